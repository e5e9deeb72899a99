"""DeleteShareGroupState (api key 86): drop share-partitions' state on their share coordinator
(a tombstone; KIP-932: sent for DeleteShareGroupOffsets and DeleteGroups of a share group).

Version 0 (flexible), as Kafka 4.4. CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for
every partition otherwise); the checks and errors are the share coordinator's
(broker/share/share_coordinator.py): NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION; a share-partition with no
state is no error.
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
        DeleteShareGroupStateRequest,
        DeleteShareGroupStateResponse,
        DeleteShareGroupStateResponsePartitionResult,
    )

API_KEY = 86
NAME = "DeleteShareGroupState"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    share_coordinator: ShareCoordinator
    authz: AuthHelper


async def handle(services: Services,
                 request: ApiRequest[DeleteShareGroupStateRequest]) -> DeleteShareGroupStateResponse:
    body = request.body
    if refused(services.authz, request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if nothing_to_do(body):
        return {"results": []}

    def run(key: StateKey, p: Mapping[str, Any]) -> Any:
        return services.share_coordinator.delete(key)

    def entry(p: Mapping[str, Any], o: Outcome) -> DeleteShareGroupStateResponsePartitionResult:
        return {"partition": p["partition"], "error_code": o.error_code, "error_message": o.error_message}

    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in await each_partition(body, run, entry)]}


def error_response(request: ApiRequest[DeleteShareGroupStateRequest], code: int) -> DeleteShareGroupStateResponse:
    return {"results": [{"topic_id": t, "partitions": [{"partition": p, "error_code": code, "error_message": None}
                                                        for p in ps]} for t, ps in partitions_of(request.body)]}
