"""LeaveGroup (api key 13): members leave; the group rebalances without them.

Versions 0-5.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: batched members with group_instance_id (KIP-345); per-member errors.
- v4: flexible.
- v5: reason per member (KIP-800).

Before v3 the single member's error is the top-level error (as Kafka's LeaveGroupResponse does).
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
    from odradek.protocol.messages import LeaveGroupRequest, LeaveGroupResponse

API_KEY = 13
NAME = "LeaveGroup"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


def _identities(request: ApiRequest[LeaveGroupRequest]) -> list[tuple[str, str | None]]:
    body = request.body
    if request.api_version >= 3:
        return [(m["member_id"], m["group_instance_id"]) for m in body["members"]]
    return [(body["member_id"], None)]


async def handle(services: Services, request: ApiRequest[LeaveGroupRequest]) -> LeaveGroupResponse:
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    identities = _identities(request)
    error, member_errors = await coordinator.leave_group(request.body["group_id"], identities)
    if request.api_version < 3:
        if error == ErrorCode.NONE and member_errors:
            error = member_errors[0]
        return {"throttle_time_ms": 0, "error_code": error, "members": []}
    return {"throttle_time_ms": 0, "error_code": error, "members": [
        {"member_id": mid, "group_instance_id": iid, "error_code": code}
        for (mid, iid), code in zip(identities, member_errors, strict=False)]}


def error_response(request: ApiRequest[LeaveGroupRequest], code: int) -> LeaveGroupResponse:
    return {"throttle_time_ms": 0, "error_code": code, "members": []}
