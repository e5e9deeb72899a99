"""How many partitions one request may add, and one broker may host (CreateTopics, CreatePartitions).

1. Per request (Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, KAFKA-17870): at most
   MAX_PARTITIONS_PER_BATCH new partitions, counted from the request before any name is checked or
   replica placed, so nothing proportional to the asked count is allocated. Over it the whole
   request fails: POLICY_VIOLATION for CreateTopics, INVALID_PARTITIONS for CreatePartitions
   (KAFKA-19673), each item with EXCESSIVE_PARTITIONS_MESSAGE.
2. Per broker (max.broker.partitions, the name KIP-578 gave it; Kafka never shipped a per-broker
   limit): the broker passes it in (broker/config/broker_config.py has its default); None is no cap. A topic
   whose replicas would take any broker past it is refused whole with POLICY_VIOLATION, and its
   replicas are not counted against the next topics of the same request.

Pure functions of the image and the request: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from odradek.controller.image import MetadataImage
from odradek.controller.records import MetadataRecord, PartitionRecord
from odradek.controller.requests import CreatableTopic, CreatePartitionsTopic, ItemError
from odradek.protocol.errors import ErrorCode

MAX_PARTITIONS_PER_BATCH = 10_000
EXCESSIVE_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."


def requests_too_many_partitions(topics: Sequence[CreatableTopic], default_num_partitions: int) -> bool:
    """Kafka's validateTotalNumberOfPartitions: assignments count when given, else num_partitions
    (-1: the default; other non-positive values add nothing, they fail on their own later)."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_num_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
        if total > MAX_PARTITIONS_PER_BATCH:
            return True
    return False


def adds_too_many_partitions(image: MetadataImage, topics: Sequence[CreatePartitionsTopic],
                             counts: Mapping[str, int]) -> bool:
    """True if the request's existing, non-duplicate topics (``counts``: how often each name is
    asked) would gain more than MAX_PARTITIONS_PER_BATCH partitions in all."""
    total = 0
    for t in topics:
        topic = image.topics.get(t.name)
        if topic is None or counts[t.name] > 1:
            continue
        total += max(0, t.count - len(topic.partitions))
        if total > MAX_PARTITIONS_PER_BATCH:
            return True
    return False


def partitions_per_broker(image: MetadataImage) -> dict[int, int]:
    """How many partition replicas each broker hosts now (for max.broker.partitions)."""
    hosted: dict[int, int] = {}
    for topic in image.topics.values():
        for p in topic.partitions.values():
            for b in p.replicas:
                hosted[b] = hosted.get(b, 0) + 1
    return hosted


def reserve_broker_capacity(hosted: dict[int, int], records: Sequence[MetadataRecord], limit: int) -> None:
    """Count ``records``' new partitions into ``hosted``; refuse them all (and count none) if a
    broker would then host more than ``limit`` replicas."""
    adding: dict[int, int] = {}
    for record in records:
        if isinstance(record, PartitionRecord):
            for b in record.replicas:
                adding[b] = adding.get(b, 0) + 1
    for b, n in sorted(adding.items()):
        if hosted.get(b, 0) + n > limit:
            raise ItemError(ErrorCode.POLICY_VIOLATION,
                            f"Adding {n} partition replica(s) to broker {b}, which hosts {hosted.get(b, 0)}, "
                            f"would exceed max.broker.partitions ({limit}).")
    for b, n in adding.items():
        hosted[b] = hosted.get(b, 0) + n
