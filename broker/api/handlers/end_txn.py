"""EndTxn (api key 26): commit or abort the producer's ongoing transaction.

Versions 0-5.
- v1: same as v0.
- v2: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v3: flexible.
- v4: TRANSACTION_ABORTABLE may be returned (KIP-890); never here.
- v5: transactions v2 (KIP-890 part 2): the commit or abort bumps the producer epoch, and the
  answer carries the producer id and epoch the producer goes on with (a new producer id at epoch 0
  once the epoch is exhausted); a retry names the epoch before the bump
  (broker/txn/coordinator.py ``_end_op_v2`` has Kafka's table). As in Kafka, the version decides
  (TransactionVersion.transactionVersionForEndTxn), whatever transaction.version is finalized: the
  Java producer sends v5 only when it is 2.

Answered once PrepareCommit/PrepareAbort is durable; the markers follow (broker/txn/markers.py).
Without an ongoing transaction: INVALID_TXN_STATE; a retry of a finished one: NONE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import fenced_error, txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import EndTxnRequest, EndTxnResponse

API_KEY = 26
NAME = "EndTxn"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


# The first version of transactions v2 (Kafka's EndTxnRequest.LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2 + 1).
TRANSACTIONS_V2_FROM = 5


async def handle(services: Services, request: ApiRequest[EndTxnRequest]) -> EndTxnResponse:
    if not services.authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, request.body["transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    body = request.body
    coordinator = txn_coordinator_of(services.txn_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    version = 2 if request.api_version >= TRANSACTIONS_V2_FROM else 0
    result = await coordinator.end_transaction(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                               body["committed"], version)
    return {"throttle_time_ms": 0, "error_code": fenced_error(result.error, request, 2),
            "producer_id": result.producer_id, "producer_epoch": result.producer_epoch}


def error_response(request: ApiRequest[EndTxnRequest], code: int) -> EndTxnResponse:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
