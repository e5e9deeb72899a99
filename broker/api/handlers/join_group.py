"""JoinGroup (api key 11): join a classic group; the answer waits for the join phase to end.

Versions 0-9.
- v1: rebalance_timeout_ms (v0: the session timeout serves as rebalance timeout).
- v2: throttle_time_ms.
- v3: same as v2.
- v4: a first join without member id gets MEMBER_ID_REQUIRED and a generated id (KIP-394).
- v5: group_instance_id: static membership (KIP-345), FENCED_INSTANCE_ID.
- v6: flexible.
- v7: protocol_type in the response; protocol_name nullable (KIP-559).
- v8: reason (KIP-800).
- v9: skip_assignment for a static leader rejoining a Stable group (KIP-814).

The state machine is broker/group/classic_manager.py; this module maps request fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import client_host, coordinator_of, join_error
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import JoinGroupRequest, JoinGroupResponse

API_KEY = 11
NAME = "JoinGroup"
VERSIONS = (0, 9)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


def _shape(response: JoinGroupResponse, version: int) -> JoinGroupResponse:
    # Before v7 protocol_name is not nullable: Kafka writes "" there.
    if version < 7 and response.get("protocol_name") is None:
        response["protocol_name"] = ""
    response["throttle_time_ms"] = 0
    return response


async def handle(services: Services, request: ApiRequest[JoinGroupRequest]) -> JoinGroupResponse:
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    version = request.api_version
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return _shape(join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, body["member_id"]), version)
    rebalance_timeout = body["session_timeout_ms"] if version == 0 else body["rebalance_timeout_ms"]
    # Before v5 the field does not exist; our codec fills "" (not Kafka's null default), and ""
    # would be taken for a static member's instance id.
    instance_id = body["group_instance_id"] if version >= 5 else None
    response = await coordinator.join_group(
        body["group_id"], body["member_id"], instance_id, request.client_id or "",
        client_host(request), rebalance_timeout, body["session_timeout_ms"], body["protocol_type"],
        [(p["name"], bytes(p["metadata"])) for p in body["protocols"]], version)
    return _shape(response.copy(), version)


def error_response(request: ApiRequest[JoinGroupRequest], code: int) -> JoinGroupResponse:
    return _shape(join_error(code, request.body["member_id"]), request.api_version)
