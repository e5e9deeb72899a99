"""DescribeGroups (api key 15): state, protocol and members of groups.

Versions 0-6.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: include_authorized_operations (KIP-430).
- v4: group_instance_id of members (KIP-345).
- v5: flexible.
- v6: error_message; an id with no classic group answers GROUP_ID_NOT_FOUND (KIP-1043), "Group
  <id> not found." or, for a KIP-848 group's id, "Group <id> is not a classic group." (Kafka
  4.4's GroupMetadataManager), still in state "Dead".

Before v6 such an id is described as state "Dead" with no error. Member metadata and assignment
are only filled in while the group is Stable, as in Kafka. Authorized operations are only given
for a group answered without error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, GROUP_OPERATIONS
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        DescribeGroupsResponseDescribedGroup,
    )

API_KEY = 15
NAME = "DescribeGroups"
VERSIONS = (0, 6)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[DescribeGroupsRequest]) -> DescribeGroupsResponse:
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    groups = []
    for group_id in body["groups"]:
        if not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, group_id):
            groups.append(_error_entry(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if coordinator is None:
            groups.append(_error_entry(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        entry = coordinator.classic.describe_group(group_id, request.api_version)
        if body["include_authorized_operations"] and entry["error_code"] == ErrorCode.NONE:
            entry["authorized_operations"] = services.authz.authorized_operations(request, authz.GROUP, group_id,
                                                                         GROUP_OPERATIONS)
        else:
            entry["authorized_operations"] = AUTHORIZED_OPERATIONS_OMITTED
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


def _error_entry(group_id: str, code: int) -> DescribeGroupsResponseDescribedGroup:
    return {"group_id": group_id, "error_code": code, "error_message": None, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def error_response(request: ApiRequest[DescribeGroupsRequest], code: int) -> DescribeGroupsResponse:
    return {"throttle_time_ms": 0, "groups": [_error_entry(g, code) for g in request.body["groups"]]}
