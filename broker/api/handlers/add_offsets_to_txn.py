"""AddOffsetsToTxn (api key 25): a group's __consumer_offsets partition joins the transaction
(so the TxnOffsetCommit that follows is committed or aborted with it).

Versions 0-4.
- v1: same as v0.
- v2: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v3: flexible.
- v4: TRANSACTION_ABORTABLE may be returned (KIP-890); never here.
"""

from __future__ import annotations

from odradek.broker.api.handlers.txn_common import fenced_error, txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

API_KEY = 25
NAME = "AddOffsetsToTxn"
VERSIONS = (0, 4)


async def handle(request: ApiRequest) -> dict:
    if not authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, request.body["transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    coordinator = txn_coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = await coordinator.add_offsets(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                         body["group_id"])
    return {"throttle_time_ms": 0, "error_code": fenced_error(code, request, 2)}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code}
