"""``TransactionCoordinator``: Kafka's transaction coordinator on the coordinator runtime.

Transactional id ``t`` belongs to partition ``abs(hashCode(t)) % transaction.state.log.num.partitions``
of ``__transaction_state`` (0.1.0's rule while the cluster's metadata format level is below the
migration's: broker/coordinator/partition_rule.py) and is served by that partition's leader (the
runtime loads the partition on leadership). Every state change is a TransactionLogValue written through the runtime
(write -> durable -> apply), so memory is the replay of the log. The entry points follow Kafka's
TransactionCoordinator:

- ``init_producer_id``: a new id gets a producer id (from the broker's producer-id source) and
  epoch 0; a known one gets its epoch bumped (a new producer id once the epoch is exhausted),
  fencing the previous incarnation. An ongoing transaction is first aborted with the bumped epoch
  (CONCURRENT_TRANSACTIONS meanwhile, retriable), as is a prepared one being completed.
- ``add_partitions`` / ``add_offsets``: the partitions (or the group's __consumer_offsets
  partition) join the ongoing transaction (Ongoing, start time set by the first).
- ``end_transaction``: PrepareCommit/PrepareAbort is written, the client answered, then the
  markers go to the partitions' leaders (``markers.MarkerWriter``) and CompleteCommit/
  CompleteAbort is written. A retried EndTxn of a completed transaction answers NONE.
- Transactions v2 (KIP-890 part 2; EndTxn v5, the partitions a leader adds for Produce v12 and
  TxnOffsetCommit v5+ through AddPartitionsToTxn v4+): the transaction records the client's
  transaction version, and every commit or abort of a v2 transaction bumps the producer epoch in
  its Prepare* record (the markers carry the bumped epoch, so a late batch of the ended
  transaction is fenced on every partition, and the next transaction starts on the new epoch);
  EndTxn v5 answers the producer id and epoch to go on with. An epoch that would reach
  Short.MaxValue hands over to a new producer id (``next_producer_id``, taken by Complete*).
  Retries follow Kafka's table (``_end_op_v2``): a retry names the epoch before the bump.
- Timers: every transaction.abort.timed.out.transaction.cleanup.interval.ms, ongoing transactions
  older than their timeout are aborted with a bumped epoch (the producer is fenced); every
  transaction.remove.expired.transaction.cleanup.interval.ms, ids idle (not in a transaction)
  for transactional.id.expiration.ms are removed (tombstone). The coordinator's own aborts (a
  timeout, a new incarnation's InitProducerId) take the cluster's finalized transaction.version.
- Loading a partition finishes what its previous leader left prepared (markers, then Complete*).
- ``verify``: the produce path's check that a transactional batch's partition was added (KIP-890's
  verification, answered here when this broker coordinates the transactional id), with Kafka's
  answers (``_verification``): TRANSACTION_ABORTABLE for a partition not in the ongoing
  transaction, CONCURRENT_TRANSACTIONS while one is being completed, PRODUCER_FENCED for another
  epoch; the leader maps them for its client's version.
- Ids that moved to another partition when the partition rule was fixed: their state is taken
  over from the partition that held it (``RehashMigrations``, broker/coordinator/rehash.py);
  until then they get COORDINATOR_LOAD_IN_PROGRESS. The partition's markers carry its leader
  epoch plus the shard's ``epoch_floor`` as their coordinator epoch. Only under Kafka's rule: below
  its level the partitions load as 0.1.0 loads them, and load again when it rises
  (``follow_partition_rule``).

Errors are Kafka's: INVALID_PRODUCER_ID_MAPPING (unknown id or producer id), PRODUCER_FENCED
(older epoch; INVALID_PRODUCER_EPOCH for request versions before KIP-588, mapped by the handlers),
CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT, and the runtime's
coordinator errors. Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.broker.coordinator import partition_rule
from odradek.broker.coordinator.migration import RehashMigrations
from odradek.broker.coordinator.rehash import LoadFilter
from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorRuntime,
    CoordinatorWriteError,
    KeyValue,
    PartitionState,
)
from odradek.broker.coordinator.twin_reader import TwinReader
from odradek.broker.network.inter_broker_client import NodeUnavailableError
from odradek.broker.txn.markers import ImageView, MarkerReplicas, MarkerWriter
from odradek.broker.txn.metadata import COMPLETE, MAX_EPOCH, PREPARE, TV2, TxnMetadata
from odradek.broker.txn.records import (
    CorruptTxnRecordError,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    key_bytes,
    key_transactional_id,
    value_bytes,
)
from odradek.broker.txn.shard import TXN_TOPIC, TxnShard
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.coordinator.runtime import PartitionWriter
    from odradek.broker.txn.producer_ids import ProducerIdSource
    from odradek.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
ADD_PARTITIONS_TO_TXN = 24
# What a leader sends the coordinator, to verify (KIP-890 part 1) or to add (part 2): v5, as Kafka's
# AddPartitionsToTxnManager (every Odradek release serves it; v5 may answer TRANSACTION_ABORTABLE).
BROKER_VERSION = 5

InitResult = tuple[ErrorCode, int, int]  # (error, producer id, producer epoch)
# Short.MaxValue: the highest epoch a v2 commit or abort may bump to (then a new producer id follows).
EPOCH_CEILING = 32767


class EndResult(NamedTuple):
    """EndTxn's answer: the error, and for transactions v2 the producer id and epoch the producer
    goes on with (-1, -1 otherwise, and on any error)."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1

# Kafka's TransactionState names (ListTransactions/DescribeTransactions, kafka-transactions.sh).
STATE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


@dataclass(frozen=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 15 * 60 * 1000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    abort_interval_ms: int = 10_000
    expire_interval_ms: int = 3600 * 1000
    load_buffer_size: int = 5 * 1024 * 1024
    offsets_num_partitions: int = 50
    marker_timeout_ms: int = 30_000

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> TxnConfig:
        return cls(
            num_partitions=cfg["transaction.state.log.num.partitions"],
            max_timeout_ms=cfg["transaction.max.timeout.ms"],
            id_expiration_ms=cfg["transactional.id.expiration.ms"],
            abort_interval_ms=cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expire_interval_ms=cfg["transaction.remove.expired.transaction.cleanup.interval.ms"],
            load_buffer_size=cfg["transaction.state.log.load.buffer.size"],
            offsets_num_partitions=cfg["offsets.topic.num.partitions"],
            marker_timeout_ms=cfg["request.timeout.ms"],
        )


def _check_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> TxnMetadata:
    """Kafka's checks of a request naming (producer id, epoch) against the id's state."""
    if meta is None or meta.producer_id != producer_id:
        raise KafkaApiError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if meta.producer_epoch != producer_epoch:
        raise KafkaApiError(ErrorCode.PRODUCER_FENCED)
    return meta


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, writer: PartitionWriter, replicas: MarkerReplicas, metadata: ImageView,
                 producer_ids: ProducerIdSource, node_id: int, time_ms: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.node_id = node_id
        self.time_ms = time_ms
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TXN_TOPIC, writer, self._new_shard, load_buffer_size=config.load_buffer_size, time_ms=time_ms,
            load_summary=self._load_summary)
        self.markers = MarkerWriter(replicas, metadata, node_id, config.marker_timeout_ms)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shards: dict[int, TxnShard] = {}
        self.twin_reader = TwinReader(writer, metadata, node_id, config.load_buffer_size)
        self.migrations: RehashMigrations = RehashMigrations(
            self.runtime, self.twin_reader, self._num_partitions, self.partition_for, key_transactional_id,
            self._leader_epoch, self._install_moved)
        # The rule the partitions held here were loaded under (partition_rule.follow moves it).
        self.loaded_rule = partition_rule.LoadedRule(metadata, self.runtime, "transactional ids")

    def _new_shard(self, partition: int) -> TxnShard:
        # Under 0.1.0's rule nothing is set aside or migrated: the partition loads as 0.1.0 loads it.
        load_filter = (LoadFilter(partition, self.partition_for, key_transactional_id)
                       if partition_rule.kafka_rule(self.metadata.image) else None)
        return TxnShard(partition, self._on_loaded, self._on_unloaded, load_filter)

    def _load_summary(self) -> str:
        return f": {sum(len(s.txns) for s in self._shards.values())} transactional ids"

    @property
    def active(self) -> bool:
        return self.runtime.active

    # ==========================================================================================
    # lifecycle

    async def start(self) -> None:
        self.loaded_rule.reset()
        topic = self.metadata.image.topics.get(TXN_TOPIC)
        led = [] if topic is None else [(p.partition, p.leader_epoch) for p in topic.partitions.values()
                                        if p.leader == self.node_id]
        self.runtime.start(led)
        self._spawn(self._every(self.config.abort_interval_ms, self.abort_timed_out_transactions))
        self._spawn(self._every(self.config.expire_interval_ms, self.expire_transactional_ids))

    async def shutdown(self) -> None:
        self.runtime.shutdown()
        self.migrations.shutdown()
        for task in list(self._tasks):
            task.cancel()
        await self.markers.close()
        await self.twin_reader.close()

    def follow_partition_rule(self) -> None:
        """The metadata format level moved: if the rule changed, every partition led here loads
        again under the new one (broker/coordinator/partition_rule.py)."""
        self.loaded_rule.follow()

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _every(self, interval_ms: int, fn: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator timer failed")

    def _on_loaded(self, shard: TxnShard) -> None:
        self._shards[shard.partition] = shard
        # Finish what the previous leader left prepared (the runtime turns the partition active
        # right after this returns, so the completion is queued for the next turn).
        for meta in shard.txns.values():
            if meta.state in PREPARE:
                asyncio.get_running_loop().call_soon(
                    self._send_markers, shard.partition, meta.transactional_id, meta.value())
        if shard.load_filter is not None:
            self.migrations.on_loaded(shard.partition, shard.load_filter)
            shard.load_filter = None

    def _on_unloaded(self, shard: TxnShard) -> None:
        self.migrations.on_unloaded(shard.partition)
        if self._shards.get(shard.partition) is shard:
            del self._shards[shard.partition]

    def _leader_epoch(self, partition: int) -> int:
        state = self.metadata.image.partition(TXN_TOPIC, partition)
        return state.leader_epoch if state is not None else 0

    def _install_moved(self, partition: int, records: list[KeyValue], last_offset: int, source_epoch: int) -> None:
        """The moved ids' copied records are durable: their state goes live here, and a prepared
        transaction's markers are sent again (by the next turn, as after a load)."""
        shard = self.runtime.shard(partition)
        shard.epoch_floor = source_epoch
        for key, value in records:
            try:
                txn_id = decode_key(key)
                v = decode_value(value) if value is not None else None
            except CorruptTxnRecordError as exc:
                log.error("skipping an unreadable %s record taken over by partition %d: %s", TXN_TOPIC, partition, exc)
                continue
            if v is None:
                continue
            shard.txns[txn_id] = TxnMetadata.from_value(txn_id, v)
            if v.state in PREPARE:
                asyncio.get_running_loop().call_soon(self._send_markers, partition, txn_id, v)

    # ==========================================================================================
    # lookups

    def _num_partitions(self) -> int:
        topic = self.metadata.image.topics.get(TXN_TOPIC)
        return len(topic.partitions) if topic is not None else self.config.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        """As FindCoordinator computes it: over the topic's partitions once it exists."""
        return partition_rule.coordinator_partition(self.metadata.image, transactional_id, self._num_partitions())

    def _partition(self, transactional_id: str) -> int:
        """The id's partition if served here; Kafka's coordinator errors otherwise."""
        if not self.runtime.active:
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        partition = self.partition_for(transactional_id)
        self.runtime.check(partition)
        if self.migrations.blocks(partition, transactional_id):
            raise KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return partition

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.runtime.shard(self._partition(transactional_id)).txns.get(transactional_id)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode | None:
        """Is ``topic-partition`` in the ongoing transaction of (producer id, epoch)? Kafka's answer
        (``_verification``), or None when this broker does not coordinate the id (the leader asks
        the coordinator over the network)."""
        p = self.partition_for(transactional_id)
        if self.runtime.state(p) is not PartitionState.ACTIVE or self.migrations.blocks(p, transactional_id):
            return None  # (a moved id not taken over yet: the remote check answers LOAD_IN_PROGRESS)
        meta = self.runtime.shard(p).txns.get(transactional_id)
        return _verification(meta, producer_id, producer_epoch, [(topic, partition)])[(topic, partition)]

    def list_transactions(self, states: list[str], producer_ids: list[int],
                          duration_ms: int = -1) -> tuple[ErrorCode, list[str], list[tuple[str, int, str]]]:
        """ListTransactions of the partitions led here: (error, unknown state filters,
        [(transactional id, producer id, state name)])."""
        if not self.runtime.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        known = {STATE_NAMES[s]: s for s in TxnState}
        unknown = [s for s in states if s not in known]
        wanted = {known[s] for s in states if s in known}
        if states and not wanted:
            return ErrorCode.NONE, unknown, []
        now = self.time_ms()
        found = []
        for partition in sorted(self.runtime.active_partitions()):
            for meta in self.runtime.shard(partition).txns.values():
                if wanted and meta.state not in wanted:
                    continue
                if producer_ids and meta.producer_id not in producer_ids:
                    continue
                if duration_ms >= 0 and (meta.state is not TxnState.ONGOING or now - meta.start_ms < duration_ms):
                    continue
                found.append((meta.transactional_id, meta.producer_id, STATE_NAMES[meta.state]))
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading() else ErrorCode.NONE
        return error, unknown, found

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only (KIP-890 part 1), asked by partition leaders before a
        transactional append: per partition NONE when it is in the ongoing transaction of
        (producer id, epoch), else Kafka's error. Coordinator errors raise KafkaApiError."""
        meta = self.runtime.shard(self._partition(transactional_id)).txns.get(transactional_id)
        return _verification(meta, producer_id, producer_epoch, partitions)

    async def verify_remote(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """The partition leader's side of KIP-890 part 1: ask the id's coordinator (another broker)
        with AddPartitionsToTxn v5 verify_only. Per partition Kafka's AddPartitionsToTxnManager's
        answer (``_ask``); the leader maps it for its client (broker/api/handlers/produce.py)."""
        return await self._ask(transactional_id, producer_id, producer_epoch, partitions, verify_only=True)

    async def add_for_leader(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 2's implicit add: a partition leader adds the partitions of a transactions-v2
        producer's batch (Produce v12) or offsets (TxnOffsetCommit v5+) to its transaction, on the
        id's coordinator - here, or another broker with AddPartitionsToTxn v5 (not verify_only). Per
        partition Kafka's AddPartitionsToTxnManager's answer (``_ask``)."""
        return await self._ask(transactional_id, producer_id, producer_epoch, partitions, verify_only=False)

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
        """The coordinator's answer as Kafka's AddPartitionsToTxnManager hands it to the leader:
        PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, COORDINATOR_NOT_AVAILABLE when the id's partition
        has no leader, NETWORK_EXCEPTION when the coordinator cannot be reached, a refused request's
        error (CLUSTER_AUTHORIZATION_FAILED as INVALID_TXN_STATE) on every partition, NONE for a
        partition the answer leaves out."""
        state = self.metadata.image.partition(TXN_TOPIC, self.partition_for(transactional_id))
        if state is None or state.leader < 0:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        if state.leader == self.node_id and not verify_only:
            code = await self.add_partitions(transactional_id, producer_id, producer_epoch, topics,
                                             client_transaction_version=TV2)
            codes = dict.fromkeys(partitions, code)
        else:
            codes = await self._ask_remote(state.leader, transactional_id, producer_id, producer_epoch, topics,
                                           verify_only)
        return {tp: ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code
                for tp, code in codes.items()}

    async def _ask_remote(self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
                          topics: dict[str, list[int]], verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
        partitions = [(t, p) for t, ps in topics.items() for p in ps]
        client = self.markers.client(leader)
        if client is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        body: AddPartitionsToTxnRequest = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": verify_only, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]}
        try:
            response: AddPartitionsToTxnResponse = await client.request(ADD_PARTITIONS_TO_TXN, BROKER_VERSION, body)
        except (NodeUnavailableError, KafkaApiError):
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        top = ErrorCode(response["error_code"])
        if top != ErrorCode.NONE:
            return dict.fromkeys(partitions, ErrorCode.INVALID_TXN_STATE
                                 if top == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else top)
        codes: dict[tuple[str, int], ErrorCode] = {}
        for txn in response["results_by_transaction"]:
            for topic in txn["topic_results"]:
                for r in topic["results_by_partition"]:
                    codes[(topic["name"], r["partition_index"])] = ErrorCode(r["partition_error_code"])
        return {tp: codes.get(tp, ErrorCode.NONE) for tp in partitions}

    # ==========================================================================================
    # InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> InitResult:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        try:
            partition = self._partition(transactional_id)
            meta = self.runtime.shard(partition).txns.get(transactional_id)
            new_pid = -1
            if meta is None or meta.producer_epoch >= MAX_EPOCH:
                new_pid = await self.producer_ids.next_id()
            op = functools.partial(self._init_op, transactional_id, timeout_ms, producer_id, producer_epoch, new_pid)
            result: InitResult = await self.runtime.write(partition, op)
            return result
        except CoordinatorWriteError as exc:
            return _write_error(exc.code), -1, -1
        except KafkaApiError as exc:
            return ErrorCode(exc.code), -1, -1

    def _init_op(self, transactional_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int,
                 new_pid: int, shard: TxnShard) -> CoordinatorResult[InitResult]:
        now = self.time_ms()
        meta = shard.txns.get(transactional_id)
        if meta is None:
            if new_pid < 0:
                raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)  # removed meanwhile: the client retries
            # Kafka's record of a new id names it as its own previous producer id (the metadata it
            # creates first holds the new id; the transition records the id it had).
            value = TxnLogValue(new_pid, 0, timeout_ms, TxnState.EMPTY, {}, now, -1, previous_producer_id=new_pid)
            return self._result(shard, transactional_id, value, (ErrorCode.NONE, new_pid, 0))
        if expected_pid >= 0 and (expected_pid, expected_epoch) != (meta.producer_id, meta.producer_epoch):
            # KIP-360: only the current incarnation may bump its own epoch - or name the epoch
            # before the last bump: a retry of its bump, or a producer whose transaction the
            # coordinator aborted (timeout), which then goes on with the current epoch.
            if (expected_pid, expected_epoch) != (meta.producer_id, meta.last_producer_epoch) or expected_epoch < 0:
                raise KafkaApiError(ErrorCode.PRODUCER_FENCED)
            if meta.state in COMPLETE:
                return CoordinatorResult(response=(ErrorCode.NONE, meta.producer_id, meta.producer_epoch))
        if meta.state in PREPARE:
            raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING:
            # Fence the previous incarnation and abort its transaction; the client retries.
            value = self._abort_value(meta, now)
            return self._result(shard, transactional_id, value, (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1),
                                markers=True)
        if meta.producer_epoch >= MAX_EPOCH:
            value = meta.next_value(TxnState.EMPTY, now, producer_id=new_pid, producer_epoch=0, timeout_ms=timeout_ms,
                                    previous_producer_id=meta.producer_id, start_ms=-1)
        else:
            value = meta.next_value(TxnState.EMPTY, now, producer_epoch=meta.producer_epoch + 1,
                                    timeout_ms=timeout_ms, start_ms=-1)
        return self._result(shard, transactional_id, value, (ErrorCode.NONE, value.producer_id, value.producer_epoch))

    def _abort_value(self, meta: TxnMetadata, now: int) -> TxnLogValue:
        """PrepareAbort with the epoch bumped once (Kafka's prepareFenceProducerEpoch + the abort;
        at Short.MaxValue the epoch stays): the fenced producer can neither produce nor end the
        transaction any more. The coordinator's own abort takes the cluster's transaction.version:
        at 2 it is a v2 abort (the markers carry v2, Kafka 4.4 bumps once there too)."""
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < EPOCH_CEILING else meta.producer_epoch
        version = TV2 if features.transaction_version(self.metadata.image.features) >= TV2 else 0
        return meta.next_value(TxnState.PREPARE_ABORT, now, producer_epoch=epoch, next_producer_id=-1,
                               client_transaction_version=version)

    def _result(self, shard: TxnShard, transactional_id: str, value: TxnLogValue, response: object,
                markers: bool = False) -> CoordinatorResult[Any]:
        def apply() -> None:
            meta = shard.txns.get(transactional_id)
            if meta is None:
                shard.txns[transactional_id] = TxnMetadata.from_value(transactional_id, value)
            else:
                meta.install(value)
            if markers:
                self._send_markers(shard.partition, transactional_id, value)

        version = features.transaction_log_value_version(self.metadata.image.features)  # transaction.version
        return CoordinatorResult([(key_bytes(transactional_id), value_bytes(value, version))], response, apply)

    # ==========================================================================================
    # AddPartitionsToTxn / AddOffsetsToTxn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: dict[str, list[int]], client_transaction_version: int = 0) -> ErrorCode:
        """AddPartitionsToTxn: ``client_transaction_version`` is 2 when a partition leader adds them
        for a transactions-v2 producer (AddPartitionsToTxn v4+ not verify_only), 0 for a client's
        AddPartitionsToTxn v0-3 and AddOffsetsToTxn, as Kafka's KafkaApis passes it. An empty
        transactional id is INVALID_REQUEST before anything else (Kafka's
        handleAddPartitionsToTransaction)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        return await self._write_for_code(transactional_id, functools.partial(
            self._add_op, transactional_id, producer_id, producer_epoch, partitions, client_transaction_version))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        offsets_partition = partition_rule.coordinator_partition(self.metadata.image, group_id,
                                                                 self._offsets_partitions())
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         {OFFSETS_TOPIC: [offsets_partition]})

    def _offsets_partitions(self) -> int:
        topic = self.metadata.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else self.config.offsets_num_partitions

    def _add_op(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: dict[str, list[int]],
                client_transaction_version: int, shard: TxnShard) -> CoordinatorResult[ErrorCode]:
        meta = _check_producer(shard.txns.get(transactional_id), producer_id, producer_epoch)
        if meta.state in PREPARE:
            raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING and meta.has_partitions(partitions):
            return CoordinatorResult(response=ErrorCode.NONE)
        now = self.time_ms()
        merged = {t: set(ps) for t, ps in meta.partitions.items()} if meta.state is TxnState.ONGOING else {}
        for t, ps in partitions.items():
            merged.setdefault(t, set()).update(ps)
        start = meta.start_ms if meta.state is TxnState.ONGOING else now
        value = meta.next_value(TxnState.ONGOING, now, partitions=merged, start_ms=start,
                                client_transaction_version=client_transaction_version)
        return self._result(shard, transactional_id, value, ErrorCode.NONE)

    # ==========================================================================================
    # EndTxn

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool, client_transaction_version: int = 0) -> EndResult:
        """EndTxn; ``client_transaction_version`` 2 for EndTxn v5 (transactions v2), else 0. An
        empty transactional id is INVALID_REQUEST before anything else (Kafka's handleEndTransaction)."""
        if not transactional_id:
            return EndResult(ErrorCode.INVALID_REQUEST)
        try:
            partition = self._partition(transactional_id)
            new_pid = -1
            meta = self.runtime.shard(partition).txns.get(transactional_id)
            if client_transaction_version >= TV2 and meta is not None and meta.producer_epoch >= MAX_EPOCH:
                new_pid = await self.producer_ids.next_id()  # the bump exhausts the epoch (Kafka's nextProducerId)
            op = functools.partial(self._end_op, transactional_id, producer_id, producer_epoch, commit,
                                   client_transaction_version, new_pid)
            result: EndResult = await self.runtime.write(partition, op)
            return result
        except CoordinatorWriteError as exc:
            return EndResult(_write_error(exc.code))
        except KafkaApiError as exc:
            return EndResult(ErrorCode(exc.code))

    async def _write_for_code(self, transactional_id: str,
                              op: Callable[[TxnShard], CoordinatorResult[ErrorCode]]) -> ErrorCode:
        """Run ``op`` on the transactional id's partition; a refused write or op as its error code."""
        try:
            code: ErrorCode = await self.runtime.write(self._partition(transactional_id), op)
            return code
        except CoordinatorWriteError as exc:
            return _write_error(exc.code)
        except KafkaApiError as exc:
            return ErrorCode(exc.code)

    def _end_op(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                client_transaction_version: int, new_pid: int, shard: TxnShard) -> CoordinatorResult[EndResult]:
        if client_transaction_version >= TV2:
            return self._end_op_v2(shard, transactional_id, producer_id, producer_epoch, commit, new_pid)
        meta = _check_producer(shard.txns.get(transactional_id), producer_id, producer_epoch)
        state = meta.state
        if state is TxnState.ONGOING:
            value = self._prepare_end(meta, commit, 0, -1, no_partition_added=False)
            return self._result(shard, transactional_id, value, EndResult(ErrorCode.NONE), markers=True)
        if state in PREPARE:
            # Kafka's metadata is pending its Complete* transition while the markers are written.
            raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)
        wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is wanted_complete:
            return CoordinatorResult(response=EndResult(ErrorCode.NONE))  # a retry of a finished EndTxn
        raise KafkaApiError(ErrorCode.INVALID_TXN_STATE)

    def _end_op_v2(self, shard: TxnShard, transactional_id: str, producer_id: int, producer_epoch: int,
                   commit: bool, new_pid: int) -> CoordinatorResult[EndResult]:
        """EndTxn v5 (Kafka's TransactionCoordinator.endTransaction for transactions v2). A retry names
        the epoch before the last bump (or, once the bump handed over to a new producer id, the old id
        at the exhausted epoch). Of Empty, CompleteCommit and CompleteAbort, with the current epoch
        (C) or a retry's (R): Empty takes an abort (C: a new, empty transaction aborted, the epoch
        bumped) and refuses a commit (INVALID_TXN_STATE), R is PRODUCER_FENCED; CompleteAbort
        answers an abort retry NONE, takes a current abort, refuses commits; CompleteCommit answers a
        commit retry NONE, takes a current abort, refuses the rest."""
        meta = shard.txns.get(transactional_id)
        if meta is None:
            raise KafkaApiError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH
                             and meta.producer_epoch == 0)
        retry_on_bump = meta.producer_epoch == producer_epoch + 1
        is_retry = retry_on_bump or retry_on_overflow
        if state in (TxnState.ONGOING, TxnState.EMPTY):
            valid_epoch = producer_epoch == meta.producer_epoch
        elif state in PREPARE:
            valid_epoch = retry_on_bump
        else:
            valid_epoch = is_retry or producer_epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            raise KafkaApiError(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            raise KafkaApiError(ErrorCode.PRODUCER_FENCED)
        if state in PREPARE:
            raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)  # Kafka: pending its Complete*
        if state is TxnState.ONGOING:
            return self._end_result(shard, transactional_id, meta, commit, new_pid, no_partition_added=False)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if is_retry and state is done:
            return CoordinatorResult(response=EndResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch))
        if not commit and not is_retry:
            # An abort with nothing ongoing (v2 may abort before any partition was added): a
            # transaction of no partitions is aborted, which bumps the epoch.
            return self._end_result(shard, transactional_id, meta, commit, new_pid, no_partition_added=True)
        log.warning("transactional id %s is %s, but received an EndTxn to %s", transactional_id,
                    STATE_NAMES[state], "commit" if commit else "abort")
        raise KafkaApiError(ErrorCode.INVALID_TXN_STATE)

    def _end_result(self, shard: TxnShard, transactional_id: str, meta: TxnMetadata, commit: bool, new_pid: int,
                    no_partition_added: bool) -> CoordinatorResult[EndResult]:
        """Prepare* of a v2 transaction; the answer names what its Complete* will hold."""
        if meta.producer_epoch < MAX_EPOCH:
            new_pid = -1
        elif new_pid < 0:
            raise KafkaApiError(ErrorCode.CONCURRENT_TRANSACTIONS)  # exhausted meanwhile: the client retries
        value = self._prepare_end(meta, commit, TV2, new_pid, no_partition_added)
        after = (new_pid, 0) if new_pid >= 0 else (value.producer_id, value.producer_epoch)
        return self._result(shard, transactional_id, value, EndResult(ErrorCode.NONE, *after), markers=True)

    def _prepare_end(self, meta: TxnMetadata, commit: bool, client_transaction_version: int, next_producer_id: int,
                     no_partition_added: bool) -> TxnLogValue:
        """PrepareCommit/PrepareAbort (Kafka's prepareAbortOrCommit): transactions v2 bump the epoch,
        except an abort at Short.MaxValue (a broken state Kafka lets abort without overflowing)."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        now = self.time_ms()
        value = meta.next_value(state, now, client_transaction_version=client_transaction_version,
                                next_producer_id=next_producer_id)
        if client_transaction_version >= TV2:
            if meta.producer_epoch == EPOCH_CEILING and not commit:
                log.error("aborting producer %d of %s at epoch %d (Short.MaxValue): this must not happen",
                          meta.producer_id, meta.transactional_id, meta.producer_epoch)
            else:
                value.producer_epoch = meta.producer_epoch + 1
        if no_partition_added:
            value.start_ms = now  # v2 may abort before any partition was added: the start is now
        return value

    # ==========================================================================================
    # markers and completion

    def _coordinator_epoch(self, partition: int) -> int:
        """Kafka's coordinator epoch is the partition's leader epoch; plus the floor of a partition
        that took over moved ids, whose producers saw the old partition's epochs (rehash.py)."""
        shard = self._shards.get(partition)
        return self._leader_epoch(partition) + (shard.epoch_floor if shard is not None else 0)

    def _send_markers(self, partition: int, transactional_id: str, prepared: TxnLogValue) -> None:
        """Markers of a durable PrepareCommit/PrepareAbort, then Complete*, in the background."""
        self._spawn(self._complete(partition, transactional_id, prepared))

    def _still_prepared(self, partition: int, transactional_id: str, prepared: TxnLogValue) -> bool:
        if self.runtime.state(partition) is not PartitionState.ACTIVE:
            return False
        meta = self.runtime.shard(partition).txns.get(transactional_id)
        return (meta is not None and meta.state is prepared.state and meta.producer_id == prepared.producer_id
                and meta.producer_epoch == prepared.producer_epoch)

    async def _complete(self, partition: int, transactional_id: str, prepared: TxnLogValue) -> None:
        commit = prepared.state is TxnState.PREPARE_COMMIT
        tps = {(t, p) for t, ps in prepared.partitions.items() for p in ps}
        wanted = functools.partial(self._still_prepared, partition, transactional_id, prepared)
        await self.markers.write(prepared.producer_id, prepared.producer_epoch, self._coordinator_epoch(partition),
                                 commit, tps, wanted, prepared.client_transaction_version)
        if not wanted():
            return  # resigned: the next leader completes it
        self.runtime.schedule_write(partition, functools.partial(self._complete_op, transactional_id, prepared),
                                    f"complete the transaction of {transactional_id}")

    def _complete_op(self, transactional_id: str, prepared: TxnLogValue, shard: TxnShard) -> CoordinatorResult[None]:
        meta = shard.txns.get(transactional_id)
        if meta is None or meta.state is not prepared.state or meta.producer_epoch != prepared.producer_epoch:
            return CoordinatorResult()
        state = TxnState.COMPLETE_COMMIT if prepared.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        value = meta.next_value(state, self.time_ms(), next_producer_id=-1)
        if meta.client_transaction_version >= TV2 and meta.next_producer_id >= 0:
            # The v2 bump exhausted the epoch: the producer goes on as the new id, epoch 0.
            value.producer_id, value.producer_epoch = meta.next_producer_id, 0
        return self._result(shard, transactional_id, value, None)

    # ==========================================================================================
    # timers

    def _active_transactions(self) -> list[tuple[int, TxnMetadata]]:
        """(partition, metadata) of every transactional id in the partitions loaded here."""
        return [(partition, meta) for partition, shard in list(self._shards.items())
                if self.runtime.state(partition) is PartitionState.ACTIVE for meta in list(shard.txns.values())]

    def abort_timed_out_transactions(self) -> int:
        """Abort (with a bumped epoch) every ongoing transaction older than its timeout."""
        now = self.time_ms()
        count = 0
        for partition, meta in self._active_transactions():
            if meta.state is TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now:
                log.info("aborting the transaction of %s (producer %d epoch %d): older than its timeout "
                         "of %d ms", meta.transactional_id, meta.producer_id, meta.producer_epoch,
                         meta.timeout_ms)
                self.runtime.schedule_write(partition, functools.partial(
                    self._abort_timed_out_op, meta.transactional_id, meta.producer_id, meta.producer_epoch),
                    f"abort the timed-out transaction of {meta.transactional_id}")
                count += 1
        return count

    def _abort_timed_out_op(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            shard: TxnShard) -> CoordinatorResult[None]:
        meta = shard.txns.get(transactional_id)
        if meta is None or meta.state is not TxnState.ONGOING or (meta.producer_id, meta.producer_epoch) != (
                producer_id, producer_epoch):
            return CoordinatorResult()  # it ended meanwhile
        return self._result(shard, transactional_id, self._abort_value(meta, self.time_ms()), None, markers=True)

    def expire_transactional_ids(self) -> int:
        """Remove ids not in a transaction and idle for transactional.id.expiration.ms."""
        now = self.time_ms()
        count = 0
        for partition, meta in self._active_transactions():
            if meta.state in COMPLETE and meta.last_update_ms + self.config.id_expiration_ms < now:
                self.runtime.schedule_write(partition, functools.partial(
                    self._expire_op, meta.transactional_id, meta.last_update_ms),
                    f"expire transactional id {meta.transactional_id}")
                count += 1
        return count

    def _expire_op(self, transactional_id: str, last_update_ms: int, shard: TxnShard) -> CoordinatorResult[None]:
        meta = shard.txns.get(transactional_id)
        if meta is None or meta.state not in COMPLETE or meta.last_update_ms != last_update_ms:
            return CoordinatorResult()

        def apply() -> None:
            shard.txns.pop(transactional_id, None)

        return CoordinatorResult([(key_bytes(transactional_id), None)], None, apply)


def _verification(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                  partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Kafka's TransactionCoordinator.handleVerifyPartitionsInTransaction: NONE for a partition in
    the transaction, TRANSACTION_ABORTABLE for one not in it (none is, once the transaction ended:
    a late batch would start a transaction no marker ends), CONCURRENT_TRANSACTIONS while it is being
    completed, PRODUCER_FENCED for another epoch, INVALID_PRODUCER_ID_MAPPING for another producer."""
    if meta is None or meta.producer_id != producer_id:
        return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if meta.producer_epoch != producer_epoch:
        return dict.fromkeys(partitions, ErrorCode.PRODUCER_FENCED)
    if meta.state in PREPARE:
        return dict.fromkeys(partitions, ErrorCode.CONCURRENT_TRANSACTIONS)
    return {tp: ErrorCode.NONE if meta.contains(*tp) else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}


def _write_error(code: int) -> ErrorCode:
    """Kafka's mapping of a failed __transaction_state append to the client's error."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.UNKNOWN_SERVER_ERROR
