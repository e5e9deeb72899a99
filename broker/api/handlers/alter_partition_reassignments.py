"""AlterPartitionReassignments (api key 45): start, change or cancel replica reassignments (KIP-455).

Versions 0-1 (flexible). Each partition names its target replicas, or null to cancel an ongoing
reassignment. Per-partition codes and messages are the controller's (``odradek.controller.reassignments``):
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS.
- v1: allow_replication_factor_change (default true), echoed in the answer: false refuses each
  partition whose target has another size than its replica set (during a reassignment, that
  reassignment's target) with INVALID_REPLICATION_FACTOR "The replication factor is changed from
  N to M", after the replicas themselves are checked (Kafka's ReplicationControlManager);
  cancelling is unaffected. ``kafka-reassign-partitions --disallow-replication-factor-change``.

The answer
comes as soon as the reassignment is recorded; it completes when the new replicas join the ISR
(``kafka-reassign-partitions --verify`` / ListPartitionReassignments show progress). A broker that
is not the controller forwards (``odradek.broker.metadata.controller_client``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import ReassignmentTarget
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        ReassignablePartitionResponse,
    )

API_KEY = 45
NAME = "AlterPartitionReassignments"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[AlterPartitionReassignmentsRequest]) -> AlterPartitionReassignmentsResponse:
    if not services.authz.cluster_allowed(request, authz.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    allow_rf_change = bool(request.body["allow_replication_factor_change"])  # true before v1
    targets = [
        ReassignmentTarget(t["name"], p["partition_index"], None if p["replicas"] is None else tuple(p["replicas"]),
                           allow_rf_change)
        for t in request.body["topics"] for p in t["partitions"]
    ]
    results = await services.controller_client.alter_partition_reassignments(targets)
    by_topic: dict[str, list[ReassignablePartitionResponse]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(
            {"partition_index": r.partition, "error_code": r.error_code, "error_message": r.error_message})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "allow_replication_factor_change": allow_rf_change,
        "responses": [{"name": n, "partitions": p} for n, p in by_topic.items()],
    }


def error_response(request: ApiRequest[AlterPartitionReassignmentsRequest], code: int) -> AlterPartitionReassignmentsResponse:
    """Kafka's AlterPartitionReassignmentsRequest.getErrorResponse: the code everywhere."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": None,
        "responses": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code, "error_message": None}
                for p in t["partitions"]]}
            for t in request.body["topics"]
        ],
    }
