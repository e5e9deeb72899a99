"""DescribeShareGroupOffsets (api key 90): the share-partition start offset (SPSO) of each
partition a share group reads, and from v1 its lag (KIP-932; ``kafka-share-groups --describe``).

Versions 0-1 (flexible), as Kafka 4.4.
- v1: lag per partition: the records below the high watermark the group has not yet
  acknowledged or archived (-1 where the share-partition was never initialized).

``topics`` null asks for every partition the group has a share-partition for. A partition the group
never fetched from has start_offset -1 (Kafka's "not initialized"). A group the coordinator does not
know as a share group answers GROUP_ID_NOT_FOUND; coordinator errors are per group.

A share-partition this broker leads and has in memory answers from there: the start offset its
last write gave the share coordinator (Kafka's write carries the SPSO from before the change it
writes, so it trails the SPSO in memory) and its lag counts the acknowledged records in flight.
Any other asks the share coordinator, as Kafka 4.4 does (ReadShareGroupStateSummary v1 through the
share persister, broker/share/share_persister.py): its start offset, leader epoch and
delivery-complete count, and the lag is Kafka's computeShareGroupLagAndBuildResponse: the
partition's latest offset (its leader's high watermark, broker/share/partition_end_offsets.py)
less the start offset and that count; -1 where the count is unknown; the partition's error when
its leader does not answer. A coordinator that does not answer in time reads as not initialized.
(Both ways give the same lag: the start offset written trails the one in memory by finished
offsets only, which the written count includes.) ``topics`` null names the partitions held here
and those of the topics the group last subscribed to whose state is initialized.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.partition_end_offsets import PartitionEndOffsets
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.broker.share.share_persister import SharePersister
    from odradek.protocol.messages import (
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsResponseGroup,
        DescribeShareGroupOffsetsResponsePartition,
        DescribeShareGroupOffsetsResponseTopic,
    )

# Kafka's Errors.NOT_LEADER_OR_FOLLOWER.message(), which it answers where the end offset is not to be had.
NOT_LEADER_MESSAGE = ("For requests intended only for the leader, this error indicates that the broker is not the "
                      "current leader. For requests intended for any replica, this error indicates that the broker "
                      "is not a replica of the topic partition.")

API_KEY = 90
NAME = "DescribeShareGroupOffsets"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    replica_manager: ReplicaManager
    share_partitions: SharePartitionManager
    share_persister: SharePersister
    partition_end_offsets: PartitionEndOffsets
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[DescribeShareGroupOffsetsRequest]) -> DescribeShareGroupOffsetsResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    coordinator = coordinator_of(services.group_coordinator)
    groups = []
    for g in request.body["groups"]:
        group_id = g["group_id"]
        if not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, group_id):
            groups.append(_group_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if coordinator is None:
            groups.append(_group_error(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        try:
            coordinator.check_coordinator(group_id)
        except KafkaApiError as exc:
            groups.append(_group_error(group_id, exc.code))
            continue
        if group_id not in coordinator.share.groups:
            groups.append(_group_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."))
            continue
        groups.append({"group_id": group_id, "topics": await _topics(services, request, group_id, g["topics"]),
                       "error_code": ErrorCode.NONE, "error_message": None})
    return {"throttle_time_ms": 0, "groups": groups}


async def _topics(services: Services, request: ApiRequest[DescribeShareGroupOffsetsRequest], group_id: str,
                  wanted: Sequence[Mapping[str, Any]] | None) -> list[DescribeShareGroupOffsetsResponseTopic]:
    manager = services.share_partitions
    image = services.metadata.image
    if wanted is None:  # every partition the group has a share-partition for
        held: dict[str, set[int]] = {}
        for g, held_topic, index in manager.partitions:
            if g == group_id:
                held.setdefault(held_topic, set()).add(index)
        group = services.group_coordinator.share.groups.get(group_id)
        for topic_id, count in group.subscribed_metadata if group is not None else ():
            subscribed = image.topic_by_id(topic_id)
            if subscribed is None:
                continue
            for index in range(count):
                found = await services.share_persister.summary((group_id, topic_id, index))
                if found is not None and found.start_offset >= 0:
                    held.setdefault(subscribed.name, set()).add(index)
        wanted = [{"topic_name": t, "partitions": sorted(ps)} for t, ps in sorted(held.items())]
    out: list[DescribeShareGroupOffsetsResponseTopic] = []
    for t in wanted:
        name = t["topic_name"]
        topic = image.topics.get(name)
        partitions: list[DescribeShareGroupOffsetsResponsePartition] = []
        for index in t["partitions"]:
            entry: DescribeShareGroupOffsetsResponsePartition = {
                "partition_index": index, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                "error_code": ErrorCode.NONE, "error_message": None}
            if not services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, name):
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or index not in topic.partitions:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                sp = manager.partitions.get((group_id, name, index))
                part = services.replica_manager.partitions.get((name, index))
                if sp is not None and part is not None:
                    entry["start_offset"] = manager.stored_start_offset(sp)
                    entry["leader_epoch"] = part.leader_epoch
                    entry["lag"] = max(0, part.high_watermark - sp.start_offset - sp.done_in_flight())
                elif (found := await services.share_persister.summary((group_id, topic.topic_id, index))) is not None \
                        and found.start_offset >= 0:
                    entry["start_offset"], entry["leader_epoch"] = found.start_offset, found.leader_epoch
                    if found.delivery_complete_count >= 0:
                        latest = await services.partition_end_offsets.latest(name, index)
                        if latest is None:
                            entry["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                            entry["error_message"] = NOT_LEADER_MESSAGE
                        else:
                            entry["lag"] = latest - found.start_offset - found.delivery_complete_count
            partitions.append(entry)
        out.append({"topic_name": name, "topic_id": topic.topic_id if topic is not None else uuid.UUID(int=0),
                    "partitions": partitions})
    return out


def _group_error(group_id: str, code: int, message: str | None = None) -> DescribeShareGroupOffsetsResponseGroup:
    return {"group_id": group_id, "topics": [], "error_code": code, "error_message": message}


def error_response(request: ApiRequest[DescribeShareGroupOffsetsRequest], code: int) -> DescribeShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "groups": [_group_error(g["group_id"], code) for g in request.body["groups"]]}

