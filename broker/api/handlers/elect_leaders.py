"""ElectLeaders (api key 43): preferred or unclean leader elections through the controller.

Versions 0-2 (the range Kafka's AdminClient and ``kafka-leader-election`` use).
- v0: preferred elections only; no top-level error code.
- v1: election_type (0 PREFERRED, 1 UNCLEAN, KIP-460); top-level error_code.
- v2: flexible.

``topic_partitions`` null means every partition; then partitions needing no election are left out
of the answer (Kafka's ReplicationControlManager.electLeaders). Per-partition codes and messages are
the controller's (``odradek.controller.elections``): ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION. A broker that is not the controller
forwards (``odradek.broker.metadata.controller_client``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import ElectionType
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        ElectLeadersRequest,
        ElectLeadersResponse,
        ElectLeadersResponsePartitionResult,
    )

API_KEY = 43
NAME = "ElectLeaders"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


def _requested(body: ElectLeadersRequest) -> list[tuple[str, int]] | None:
    if body["topic_partitions"] is None:
        return None
    return [(t["topic"], p) for t in body["topic_partitions"] for p in t["partitions"]]


async def handle(services: Services, request: ApiRequest[ElectLeadersRequest]) -> ElectLeadersResponse:
    if not services.authz.cluster_allowed(request, authz.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    election_type = ElectionType.PREFERRED if request.api_version == 0 else body["election_type"]
    if election_type not in ElectionType._value2member_map_:
        return error_response(request, ErrorCode.INVALID_REQUEST)
    results = await services.controller_client.elect_leaders(election_type, _requested(body))
    by_topic: dict[str, list[ElectLeadersResponsePartitionResult]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(
            {"partition_id": r.partition, "error_code": r.error_code, "error_message": r.error_message})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "replica_election_results": [{"topic": t, "partition_result": p} for t, p in by_topic.items()],
    }


def error_response(request: ApiRequest[ElectLeadersRequest], code: int) -> ElectLeadersResponse:
    """Kafka's ElectLeadersRequest.getErrorResponse: the code at the top and on every partition."""
    requested = _requested(request.body) or []
    by_topic: dict[str, list[ElectLeadersResponsePartitionResult]] = {}
    for topic, partition in requested:
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": code, "error_message": None})
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "replica_election_results": [{"topic": t, "partition_result": p} for t, p in by_topic.items()],
    }
