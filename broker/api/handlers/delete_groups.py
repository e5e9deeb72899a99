"""DeleteGroups (api key 42): delete Empty groups and their committed offsets.

Versions 0-3.
- v1: same as v0.
- v2: flexible.
- v3: error_message per group. Kafka 4.4 fills it only for share and streams groups'
  own failures (GroupCoordinatorService.deleteGroups); for classic and consumer groups, Odradek's
  only kinds, it is null, as there.

Per group: GROUP_ID_NOT_FOUND (unknown or Dead), NON_EMPTY_GROUP (members present), or the
coordinator errors. Deletion writes tombstones for every offset and for the group metadata.

A share group (KIP-932) is deleted as Kafka 4.4's GroupCoordinatorService.deleteShareGroups does:
NON_EMPTY_GROUP while it has members ("The group is not empty."); else the share state of each of
its share-partitions is deleted first (DeleteShareGroupState through the share persister, a
tombstone in ``__share_group_state``: a group of the same id later starts again at
share.auto.offset.reset), then the group. Its share-partitions are those of the topics it last
subscribed to (kept in its ShareGroupStatePartitionMetadata record, as Kafka's initialized ones)
and those this broker holds for it. Then the group's tombstones are written to __consumer_offsets
(broker/group/share_group.py), so the group stays gone after its coordinator moves.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.coordinator.runtime import CoordinatorWriteError
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.group.errors import append_error
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

API_KEY = 42
NAME = "DeleteGroups"
VERSIONS = (0, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    share_partitions: SharePartitionManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[DeleteGroupsRequest]) -> DeleteGroupsResponse:
    names = request.body["groups_names"]
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    unique = list(dict.fromkeys(names))
    # Kafka: DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it (the others are deleted).
    deletable = services.authz.filter_allowed(request, authz.DELETE, authz.GROUP, unique)
    results: dict[str, int] = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in unique}
    messages: dict[str, str | None] = {}
    others = []
    for g in deletable:
        if g in coordinator.share.groups:
            results[g], messages[g] = await _delete_share_group(services, coordinator, g)
        else:
            others.append(g)
    if others:
        results.update(await coordinator.delete_groups(others))
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": results[g], "error_message": messages.get(g)}
                                              for g in unique]}


async def _delete_share_group(services: Services, coordinator: GroupCoordinator,
                              group_id: str) -> tuple[int, str | None]:
    try:
        partition = coordinator.ctx.check_coordinator(group_id)
    except KafkaApiError as exc:
        return exc.code, None
    group = coordinator.share.groups[group_id]
    if group.members:
        return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
    image = services.metadata.image
    topics = {t.name for tid, _ in group.subscribed_metadata if (t := image.topic_by_id(tid)) is not None}
    topics |= {topic for g, topic, _ in services.share_partitions.partitions if g == group_id}
    for topic in sorted(topics):
        services.share_partitions.delete_state(group_id, topic)
    try:
        await coordinator.runtime.write(partition, functools.partial(coordinator.share.delete_group_op, group_id))
    except CoordinatorWriteError as exc:
        return append_error(exc.code), None
    except KafkaApiError as exc:
        return exc.code, exc.message or None
    return ErrorCode.NONE, None


def error_response(request: ApiRequest[DeleteGroupsRequest], code: int) -> DeleteGroupsResponse:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code, "error_message": None}
                                               for g in dict.fromkeys(request.body["groups_names"])]}
