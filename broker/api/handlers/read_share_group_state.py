"""ReadShareGroupState (api key 84): a share-partition's state (start offset, state epoch, in-flight
batches) from its share coordinator, as the share-partition leader reads it before it acquires
anything (KIP-932; broker/share/share_persister.py sends it).

Version 0 (flexible), as Kafka 4.4. CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for
every partition otherwise); the checks and errors are the share coordinator's
(broker/share/share_coordinator.py): NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST (also for a share-partition never initialized),
FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION. A newer leader epoch is recorded.
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
        ReadShareGroupStateRequest,
        ReadShareGroupStateResponse,
        ReadShareGroupStateResponsePartitionResult,
    )

API_KEY = 84
NAME = "ReadShareGroupState"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    share_coordinator: ShareCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[ReadShareGroupStateRequest]) -> ReadShareGroupStateResponse:
    body = request.body
    if refused(services.authz, request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if nothing_to_do(body):
        return {"results": []}

    def run(key: StateKey, p: Mapping[str, Any]) -> Any:
        return services.share_coordinator.read(key, p["leader_epoch"])

    def entry(p: Mapping[str, Any], o: Outcome) -> ReadShareGroupStateResponsePartitionResult:
        state = o.state
        return {"partition": p["partition"], "error_code": o.error_code, "error_message": o.error_message,
                "state_epoch": state.state_epoch if state is not None else 0,
                "start_offset": state.start_offset if state is not None else -1,
                "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                                  for f, la, s, c in o.batches]}

    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in await each_partition(body, run, entry)]}


def error_response(request: ApiRequest[ReadShareGroupStateRequest], code: int) -> ReadShareGroupStateResponse:
    return {"results": [{"topic_id": t, "partitions": [{"partition": p, "error_code": code, "error_message": None, "state_epoch": 0, "start_offset": -1,
                                                        "state_batches": []}
                                                        for p in ps]} for t, ps in partitions_of(request.body)]}
