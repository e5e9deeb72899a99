"""DescribeTransactions (api key 65): the coordinator's state of transactional ids
(``kafka-transactions.sh describe``).

Version 0 (flexible). Per id: the coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE), TRANSACTIONAL_ID_NOT_FOUND for an unknown one, else Kafka's state
name, timeout, start time, producer id and epoch and the partitions in the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.broker.txn.coordinator import STATE_NAMES
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import (
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        DescribeTransactionsResponseTransactionState,
    )

API_KEY = 65
NAME = "DescribeTransactions"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


def _state(txn_id: str, code: int) -> DescribeTransactionsResponseTransactionState:
    return {"error_code": code, "transactional_id": txn_id, "transaction_state": "", "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}


def handle(services: Services, request: ApiRequest[DescribeTransactionsRequest]) -> DescribeTransactionsResponse:
    coordinator = txn_coordinator_of(services.txn_coordinator)
    states: list[DescribeTransactionsResponseTransactionState] = []
    for txn_id in request.body["transactional_ids"]:
        # Kafka: DESCRIBE on the transactional id; the partitions of topics the principal may not
        # DESCRIBE are left out of the state.
        if not services.authz.allowed(request, authz.DESCRIBE, authz.TRANSACTIONAL_ID, txn_id):
            states.append(_state(txn_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        if coordinator is None:
            states.append(_state(txn_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        try:
            meta = coordinator.describe(txn_id)
        except KafkaApiError as exc:
            states.append(_state(txn_id, exc.code))
            continue
        if meta is None:
            states.append(_state(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        states.append({"error_code": ErrorCode.NONE, "transactional_id": txn_id,
                       "transaction_state": STATE_NAMES[meta.state], "transaction_timeout_ms": meta.timeout_ms,
                       "transaction_start_time_ms": meta.start_ms, "producer_id": meta.producer_id,
                       "producer_epoch": meta.producer_epoch,
                       "topics": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(meta.partitions.items())
                                  if services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, t)]})
    return {"throttle_time_ms": 0, "transaction_states": states}


def error_response(request: ApiRequest[DescribeTransactionsRequest], code: int) -> DescribeTransactionsResponse:
    return {"throttle_time_ms": 0, "transaction_states": [_state(t, code) for t in request.body["transactional_ids"]]}
