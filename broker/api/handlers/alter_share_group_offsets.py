"""AlterShareGroupOffsets (api key 91): set the share-partition start offset (SPSO) of an empty share
group's partitions (KIP-932; ``kafka-share-groups --reset-offsets``).

Version 0 (flexible), as Kafka 4.4. The group must exist as a share group (GROUP_ID_NOT_FOUND) and have
no members (NON_EMPTY_GROUP, for the whole request); each partition then starts over at its new
offset, which must lie between the log start and the high watermark (INVALID_REQUEST). Authorization:
READ on the group (GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED).

The share-partitions live on their leaders (broker/share/): this broker sets those it leads (and
writes their new state to ``__share_group_state`` through the share persister). For the others it
(and for those it leads too) does what Kafka 4.4's group coordinator does: the share coordinator's state of the share-partition
is initialized anew at the new start offset with the next state epoch - InitializeShareGroupState
through the share persister where another broker leads the state's partition, the local share
coordinator where this one does. The partition's leader drops its idle copy of the share-partition
when a member next opens a session and reads the new state (SharePartitionManager._drop_idle).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.broker.share.share_state_store import Where
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_coordinator import ShareCoordinator
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.broker.share.share_persister import SharePersister
    from odradek.controller.image import TopicImage
    from odradek.protocol.messages import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
        AlterShareGroupOffsetsResponsePartition,
        AlterShareGroupOffsetsResponseTopic,
    )

API_KEY = 91
NAME = "AlterShareGroupOffsets"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    share_partitions: SharePartitionManager
    share_persister: SharePersister
    share_coordinator: ShareCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[AlterShareGroupOffsetsRequest]) -> AlterShareGroupOffsetsResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    group_id = body["group_id"]
    if not services.authz.allowed(request, authz.READ, authz.GROUP, group_id):
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code, message = check_empty_share_group(services.group_coordinator, group_id)
    if code != ErrorCode.NONE:
        return error_response(request, code, message)
    image = services.metadata.image
    responses: list[AlterShareGroupOffsetsResponseTopic] = []
    for t in body["topics"]:
        name = t["topic_name"]
        topic = image.topics.get(name)
        partitions: list[AlterShareGroupOffsetsResponsePartition] = []
        for p in t["partitions"]:
            entry: AlterShareGroupOffsetsResponsePartition = {
                "partition_index": p["partition_index"], "error_code": ErrorCode.NONE, "error_message": None}
            if not services.authz.allowed(request, authz.READ, authz.TOPIC, name):
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or p["partition_index"] not in topic.partitions:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    services.share_partitions.alter_start_offset(group_id, name, p["partition_index"],
                                                                 p["start_offset"])
                except KafkaApiError as exc:
                    entry["error_code"], entry["error_message"] = exc.code, exc.message
                if entry["error_code"] in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                    # Led here or not, the stored state starts over too (a write would only
                    # update it: the old batches' acknowledgements would stay).
                    entry["error_code"], entry["error_message"] = await _initialize_state(
                        services, group_id, topic, p["partition_index"], p["start_offset"],
                        led_here=entry["error_code"] == ErrorCode.NONE)
            partitions.append(entry)
        responses.append({"topic_name": name, "topic_id": topic.topic_id if topic is not None else uuid.UUID(int=0),
                          "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


async def _initialize_state(services: Services, group_id: str, topic: TopicImage, partition: int,
                                start_offset: int, led_here: bool) -> tuple[int, str | None]:
    """The share state starts over at ``start_offset`` with the next state epoch, at the share
    coordinator of the state's partition (here or on another broker)."""
    key = (group_id, topic.topic_id, partition)
    persister = services.share_persister
    where = persister.store.where(key)
    if where is Where.WAIT:
        # (Led here: the share-partition, reset in memory, writes its state once the partition loads.)
        return (ErrorCode.NONE if led_here else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), None
    if where is Where.ABSENT:
        return ErrorCode.NONE, None  # no __share_group_state yet: no state is stored anywhere
    if where is Where.ELSEWHERE:
        return await persister.reinitialize(key, start_offset)
    state = persister.store.read(key)  # (READY: the state's partition is led and loaded here)
    epoch = state.state_epoch + 1 if state is not None else 0
    outcome = await services.share_coordinator.initialize(key, epoch, start_offset)
    return outcome.error_code, outcome.error_message


def check_empty_share_group(coordinator: GroupCoordinator, group_id: str) -> tuple[int, str | None]:
    """Kafka's checks before a share group's offsets change: the coordinator's errors, an unknown
    group, one with members."""
    if coordinator_of(coordinator) is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    if not group_id:  # Kafka's GroupCoordinatorService: an empty group id is invalid, not unknown
        return ErrorCode.INVALID_GROUP_ID, None
    try:
        coordinator.check_coordinator(group_id)
    except KafkaApiError as exc:
        return exc.code, exc.message
    group = coordinator.share.groups.get(group_id)
    if group is None:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if group.members:
        return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
    return ErrorCode.NONE, None


def error_response(request: ApiRequest[AlterShareGroupOffsetsRequest], code: int, message: str | None = None) -> AlterShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}
