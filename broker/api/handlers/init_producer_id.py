"""InitProducerId (api key 22): a producer id and epoch for idempotent and transactional producers.

Versions 0-5.
- v1: same as v0.
- v2: flexible.
- v3: producer_id/producer_epoch in the request (KIP-360: an existing producer may bump its
  epoch).
- v4: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v5: same as v4.

Without a transactional id every call gets a fresh producer id with epoch 0, as Kafka does for
idempotent producers (the Java producer, kafka-python and Spark's sink call this first and fail
if it is missing). Producer ids never repeat across restarts (broker/txn/producer_ids.py).

With a transactional id the transaction coordinator answers (broker/txn/coordinator.py): an epoch
bump fencing the previous incarnation, INVALID_TRANSACTION_TIMEOUT above
transaction.max.timeout.ms, CONCURRENT_TRANSACTIONS while a previous transaction is being ended.
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
    from odradek.broker.txn.producer_ids import ProducerIdSource
    from odradek.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = 22
NAME = "InitProducerId"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    txn_coordinator: TransactionCoordinator
    producer_ids: ProducerIdSource
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[InitProducerIdRequest]) -> InitProducerIdResponse:
    body = request.body
    txn_id = body["transactional_id"]
    if services.authz.authorizer is not None:
        # KafkaApis.handleInitProducerIdRequest: WRITE on the transactional id; an idempotent
        # producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
        if txn_id is not None:
            if not services.authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, txn_id):
                raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not (services.authz.cluster_allowed(request, authz.IDEMPOTENT_WRITE)
                  or services.authz.allowed_by_resource_type(request, authz.WRITE, authz.TOPIC)):
            raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if txn_id is not None:
        coordinator = txn_coordinator_of(services.txn_coordinator)
        if coordinator is None:
            return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        code, pid, epoch = await coordinator.init_producer_id(
            txn_id, body["transaction_timeout_ms"], body.get("producer_id", -1), body.get("producer_epoch", -1))
        return {"throttle_time_ms": 0, "error_code": fenced_error(code, request, 4), "producer_id": pid,
                "producer_epoch": epoch}
    producer_id = await services.producer_ids.next_id()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


def error_response(request: ApiRequest[InitProducerIdRequest], code: int) -> InitProducerIdResponse:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
