"""EndTxn (api key 26): commit or abort the producer's ongoing transaction.

Versions 0-4 (v5, KIP-890 part 2's epoch bump per transaction, needs transaction.version 2, which
is not advertised).
- v1: same as v0.
- v2: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v3: flexible.
- v4: TRANSACTION_ABORTABLE may be returned (KIP-890); never here.

Answered once PrepareCommit/PrepareAbort is durable; the markers follow (broker/txn/markers.py).
Without an ongoing transaction: INVALID_TXN_STATE; a retry of a finished one: NONE.
"""

from __future__ import annotations

from broker.handlers.txn_common import fenced_error, txn_coordinator_of
from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode, KafkaApiError

API_KEY = 26
NAME = "EndTxn"
VERSIONS = (0, 4)


async def handle(request: ApiRequest) -> dict:
    if not authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, request.body["transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    body = request.body
    coordinator = txn_coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = await coordinator.end_transaction(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                             body["committed"])
    return {"throttle_time_ms": 0, "error_code": fenced_error(code, request, 2), "producer_id": -1,
            "producer_epoch": -1}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
