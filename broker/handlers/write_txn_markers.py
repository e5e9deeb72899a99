"""WriteTxnMarkers (api key 27): a transaction coordinator's COMMIT/ABORT markers for the
partitions this broker leads.

Versions 0-1.
- v1: flexible.

Inter-broker only. Kafka requires the ClusterAction permission (CLUSTER_AUTHORIZATION_FAILED
otherwise); until authorization exists (issue 15) the stand-in is the client id every Odradek
broker's marker sender uses (``broker-<id>-txn-marker-sender``, broker/txn/markers.py): any other
client gets CLUSTER_AUTHORIZATION_FAILED for every partition and nothing is appended.
Each marker goes through ``ReplicaManager.append_end_txn_markers`` (acks=-1, coordinator origin);
errors per partition are the replica manager's (NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.completion import Completion
from broker.handlers.txn_common import from_broker
from broker.request_types import ApiRequest
from protocol.errors import ErrorCode, KafkaApiError

API_KEY = 27
NAME = "WriteTxnMarkers"
VERSIONS = (0, 1)

def _response(markers: list[dict], code_of: Callable[[int, str, int], int]) -> dict:
    """One result per (marker, topic, partition) of the request, in its order."""
    return {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p, "error_code": code_of(i, t["name"], p)}
                                           for p in t["partition_indexes"]]}
        for t in m["topics"]]} for i, m in enumerate(markers)]}


async def handle(request: ApiRequest) -> dict:
    markers = request.body["markers"]
    if not from_broker(request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    entries = [(t["name"], p, m["producer_id"], m["producer_epoch"], m["coordinator_epoch"], m["transaction_result"])
               for m in markers for t in m["topics"] for p in t["partition_indexes"]]
    done: Completion[list[Any]] = Completion()
    request.broker.replica_manager.append_end_txn_markers(entries, request.broker.config["request.timeout.ms"], done)
    results = done.value if done.done else await done.wait()
    codes = {(e[2], e[0], e[1]): (r.code if isinstance(r, KafkaApiError) else ErrorCode.NONE)
             for e, r in zip(entries, results, strict=True)}
    return _response(markers, lambda i, t, p: codes[(markers[i]["producer_id"], t, p)])


def error_response(request: ApiRequest, code: int) -> dict:
    return _response(request.body["markers"], lambda i, t, p: code)
