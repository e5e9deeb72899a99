"""WriteShareGroupState (api key 85): a share-partition leader's new state (start offset and the
in-flight batches that changed) to the share-partition's share coordinator (KIP-932;
broker/share/share_persister.py sends it).

Versions 0-1 (flexible), as Kafka 4.4.
- v1: delivery_complete_count (KIP-1226): the Acknowledged and Archived offsets from the start
  offset on, which the share coordinator keeps for the group's lag (v0: -1, unknown).

CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for every partition otherwise); the
checks and errors are the share coordinator's (broker/share/share_coordinator.py): NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST (also for a share-partition
never initialized), FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.share_state_requests import (
    each_partition,
    nothing_to_do,
    partitions_of,
    refused,
)
from odradek.broker.api.request_types import ApiRequest
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_coordinator import Outcome, ShareCoordinator
    from odradek.broker.share.share_state_records import StateKey
    from odradek.protocol.messages import (
        WriteShareGroupStateRequest,
        WriteShareGroupStateResponse,
        WriteShareGroupStateResponsePartitionResult,
    )

API_KEY = 85
NAME = "WriteShareGroupState"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    share_coordinator: ShareCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[WriteShareGroupStateRequest]) -> WriteShareGroupStateResponse:
    body = request.body
    if refused(services.authz, request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if nothing_to_do(body):
        return {"results": []}

    def run(key: StateKey, p: Mapping[str, Any]) -> Any:
        return services.share_coordinator.write(
            key, p["state_epoch"], p["leader_epoch"], p["start_offset"],
            [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]) for b in p["state_batches"]],
            p.get("delivery_complete_count", -1))

    def entry(p: Mapping[str, Any], o: Outcome) -> WriteShareGroupStateResponsePartitionResult:
        return {"partition": p["partition"], "error_code": o.error_code, "error_message": o.error_message}

    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in await each_partition(body, run, entry)]}


def error_response(request: ApiRequest[WriteShareGroupStateRequest], code: int) -> WriteShareGroupStateResponse:
    return {"results": [{"topic_id": t, "partitions": [{"partition": p, "error_code": code, "error_message": None}
                                                        for p in ps]} for t, ps in partitions_of(request.body)]}
