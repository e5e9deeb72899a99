"""ReadShareGroupStateSummary (api key 87): a share-partition's start offset and epochs from its
share coordinator (KIP-932; what DescribeShareGroupOffsets answers from).

Versions 0-1 (flexible), as Kafka 4.4.
- v1: delivery_complete_count (KIP-1226): the Acknowledged and Archived offsets from the start
  offset on, as the share-partition's leader last wrote them (-1: unknown).

CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for every partition otherwise); the
errors are the share coordinator's (broker/share/share_coordinator.py): NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION.
A share-partition with no state reads as start offset -1, epochs 0, count -1, as Kafka's.
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
        ReadShareGroupStateSummaryRequest,
        ReadShareGroupStateSummaryResponse,
        ReadShareGroupStateSummaryResponsePartitionResult,
    )

API_KEY = 87
NAME = "ReadShareGroupStateSummary"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    share_coordinator: ShareCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[ReadShareGroupStateSummaryRequest]) -> ReadShareGroupStateSummaryResponse:
    body = request.body
    if refused(services.authz, request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if nothing_to_do(body):
        return {"results": []}

    def run(key: StateKey, p: Mapping[str, Any]) -> Any:
        return _now(services.share_coordinator.summary(key))

    def entry(p: Mapping[str, Any], o: Outcome) -> ReadShareGroupStateSummaryResponsePartitionResult:
        state = o.state
        return {"partition": p["partition"], "error_code": o.error_code, "error_message": o.error_message,
                "state_epoch": state.state_epoch if state is not None else 0,
                "leader_epoch": state.leader_epoch if state is not None else 0,
                "start_offset": state.start_offset if state is not None else -1,
                "delivery_complete_count": state.delivery_complete_count if state is not None else -1}

    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in await each_partition(body, run, entry)]}


def error_response(request: ApiRequest[ReadShareGroupStateSummaryRequest], code: int) -> ReadShareGroupStateSummaryResponse:
    return {"results": [{"topic_id": t, "partitions": [{"partition": p, "error_code": code, "error_message": None, "state_epoch": 0, "leader_epoch": 0,
                                                        "start_offset": -1, "delivery_complete_count": -1}
                                                        for p in ps]} for t, ps in partitions_of(request.body)]}


async def _now(outcome: Outcome) -> Outcome:
    return outcome  # a read: answered at once, as an awaitable for each_partition
