"""ListTransactions (api key 66): the transactional ids this broker coordinates
(``kafka-transactions.sh list``; the admin client asks every broker).

Versions 0-2 (flexible).
- v1: duration_filter (KIP-994): only transactions running at least that long.
- v2: transactional_id_pattern (KIP-1152): a regular expression the whole transactional id must
  match (Kafka 4.4: RE2/J's Pattern.matches; here RE2's, broker/runtime/client_regex.py, as the KIP-848
  topic regexes); null or empty: no filter. One that does not compile answers
  INVALID_REGULAR_EXPRESSION with nothing listed (Kafka's ListTransactionsRequest.getErrorResponse).

Filters by Kafka's state names (unknown ones are echoed in unknown_state_filters) and producer ids.
COORDINATOR_LOAD_IN_PROGRESS while a partition loads (with what is loaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.runtime.client_regex import ClientRegexError, compile_client_regex
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import ListTransactionsRequest, ListTransactionsResponse

API_KEY = 66
NAME = "ListTransactions"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[ListTransactionsRequest]) -> ListTransactionsResponse:
    body = request.body
    coordinator = txn_coordinator_of(services.txn_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error, unknown, found = coordinator.list_transactions(list(body["state_filters"]),
                                                          list(body["producer_id_filters"]),
                                                          body.get("duration_filter", -1))
    pattern_text = body["transactional_id_pattern"]  # null before v2
    if pattern_text and error != ErrorCode.COORDINATOR_NOT_AVAILABLE:
        try:
            pattern = compile_client_regex(pattern_text)
        except ClientRegexError:
            # Kafka answers the load in progress before it reads the pattern.
            if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return error_response(request, error)
            return error_response(request, ErrorCode.INVALID_REGULAR_EXPRESSION)
        found = [f for f in found if pattern.fullmatch(f[0])]
    # Kafka: only the transactional ids the principal may DESCRIBE.
    found = services.authz.filter_allowed(request, authz.DESCRIBE, authz.TRANSACTIONAL_ID, found, lambda f: f[0])
    return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": t, "producer_id": p, "transaction_state": s}
                                   for t, p, s in found]}


def error_response(request: ApiRequest[ListTransactionsRequest], code: int) -> ListTransactionsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}
