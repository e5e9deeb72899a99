"""SyncGroup (api key 14): the leader hands out the assignment; every member receives its own.

Versions 0-5.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: group_instance_id (KIP-345).
- v4: flexible.
- v5: protocol_type and protocol_name in request (checked: INCONSISTENT_GROUP_PROTOCOL, null
  ones before authorization, as KafkaApis) and response (KIP-559).

A member's SyncGroup in CompletingRebalance waits until the leader's assignment is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of, sync_error
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import SyncGroupRequest, SyncGroupResponse

API_KEY = 14
NAME = "SyncGroup"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[SyncGroupRequest]) -> SyncGroupResponse:
    body = request.body
    if request.api_version >= 5 and (body["protocol_type"] is None or body["protocol_name"] is None):
        # Mandatory from v5 (Kafka's SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent,
        # which KafkaApis checks first, before authorization).
        return error_response(request, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if not services.authz.allowed(request, authz.READ, authz.GROUP, body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assignments: dict[str, bytes] = {}
    for a in body["assignments"]:
        assignments[a["member_id"]] = bytes(a["assignment"])
    version = request.api_version
    # Fields a version lacks are Kafka's null (not checked), not the "" our codec fills in: a v3
    # leader's SyncGroup would otherwise fail with INCONSISTENT_GROUP_PROTOCOL.
    response = await coordinator.sync_group(body["group_id"], body["generation_id"], body["member_id"],
                                            body["group_instance_id"] if version >= 3 else None,
                                            body["protocol_type"] if version >= 5 else None,
                                            body["protocol_name"] if version >= 5 else None, assignments)
    return {**response, "throttle_time_ms": 0}


def error_response(request: ApiRequest[SyncGroupRequest], code: int) -> SyncGroupResponse:
    return {**sync_error(code), "throttle_time_ms": 0}
