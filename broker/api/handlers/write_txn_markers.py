"""WriteTxnMarkers (api key 27): a transaction coordinator's COMMIT/ABORT markers for the
partitions this broker leads.

Versions 1-2 (v0 was retired by Kafka 4.0, KIP-896: a request for it closes the connection).
- v1: flexible.
- v2: transaction_version per marker (KIP-1228): the transaction's client transaction version.

Sent by transaction coordinators (broker/txn/markers.py) and by the admin client's
abortTransaction (``kafka-transactions.sh abort`` of a hanging transaction). Kafka requires the
ClusterAction permission on the cluster (CLUSTER_AUTHORIZATION_FAILED for every partition
otherwise); with no authorizer, as here until issue 15, every client is allowed
(``_cluster_action_allowed``: CLUSTER_ACTION with an authorizer). The markers themselves are what is
validated: each goes through ``ReplicaManager.append_end_txn_markers`` (acks=-1, coordinator
origin), whose errors per partition are Kafka's: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the last marker's; a marker of
transaction version 2 (v2's field, KIP-1228) is refused INVALID_PRODUCER_EPOCH unless its epoch is
above the producer's (or repeats the marker that ended its last transaction); nothing is appended
for a refused marker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.runtime.completion import Completion
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import WritableTxnMarker, WriteTxnMarkersRequest, WriteTxnMarkersResponse

API_KEY = 27
NAME = "WriteTxnMarkers"
VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    replica_manager: ReplicaManager
    authz: AuthHelper


def _response(markers: list[WritableTxnMarker], code_of: Callable[[int, str, int], int]) -> WriteTxnMarkersResponse:
    """One result per (marker, topic, partition) of the request, in its order."""
    return {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p, "error_code": code_of(i, t["name"], p)}
                                           for p in t["partition_indexes"]]}
        for t in m["topics"]]} for i, m in enumerate(markers)]}


async def handle(services: Services, request: ApiRequest[WriteTxnMarkersRequest]) -> WriteTxnMarkersResponse:
    markers = request.body["markers"]
    if not _cluster_action_allowed(services, request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    entries = [(t["name"], p, m["producer_id"], m["producer_epoch"], m["coordinator_epoch"], m["transaction_result"],
                m.get("transaction_version", 0)) for m in markers for t in m["topics"] for p in t["partition_indexes"]]
    done: Completion[list[Any]] = Completion()
    services.replica_manager.append_end_txn_markers(entries, services.config["request.timeout.ms"], done)
    results = done.value if done.done else await done.wait()
    codes = {(e[2], e[0], e[1]): (r.code if isinstance(r, KafkaApiError) else ErrorCode.NONE)
             for e, r in zip(entries, results, strict=True)}
    return _response(markers, lambda i, t, p: codes[(markers[i]["producer_id"], t, p)])


def _cluster_action_allowed(services: Services, request: ApiRequest[WriteTxnMarkersRequest]) -> bool:
    """Kafka's ``authorize(CLUSTER_ACTION, CLUSTER)`` (every principal without an authorizer)."""
    return services.authz.cluster_allowed(request, authz.CLUSTER_ACTION)


def error_response(request: ApiRequest[WriteTxnMarkersRequest], code: int) -> WriteTxnMarkersResponse:
    return _response(request.body["markers"], lambda i, t, p: code)
