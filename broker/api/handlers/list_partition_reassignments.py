"""ListPartitionReassignments (api key 46): the ongoing replica reassignments (KIP-455).

Version 0 (flexible). ``topics`` null lists every ongoing reassignment; otherwise the named
partitions that are reassigning (unknown topics and partitions are left out, as Kafka does). Each
entry carries the replicas (target + removing), adding_replicas and removing_replicas. A broker that
is not the controller forwards (``odradek.broker.metadata.controller_client``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
        OngoingPartitionReassignment,
    )

API_KEY = 46
NAME = "ListPartitionReassignments"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[ListPartitionReassignmentsRequest]) -> ListPartitionReassignmentsResponse:
    if not services.authz.cluster_allowed(request, authz.DESCRIBE):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    topics = request.body["topics"]
    wanted = None if topics is None else [(t["name"], i) for t in topics for i in t["partition_indexes"]]
    ongoing = await services.controller_client.list_partition_reassignments(wanted)
    by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
    for o in ongoing:
        by_topic.setdefault(o.topic, []).append({
            "partition_index": o.partition,
            "replicas": list(o.replicas),
            "adding_replicas": list(o.adding_replicas),
            "removing_replicas": list(o.removing_replicas),
        })
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()],
    }


def error_response(request: ApiRequest[ListPartitionReassignmentsRequest], code: int) -> ListPartitionReassignmentsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "topics": []}
