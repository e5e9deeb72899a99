"""InitProducerId (api key 22): a producer id and epoch for idempotent producers.

Versions 0-5.
- v1: same as v0.
- v2: flexible.
- v3: producer_id/producer_epoch in the request (KIP-360: an existing producer may bump its
  epoch).
- v4: PRODUCER_FENCED may be returned (KIP-588).
- v5: same as v4.

Without a transactional id every call gets a fresh producer id with epoch 0, as Kafka does for
idempotent producers (the Java producer, kafka-python and Spark's sink call this first and fail
if it is missing). Producer ids never repeat across restarts (broker/producer_ids.py).

Transactional ids need the transaction coordinator, which Odradek does not have yet: such calls
get COORDINATOR_NOT_AVAILABLE (FindCoordinator for transactions answers the same), so a
transactional client fails with a timeout instead of proceeding without guarantees.
"""

from __future__ import annotations

from broker.request_types import ApiRequest
from protocol.errors import ErrorCode

API_KEY = 22
NAME = "InitProducerId"
VERSIONS = (0, 5)


async def handle(request: ApiRequest) -> dict:
    body = request.body
    if body["transactional_id"] is not None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1,
                "producer_epoch": -1}
    producer_id = await request.broker.producer_ids.next_id()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
