"""ShareGroupHeartbeat (api key 76): membership of a share group (KIP-932).

Version 1 (flexible), Kafka 4.4's only one (v0 was Kafka 4.0's early access). The member id is the
client's; epoch 0 joins (naming its subscription), -1 leaves, any other must be the member's.
Each answer carries the member's epoch, the heartbeat interval (``group.share.heartbeat.interval.ms``)
and, when it changed or the request was a full one, its assignment: the partitions it may fetch
from (broker/group/share_group.py; several members may be given one partition).

Errors are answered with error_code and error_message, member_id null and member_epoch 0, as
Kafka's. While the cluster's share.version is 0 (kafka-features, controller/features.py) every
heartbeat answers UNSUPPORTED_VERSION, as Kafka's KafkaApis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import client_host, coordinator_of
from odradek.broker.security import authz
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

API_KEY = 76
NAME = "ShareGroupHeartbeat"
VERSIONS = (1, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[ShareGroupHeartbeatRequest]) -> ShareGroupHeartbeatResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    if not services.authz.allowed(request, authz.READ, authz.GROUP, body["group_id"]):
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # Kafka: a subscription naming a topic the principal may not DESCRIBE is refused.
    names = body.get("subscribed_topic_names")
    if names and len(services.authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, names)) < len(names):
        return error_response(request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        return await coordinator.share.heartbeat(body, request.client_id or "", client_host(request))
    except KafkaApiError as exc:
        answer = error_response(request, exc.code)
        answer["error_message"] = exc.message
        return answer


def error_response(request: ApiRequest[ShareGroupHeartbeatRequest], code: int) -> ShareGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}
