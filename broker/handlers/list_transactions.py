"""ListTransactions (api key 66): the transactional ids this broker coordinates
(``kafka-transactions.sh list``; the admin client asks every broker).

Versions 0-1 (flexible).
- v1: duration_filter (KIP-994): only transactions running at least that long.

Filters by Kafka's state names (unknown ones are echoed in unknown_state_filters) and producer ids.
COORDINATOR_LOAD_IN_PROGRESS while a partition loads (with what is loaded).
"""

from __future__ import annotations

from broker.handlers.txn_common import txn_coordinator_of
from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode

API_KEY = 66
NAME = "ListTransactions"
VERSIONS = (0, 1)


def handle(request: ApiRequest) -> dict:
    body = request.body
    coordinator = txn_coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error, unknown, found = coordinator.list_transactions(list(body["state_filters"]),
                                                          list(body["producer_id_filters"]),
                                                          body.get("duration_filter", -1))
    # Kafka: only the transactional ids the principal may DESCRIBE.
    found = authz.filter_allowed(request, authz.DESCRIBE, authz.TRANSACTIONAL_ID, found, lambda f: f[0])
    return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": t, "producer_id": p, "transaction_state": s}
                                   for t, p, s in found]}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}
