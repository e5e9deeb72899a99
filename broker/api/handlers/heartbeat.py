"""Heartbeat (api key 12): a member is alive; REBALANCE_IN_PROGRESS tells it to rejoin.

Versions 0-4.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: group_instance_id (KIP-345).
- v4: flexible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import HeartbeatRequest, HeartbeatResponse

API_KEY = 12
NAME = "Heartbeat"
VERSIONS = (0, 4)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[HeartbeatRequest]) -> HeartbeatResponse:
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    # Before v3 there is no group_instance_id: Kafka's null, not the "" our codec fills in.
    code = await coordinator.heartbeat(body["group_id"], body["generation_id"], body["member_id"],
                                       body["group_instance_id"] if request.api_version >= 3 else None)
    return {"throttle_time_ms": 0, "error_code": code}


def error_response(request: ApiRequest[HeartbeatRequest], code: int) -> HeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code}
