"""The replica manager: the door to this broker's partition data, and the two purgatories.

Kafka's kafka.server.ReplicaManager. Requests reach partition data only through it:
``append_records`` (Produce), ``fetch_messages`` (Fetch), ``fetch_offset_for_timestamp``
(ListOffsets), ``delete_records``, ``last_offset_for_leader_epoch``; the coordinators write and
read their internal topics through ``append_internal``/``read_internal`` and wait for their writes
to be replicated with ``wait_for_high_watermark``; the transaction coordinator's COMMIT/ABORT
markers go through ``append_end_txn_markers``. Each partition is a
:class:`~odradek.broker.replica.partition.Partition` over its storage ``Log``.

The rest of Kafka's ReplicaManager lives beside it, each part built here with what it uses:
- leadership and log lifecycle (broker/replica/leadership.py): the metadata's partitions made
  local, followers handed to the replica fetchers (broker/replica/replica_fetcher.py), logs
  created and deleted on the log-admin thread;
- ISR changes (broker/replica/isr_manager.py): AlterPartition to shrink and expand the ISRs of
  led partitions (KIP-497), sent again until a controller answers;
- log-dir failures (broker/replica/log_dir_failures.py): an offline dir's partitions answer
  KAFKA_STORAGE_ERROR, the controller is told, the broker stops when it can do no more;
- periodic tasks (broker/replica/periodic_tasks.py): retention, flushes, checkpoints, producer
  expiry, ISR expiration, the log cleaner.

Purgatories: acks=-1 produces wait in the produce purgatory (odradek.broker.replica.delayed_produce)
until the high watermark passes their batches; long-poll fetches wait in the fetch purgatory
(odradek.broker.replica.delayed_fetch) until enough bytes are readable, share fetches in the share
fetch purgatory (odradek.broker.share.delayed_share_fetch). All are checked for a partition
when its high watermark or last stable offset moves (``try_complete_delayed_requests``) — after
each leader append on one node; with replication, also when a follower's fetch moves the HW.

Fetches: consumers and followers go through one read loop (``read_from_local_log``). A consumer
reads up to the HW (the LSO under read_committed) of a partition led here or, KIP-392, followed
here; a follower reads up to the log end of a partition it is a replica of, and its fetch offset
is its log end (the leader's bookkeeping of its position, the HW and the ISR follow from it).

Threading: partition state and the purgatories are owned by the handler loop. Appends run on
the loop: a page-cache ``pwrite`` costs microseconds, less than a hand-off to the IO pool would
(measured in bench/storage_bench.py); segment rolls fsync the old segment (rare: every
``segment.bytes``). Blocking, slow work — start-up recovery, log creation and deletion,
retention, flushes, checkpoints, DeleteRecords — runs on the IO pool, and so does recompressing
the batches of a topic whose ``compression.type`` names a codec: such a partition's produce
appends go through its append lane (broker/replica/append_lane.py), which keeps them in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.replica import producer_queries
from odradek.broker.replica.append_lane import IN_LANE, LaneWaits
from odradek.broker.replica.delayed_fetch import DelayedFetch, FetchStatus
from odradek.broker.replica.delayed_produce import DelayedProduce, ProduceCallback, ProduceResult
from odradek.broker.replica.fetch_params import FetchCallback, FetchParams, FetchResult, LogReadResult
from odradek.broker.replica.fetch_session import CachedPartition
from odradek.broker.replica.isr_manager import AlterPartitionCall, IsrManager, broker_epoch_of
from odradek.broker.replica.leadership import PartitionLeadership
from odradek.broker.replica.log_defaults import LogDefaults
from odradek.broker.replica.log_dir_failures import LogDirFailures, OfflineReplicas
from odradek.broker.replica.log_dir_mover import LogDirMover
from odradek.broker.replica.log_dirs_report import describe_log_dirs
from odradek.broker.replica.partition import Partition, RecordCheck
from odradek.broker.replica.periodic_tasks import PeriodicTasks
from odradek.broker.replica.producer_turns import ProducerTurns
from odradek.broker.replica.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.broker.replica.replica_selector import replica_selector
from odradek.broker.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.runtime.reported_once import ReportedOnce
from odradek.broker.runtime.timing_wheel import Timer
from odradek.controller.image import MetadataDelta, MetadataImage
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.cleaner import LogCleaner
from odradek.storage.clock import now_ms
from odradek.storage.errors import KafkaStorageError, SegmentTruncatedError
from odradek.storage.log_manager import LogManager
from odradek.storage.results import EMPTY_SLICE, AppendInfo

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.runtime.metrics import BrokerMetrics
    from odradek.protocol.messages import DescribeLogDirsResult, ProducerState

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class MetadataView(Protocol):
    """What the replica manager reads of the broker's metadata."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def metadata_dir(self) -> Path | None: ...

    def subscribe(self, callback: Callable[[MetadataDelta], None]) -> Callable[[], None]: ...


class ReplicaManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataView, timer: Timer, io_pool: Executor,
                 fail: Callable[[str], None], is_stopping: Callable[[], bool], *,
                 alter_partition: AlterPartitionCall | None = None,
                 on_offline_replicas: OfflineReplicas | None = None,
                 metrics: BrokerMetrics | None = None) -> None:
        """``fail(reason)`` stops the broker (a fatal log dir failure); ``is_stopping()`` tells a
        shutdown in progress; ``alter_partition`` is the controller client's AlterPartition (ISR
        changes, KIP-497; None: the ISR stays as the controller made it); ``on_offline_replicas``
        tells the controller which replicas are in failed log dirs (cluster mode; None on one node);
        ``metrics`` counts bytes in (None: no metrics server)."""
        self.config = config
        self.metadata = metadata
        self.io_pool = io_pool
        self.metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._unsubscribe: Callable[[], None] | None = None
        self.node_id: int = config.node_id
        self._zero_copy: bool = config["odradek.fetch.sendfile"]
        self._reported_truncations = ReportedOnce()  # segment paths
        # (topic, partition, producer id, commit) after a marker lands: the group coordinator
        # completes TxnOffsetCommit's pending offsets on __consumer_offsets (Kafka's
        # onTransactionCompleted, called from WriteTxnMarkers).
        self._txn_marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        # KIP-392 replica.selector.class: None (consumers read from leaders) unless configured.
        self.replica_selector = replica_selector(config["replica.selector.class"])
        # Transactions-v2 Produce requests waiting for the coordinator, one producer's in order.
        self.producer_turns = ProducerTurns()
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory("Produce", timer)
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch] = DelayedOperationPurgatory("Fetch", timer)
        # Share-group fetches waiting for records (broker/share/delayed_share_fetch.py; Kafka's
        # delayedShareFetchPurgatory): checked on the same partition events as the fetch purgatory.
        self.share_fetch_purgatory: DelayedOperationPurgatory[DelayedOperation] = DelayedOperationPurgatory(
            "ShareFetch", timer)
        self.log_defaults = LogDefaults(config)
        self.log_manager = LogManager(config.log_dirs, self.log_defaults.base_log_config, node_id=self.node_id,
                                      producer_state_factory=self.log_defaults.producer_state)
        self.log_dir_failures = LogDirFailures(self.log_manager, self.partitions, self._image, metadata.metadata_dir,
                                               self.call_on_loop, self.try_complete_delayed_requests, fail,
                                               is_stopping, lambda: self._started, on_offline_replicas)
        # The log manager and its failure handler name each other (a log's I/O error reaches the
        # handler, which asks the log manager what is offline): the one link made after both exist.
        self.log_manager.on_dir_offline = self.log_dir_failures.dir_offline_threadsafe
        self.isr = IsrManager(self.node_id, self.partitions, self._image, alter_partition,
                              config["replica.lag.time.max.ms"], self.try_complete_delayed_requests)
        self.replica_fetchers = ReplicaFetcherManager(self, FetcherConfig.from_broker_config(config),
                                                      self._broker_endpoint)
        self.leadership = PartitionLeadership(self.node_id, self._image, self.log_manager, self.log_defaults,
                                              self.partitions, self.replica_fetchers, io_pool,
                                              self._after_leader_append, self.try_complete_delayed_requests)
        self.periodic = PeriodicTasks(config, self.log_manager, self.partitions, io_pool, self.call_on_loop,
                                      self.isr.shrink_lagging)
        # AlterReplicaLogDirs' moves between log dirs; one thread per log dir (Kafka's default
        # num.replica.alter.log.dirs.threads).
        self.log_dir_mover = LogDirMover(self, threads=len(config.log_dirs))

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        image = self.image
        await self.leadership.open_logs(image)
        fatal = self.log_dir_failures.fatal_failure()
        if fatal is not None:
            raise KafkaStorageError(fatal)
        self._started = True
        await self.leadership.serve(image)
        self._unsubscribe = self.metadata.subscribe(self.leadership.on_delta)
        self.periodic.start()
        self.log_dir_mover.resume_all()  # moves between log dirs a restart interrupted
        self.log_dir_failures.report_after_start()

    async def shutdown(self) -> None:
        await self.replica_fetchers.shutdown()
        self.isr.shutdown()
        self.periodic.stop()
        # After the cleaner: a copy waiting for a cleaning round to end (to pause it) is not held up.
        await self.log_dir_mover.shutdown()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.share_fetch_purgatory.shutdown()
        self.leadership.close_log_admin()
        if self._started:
            # After any periodic write still running in a pool thread (the writer waits for it).
            await self.run_blocking(self.periodic.hw_writer.write_later(self.periodic.high_watermarks_by_dir()))
        await self.run_blocking(self.log_manager.shutdown)

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` on the IO pool."""
        return await asyncio.get_running_loop().run_in_executor(self.io_pool, fn, *args)

    def call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from any thread; dropped once the loop is closing."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # closed between the test and the call

    @property
    def cleaner(self) -> LogCleaner | None:
        return self.periodic.cleaner

    # -- metadata ---------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def _image(self) -> MetadataImage:
        return self.metadata.image

    def _broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.image.brokers.get(broker_id)
        return (reg.host, reg.port) if reg is not None else None

    async def wait_for_logs(self, topics: Any) -> dict[str, KafkaApiError]:
        """See :meth:`PartitionLeadership.wait_for_logs`."""
        return await self.leadership.wait_for_logs(topics)

    def offline_replicas(self) -> list[tuple[uuid.UUID, int]]:
        """(topic id, partition) of every hosted partition whose log dir is offline."""
        return self.log_dir_failures.offline_replicas()

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self.leadership.on_become_leader(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self.leadership.on_resign(callback)

    def on_txn_marker(self, callback: Callable[[str, int, int, bool], None]) -> None:
        self._txn_marker_listeners.append(callback)

    # -- what the replica fetchers use (odradek.broker.replica.replica_fetcher.FollowerHost) -------------

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if it is still a follower here under ``leader_epoch``."""
        part = self.partitions.get(tp)
        if part is None or part.leader == self.node_id or part.leader_epoch != leader_epoch or part.offline:
            return None
        return part

    def broker_epoch(self) -> int:
        return broker_epoch_of(self.image, self.node_id)

    def follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        """A follower's HW moved (the fetcher took it from its leader): consumers' fetches
        waiting on it here (KIP-392) may have enough now (Kafka's completeDelayedFetchRequests)."""
        if self.fetch_purgatory.delayed:
            self.fetch_purgatory.check_and_complete(tp)

    # -- producer state (DescribeProducers, transactions) -----------------------------------

    def active_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """DescribeProducers' rows of a partition led here (broker/replica/producer_queries.py)."""
        return producer_queries.active_producers(self.leader_partition(topic, partition).log.producer_state)

    def transaction_to_join(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> tuple[bool, bool]:
        """(joins an open transaction, has batches at the epoch) on a partition led here (Kafka's
        partition errors otherwise; broker/replica/producer_queries.py)."""
        state = self.leader_partition(topic, partition).log.producer_state
        return producer_queries.transaction_to_join(state, producer_id, producer_epoch)

    def open_transactions(self, topic: str, partition: int) -> dict[int, int]:
        """Producer id -> first offset of its open transaction on a partition led here."""
        return producer_queries.open_transactions(self.leader_partition(topic, partition).log.producer_state)

    def next_producer_sequence(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> int:
        """The sequence a coordinator-written batch of (producer id, epoch) continues with here."""
        state = self.leader_partition(topic, partition).log.producer_state
        return producer_queries.next_producer_sequence(state, producer_id, producer_epoch)

    # -- lookups ----------------------------------------------------------------------------

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it; Kafka's errors otherwise."""
        part = self.partitions.get((topic, index))
        if part is None:
            t = self.image.topics.get(topic)
            if t is None or index not in t.partitions:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            failure = self.leadership.storage_failure(t)
            if failure is not None:
                # Its log could not be made here: say so (not NOT_LEADER, which clients would
                # retry forever); it is tried again now and then.
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, failure)
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if part.leader != self.node_id:
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if part.offline:
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                f"Partition {topic}-{index} is in an offline log directory")
        return part

    # -- appends (Kafka's ReplicaManager.appendRecords) ---------------------------------------

    def append_records(self, entries: list[tuple[str, int, Any]], required_acks: int, timeout_ms: int,
                       callback: ProduceCallback, record_check: RecordCheck | None = None) -> None:
        """Append each (topic, partition, records) as the leader; ``callback(results)`` gets, in
        entry order, each partition's AppendInfo or the KafkaApiError it was refused with.

        acks 0 and 1 answer once the records are in the log; acks=-1 once the high watermark
        passed them (the produce purgatory), at once when it already has — always on one node.
        ``record_check`` is the request's own per-record-set check, run after the partition's.
        The callback may run before this returns.
        """
        results: list[ProduceResult] = []
        short = False  # some appended partition's HW is not past its batches yet (acks=-1)
        metrics = self.metrics
        # Delayed operations are added only by requests, never by what completes inside this
        # loop: a purgatory with nothing waiting now stays empty until the loop ends, so it is
        # not checked per partition.
        produce_waiters = self.produce_purgatory.check_and_complete if self.produce_purgatory.delayed else None
        fetch_waiters = self.fetch_purgatory.check_and_complete if self.fetch_purgatory.delayed else None
        if self.share_fetch_purgatory.delayed:
            fetch_waiters = self._fetch_and_share_waiters
        in_lanes: LaneWaits | None = None
        for topic, index, records in entries:
            try:
                part = self.leader_partition(topic, index)
                lane = part.append_lane
                if lane is None:
                    info = part.append_records_to_leader(records, required_acks, record_check)
                else:
                    # The topic recompresses (append_lane.py): appended now, or queued in order.
                    if in_lanes is None:
                        in_lanes = LaneWaits(results)
                    queued = lane.append(records, required_acks, record_check, in_lanes.deliverer(len(results)))
                    if queued is None:
                        in_lanes.waiting += 1
                        results.append(IN_LANE)
                        continue
                    info = queued
            except KafkaApiError as exc:
                results.append(exc)
                continue
            results.append(info)
            if not info.duplicate:
                # _after_leader_append, inlined: this loop is the produce hot path.
                if metrics is not None:
                    metrics.bytes_in.inc(info.size)
                    metrics.topic_stats.appended(topic, info.size, info.last_offset - info.first_offset + 1)
                if part.maybe_increment_high_watermark():
                    # try_complete_delayed_requests, inlined
                    if produce_waiters is not None:
                        produce_waiters((topic, index))
                    if fetch_waiters is not None:
                        fetch_waiters((topic, index))
                elif fetch_waiters is not None:
                    # The log end moved but not the HW (followers behind): a follower's fetch
                    # waiting on this partition may have enough now (never on one node).
                    fetch_waiters((topic, index))
            # Kafka's DelayedProduce.tryComplete, done before making one (the ISR cannot change
            # during this loop, and append_records_to_leader refused acks=-1 below
            # min.insync.replicas): on a single node the HW is always past, and no
            # DelayedProduce is allocated.
            if required_acks == -1 and part.high_watermark <= info.last_offset:
                short = True
        if in_lanes is not None and in_lanes.waiting:
            in_lanes.then = lambda: self._answer_produce(entries, results, required_acks, timeout_ms, callback)
            return
        if not short:
            callback(results)
            return
        waiting = [(i, (e[0], e[1])) for i, e in enumerate(entries) if isinstance(results[i], AppendInfo)]
        self._wait_for_acks(timeout_ms, results, waiting, callback)

    def _answer_produce(self, entries: list[tuple[str, int, Any]], results: list[ProduceResult], required_acks: int,
                        timeout_ms: int, callback: ProduceCallback) -> None:
        """The end of :meth:`append_records` for a request whose appends waited in lanes."""
        if required_acks == -1:
            waiting = [(i, (e[0], e[1])) for i, e in enumerate(entries) if isinstance(results[i], AppendInfo)]
            if waiting:
                self._wait_for_acks(timeout_ms, results, waiting, callback)
                return
        callback(results)

    def _wait_for_acks(self, timeout_ms: int, results: list[ProduceResult], waiting: list[tuple[int, TopicPartition]],
                       callback: ProduceCallback) -> None:
        """Answer ``callback(results)`` once the HW passed each waiting (index, partition)'s append
        (a DelayedProduce in the produce purgatory; at once if it already has)."""
        op = DelayedProduce(timeout_ms, results, waiting, self._led_partition, callback)
        self.produce_purgatory.try_complete_else_watch(op, [key for _, key in waiting])

    def _led_partition(self, key: TopicPartition) -> Partition | None:
        part = self.partitions.get(key)
        return part if part is not None and part.leader == self.node_id else None

    def _after_leader_append(self, part: Partition, info: AppendInfo) -> None:
        """Metrics, then the HW: if it moved, waiting produces and fetches are checked."""
        metrics = self.metrics
        if metrics is not None:
            metrics.bytes_in.inc(info.size)
            # Kafka's MessagesInPerSec counts records from the batches' offsets, not by decoding.
            metrics.topic_stats.appended(part.topic, info.size, info.last_offset - info.first_offset + 1)
        if part.maybe_increment_high_watermark():
            self.try_complete_delayed_requests((part.topic, part.index))
        elif self.fetch_purgatory.delayed:
            self.fetch_purgatory.check_and_complete((part.topic, part.index))  # followers' fetches

    def try_complete_delayed_requests(self, key: TopicPartition) -> None:
        """A partition's HW/LSO moved (or it went away): answer what waited on it."""
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)
        if self.share_fetch_purgatory.delayed:
            self.share_fetch_purgatory.check_and_complete(key)

    def _fetch_and_share_waiters(self, key: Hashable) -> int:
        """append_records' fetch check while share fetches wait too: both purgatories."""
        return self.fetch_purgatory.check_and_complete(key) + self.share_fetch_purgatory.check_and_complete(key)

    def append_end_txn_markers(self, markers: list[tuple[str, int, int, int, int, bool, int]], timeout_ms: int,
                               callback: ProduceCallback) -> None:
        """Write transaction markers: each (topic, partition, producer id, producer epoch, coordinator
        epoch, commit, transaction version) as its leader (Kafka's appendRecords with
        AppendOrigin.COORDINATOR from WriteTxnMarkers, acks=-1; transaction version 2 is KIP-1228's
        stricter epoch check, odradek.storage.producer_state). ``callback(results)`` gets, in order, each marker's AppendInfo or
        the KafkaApiError it was refused with (NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS, ...), once the HW passed the markers
        (REQUEST_TIMED_OUT after ``timeout_ms``). Each marker that lands moves the LSO with the HW
        and wakes what waited on it. The callback may run before this returns."""
        results: list[ProduceResult] = []
        waiting: list[tuple[int, TopicPartition]] = []
        for i, (topic, index, producer_id, producer_epoch, coordinator_epoch, commit, version) in enumerate(markers):
            try:
                part = self.leader_partition(topic, index)
                info = part.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, version)
            except KafkaApiError as exc:
                results.append(exc)
                continue
            results.append(info)
            self._after_leader_append(part, info)
            for listener in self._txn_marker_listeners:
                listener(topic, index, producer_id, commit)
            if part.high_watermark <= info.last_offset:
                waiting.append((i, (topic, index)))
        if not waiting:
            callback(results)
            return
        self._wait_for_acks(timeout_ms, results, waiting, callback)

    # -- internal topics (the coordinators': Kafka's appendRecords with internalTopicsAllowed) --

    def append_internal(self, topic: str, partition: int, records: bytes, required_acks: int = 1) -> AppendInfo:
        """Append coordinator records (e.g. __consumer_offsets) as the leader, without the client
        checks; with ``required_acks=-1`` refused with NOT_ENOUGH_REPLICAS while the ISR is below
        min.insync.replicas, as a produce is. Moves the HW (at once on one node); the caller waits
        for it with :meth:`wait_for_high_watermark`."""
        part = self.leader_partition(topic, partition)
        info = part.append_internal(records, required_acks)
        if not info.duplicate:
            self._after_leader_append(part, info)
        return info

    def wait_for_high_watermark(self, topic: str, partition: int, required_offset: int, timeout_ms: int,
                                callback: Callable[[int], Any]) -> None:
        """``callback(error code)`` once the HW of a partition led here reached ``required_offset``
        (NONE), it is no longer led here (NOT_LEADER_OR_FOLLOWER) or ``timeout_ms`` passed
        (REQUEST_TIMED_OUT). At once when the HW is already there (always on one node); else a
        DelayedProduce in the produce purgatory, as an acks=-1 produce waits. The ISR shrinking
        below min.insync.replicas meanwhile does not matter: what is below the HW is durable."""
        key = (topic, partition)
        part = self._led_partition(key)
        if part is None:
            callback(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if part.high_watermark >= required_offset:
            callback(ErrorCode.NONE)
            return

        def done(results: list[ProduceResult]) -> None:
            result = results[0]
            if isinstance(result, KafkaApiError) and result.code != ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                callback(result.code)
            else:
                callback(ErrorCode.NONE)

        # The offset to reach, in the shape DelayedProduce checks (an append's last offset).
        target = AppendInfo(required_offset - 1, required_offset - 1, -1, -1, -1, -1, 0, 0)
        self._wait_for_acks(timeout_ms, [target], [(0, key)], done)

    def read_internal(self, topic: str, partition: int, start_offset: int, max_bytes: int) -> bytes:
        return self.leader_partition(topic, partition).read_committed_bytes(start_offset, max_bytes)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.leader_partition(topic, partition).log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.leader_partition(topic, partition).log_end_offset

    # -- fetches (Kafka's ReplicaManager.fetchMessages) -------------------------------------

    def fetch_messages(self, params: FetchParams, partitions: list[CachedPartition], callback: FetchCallback) -> None:
        """Read ``partitions`` once; answer at once if there is enough (or an error, or no wait),
        else wait in the fetch purgatory for ``min_bytes`` or ``max_wait_ms``.

        ``callback(result)`` may run before this returns.
        """
        result = self.read_from_local_log(params, partitions)
        if (params.max_wait_ms <= 0 or not partitions or result.total_bytes >= params.min_bytes
                or result.has_error or result.truncated is not None or result.redirected):
            callback(result)
            return
        status: list[FetchStatus] = []
        keys: list[TopicPartition] = []
        follower = params.replica_id >= 0
        for read in result.partitions:
            cp = read.partition
            key = (self._topic_name(params, cp), cp.partition)
            part = self.partitions[key]  # read without error: it exists
            readable = part.appended_bytes if follower else part.bytes_below_bound(params.isolation_level)
            status.append((key, cp, readable - read.size))
            keys.append(key)
        op = DelayedFetch(params, partitions, status, self.partitions.get, self._read_from_purgatory,
                          self.node_id, callback)
        self.fetch_purgatory.try_complete_else_watch(op, keys)

    def _topic_name(self, params: FetchParams, cp: CachedPartition) -> str:
        if not params.uses_topic_ids:
            return cp.topic  # type: ignore[return-value]
        topic = self.image.topics_by_id.get(cp.topic_id)
        return topic.name if topic is not None else ""

    def _read_from_purgatory(self, params: FetchParams, partitions: list[CachedPartition]) -> FetchResult:
        """A waiting fetch's completion read: a follower's position was taken when its fetch
        arrived and is not reported again (Kafka's readFromLog with readFromPurgatory)."""
        return self.read_from_local_log(params, partitions, False)

    def read_from_local_log(self, params: FetchParams, partitions: list[CachedPartition],
                            update_fetch_state: bool = True) -> FetchResult:
        """One read of every partition within the response budget (Kafka's readFromLocalLog), for a
        consumer or for a follower (``params.replica_id >= 0``).

        The first batch of the first partition with data comes whole even past the limits
        (KIP-74 ``minOneMessage``), so a fetch always makes progress.

        A consumer reads up to the HW, or the LSO under read_committed (with the aborted
        transactions overlapping what it read); KIP-392: its Fetch v11+ may be served by a follower,
        up to the follower's HW (:meth:`_follower_for_consumer`), and with a
        ``replica.selector.class`` and a ``client.rack`` the leader may instead name a preferred
        read replica for a partition, reading nothing of it, and the fetch is answered at once.

        A follower reads up to the log end, refused for a partition it is not a replica of
        (UNKNOWN_LEADER_EPOCH when it gave its leader epoch, else NOT_LEADER_OR_FOLLOWER: Kafka's
        followerReplicaOrThrow); its fetch offset is its log end (Kafka's updateFollowerFetchState:
        the HW may move, the ISR may grow), and the HWs that moved complete what waited on them,
        after the read. Its bytes are not counted as consumers' (``bytes_by_topic``). Only the read
        a fetch makes when it arrives reports the follower's position (``update_fetch_state``); the
        read that completes it from the purgatory does not (Kafka's ``updateFetchState =
        !readFromPurgatory``): the position, its time and the log end it is measured against stay
        the request's, and a woken fetch costs one read, not a second round of bookkeeping.
        """
        image = self.image
        uses_ids = params.uses_topic_ids
        replica_id = params.replica_id
        follower = replica_id >= 0
        isolation = params.isolation_level
        budget = params.max_bytes
        zero_copy = self._zero_copy
        selector = self.replica_selector if params.client_rack and not follower else None
        report_position = follower and update_fetch_state
        fetch_ms = now_ms() if report_position else 0
        moved: list[TopicPartition] = []
        out = FetchResult()
        reads = out.partitions
        for cp in partitions:
            if uses_ids:
                topic = image.topics_by_id.get(cp.topic_id)
                if topic is None:
                    reads.append(LogReadResult(cp, ErrorCode.UNKNOWN_TOPIC_ID))
                    out.has_error = True
                    continue
                name = topic.name
            else:
                name = cp.topic  # type: ignore[assignment]
            try:
                if follower:
                    part = self._leader_for_follower(name, cp, replica_id)
                else:
                    try:
                        part = self.leader_partition(name, cp.partition)
                    except KafkaApiError as exc:
                        part = self._follower_for_consumer(params, name, cp.partition, exc)
                    part.check_leader_epoch(cp.current_leader_epoch)
                    if selector is not None and part.leader == self.node_id:
                        preferred = selector.preferred_read_replica(part, params.client_rack,  # type: ignore[arg-type]
                                                                    cp.fetch_offset, image, now_ms())
                        if preferred >= 0:
                            out.redirected = True
                            reads.append(LogReadResult(cp, ErrorCode.NONE, part.high_watermark,
                                                       part.last_stable_offset, part.log_start_offset,
                                                       preferred_read_replica=preferred))
                            continue
                min_one = out.total_bytes == 0
                limit = min(cp.partition_max_bytes, max(budget - out.total_bytes, 0))
                records: Any = b""
                aborted = None
                if follower:
                    piece = part.read_for_follower(cp.fetch_offset, limit, min_one) if limit > 0 or min_one else EMPTY_SLICE
                    if report_position:
                        # Before the answer's offsets are taken: the follower's position may move the HW.
                        if part.update_follower_fetch_state(replica_id, cp.fetch_offset, fetch_ms,
                                                            params.replica_epoch):
                            moved.append((name, cp.partition))
                        if replica_id not in part.isr:
                            self.isr.maybe_expand(part, replica_id)
                elif limit > 0 or min_one:
                    piece = part.read(cp.fetch_offset, limit, isolation, min_one)
                    if isolation:  # read_committed (Kafka's FetchIsolation.TXN_COMMITTED)
                        aborted = part.aborted_transactions(cp.fetch_offset, piece)
                else:
                    piece = EMPTY_SLICE
                size = piece.size
                if size:
                    records = piece if zero_copy else piece.read_bytes()
                    out.total_bytes += size
                    if not follower:
                        out.bytes_by_topic[name] = out.bytes_by_topic.get(name, 0) + size
                reads.append(LogReadResult(cp, ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                                           part.log_start_offset, records, size, aborted))
            except SegmentTruncatedError as exc:
                self._report_truncated(exc)
                out.truncated = exc
                reads.clear()  # drop slices already read: nothing of this response is sent
                break
            except KafkaApiError as exc:
                self._read_error(out, cp, name, exc)
        for key in moved:
            self.try_complete_delayed_requests(key)
        return out

    def _leader_for_follower(self, name: str, cp: CachedPartition, replica_id: int) -> Partition:
        """The partition a follower fetches: led here, at its leader epoch, with it as a replica."""
        part = self.leader_partition(name, cp.partition)
        part.check_leader_epoch(cp.current_leader_epoch)
        if replica_id not in part.replicas:
            # With a (matching) leader epoch the (replica, epoch) pair is not known yet
            # (a reassignment): the follower retries.
            code = (ErrorCode.UNKNOWN_LEADER_EPOCH if cp.current_leader_epoch >= 0
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            raise KafkaApiError(code, f"Replica {replica_id} is not recognized as a valid replica")
        return part

    def _follower_for_consumer(self, params: FetchParams, name: str, index: int, exc: KafkaApiError) -> Partition:
        """KIP-392: a partition this broker follows serves a consumer's Fetch v11+ (Kafka's
        fetchOnlyFromLeader is false for them), reads bounded by its own HW; else ``exc``."""
        if params.fetch_only_from_leader or exc.code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise exc
        part = self.partitions.get((name, index))
        if part is None or part.offline or part.leader == self.node_id:
            raise exc
        return part

    def _read_error(self, out: FetchResult, cp: CachedPartition, name: str, exc: KafkaApiError) -> None:
        out.has_error = True
        found = self.partitions.get((name, cp.partition))
        if found is not None and exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            out.partitions.append(LogReadResult(cp, exc.code, found.high_watermark, found.last_stable_offset,
                                                found.log_start_offset))
        else:
            out.partitions.append(LogReadResult(cp, exc.code))

    def _report_truncated(self, exc: SegmentTruncatedError) -> None:
        """One error per truncated segment file (each retrying consumer would otherwise log again);
        later fetches of it close their connections quietly."""
        if not self._reported_truncations.first(exc.path):
            log.debug("closing a fetch connection: %s", exc)
            return
        log.error("%s; closing the fetching connection (Kafka: truncated during read)", exc)

    # -- offsets, deletion ------------------------------------------------------------------

    def fetch_offset_for_timestamp(self, topic: str, index: int, current_leader_epoch: int, timestamp: int,
                                   isolation_level: int) -> tuple[int, int, int]:
        """ListOffsets: (offset, timestamp, leader epoch); Kafka's errors as KafkaApiError."""
        part = self.leader_partition(topic, index)
        part.check_leader_epoch(current_leader_epoch)
        return part.fetch_offset_for_timestamp(timestamp, isolation_level)

    def last_offset_for_leader_epoch(self, topic: str, index: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), (-1, -1) for an unknown epoch."""
        return self.leader_partition(topic, index).last_offset_for_leader_epoch(current_leader_epoch, leader_epoch)

    async def delete_records(self, topic: str, index: int, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (-1 = the HW); returns the
        low watermark. Deleting segments renames files: the IO pool does it."""
        part = self.leader_partition(topic, index)
        target = part.delete_records_target(offset)
        if target > part.log_start_offset:
            low_watermark: int = await self.run_blocking(part.delete_records_before, target)
            part.after_log_start_moved()
            return low_watermark
        return part.log_start_offset

    # -- log dirs ---------------------------------------------------------------------------

    def describe_log_dirs(self, wanted: dict[str, set[int]] | None) -> list[DescribeLogDirsResult]:
        """Blocking (the IO pool runs it): DescribeLogDirs' answer, see broker/replica/log_dirs_report.py."""
        return describe_log_dirs(self.log_manager, self.partitions, wanted)
