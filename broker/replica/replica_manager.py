"""The replica manager: this broker's partitions, their logs, and the two purgatories.

Kafka's kafka.server.ReplicaManager. It turns the controller's metadata into local state: every
partition this broker hosts has a :class:`~broker.replica.partition.Partition` with its storage
``Log`` and the leader epoch the controller assigned. Requests reach partition data only through
it: ``append_records`` (Produce), ``fetch_messages`` (Fetch), ``fetch_offset_for_timestamp``
(ListOffsets), ``delete_records``, ``last_offset_for_leader_epoch``; the coordinators write and
read their internal topics through ``append_internal``/``read_internal`` and wait for their writes
to be replicated with ``wait_for_high_watermark``; the transaction coordinator's COMMIT/ABORT
markers go through ``append_end_txn_markers``.

Purgatories: acks=-1 produces wait in the produce purgatory (broker.replica.delayed_produce)
until the high watermark passes their batches; long-poll fetches wait in the fetch purgatory
(broker.replica.delayed_fetch) until enough bytes are readable. Both are checked for a partition
when its high watermark or last stable offset moves (``try_complete_delayed_requests``) — after
each leader append on one node; with replication, also when a follower's fetch moves the HW.

Followers (replication): partitions hosted here but led elsewhere are followed by the replica
fetchers (broker/replica/replica_fetcher.py), which this class starts, feeds from each metadata
change (``_apply_leadership``: new followers and new leader epochs are added, new leaders and
deleted partitions removed) and stops. A follower's Partition answers NOT_LEADER_OR_FOLLOWER to
clients, as in Kafka.

ISR changes (KIP-497): as leader, a follower lagging more than ``replica.lag.time.max.ms`` is
dropped from the ISR (checked every half of it, Kafka's isr-expiration task) and a replica that
caught up is added back (checked on its fetch), each through ``alter_partition`` — the controller
client's AlterPartition, set by the broker (None: the ISR stays as the controller made it). Only the
controller's answer or newer metadata changes a partition's ISR; until then the HW counts the
maximal ISR (``Partition.maximal_isr``), and a change that got no answer (no controller while etcd
is away) is sent again with backoff (``_send_isr_change``). That is what lets a leader go on serving
on the metadata it has through an etcd outage of any length without ever acknowledging an acks=all
write that a replica the controller may elect lacks (broker/cluster/registration.py has the argument).

Threading: partition state and the purgatories are owned by the handler loop. Appends run on
the loop: a page-cache ``pwrite`` costs microseconds, less than a hand-off to the IO pool would
(measured in bench/storage_bench.py); segment rolls fsync the old segment (rare: every
``segment.bytes``). Blocking, slow work — start-up recovery, log creation and deletion,
retention, flushes, checkpoints, DeleteRecords — runs on the IO pool, and so does recompressing
the batches of a topic whose ``compression.type`` names a codec: such a partition's produce
appends go through its append lane (broker/replica/append_lane.py), which keeps them in arrival order.

Disk faults, as in Kafka (``_on_dir_offline``; the storage side is storage.log_manager): a log
dir with an I/O error goes offline until the broker restarts and its partitions answer
KAFKA_STORAGE_ERROR; with no online log dir left, or the metadata log's dir failed (KIP-858),
the broker shuts down (the ``fail`` callback: one line, exit 1) instead of looking alive while
serving nothing. In a cluster, ``on_offline_replicas`` reports the replicas in failed dirs to the
controller (through the broker's registration), which moves them out of ISRs and leaderships
(KIP-858). A topic whose logs could not be created answers KAFKA_STORAGE_ERROR to
CreateTopics / CreatePartitions / auto-creation (``wait_for_logs``) and to requests for its
partitions, and the creation is retried on those requests at most once a second (a transient
EMFILE passes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from broker.purgatory import DelayedOperationPurgatory
from broker.replica.append_lane import AppendLane, Deliver
from broker.replica.delayed_fetch import DelayedFetch, FetchStatus
from broker.replica.delayed_produce import DelayedProduce, ProduceCallback, ProduceResult
from broker.replica.fetch_params import FetchCallback, FetchParams, FetchResult, LogReadResult
from broker.replica.fetch_session import CachedPartition
from broker.replica.high_watermark_checkpoint import HighWatermarkWriter, read_high_watermarks
from broker.replica.log_dir_mover import LogDirMover
from broker.replica.partition import Partition, RecordCheck
from broker.replica.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from broker.replica.replica_selector import replica_selector
from broker.timing_wheel import Timer
from broker.topic_config_view import config_layers, effective_broker_config, effective_log_defaults
from broker.txn.producer_turns import ProducerTurns
from controller.image import MetadataDelta, MetadataImage, TopicImage
from protocol.errors import ErrorCode, KafkaApiError
from storage.cleaner import CleanerConfig, LogCleaner
from storage.errors import InvalidConfigError, KafkaStorageError, SegmentTruncatedError
from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.partition_metadata import topic_id_to_str
from storage.producer_state import InvalidProducerEpochError, ProducerStateManager
from storage.results import EMPTY_SLICE, AppendInfo

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from controller.requests import AlterPartitionResult

    # ControllerClient.alter_partition(topic_id, partition, leader_id, leader_epoch, partition_epoch, new_isr,
    # broker_epochs)
    AlterPartitionCall = Callable[[Any, int, int, int, int, Sequence[int], Mapping[int, int]],
                                  Awaitable[AlterPartitionResult]]
    from broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# A topic whose local logs could not be made is retried (on the next request for one of its
# partitions) at most this often: a transient EMFILE passes, an offline dir fails fast again.
LOG_CREATION_RETRY_S = 1.0

# An AlterPartition that got no answer is sent again after this, doubling up to the maximum.
ISR_CHANGE_BACKOFF_S = 0.1
ISR_CHANGE_MAX_BACKOFF_S = 5.0
# Answers that say "no controller could decide": sent again (the others are final, see _send_isr_change).
ISR_CHANGE_RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT,
                                  ErrorCode.STALE_CONTROLLER_EPOCH})


class MetadataView(Protocol):
    """What the replica manager reads of the broker's metadata."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def metadata_dir(self) -> Path | None: ...

    def subscribe(self, callback: Callable[[MetadataDelta], None]) -> Callable[[], None]: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# A produce result not known yet: its append waits in the partition's lane (replaced before the callback).
_IN_LANE = KafkaApiError(ErrorCode.REQUEST_TIMED_OUT, "the append waited in its partition's append lane")


class _LaneWaits:
    """One produce request's appends queued in append lanes: ``then`` runs once all are delivered."""

    __slots__ = ("results", "waiting", "then")

    def __init__(self, results: list[ProduceResult]) -> None:
        self.results = results
        self.waiting = 0
        self.then: Callable[[], None] | None = None

    def deliverer(self, index: int) -> Deliver:
        def deliver(result: ProduceResult) -> None:
            self.results[index] = result
            self.waiting -= 1
            if self.waiting == 0 and self.then is not None:
                self.then()
        return deliver


class ReplicaManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataView, timer: Timer, io_pool: Executor,
                 fail: Callable[[str], None], is_stopping: Callable[[], bool],
                 metrics: BrokerMetrics | None = None) -> None:
        """``fail(reason)`` stops the broker (a fatal log dir failure); ``is_stopping()`` tells a
        shutdown in progress; ``metrics`` may be set later (it starts after the replica manager)."""
        self.config = config
        self.metadata = metadata
        self.io_pool = io_pool
        self.metrics = metrics
        self._fail = fail
        self._is_stopping = is_stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self.node_id: int = config.node_id
        self.base_log_config: LogConfig = config.log_config()
        # producer.id.expiration.ms is dynamic: read when a log is made, pushed to open logs on change.
        self.producer_id_expiration_ms: int = config["producer.id.expiration.ms"]
        self.log_manager = LogManager(
            config.log_dirs,
            self.base_log_config,
            node_id=self.node_id,
            producer_state_factory=lambda _t, _p, d: ProducerStateManager(d, self.producer_id_expiration_ms),
        )
        # Every replication-offset-checkpoint write, periodic or at shutdown, one at a time.
        self._hw_writer = HighWatermarkWriter(self.log_manager.report_dir_failure)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory("Produce", timer)
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch] = DelayedOperationPurgatory("Fetch", timer)
        self._zero_copy: bool = config["odradek.fetch.sendfile"]
        self._reported_truncations: set[str] = set()
        self._leader_listeners: list[Callable[[str, int, int], None]] = []
        self._resign_listeners: list[Callable[[str, int], None]] = []
        # (topic, partition, producer id, commit) after a marker lands: the group coordinator
        # completes TxnOffsetCommit's pending offsets on __consumer_offsets (Kafka's
        # onTransactionCompleted, called from WriteTxnMarkers).
        self._txn_marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        self._tasks: list[asyncio.Task] = []
        self.cleaner: LogCleaner | None = None
        self._log_admin = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-log-admin")
        self._pending_logs: dict[str, asyncio.Future] = {}
        # Topics whose logs could not all be opened or created here: (reason, monotonic time).
        self._log_failures: dict[str, tuple[str, float]] = {}
        self._started = False
        self._unsubscribe: Callable[[], None] | None = None
        self.log_manager.on_dir_offline = self._dir_offline_threadsafe
        self.replica_fetchers = ReplicaFetcherManager(self, FetcherConfig.from_broker_config(config),
                                                      self._broker_endpoint)
        # The controller client's alter_partition (the broker sets it after start-up).
        self.alter_partition: AlterPartitionCall | None = None
        # Cluster mode: told the replicas (topic id, partition) in failed log dirs when one fails,
        # so the controller moves them out of ISRs and leaderships (None: one node, nobody to tell).
        self.on_offline_replicas: Callable[[list[tuple[uuid.UUID, int]]], None] | None = None
        self.replica_lag_time_max_ms: int = config["replica.lag.time.max.ms"]
        self._isr_tasks: set[asyncio.Task[None]] = set()
        # replication-offset-checkpoint's HWs, taken by the partitions made at start-up.
        self._checkpointed_hws: dict[TopicPartition, int] = {}
        # KIP-392 replica.selector.class: None (consumers read from leaders) unless configured.
        self.replica_selector = replica_selector(config["replica.selector.class"])
        # Transactions-v2 Produce requests waiting for the coordinator, one producer's in order.
        self.producer_turns = ProducerTurns()
        # AlterReplicaLogDirs' moves between log dirs; one thread per log dir (Kafka's default
        # num.replica.alter.log.dirs.threads).
        self.log_dir_mover = LogDirMover(self, threads=len(config.log_dirs))

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        image = self.image
        self.log_manager.cluster_id = image.cluster_id
        # Dynamic broker defaults stored by the controller apply from the first log opened.
        self._apply_broker_defaults()
        topic_configs = {name: self.topic_log_config(t) for name, t in image.topics.items()}
        await self._io(self.log_manager.startup, topic_configs)
        self._checkpointed_hws = await self._io(read_high_watermarks, self.log_manager.online_dirs())
        for topic in list(image.topics.values()):
            try:
                await self._io(self._open_logs, self._hosted_snapshot(topic))
            except KafkaStorageError as exc:
                # Its partitions stay unserved (KAFKA_STORAGE_ERROR); the other topics start.
                log.error("Cannot open the logs of %s: %s", topic.name, exc)
                self._log_failures[topic.name] = (str(exc), time.monotonic())
        fatal = self._fatal_log_dir_failure()
        if fatal is not None:
            raise KafkaStorageError(fatal)
        self._started = True
        self._apply_leadership(image, set(image.topics))
        await self._io(self._delete_strays, image)
        self._unsubscribe = self.metadata.subscribe(self._on_delta)
        loop = asyncio.get_running_loop()
        cfg = self.config
        self.cleaner = LogCleaner(self.log_manager, CleanerConfig.from_broker_props(cfg),
                                  upper_bound_offset=self._cleanable_upper_bound)
        self._tasks = [
            loop.create_task(self._every(cfg["log.retention.check.interval.ms"], self._retention)),
            loop.create_task(self._every(cfg.log_flush_interval_ms, self.log_manager.flush_dirty)),
            loop.create_task(self._every(cfg["log.flush.offset.checkpoint.interval.ms"], self.log_manager.checkpoint)),
            loop.create_task(self._every(cfg["producer.id.expiration.check.interval.ms"], self.log_manager.remove_expired_producers)),
        ]
        self._tasks.append(loop.create_task(self._every_on_loop(
            cfg["replica.high.watermark.checkpoint.interval.ms"], self._checkpoint_high_watermarks)))
        # Kafka's isr-expiration task: every half of replica.lag.time.max.ms.
        self._tasks.append(loop.create_task(self._every_on_loop(self.replica_lag_time_max_ms // 2,
                                                                self._maybe_shrink_isrs)))
        if self.cleaner.config.enable:
            # Kafka's LogCleaner threads: one log cleaned per round, then back off.
            self._tasks.append(loop.create_task(self._every(self.cleaner.config.backoff_ms, self.cleaner.clean_once)))
        self.log_dir_mover.resume_all()  # moves between log dirs a restart interrupted

    def _cleanable_upper_bound(self, topic: str, partition: int) -> int | None:
        """Compaction never passes the last stable offset (read from the cleaner's IO thread:
        a racy read of an int only makes one round a little conservative)."""
        part = self.partitions.get((topic, partition))
        return None if part is None else part.last_stable_offset

    async def shutdown(self) -> None:
        await self.replica_fetchers.shutdown()
        for task in [*self._tasks, *self._isr_tasks]:
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        # After the cleaner: a copy waiting for a cleaning round to end (to pause it) is not held up.
        await self.log_dir_mover.shutdown()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self._log_admin.shutdown(wait=True)
        if self._started:
            # After any periodic write still running in a pool thread (the writer waits for it).
            await self._io(self._hw_writer.write_later(self._high_watermarks_by_dir()))
        await self._io(self.log_manager.shutdown)

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.io_pool, fn, *args)

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self._io(fn)
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    async def _every_on_loop(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def _high_watermarks_by_dir(self) -> dict[Path, list[tuple[str, int, int]]]:
        """Each online log dir's (topic, partition, HW), read on the loop."""
        lm = self.log_manager
        by_dir: dict[Path, list[tuple[str, int, int]]] = {d: [] for d in lm.online_dirs()}
        for (topic, index), part in self.partitions.items():
            entries = by_dir.get(lm.log_dir_of(topic, index))  # type: ignore[arg-type]
            if entries is not None:
                entries.append((topic, index, part.high_watermark))
        return by_dir

    def _checkpoint_high_watermarks(self) -> None:
        """Kafka's checkpointHighWatermarks: collected on the loop, written on the IO pool."""
        self.io_pool.submit(self._hw_writer.write_later(self._high_watermarks_by_dir()))

    def _retention(self) -> int:
        """On the IO pool: retention over every log. The partitions whose log start moved then
        recompute their last stable offset on the loop, as after DeleteRecords: an open transaction
        that began in a deleted segment no longer holds the LSO below the log start (Kafka updates
        the first unstable offset when the log start moves, maybeIncrementFirstUnstableOffset)."""
        moved: list[TopicPartition] = []
        deleted = self.log_manager.run_retention(now_ms(), self._retention_high_watermark, moved)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        if moved:
            self._call_on_loop(self._after_log_starts_moved, moved)
        return deleted

    def _after_log_starts_moved(self, keys: list[TopicPartition]) -> None:
        for key in keys:
            part = self.partitions.get(key)
            if part is not None:
                part.after_log_start_moved()

    def _retention_high_watermark(self, topic: str, index: int, lg: Log) -> int | None:
        """The high watermark retention may delete up to (Kafka's deletableSegments): the
        partition's, as leader or as follower (Kafka applies retention on followers too, with the
        high watermark the leader gave them). None for a log without its partition here (still
        being made, or its topic deleted): the log then never deletes its active segment.

        Called on the IO thread under the log's lock: only reads the loop-owned state (a racy
        read of an int; the log caps it at its log end offset, and a stale lower value only
        keeps a segment until the next check).
        """
        part = self.partitions.get((topic, index))
        if part is None or part.log is not lg:
            return None
        return part.high_watermark

    # -- metadata ---------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def topic_log_config(self, topic: TopicImage) -> LogConfig:
        try:
            return self.base_log_config.with_overrides(topic.configs)
        except InvalidConfigError as exc:
            # The controller validated these; a broker-default change could still clash.
            log.error("topic %s has an invalid config (%s); using broker defaults", topic.name, exc)
            return self.base_log_config

    def _hosted_snapshot(self, topic: TopicImage) -> tuple[str, str, LogConfig, list[int]]:
        """What creating a topic's local logs needs, copied on the loop (the image is loop-owned)."""
        indexes = [p.partition for p in topic.partitions.values() if self.node_id in p.replicas]
        return topic.name, topic_id_to_str(topic.topic_id), self.topic_log_config(topic), indexes

    def _open_logs(self, snapshot: tuple[str, str, LogConfig, list[int]]) -> None:
        """Blocking: open or create the local logs of a topic's partitions hosted here.

        Tries every partition; KafkaStorageError (the first reason, and how many failed) if any
        log could not be opened or created.
        """
        name, tid, config, indexes = snapshot
        failed: list[KafkaStorageError] = []
        for index in indexes:
            try:
                self.log_manager.get_or_create_log(name, index, tid, config)
            except KafkaStorageError as exc:
                failed.append(exc)
        if len(failed) == 1:
            raise failed[0]
        if failed:
            raise KafkaStorageError(f"{failed[0]} (and {len(failed) - 1} more partitions of {name})")

    def _delete_strays(self, image: MetadataImage) -> None:
        """Logs the metadata does not know (a crash between a topic deletion's commit and its log
        removal, or lost metadata) are renamed ``-stray``, not deleted, and never served."""
        for (topic, partition), lg in list(self.log_manager.all_logs().items()):
            t = image.topics.get(topic)
            if t is None or partition not in t.partitions or (
                lg.topic_id is not None and lg.topic_id != topic_id_to_str(t.topic_id)
            ):
                target = self.log_manager.mark_stray(topic, partition)
                log.warning("log %s-%d is not in the cluster metadata; kept as %s", topic, partition, target)

    def _apply_leadership(self, image: MetadataImage, topics: set[str]) -> None:
        """Bring hosted partitions to the image's leadership; start and stop following them
        (Kafka's makeLeaders / makeFollowers)."""
        follow: dict[TopicPartition, tuple[int, int, Any, int]] = {}
        unfollow: list[TopicPartition] = []
        for name in topics:
            topic = image.topics.get(name)
            if topic is None:
                continue
            for p in topic.partitions.values():
                key = (name, p.partition)
                if self.node_id not in p.replicas:
                    continue
                part = self.partitions.get(key)
                created = part is None
                if part is None:
                    lg = self.log_manager.get_log(name, p.partition)
                    if lg is None or (lg.topic_id is not None and lg.topic_id != topic_id_to_str(topic.topic_id)):
                        continue  # its log is still being created (or belongs to a deleted namesake)
                    part = self.partitions[key] = Partition(name, p.partition, topic.topic_id, lg)
                    self._sync_append_lane(part)
                    checkpointed = self._checkpointed_hws.pop(key, None)
                    if checkpointed is not None:
                        part.restore_high_watermark(checkpointed)
                part.is_internal = topic.is_internal
                was_leader = part.leader == self.node_id
                moved = not created and (part.leader != p.leader or part.leader_epoch != p.leader_epoch)
                isr_changed = part.isr != p.isr
                if isr_changed or moved or created or part.partition_epoch != p.partition_epoch:
                    # Newer metadata ends an AlterPartition in flight (Kafka's makeLeader: the committed
                    # state replaces a pending one; its answer, if it comes, is ignored).
                    part.set_committed_isr(p.isr, p.partition_epoch)
                part.leader, part.leader_epoch = p.leader, p.leader_epoch
                part.replicas = p.replicas
                if p.leader == self.node_id:
                    if moved or created:
                        part.reset_follower_states(now_ms())  # followers' positions unknown until they fetch
                        # Kafka's makeLeader: the ISR may be this broker alone (HW = log end).
                        part.maybe_increment_high_watermark()
                        unfollow.append(key)
                    elif isr_changed:
                        # A smaller ISR may let the HW move (and acks=-1 produces answer, or fail
                        # with NOT_ENOUGH_REPLICAS_AFTER_APPEND below min.insync.replicas).
                        part.maybe_increment_high_watermark()
                        self.try_complete_delayed_requests(key)
                if moved:
                    # Requests waiting on the old leadership answer now (fenced or not leader).
                    self.try_complete_delayed_requests(key)
                if p.leader != self.node_id and (moved or created):
                    # A follower (again, or under a new leader epoch): truncate, then fetch.
                    follow[key] = (p.leader, p.leader_epoch, topic.topic_id, part.log_end_offset)
                if p.leader == self.node_id and not was_leader:
                    for on_leader in self._leader_listeners:
                        on_leader(name, p.partition, p.leader_epoch)
                elif was_leader and p.leader != self.node_id:
                    for on_resign in self._resign_listeners:
                        on_resign(name, p.partition)
        if unfollow:
            self.replica_fetchers.remove_partitions(unfollow)
        if follow:
            self.replica_fetchers.add_partitions(follow)

    # -- what the replica fetchers use (broker.replica.replica_fetcher.FollowerHost) -------------

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if it is still a follower here under ``leader_epoch``."""
        part = self.partitions.get(tp)
        if part is None or part.leader == self.node_id or part.leader_epoch != leader_epoch or part.offline:
            return None
        return part

    def broker_epoch(self) -> int:
        reg = self.image.brokers.get(self.node_id)
        return reg.broker_epoch if reg is not None else -1

    def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._io(fn, *args)

    # -- ISR changes (Kafka's Partition.maybeShrinkIsr / maybeExpandIsr, AlterPartition) --------

    def _maybe_shrink_isrs(self) -> None:
        """Drop from each led partition's ISR the followers lagging over replica.lag.time.max.ms."""
        if self.alter_partition is None:
            return
        now = now_ms()
        lag = self.replica_lag_time_max_ms
        for part in self.partitions.values():
            if len(part.isr) > 1 and part.leader == self.node_id and part.pending_isr is None:
                out = part.out_of_sync_replicas(now, lag)
                if out:
                    log.info("Shrinking the ISR of %s-%d from %s: %s not caught up for %d ms", part.topic,
                             part.index, list(part.isr), out, lag)
                    self._request_isr_change(part, tuple(r for r in part.isr if r not in out))

    def _maybe_expand_isr(self, part: Partition, replica_id: int) -> None:
        if (self.alter_partition is not None and part.pending_isr is None and part.is_expansion_candidate(replica_id)
                and self._isr_eligible(replica_id, part.follower_broker_epoch(replica_id))):
            log.info("Expanding the ISR of %s-%d from %s to add %d", part.topic, part.index, list(part.isr), replica_id)
            self._request_isr_change(part, (*part.isr, replica_id))

    def _isr_eligible(self, replica_id: int, fetched_epoch: int) -> bool:
        """Kafka's Partition.isReplicaIsrEligible: registered, not fenced, and (KIP-903) fetching as
        the incarnation the metadata knows: a follower that restarted with a lost log fetches with a
        new broker epoch, and must not be added back on the strength of an older one."""
        reg = self.image.brokers.get(replica_id)
        if reg is None or reg.fenced:
            return False
        return fetched_epoch == -1 or fetched_epoch == reg.broker_epoch

    def _request_isr_change(self, part: Partition, new_isr: tuple[int, ...]) -> None:
        part.pending_isr = new_isr  # the HW counts the maximal ISR from now on (Partition's docstring)
        task = asyncio.get_running_loop().create_task(self._send_isr_change(part, new_isr))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    def _isr_change_current(self, part: Partition, new_isr: tuple[int, ...], leader_epoch: int) -> bool:
        """The AlterPartition for ``new_isr`` is still the one in flight: same partition object, still
        led here in the same leader epoch, no newer metadata since (which clears ``pending_isr``)."""
        return (self.partitions.get((part.topic, part.index)) is part and part.leader == self.node_id
                and part.leader_epoch == leader_epoch and part.pending_isr is new_isr)

    async def _send_isr_change(self, part: Partition, new_isr: tuple[int, ...]) -> None:
        """Send the AlterPartition until the controller answers (Kafka's AlterPartitionManager): no
        answer - no controller while etcd is away, a timeout, a lost connection - is sent again with
        backoff for as long as this change is the one in flight, the HW counting the maximal ISR
        meanwhile. The answer, as Kafka's handleAlterPartitionError takes it: NONE commits the ISR
        here at once; INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED (the controller did not apply it)
        go back to the committed ISR, so a later check may try again; any other error (a stale
        leader or partition epoch) leaves it pending until newer metadata replaces it."""
        call = self.alter_partition
        assert call is not None
        epoch = part.leader_epoch
        backoff = ISR_CHANGE_BACKOFF_S
        while True:
            if not self._isr_change_current(part, new_isr, epoch):
                return
            try:
                # KIP-903: each member with the broker epoch it fetched with, ours for ourselves.
                epochs = {r: part.follower_broker_epoch(r) for r in new_isr if r != self.node_id}
                epochs[self.node_id] = self.broker_epoch()
                result = await call(part.topic_id, part.index, self.node_id, epoch, part.partition_epoch, new_isr,
                                    epochs)
                code = result.error_code
                if code not in ISR_CHANGE_RETRIABLE:
                    break
                why = _error_name(code)
            except Exception as exc:  # REQUEST_TIMED_OUT, NOT_CONTROLLER, a lost connection, etcd away
                why = str(exc) or type(exc).__name__
            # One WARNING per change, the retries at DEBUG: an etcd outage of hours must not fill the log.
            log.log(logging.WARNING if backoff == ISR_CHANGE_BACKOFF_S else logging.DEBUG,
                    "AlterPartition of %s-%d to %s got no answer (%s); sending it again in %.1f s and after that "
                    "until a controller answers", part.topic, part.index, list(new_isr), why, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, ISR_CHANGE_MAX_BACKOFF_S)
        if not self._isr_change_current(part, new_isr, epoch):
            return  # newer metadata came first and says what is committed
        if code == ErrorCode.NONE:
            # Applied at once, as Kafka does; the metadata that follows says the same.
            part.set_committed_isr(tuple(result.isr), result.partition_epoch)
            part.maybe_increment_high_watermark()
            self.try_complete_delayed_requests((part.topic, part.index))
            return
        log.info("AlterPartition of %s-%d to %s answered %s", part.topic, part.index, list(new_isr),
                 _error_name(code))
        if code in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            part.pending_isr = None  # applied by no controller: back to the committed ISR
            if part.maybe_increment_high_watermark():  # a refused member no longer holds the HW
                self.try_complete_delayed_requests((part.topic, part.index))

    def _broker_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.image.brokers.get(broker_id)
        return (reg.host, reg.port) if reg is not None else None

    def _on_delta(self, delta: MetadataDelta) -> None:
        """Called on the handler loop after each committed metadata change."""
        image = self.image
        for name, old in delta.deleted_topics.items():
            for index in old.partitions:
                part = self.partitions.pop((name, index), None)
                self.replica_fetchers.remove_partitions([(name, index)])
                if part is not None:
                    # Waiting requests on a deleted partition answer now (with its error).
                    self.try_complete_delayed_requests((name, index))
                    for cb in self._resign_listeners:
                        cb(name, index)
            self._log_admin_job(name, self._delete_topic_logs, name, list(old.partitions))
        touched = set(delta.created_topics) | {t for t, _ in delta.changed_partitions}
        for name in touched:
            topic = image.topics.get(name)
            if topic is not None:
                # Partitions already hosted keep serving; new ones are registered once their logs
                # exist (a 10,000-partition topic takes seconds of file creation, which must not
                # stall the loop). Until then they answer NOT_LEADER_OR_FOLLOWER, which clients retry.
                self._apply_leadership(image, {name})
                self._log_admin_job(name, self._open_logs, self._hosted_snapshot(topic))
        for name in delta.changed_topic_configs:
            topic = image.topics.get(name)
            if topic is not None:
                self.log_manager.update_config(name, self.topic_log_config(topic))
                self._sync_append_lanes(topic)
        if delta.changed_broker_configs:
            self._reload_broker_defaults()
        if delta.changed_brokers:
            self._refollow(delta.changed_brokers)

    def _refollow(self, brokers: set[int]) -> None:
        """Leaders that (re)registered: follow their partitions not yet followed at that endpoint
        (a leader unknown when its partition became a follower, or moved to another port)."""
        follow: dict[TopicPartition, tuple[int, int, Any, int]] = {}
        for key, part in self.partitions.items():
            leader = part.leader
            if leader in brokers and leader != self.node_id and leader >= 0:
                endpoint = self._broker_endpoint(leader)
                if endpoint is not None and not self.replica_fetchers.follows(key, endpoint):
                    follow[key] = (leader, part.leader_epoch, part.topic_id, part.log_end_offset)
        if follow:
            self.replica_fetchers.add_partitions(follow)

    def _apply_broker_defaults(self) -> None:
        """The controller-stored dynamic broker configs, with Kafka's precedence (a dynamic value
        also hides its synonyms in lower layers): log.* keys become the topic defaults, and
        producer.id.expiration.ms reaches the logs already open (at start-up there are none)."""
        layers = config_layers(self.config, self.image.broker_configs, self.node_id)
        self.base_log_config = effective_log_defaults(self.config, layers)
        expiration = effective_broker_config(self.config, layers)["producer.id.expiration.ms"]
        if expiration != self.producer_id_expiration_ms:
            self.producer_id_expiration_ms = expiration
            self.log_manager.set_producer_id_expiration_ms(expiration)

    def _reload_broker_defaults(self) -> None:
        """A dynamic broker config change: new defaults, then every topic's log config again."""
        self._apply_broker_defaults()
        for name, topic in self.image.topics.items():
            self.log_manager.update_config(name, self.topic_log_config(topic))
            self._sync_append_lanes(topic)

    def _delete_topic_logs(self, topic: str, partitions: list[int]) -> None:
        for index in partitions:
            try:
                self.log_manager.delete_log(topic, index)
            except KafkaStorageError as exc:
                log.warning("could not delete %s-%d: %s", topic, index, exc)

    def _log_admin_job(self, topic: str, fn: Callable, *args: Any) -> None:
        """Run blocking log creation/deletion on the single log-admin thread, in delta order.

        One thread, so a topic deleted and re-created under the same name has its old logs
        removed before the new ones are made. When a job ends, the topic's partitions are
        (re)registered from the then-current image.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._log_admin, fn, *args)
        self._pending_logs[topic] = future

        def done(f: asyncio.Future) -> None:
            if self._pending_logs.get(topic) is f:
                del self._pending_logs[topic]
            if f.cancelled():
                return
            exc = f.exception()
            if isinstance(exc, KafkaStorageError):
                log.error("Creating or deleting logs of %s failed: %s", topic, exc)
                self._log_failures[topic] = (str(exc), time.monotonic())
            else:
                self._log_failures.pop(topic, None)
                if exc is not None:
                    log.error("creating or deleting logs of %s failed", topic, exc_info=exc)
            self._apply_leadership(self.image, {topic})

        future.add_done_callback(done)

    async def wait_for_logs(self, topics: Any) -> dict[str, KafkaApiError]:
        """Wait until pending log creation/deletion for these topics is done (CreateTopics,
        CreatePartitions and auto-creation answer after it, so a Produce that follows succeeds).

        Returns the topics whose logs could not be made, with the error to answer: a topic the
        controller created but whose log does not exist here must not be reported as a success
        (KAFKA_STORAGE_ERROR with the reason; UNKNOWN_SERVER_ERROR for an unexpected failure).
        """
        pending = {t: f for t in topics if (f := self._pending_logs.get(t)) is not None}
        if not pending:
            return {}
        outcomes = await asyncio.gather(*pending.values(), return_exceptions=True)
        errors: dict[str, KafkaApiError] = {}
        for topic, outcome in zip(pending, outcomes, strict=True):
            if isinstance(outcome, KafkaApiError):
                errors[topic] = outcome
            elif isinstance(outcome, BaseException):
                errors[topic] = KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Creating the logs of {topic} failed")
        return errors

    def _retry_logs(self, topic: TopicImage, failed_at: float) -> None:
        if topic.name in self._pending_logs or time.monotonic() - failed_at < LOG_CREATION_RETRY_S:
            return
        self._log_failures[topic.name] = (self._log_failures[topic.name][0], time.monotonic())
        self._log_admin_job(topic.name, self._open_logs, self._hosted_snapshot(topic))

    # -- log dir failures (Kafka's ReplicaManager.handleLogDirFailure) ----------------------

    def _dir_offline_threadsafe(self, log_dir: Path, reason: str) -> None:
        """LogManager's callback, from any thread (maybe inside a Log's lock): hand over to the loop
        (if it is closing, the shutdown reports offline dirs itself)."""
        self._call_on_loop(self._on_dir_offline, log_dir, reason)

    def _call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from any thread; dropped once the loop is closing."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # closed between the test and the call

    def _on_dir_offline(self, log_dir: Path, reason: str) -> None:
        """A log dir went offline: say so once; stop the broker if it can no longer do its job.

        Its partitions already answer KAFKA_STORAGE_ERROR (their logs are flagged offline), so
        clients move on. Like Kafka, the broker shuts down when no online log dir is left or
        when the dir holds the metadata log (KIP-858): a broker that cannot write anything must
        not look alive.
        """
        if self._is_stopping():
            return  # found while shutting down: the shutdown's last line reports it
        hosted = [tp for tp in self.partitions if self.log_manager.log_dir_of(*tp) == log_dir]
        log.error("Log directory %s is offline (%s); its %d partitions answer KAFKA_STORAGE_ERROR until "
                  "the broker restarts", log_dir, reason, len(hosted))
        for tp in hosted:
            # Long-polling fetches on them answer now (with the error), not at their timeout.
            self.try_complete_delayed_requests(tp)
        if self.on_offline_replicas is not None:
            self.on_offline_replicas(self.offline_replicas())
        fatal = self._fatal_log_dir_failure()
        if fatal is not None and self._started:
            self._fail(fatal)  # (during start(), start itself raises it)

    def offline_replicas(self) -> list[tuple[uuid.UUID, int]]:
        """(topic id, partition) of every hosted partition whose log dir is offline."""
        lm = self.log_manager
        out = []
        for topic, index in self.partitions:
            t = self.image.topics.get(topic)
            if t is not None and lm.log_dir_of(topic, index) in lm.offline_dirs:
                out.append((t.topic_id, index))
        return out

    def _fatal_log_dir_failure(self) -> str | None:
        """Kafka's reason to shut the broker down after log dir failures, or None."""
        lm = self.log_manager
        if not lm.online_dirs():
            return f"Shutdown broker because all log dirs in {', '.join(str(d) for d in lm.log_dirs)} have failed"
        metadata_dir = self.metadata.metadata_dir
        if metadata_dir is not None:
            for d in lm.offline_dirs:
                if Path(d).resolve() == Path(metadata_dir).resolve():
                    return f"Shutdown broker because the metadata log dir {d} has failed"
        return None

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self._leader_listeners.append(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self._resign_listeners.append(callback)

    def on_txn_marker(self, callback: Callable[[str, int, int, bool], None]) -> None:
        self._txn_marker_listeners.append(callback)

    def active_producers(self, topic: str, partition: int) -> list[dict[str, int]]:
        """DescribeProducers: the producer state of a partition led here (Kafka's
        Partition.activeProducerState), in the response's field names."""
        state = self.leader_partition(topic, partition).log.producer_state
        if not isinstance(state, ProducerStateManager):
            return []
        return [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                 "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                 "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset}
                for e in list(state.producers.values())]

    def transaction_to_join(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> tuple[bool, bool]:
        """Before a transactional batch of (producer id, epoch) is appended to a partition led here
        (Kafka's UnifiedLog.maybeStartTransactionVerification): (whether the producer's transaction at
        that epoch is open here already - then the coordinator is not asked, neither to verify the
        partition (KIP-890) nor to add it (transactions v2) - and whether the partition remembers
        batches of the producer at its current epoch). Raises Kafka's partition errors
        (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) and INVALID_PRODUCER_EPOCH for an
        epoch below the producer's, before the coordinator is asked anything."""
        state = self.leader_partition(topic, partition).log.producer_state
        entry = state.last_entry(producer_id) if isinstance(state, ProducerStateManager) else None
        if entry is None:
            return False, False
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(f"Epoch of producer {producer_id} is {producer_epoch}, which is smaller "
                                            f"than the last seen epoch {entry.producer_epoch}")
        return entry.current_txn_first_offset is not None and entry.producer_epoch == producer_epoch, bool(entry.batches)

    def open_transactions(self, topic: str, partition: int) -> dict[int, int]:
        """Producer id -> first offset of its open transaction on a led partition (the group
        coordinator restores TxnOffsetCommit's pending offsets from these when it loads)."""
        state = self.leader_partition(topic, partition).log.producer_state
        if not isinstance(state, ProducerStateManager):
            return {}
        return {pid: first for first, pid in state.ongoing_txns.items()}

    def next_producer_sequence(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> int:
        """The sequence a coordinator-written batch of (producer id, epoch) continues with here
        (TxnOffsetCommit writes the offsets as the producer's transactional batch)."""
        state = self.leader_partition(topic, partition).log.producer_state
        entry = state.last_entry(producer_id) if isinstance(state, ProducerStateManager) else None
        if entry is None or entry.producer_epoch != producer_epoch or entry.last_seq < 0:
            return 0
        return (entry.last_seq + 1) & 0x7FFFFFFF

    # -- lookups ----------------------------------------------------------------------------

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it; Kafka's errors otherwise."""
        part = self.partitions.get((topic, index))
        if part is None:
            t = self.image.topics.get(topic)
            if t is None or index not in t.partitions:
                raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            failure = self._log_failures.get(topic)
            if failure is not None:
                # Its log could not be made here: say so (not NOT_LEADER, which clients would
                # retry forever), and try again now and then.
                self._retry_logs(t, failure[1])
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, failure[0])
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
        in_lanes: _LaneWaits | None = None
        for topic, index, records in entries:
            try:
                part = self.leader_partition(topic, index)
                lane = part.append_lane
                if lane is None:
                    info = part.append_records_to_leader(records, required_acks, record_check)
                else:
                    # The topic recompresses (append_lane.py): appended now, or queued in order.
                    if in_lanes is None:
                        in_lanes = _LaneWaits(results)
                    queued = lane.append(records, required_acks, record_check, in_lanes.deliverer(len(results)))
                    if queued is None:
                        in_lanes.waiting += 1
                        results.append(_IN_LANE)
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
        op = DelayedProduce(timeout_ms, results, waiting, self._led_partition, callback)
        self.produce_purgatory.try_complete_else_watch(op, [key for _, key in waiting])

    def _answer_produce(self, entries: list[tuple[str, int, Any]], results: list[ProduceResult], required_acks: int,
                        timeout_ms: int, callback: ProduceCallback) -> None:
        """The end of :meth:`append_records` for a request whose appends waited in lanes."""
        if required_acks == -1:
            waiting = [(i, (e[0], e[1])) for i, e in enumerate(entries) if isinstance(results[i], AppendInfo)]
            if waiting:
                op = DelayedProduce(timeout_ms, results, waiting, self._led_partition, callback)
                self.produce_purgatory.try_complete_else_watch(op, [key for _, key in waiting])
                return
        callback(results)

    def _leads_at(self, part: Partition, leader_epoch: int) -> bool:
        """``part`` is still hosted and led here, at ``leader_epoch`` (an append lane's entry)."""
        return (self.partitions.get((part.topic, part.index)) is part and part.leader == self.node_id
                and part.leader_epoch == leader_epoch)

    def _sync_append_lane(self, part: Partition) -> None:
        """Give ``part`` an append lane when its topic recompresses (a lane whose topic stopped
        retires itself once empty)."""
        if part.append_lane is None and part.log.config.recompression is not None and self._loop is not None:
            part.append_lane = AppendLane(part, self.io_pool, self._loop, self._leads_at, self._after_leader_append)

    def _sync_append_lanes(self, topic: TopicImage) -> None:
        for index in topic.partitions:
            part = self.partitions.get((topic.name, index))
            if part is not None:
                self._sync_append_lane(part)

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

    def append_end_txn_markers(self, markers: list[tuple[str, int, int, int, int, bool, int]], timeout_ms: int,
                               callback: ProduceCallback) -> None:
        """Write transaction markers: each (topic, partition, producer id, producer epoch, coordinator
        epoch, commit, transaction version) as its leader (Kafka's appendRecords with
        AppendOrigin.COORDINATOR from WriteTxnMarkers, acks=-1; transaction version 2 is KIP-1228's
        stricter epoch check, storage.producer_state). ``callback(results)`` gets, in order, each marker's AppendInfo or
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
        op = DelayedProduce(timeout_ms, results, waiting, self._led_partition, callback)
        self.produce_purgatory.try_complete_else_watch(op, [key for _, key in waiting])

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
        op = DelayedProduce(timeout_ms, [target], [(0, key)], self._led_partition, done)
        self.produce_purgatory.try_complete_else_watch(op, [key])

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
        op = DelayedFetch(params, partitions, status, self.partitions.get, self.read_from_local_log,
                          self.node_id, callback)
        self.fetch_purgatory.try_complete_else_watch(op, keys)

    def _topic_name(self, params: FetchParams, cp: CachedPartition) -> str:
        if not params.uses_topic_ids:
            return cp.topic  # type: ignore[return-value]
        topic = self.image.topics_by_id.get(cp.topic_id)
        return topic.name if topic is not None else ""

    def read_from_local_log(self, params: FetchParams, partitions: list[CachedPartition]) -> FetchResult:
        """One read of every partition within the response budget (Kafka's readFromLocalLog).

        The first batch of the first partition with data comes whole even past the limits
        (KIP-74 ``minOneMessage``), so a consumer always makes progress. A follower's fetch
        (``params.replica_id >= 0``) is read by :meth:`_read_for_follower`.

        KIP-392: a consumer's Fetch v11+ may be served by a follower, up to the follower's HW
        (:meth:`_follower_for_consumer`); with a ``replica.selector.class`` and a ``client.rack``
        the leader may instead name a preferred read replica for a partition, reading nothing
        of it, and the fetch is answered at once (Kafka's readFromLocalLog).
        """
        if params.replica_id >= 0:
            return self._read_for_follower(params, partitions)
        image = self.image
        uses_ids = params.uses_topic_ids
        isolation = params.isolation_level
        budget = params.max_bytes
        zero_copy = self._zero_copy
        out = FetchResult()
        reads = out.partitions
        selector = self.replica_selector if params.client_rack else None
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
                        reads.append(LogReadResult(cp, ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                                                   part.log_start_offset, preferred_read_replica=preferred))
                        continue
                min_one = out.total_bytes == 0
                limit = min(cp.partition_max_bytes, max(budget - out.total_bytes, 0))
                records: Any = b""
                size = 0
                aborted = None
                if limit > 0 or min_one:
                    piece = part.read(cp.fetch_offset, limit, isolation, min_one)
                    size = piece.size
                    if size:
                        records = piece if zero_copy else piece.read_bytes()
                        out.total_bytes += size
                        out.bytes_by_topic[name] = out.bytes_by_topic.get(name, 0) + size
                    if isolation:  # read_committed (Kafka's FetchIsolation.TXN_COMMITTED)
                        aborted = part.aborted_transactions(cp.fetch_offset, piece)
                reads.append(LogReadResult(cp, ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                                           part.log_start_offset, records, size, aborted))
            except SegmentTruncatedError as exc:
                self._report_truncated(exc)
                out.truncated = exc
                reads.clear()  # drop slices already read: nothing of this response is sent
                return out
            except KafkaApiError as exc:
                self._read_error(out, cp, name, exc)
        return out

    def _follower_for_consumer(self, params: FetchParams, name: str, index: int, exc: KafkaApiError) -> Partition:
        """KIP-392: a partition this broker follows serves a consumer's Fetch v11+ (Kafka's
        fetchOnlyFromLeader is false for them), reads bounded by its own HW; else ``exc``."""
        if params.fetch_only_from_leader or exc.code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise exc
        part = self.partitions.get((name, index))
        if part is None or part.offline or part.leader == self.node_id:
            raise exc
        return part

    def follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        """A follower's HW moved (the fetcher took it from its leader): consumers' fetches
        waiting on it here (KIP-392) may have enough now (Kafka's completeDelayedFetchRequests)."""
        if self.fetch_purgatory.delayed:
            self.fetch_purgatory.check_and_complete(tp)

    def _read_error(self, out: FetchResult, cp: CachedPartition, name: str, exc: KafkaApiError) -> None:
        out.has_error = True
        found = self.partitions.get((name, cp.partition))
        if found is not None and exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            out.partitions.append(LogReadResult(cp, exc.code, found.high_watermark, found.last_stable_offset,
                                                found.log_start_offset))
        else:
            out.partitions.append(LogReadResult(cp, exc.code))

    def _read_for_follower(self, params: FetchParams, partitions: list[CachedPartition]) -> FetchResult:
        """A follower's read: up to the log end, refused for a partition it is not a replica of
        (UNKNOWN_LEADER_EPOCH when it gave its leader epoch, else NOT_LEADER_OR_FOLLOWER: Kafka's
        followerReplicaOrThrow); its fetch offset is its log end (Kafka's
        updateFollowerFetchState), and the HWs that moves complete what waited on them, after
        the read. Its bytes are not counted as consumers' (``bytes_by_topic``)."""
        image = self.image
        uses_ids = params.uses_topic_ids
        budget = params.max_bytes
        zero_copy = self._zero_copy
        replica_id = params.replica_id
        fetch_ms = now_ms()
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
                part = self.leader_partition(name, cp.partition)
                part.check_leader_epoch(cp.current_leader_epoch)
                if replica_id not in part.replicas:
                    # With a (matching) leader epoch the (replica, epoch) pair is not known yet
                    # (a reassignment): the follower retries.
                    code = (ErrorCode.UNKNOWN_LEADER_EPOCH if cp.current_leader_epoch >= 0
                            else ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    raise KafkaApiError(code, f"Replica {replica_id} is not recognized as a valid replica")
                min_one = out.total_bytes == 0
                limit = min(cp.partition_max_bytes, max(budget - out.total_bytes, 0))
                records: Any = b""
                piece = part.read_for_follower(cp.fetch_offset, limit, min_one) if limit > 0 or min_one else EMPTY_SLICE
                if part.update_follower_fetch_state(replica_id, cp.fetch_offset, fetch_ms, params.replica_epoch):
                    moved.append((name, cp.partition))
                if replica_id not in part.isr:
                    self._maybe_expand_isr(part, replica_id)
                size = piece.size
                if size:
                    records = piece if zero_copy else piece.read_bytes()
                    out.total_bytes += size
                reads.append(LogReadResult(cp, ErrorCode.NONE, part.high_watermark, part.last_stable_offset,
                                           part.log_start_offset, records, size))
            except SegmentTruncatedError as exc:
                self._report_truncated(exc)
                out.truncated = exc
                reads.clear()
                break
            except KafkaApiError as exc:
                self._read_error(out, cp, name, exc)
        for key in moved:
            self.try_complete_delayed_requests(key)
        return out

    def _report_truncated(self, exc: SegmentTruncatedError) -> None:
        """One error per truncated segment file (each retrying consumer would otherwise log again);
        later fetches of it close their connections quietly."""
        if exc.path in self._reported_truncations:
            log.debug("closing a fetch connection: %s", exc)
            return
        if len(self._reported_truncations) < 10_000:
            self._reported_truncations.add(exc.path)
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
            low_watermark = await self._io(part.delete_records_before, target)
            part.after_log_start_moved()
            return low_watermark
        return part.log_start_offset

    # -- log dirs ---------------------------------------------------------------------------

    def describe_log_dirs(self, wanted: dict[str, set[int]] | None) -> list[dict[str, Any]]:
        """Blocking (statvfs and segment sizes; the IO pool runs it): each log dir with the
        partitions it holds, as DescribeLogDirs answers. ``wanted`` None means every partition.

        ``offset_lag`` is Kafka's getLogEndOffsetLag: for a current log how far its log end is
        behind the partition's high watermark, max(HW - LEO, 0) - 0 for a leader and for a follower
        alike, since neither's HW passes its own log end; for a future log (a move between log dirs
        under way, ``is_future_key``) how far it is behind the current log's end; -1 for a log whose
        partition is not (yet) served here. An offline dir is listed with KAFKA_STORAGE_ERROR and
        no partitions, as Kafka does.
        """
        lm = self.log_manager
        by_dir: dict[Path, list[tuple[TopicPartition, Any]]] = {d: [] for d in lm.log_dirs}
        for tp, lg in lm.all_logs().items():
            d = lm.log_dir_of(*tp)
            if d is not None:
                by_dir.setdefault(d, []).append((tp, lg))
        futures = lm.future_logs()
        for tp, (d, lg) in futures.items():
            by_dir.setdefault(d, []).append((tp, lg))
        results: list[dict[str, Any]] = []
        offline = lm.offline_dirs
        for log_dir, logs in sorted(by_dir.items()):
            path = str(os.path.abspath(log_dir))
            if log_dir in offline:
                results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                                "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False})
                continue
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, index), lg in sorted(logs, key=lambda item: item[0]):
                if wanted is not None and index not in wanted.get(topic, ()):
                    continue
                part = self.partitions.get((topic, index))
                is_future = (topic, index) in futures and futures[(topic, index)][1] is lg
                if part is None:
                    lag = -1
                elif is_future:
                    lag = part.log_end_offset - lg.log_end_offset
                else:
                    lag = max(0, part.high_watermark - lg.log_end_offset)
                topics.setdefault(topic, []).append(
                    {"partition_index": index, "partition_size": lg.size_in_bytes, "offset_lag": lag,
                     "is_future_key": is_future})
            try:
                st = os.statvfs(log_dir)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                total = usable = -1
            results.append({
                "error_code": ErrorCode.NONE,
                "log_dir": path,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                "total_bytes": total,
                "usable_bytes": usable,
                "is_cordoned": False,  # v5 (KIP-1066): Odradek does not cordon log dirs
            })
        return results
