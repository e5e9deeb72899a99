"""DeleteGroups (api key 42): delete Empty groups and their committed offsets.

Versions 0-3.
- v1: same as v0.
- v2: flexible.
- v3: error_message per group. Kafka 4.4 fills it only for share and streams groups'
  own failures (GroupCoordinatorService.deleteGroups); for classic and consumer groups, Odradek's
  only kinds, it is null, as there.

Per group: GROUP_ID_NOT_FOUND (unknown or Dead), NON_EMPTY_GROUP (members present), or the
coordinator errors. Deletion writes tombstones for every offset and for the group metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

API_KEY = 42
NAME = "DeleteGroups"
VERSIONS = (0, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
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
    if deletable:
        results.update(await coordinator.delete_groups(deletable))
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": results[g], "error_message": None}
                                              for g in unique]}


def error_response(request: ApiRequest[DeleteGroupsRequest], code: int) -> DeleteGroupsResponse:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code, "error_message": None}
                                               for g in dict.fromkeys(request.body["groups_names"])]}
