"""ListGroups (api key 16): the groups this broker coordinates.

Versions 0-5.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: flexible.
- v4: states_filter and group_state (KIP-518).
- v5: types_filter and group_type (KIP-848): "classic" or "consumer" (ConsumerGroupHeartbeat groups).

While a __consumer_offsets partition is loading the error is COORDINATOR_LOAD_IN_PROGRESS, with
the groups of the loaded partitions (as Kafka).
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
    from odradek.protocol.messages import ListGroupsRequest, ListGroupsResponse

API_KEY = 16
NAME = "ListGroups"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[ListGroupsRequest]) -> ListGroupsResponse:
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    version = request.api_version
    states = set(body["states_filter"] or ()) if version >= 4 else None
    types = set(body["types_filter"] or ()) if version >= 5 else None
    error, groups = coordinator.list_groups(states or None, types or None)
    # Kafka: every group with DESCRIBE on the cluster, else those the principal may DESCRIBE.
    if services.authz.authorizer is not None and not services.authz.cluster_allowed(request, authz.DESCRIBE):
        groups = services.authz.filter_allowed(request, authz.DESCRIBE, authz.GROUP, groups, lambda g: g["group_id"])
    return {"throttle_time_ms": 0, "error_code": error, "groups": groups}


def error_response(request: ApiRequest[ListGroupsRequest], code: int) -> ListGroupsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "groups": []}
