"""TxnOffsetCommit (api key 28): a transactional producer commits a group's offsets inside its
transaction (Java's sendOffsetsToTransaction, librdkafka's send_offsets_to_transaction).

Versions 0-4.
- v1: same as v0.
- v2: committed_leader_epoch.
- v3: flexible; generation_id, member_id, group_instance_id (KIP-447: the group's checks);
  PRODUCER_FENCED may be returned (INVALID_PRODUCER_EPOCH before).
- v4: TRANSACTION_ABORTABLE may be returned (KIP-890); never here.

Where this broker coordinates the transactional id, the group's __consumer_offsets partition must
be in the producer's ongoing transaction (AddOffsetsToTxn; INVALID_TXN_STATE otherwise, nothing
written). The offsets stay pending until the transaction's marker lands on the group's __consumer_offsets
partition (broker/group/txn_offsets.py): OffsetFetch shows them only after a commit.
"""

from __future__ import annotations

from broker.group.coordinator import OFFSETS_TOPIC, coordinator_of
from broker.group.txn_offsets import TxnCommitPartition
from broker.handlers.txn_common import fenced_error
from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode, KafkaApiError

API_KEY = 28
NAME = "TxnOffsetCommit"
VERSIONS = (0, 4)


def _response(topics: list[dict], codes: list[int]) -> dict:
    it = iter(codes)
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": next(it)}
                                           for p in t["partitions"]]} for t in topics]}


async def handle(request: ApiRequest) -> dict:
    if not authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, request.body["transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    topics = body["topics"]
    coordinator = coordinator_of(request)
    count = sum(len(t["partitions"]) for t in topics)
    if coordinator is None:
        return _response(topics, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * count)
    refused = _verify(request, coordinator.partition_for(body["group_id"]))
    if refused is not None:
        return _response(topics, [refused] * count)
    partitions: list[TxnCommitPartition] = [
        (t["name"], p["partition_index"], p["committed_offset"], p.get("committed_leader_epoch", -1),
         p["committed_metadata"]) for t in topics for p in t["partitions"]]
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (not committed).
    denied = authz.denied_indexes(request, authz.READ, authz.TOPIC, [p[0] for p in partitions])
    allowed = [p for i, p in enumerate(partitions) if i not in denied]
    codes = iter(await coordinator.commit_txn_offsets(
        body["group_id"], body["producer_id"], body["producer_epoch"], body.get("member_id") or "",
        body.get("group_instance_id"), body.get("generation_id", -1), allowed) if allowed or not denied else [])
    return _response(topics, [ErrorCode.TOPIC_AUTHORIZATION_FAILED if i in denied
                              else fenced_error(ErrorCode(next(codes)), request, 3) for i in range(len(partitions))])


def _verify(request: ApiRequest, offsets_partition: int) -> ErrorCode | None:
    """KIP-890's check where this broker coordinates the transactional id: the group's
    __consumer_offsets partition must be in the ongoing transaction (AddOffsetsToTxn first), else
    an offset batch no marker would ever close. Kafka's errors; None to go on."""
    body = request.body
    txn = request.broker.txn_coordinator
    if txn is None or not request.broker.config["transaction.partition.verification.enable"]:
        return None
    code = txn.verify(body["transactional_id"], body["producer_id"], body["producer_epoch"], OFFSETS_TOPIC,
                      offsets_partition)
    if code is None or code == ErrorCode.NONE:
        return None
    return fenced_error(ErrorCode.PRODUCER_FENCED if code == ErrorCode.INVALID_PRODUCER_EPOCH else code, request, 3)


def error_response(request: ApiRequest, code: int) -> dict:
    return _response(request.body["topics"], [code] * sum(len(t["partitions"]) for t in request.body["topics"]))
