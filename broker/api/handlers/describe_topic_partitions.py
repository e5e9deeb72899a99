"""DescribeTopicPartitions (api key 75): topics and their partitions, a bounded page at a time (KIP-966).

Version 0 (flexible). Kafka 4.x's ``kafka-topics --describe`` and ``Admin.describeTopics`` send it
when the broker advertises it (else they fall back to Metadata), following ``next_cursor`` until it
is null, so a topic of 100,000 partitions is never one answer.

The rules are Kafka's (DescribeTopicPartitionsRequestHandler, KRaftMetadataCache.describeTopicResponse):
1. ``topics`` empty means every topic; named topics are described once each (duplicates collapse).
   Either way only names at or after the cursor's topic count, in name order.
2. A cursor (topic name, partition index) says where the previous answer stopped: its topic is
   described from that partition on, later topics from partition 0. Named topics must include the
   cursor's topic, and its partition index must not be negative: else the whole request answers
   INVALID_REQUEST for every named topic (Kafka's getErrorResponse).
3. At most min(``response_partition_limit``, broker ``max.request.partition.size.limit``), and at
   least 1, partitions are described. Where the budget runs out inside a topic, ``next_cursor``
   is that topic and its first partition not described; where it runs out exactly at a topic's end
   and another topic follows, the next topic and 0; when everything fit, null.
4. DESCRIBE on the topic is needed (with an authorizer). Asking for every topic lists only the
   describable ones; a named topic without it answers TOPIC_AUTHORIZATION_FAILED with the zero
   topic id, after the others, whether or not it exists. ``topic_authorized_operations`` is the
   principal's (every topic operation without an authorizer) for every other topic, unknown ones
   included; the refused topics keep the default.
5. A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for
   an illegal name) without partitions and takes none of the budget; asked for every topic, none
   can be missing.
6. Partitions: leader -1 when it is not a live broker with the request's listener (Metadata's rule),
   the leader epoch, replicas and ISR as the controller has them, offline replicas (not live, no
   such listener, or in a failed log dir), and empty eligible-leader-replica lists (Odradek has no
   ELR, KIP-966's other half; Kafka answers the same while it is disabled). Partition errors are
   always NONE, as in Kafka.

A request naming more than SLICE topics (hundreds of thousands of names fit in a few MB) is worked
through SLICE names at a time, yielding to the handler loop in between; its frame is decoded and
its answer encoded in a worker thread (broker/api/dispatcher.py, OFF_LOOP_APIS), so other clients
are served meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.controller.topic_names import invalid_topic_reason, is_internal
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, TOPIC_OPERATIONS
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsRequestCursor,
        DescribeTopicPartitionsResponse,
        DescribeTopicPartitionsResponsePartition,
        DescribeTopicPartitionsResponseTopic,
    )

API_KEY = 75
NAME = "DescribeTopicPartitions"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    authz: AuthHelper


ZERO_UUID = uuid.UUID(int=0)
SLICE = 2000  # names worked through between two yields to the handler loop (a large request)


def _java_order(names: Iterable[str]) -> Callable[[str], Any] | None:
    """Kafka sorts and compares names as Java Strings (UTF-16 code units): the sort key that does
    the same here (code points order a name with a character above U+FFFF differently); None when
    every name is ASCII, where the two orders agree."""
    if all(name.isascii() for name in names):
        return None
    return lambda name: name.encode("utf-16-be", "surrogatepass")


class _InvalidRequest(Exception):
    pass


def handle(services: Services, request: ApiRequest[DescribeTopicPartitionsRequest]) -> DescribeTopicPartitionsResponse | Awaitable[DescribeTopicPartitionsResponse]:
    work = _Answer(services, request)
    if len(request.body["topics"]) <= SLICE:
        for _ in work:
            pass
        return work.answer
    return _answer_in_slices(work)


async def _answer_in_slices(work: _Answer) -> DescribeTopicPartitionsResponse:
    """A request naming many topics (a large frame is decoded off the loop, broker/api/dispatcher.py)
    is answered SLICE names at a time, so other clients are served in between."""
    for _ in work:
        await asyncio.sleep(0)
    return work.answer


class _Answer:
    """The answer, worked out by iterating: each step yields after about SLICE names."""

    __slots__ = ("services", "request", "answer")

    def __init__(self, services: Services, request: ApiRequest[DescribeTopicPartitionsRequest]) -> None:
        self.services = services
        self.request = request
        self.answer: DescribeTopicPartitionsResponse = {"throttle_time_ms": 0, "topics": [], "next_cursor": None}

    def __iter__(self) -> Iterator[None]:
        services, request = self.services, self.request
        body = request.body
        cursor = body["cursor"]
        try:
            names = _names_to_describe(services, request, cursor)
        except _InvalidRequest:
            self.answer = error_response(request, ErrorCode.INVALID_REQUEST)
            return
        yield
        fetch_all = not body["topics"]
        limit = max(min(services.config["max.request.partition.size.limit"], body["response_partition_limit"]), 1)
        refused: list[DescribeTopicPartitionsResponseTopic] = []
        describable = []
        if services.authz.authorizer is None:
            describable = names
        else:
            for i, name in enumerate(names, 1):
                if services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, name):
                    describable.append(name)
                elif not fetch_all:
                    refused.append(_error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, ZERO_UUID, False))
                if i % SLICE == 0:
                    yield
        response: DescribeTopicPartitionsResponse = {"throttle_time_ms": 0, "topics": [], "next_cursor": None}
        yield from _describe(services, request, describable, cursor, limit, fetch_all, response)
        # Kafka fills the bitfield of every topic described, the unknown ones included, but not of
        # those refused (added after).
        for i, topic in enumerate(response["topics"], 1):
            topic["topic_authorized_operations"] = services.authz.authorized_operations(
                request, authz.TOPIC, cast(str, topic["name"]), TOPIC_OPERATIONS)  # named: built above
            if i % SLICE == 0:
                yield
        response["topics"] += refused
        self.answer = response


def _names_to_describe(services: Services, request: ApiRequest[DescribeTopicPartitionsRequest],
                       cursor: DescribeTopicPartitionsRequestCursor | None) -> list[str]:
    """The names at or after the cursor's topic, in Kafka's order; _InvalidRequest for a bad cursor."""
    requested = request.body["topics"]
    candidates = [t["name"] for t in requested] if requested else list(services.metadata.image.topics)
    key = _java_order(candidates if cursor is None else [*candidates, cursor["topic_name"]])
    if cursor is not None:
        start = cursor["topic_name"] if key is None else key(cursor["topic_name"])
        candidates = [n for n in candidates if (n if key is None else key(n)) >= start]
    names = set(candidates)
    if cursor is not None:
        if requested and cursor["topic_name"] not in names:
            raise _InvalidRequest  # the cursor's topic must be one of those named
        if cursor["partition_index"] < 0:
            raise _InvalidRequest
    return sorted(names, key=key)


def _describe(services: Services, request: ApiRequest[DescribeTopicPartitionsRequest], names: list[str],
              cursor: DescribeTopicPartitionsRequestCursor | None, limit: int,
              fetch_all: bool, response: DescribeTopicPartitionsResponse) -> Iterator[None]:
    """Fills ``response`` with the topics and the next cursor, yielding every SLICE names."""
    image = services.metadata.image
    listener = request.listener
    reachable = {b.node_id for b in image.brokers.values() if not b.fenced and b.endpoint_for(listener) is not None}
    topics = response["topics"]
    remaining = limit
    for i, name in enumerate(names, 1):
        if i % SLICE == 0:
            yield
        if remaining == 0:
            # The budget ended exactly with the previous topic: the next answer starts here.
            response["next_cursor"] = {"topic_name": name, "partition_index": 0}
            return
        topic = image.topics.get(name)
        if topic is None:
            if not fetch_all:
                code = ErrorCode.INVALID_TOPIC_EXCEPTION if invalid_topic_reason(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(_error_topic(code, name, ZERO_UUID, is_internal(name)))
            continue
        first = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
        end = min(len(topic.partitions), first + remaining)
        partitions = [_partition(image, p, reachable)
                      for index in range(first, end) if (p := topic.partitions.get(index)) is not None]
        topics.append(_topic(topic, partitions))
        if end < len(topic.partitions):
            response["next_cursor"] = {"topic_name": name, "partition_index": end}
            return
        remaining -= len(partitions)


def _topic(topic: TopicImage, partitions: list[DescribeTopicPartitionsResponsePartition]) -> DescribeTopicPartitionsResponseTopic:
    return {"error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
            "is_internal": is_internal(topic.name), "partitions": partitions,
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def _partition(image: MetadataImage, p: PartitionState, reachable: set[int]) -> DescribeTopicPartitionsResponsePartition:
    return {
        "error_code": ErrorCode.NONE,
        "partition_index": p.partition,
        "leader_id": p.leader if p.leader in reachable else -1,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        "offline_replicas": [r for r in p.replicas if r not in reachable or r in p.offline_replicas],
    }


def _error_topic(code: int, name: str, topic_id: uuid.UUID, internal: bool) -> DescribeTopicPartitionsResponseTopic:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": internal, "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def error_response(request: ApiRequest[DescribeTopicPartitionsRequest], code: int) -> DescribeTopicPartitionsResponse:
    """Kafka's DescribeTopicPartitionsRequest.getErrorResponse: every named topic with ``code``."""
    return {"throttle_time_ms": 0, "next_cursor": None,
            "topics": [_error_topic(code, t["name"], ZERO_UUID, False) for t in request.body["topics"]]}
