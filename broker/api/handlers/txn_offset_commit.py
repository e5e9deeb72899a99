"""TxnOffsetCommit (api key 28): a transactional producer commits a group's offsets inside its
transaction (Java's sendOffsetsToTransaction, librdkafka's send_offsets_to_transaction).

Versions 0-6.
- v1: same as v0.
- v2: committed_leader_epoch.
- v3: flexible; generation_id, member_id, group_instance_id (KIP-447: the group's checks);
  PRODUCER_FENCED may be returned (INVALID_PRODUCER_EPOCH before).
- v4: TRANSACTION_ABORTABLE may be returned (KIP-890): the offsets partition was not added.
- v5: transactions v2 (KIP-890 part 2): the producer sends no AddOffsetsToTxn; the group's
  coordinator adds the group's __consumer_offsets partition to the transaction itself
  (``_join_offsets_partition``, as for Produce v12: broker/txn/coordinator.py ``add_for_leader``),
  unless the producer's transaction at that epoch is open on it already.
- v6: topics by topic_id instead of name, in the request and the answer (KIP-1319); an id no
  topic has answers UNKNOWN_TOPIC_ID on each of its partitions, before the topic authorization
  check, as Kafka 4.4's KafkaApis does. The offsets are stored by name, as ever. A generation for a
  group the coordinator does not have is GROUP_ID_NOT_FOUND (ILLEGAL_GENERATION before v6).

Before v5 the group's __consumer_offsets partition must be in the producer's ongoing transaction
(AddOffsetsToTxn), verified with its coordinator (``_join_offsets_partition``, KIP-890 part 1):
TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE before, nothing written. The refusals of the
verification and of v5's add are Kafka's group coordinator's mapping of them
(CoordinatorOperationExceptionHelper): INVALID_PRODUCER_EPOCH (another epoch),
INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS, NOT_COORDINATOR (the offsets partition is led
elsewhere), COORDINATOR_LOAD_IN_PROGRESS (the transaction coordinator could not be reached),
COORDINATOR_NOT_AVAILABLE; nothing written. The offsets stay pending until the transaction's marker
lands on the group's __consumer_offsets partition (broker/group/txn_offsets.py): OffsetFetch shows
them only after a commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import fenced_error
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import OFFSETS_TOPIC, coordinator_of
from odradek.broker.group.txn_offsets import TxnCommitPartition
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

API_KEY = 28
NAME = "TxnOffsetCommit"
VERSIONS = (0, 6)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    replica_manager: ReplicaManager
    group_coordinator: GroupCoordinator
    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


ADD_PARTITION_FROM = 5  # transactions v2 (Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation)
TRANSACTION_ABORTABLE_FROM = 4
TOPIC_IDS_FROM = 6

# How Kafka's group coordinator answers an add it could not make (CoordinatorOperationExceptionHelper).
_ADD_ERRORS = {
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


def _response(request: ApiRequest[TxnOffsetCommitRequest], codes: Sequence[int]) -> TxnOffsetCommitResponse:
    """One code per requested partition, in request order; each topic answered as it was named
    (the codec writes name before v6, topic_id from v6)."""
    it = iter(codes)
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "topic_id": t["topic_id"],
         "partitions": [{"partition_index": p["partition_index"], "error_code": next(it)} for p in t["partitions"]]}
        for t in request.body["topics"]]}


def _topic_names(services: Services, request: ApiRequest[TxnOffsetCommitRequest]) -> list[str | None]:
    """Each requested topic's name: from v6 the name of the topic with that id (None: none has it)."""
    topics = request.body["topics"]
    if request.api_version < TOPIC_IDS_FROM:
        return [t["name"] for t in topics]
    by_id = services.metadata.image.topics_by_id
    return [None if (topic := by_id.get(t["topic_id"])) is None else topic.name for t in topics]


async def handle(services: Services, request: ApiRequest[TxnOffsetCommitRequest]) -> TxnOffsetCommitResponse:
    if not services.authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, request.body["transactional_id"]):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    names = _topic_names(services, request)
    requested = [(name, p) for t, name in zip(body["topics"], names, strict=True) for p in t["partitions"]]
    unknown_ids = [name is None for name, _ in requested]

    def respond(codes: Sequence[int]) -> TxnOffsetCommitResponse:
        it = iter(codes)
        return _response(request, [ErrorCode.UNKNOWN_TOPIC_ID if unknown else next(it) for unknown in unknown_ids])

    partitions: list[TxnCommitPartition] = [
        (name, p["partition_index"], p["committed_offset"], p.get("committed_leader_epoch", -1),
         p["committed_metadata"]) for name, p in requested if name is not None]
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return respond([ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(partitions))
    refused = await _join_offsets_partition(services, request, coordinator.partition_for(body["group_id"])) \
        if partitions else None
    if refused is not None:
        return respond([refused] * len(partitions))
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (not committed).
    denied = services.authz.denied_indexes(request, authz.READ, authz.TOPIC, [p[0] for p in partitions])
    allowed = [p for i, p in enumerate(partitions) if i not in denied]
    codes = iter(await coordinator.commit_txn_offsets(
        body["group_id"], body["producer_id"], body["producer_epoch"], body.get("member_id") or "",
        body.get("group_instance_id"), body.get("generation_id_or_member_epoch", -1), allowed,
        request.api_version) if allowed or not denied else [])
    return respond([ErrorCode.TOPIC_AUTHORIZATION_FAILED if i in denied
                    else fenced_error(ErrorCode(next(codes)), request, 3) for i in range(len(partitions))])


async def _join_offsets_partition(services: Services, request: ApiRequest[TxnOffsetCommitRequest], offsets_partition: int) -> ErrorCode | None:
    """The group's __consumer_offsets partition and the producer's transaction, before any offset is
    written (Kafka's CoordinatorPartitionWriter.maybeStartTransactionVerification): nothing to do
    when the producer's transaction at this epoch is open there; else, from v5, the transaction
    coordinator adds it (transactions v2), before v5 it verifies that AddOffsetsToTxn added it
    (KIP-890 part 1, when transaction.partition.verification.enable) - here or on the coordinator's
    broker. Kafka's error (a partition not added: TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE
    before; another epoch INVALID_PRODUCER_EPOCH), or None to go on."""
    body = request.body
    version = request.api_version
    add = version >= ADD_PARTITION_FROM
    if not add and not services.config["transaction.partition.verification.enable"]:
        return None
    txn_id, producer_id, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
    tp = (OFFSETS_TOPIC, offsets_partition)
    try:
        joined, _ = services.replica_manager.transaction_to_join(OFFSETS_TOPIC, offsets_partition, producer_id, epoch)
    except KafkaApiError as exc:
        code = ErrorCode(exc.code)
        return _ADD_ERRORS.get(code, code)
    if joined:
        return None
    txn = services.txn_coordinator
    if not txn.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if add:
        code = (await txn.add_for_leader(txn_id, producer_id, epoch, [tp]))[tp]
    else:
        local = txn.verify(txn_id, producer_id, epoch, *tp)
        code = (await txn.verify_remote(txn_id, producer_id, epoch, [tp]))[tp] if local is None else local
        if code == ErrorCode.PRODUCER_FENCED:
            code = ErrorCode.INVALID_PRODUCER_EPOCH  # as Kafka's AddPartitionsToTxnManager hands it on
        if code == ErrorCode.TRANSACTION_ABORTABLE and version < TRANSACTION_ABORTABLE_FROM:
            code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.NONE:
        return None
    return _ADD_ERRORS.get(code, code)


def error_response(request: ApiRequest[TxnOffsetCommitRequest], code: int) -> TxnOffsetCommitResponse:
    return _response(request, [code] * sum(len(t["partitions"]) for t in request.body["topics"]))
