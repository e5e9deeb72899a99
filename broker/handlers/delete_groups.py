"""DeleteGroups (api key 42): delete Empty groups and their committed offsets.

Versions 0-2.
- v1: same as v0.
- v2: flexible.

Per group: GROUP_ID_NOT_FOUND (unknown or Dead), NON_EMPTY_GROUP (members present), or the
coordinator errors. Deletion writes tombstones for every offset and for the group metadata.
"""

from __future__ import annotations

from broker.group.coordinator import coordinator_of
from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode

API_KEY = 42
NAME = "DeleteGroups"
VERSIONS = (0, 2)


async def handle(request: ApiRequest) -> dict:
    names = request.body["groups_names"]
    coordinator = coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    unique = list(dict.fromkeys(names))
    # Kafka: DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it (the others are deleted).
    deletable = authz.filter_allowed(request, authz.DELETE, authz.GROUP, unique)
    results: dict[str, int] = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in unique}
    if deletable:
        results.update(await coordinator.delete_groups(deletable))
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": results[g]} for g in unique]}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code}
                                               for g in dict.fromkeys(request.body["groups_names"])]}
