"""AddPartitionsToTxn (api key 24): partitions join a producer's ongoing transaction.

Versions 0-3 (the client versions; v4+ carry KIP-890's batched broker-to-coordinator
verification, not served yet).
- v1: same as v0.
- v2: PRODUCER_FENCED may be returned (KIP-588); INVALID_PRODUCER_EPOCH before.
- v3: flexible.

A partition of a topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED (Kafka's KafkaApis); otherwise the coordinator's answer goes to every
partition.
"""

from __future__ import annotations

from broker.handlers.txn_common import fenced_error, txn_coordinator_of
from broker.request_types import ApiRequest
from protocol.errors import ErrorCode

API_KEY = 24
NAME = "AddPartitionsToTxn"
VERSIONS = (0, 3)


def _results(topics: list[dict], code_of: dict[tuple[str, int], ErrorCode] | int) -> list[dict]:
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": code_of if isinstance(code_of, int) else code_of[(t["name"], p)]}
        for p in t["partitions"]]} for t in topics]


async def handle(request: ApiRequest) -> dict:
    body = request.body
    topics = body["v3_and_below_topics"]
    coordinator = txn_coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    image = request.broker.metadata.image
    unknown = {(t["name"], p) for t in topics for p in t["partitions"]
               if image.partition(t["name"], p) is None}
    if unknown:
        codes = {(t["name"], p): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t["name"], p) in unknown
                                  else ErrorCode.OPERATION_NOT_ATTEMPTED) for t in topics for p in t["partitions"]}
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(topics, codes)}
    partitions: dict[str, list[int]] = {}
    for t in topics:
        partitions.setdefault(t["name"], []).extend(t["partitions"])
    code = await coordinator.add_partitions(body["v3_and_below_transactional_id"], body["v3_and_below_producer_id"],
                                            body["v3_and_below_producer_epoch"], partitions)
    return {"throttle_time_ms": 0,
            "results_by_topic_v3_and_below": _results(topics, int(fenced_error(code, request, 2)))}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(request.body["v3_and_below_topics"], code)}
