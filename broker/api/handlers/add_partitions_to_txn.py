"""AddPartitionsToTxn (api key 24): partitions join a producer's ongoing transaction.

Versions 0-5.
- v1: same as v0.
- v2: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v3: flexible.
- v4: batched, broker to coordinator (KIP-890 part 1): ``verify_only`` asks whether partitions are
  in a producer's ongoing transaction before a leader appends its transactional batch (Kafka's
  answers: TRANSACTION_ABORTABLE per partition not in it, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS
  while it completes); inter-broker only (Kafka's ClusterAction; the stand-in until issue 15 is
  the brokers' client id, txn_common.from_broker): CLUSTER_AUTHORIZATION_FAILED for clients. To a v4
  request, which predates TRANSACTION_ABORTABLE (the 0.1.0 release sends v4), a partition not in the
  transaction answers INVALID_TXN_STATE and another epoch INVALID_PRODUCER_EPOCH, as 0.1.0 answered.
- v5: same as v4 (TRANSACTION_ABORTABLE may be returned); what this release's leaders send.

A v4+ transaction that is not verify_only is a partition leader adding partitions for a
transactions-v2 producer (Produce v12, TxnOffsetCommit v5+: KIP-890 part 2's implicit add): the
coordinator records the transaction as a v2 one, as Kafka's transactionVersionForAddPartitionsToTxn
(v4+: 2); the client versions v0-3 add as version 0.

A partition of a topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED (Kafka's KafkaApis); otherwise the coordinator's answer goes to every
partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import fenced_error, from_broker, txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        AddPartitionsToTxnResult,
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTopicResult,
    )

API_KEY = 24
NAME = "AddPartitionsToTxn"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


_BEFORE_V5 = {ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE,
              ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH}


def _results(topics: list[AddPartitionsToTxnTopic],
             code_of: dict[tuple[str, int], ErrorCode] | int) -> list[AddPartitionsToTxnTopicResult]:
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": code_of if isinstance(code_of, int) else code_of[(t["name"], p)]}
        for p in t["partitions"]]} for t in topics]


async def _handle_batched(services: Services,
                          request: ApiRequest[AddPartitionsToTxnRequest]) -> AddPartitionsToTxnResponse:
    """v4+: several transactions, each added or (verify_only) checked."""
    if not from_broker(request):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    coordinator = txn_coordinator_of(services.txn_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    results: list[AddPartitionsToTxnResult] = []
    for txn in request.body["transactions"]:
        tps = [(t["name"], p) for t in txn["topics"] for p in t["partitions"]]
        codes: dict[tuple[str, int], ErrorCode]
        try:
            if txn["verify_only"]:
                codes = coordinator.verify_partitions(txn["transactional_id"], txn["producer_id"],
                                                      txn["producer_epoch"], tps)
                if request.api_version < 5:
                    codes = {tp: _BEFORE_V5.get(code, code) for tp, code in codes.items()}
            else:
                partitions: dict[str, list[int]] = {}
                for t, p in tps:
                    partitions.setdefault(t, []).append(p)
                code = await coordinator.add_partitions(txn["transactional_id"], txn["producer_id"],
                                                        txn["producer_epoch"], partitions, client_transaction_version=2)
                codes = dict.fromkeys(tps, code)
        except KafkaApiError as exc:
            codes = dict.fromkeys(tps, ErrorCode(exc.code))
        results.append({"transactional_id": txn["transactional_id"], "topic_results": _results(txn["topics"], codes)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}


async def handle(services: Services, request: ApiRequest[AddPartitionsToTxnRequest]) -> AddPartitionsToTxnResponse:
    if request.api_version < 4 and not services.authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID,
                                                     request.body["v3_and_below_transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if request.api_version >= 4 and not services.authz.cluster_allowed(request, authz.CLUSTER_ACTION):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.api_version >= 4:
        return await _handle_batched(services, request)
    body = request.body
    topics = body["v3_and_below_topics"]
    coordinator = txn_coordinator_of(services.txn_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    image = services.metadata.image
    # Kafka: WRITE on each topic; any unauthorized (TOPIC_AUTHORIZATION_FAILED) or unknown
    # (UNKNOWN_TOPIC_OR_PARTITION) partition fails the request, the others OPERATION_NOT_ATTEMPTED.
    writable = set(services.authz.filter_allowed(request, authz.WRITE, authz.TOPIC, {t["name"] for t in topics}))
    failed = {(t["name"], p): ErrorCode.TOPIC_AUTHORIZATION_FAILED if t["name"] not in writable
              else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
              for t in topics for p in t["partitions"]
              if t["name"] not in writable or image.partition(t["name"], p) is None}
    if failed:
        codes = {(t["name"], p): failed.get((t["name"], p), ErrorCode.OPERATION_NOT_ATTEMPTED)
                 for t in topics for p in t["partitions"]}
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(topics, codes)}
    partitions: dict[str, list[int]] = {}
    for t in topics:
        partitions.setdefault(t["name"], []).extend(t["partitions"])
    code = await coordinator.add_partitions(body["v3_and_below_transactional_id"], body["v3_and_below_producer_id"],
                                            body["v3_and_below_producer_epoch"], partitions)
    return {"throttle_time_ms": 0,
            "results_by_topic_v3_and_below": _results(topics, int(fenced_error(code, request, 2)))}


def error_response(request: ApiRequest[AddPartitionsToTxnRequest], code: int) -> AddPartitionsToTxnResponse:
    if request.api_version >= 4:
        return {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": []}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(request.body["v3_and_below_topics"], code)}
