"""The replica manager: this broker's partitions, their logs, high watermarks and delayed fetches.

It turns the controller's metadata into local state: every partition this broker hosts has a
:class:`Partition` with its storage ``Log`` and the leader epoch the controller assigned. Produce
appends through it, Fetch/ListOffsets read through it, and the group coordinator writes
``__consumer_offsets`` through ``append_internal``/``read_internal``.

High watermark: on a single node the in-sync replica set is this broker alone, so the high
watermark is the log end offset after every append (acks=-1 is satisfied at once). The cluster
work will make it the minimum of the ISR's fetched offsets; everything reads ``high_watermark``
rather than the log end for that reason. The last stable offset equals the high watermark until
transactions exist.

Threading: partition state and the purgatories are owned by the handler loop. Appends run on
the loop: a page-cache ``pwrite`` costs microseconds, less than a hand-off to the IO pool would
(measured in bench/storage_bench.py); segment rolls fsync the old segment (rare: every
``segment.bytes``). Blocking, slow work — start-up recovery, log creation and deletion,
retention, flushes, checkpoints — runs on the IO pool.

Disk faults, as in Kafka (``_on_dir_offline``; the storage side is storage.log_manager): a log
dir with an I/O error goes offline until the broker restarts and its partitions answer
KAFKA_STORAGE_ERROR; with no online log dir left, or the metadata log's dir failed (KIP-858),
the broker shuts down (``Broker.fail``: one line, exit 1) instead of looking alive while serving
nothing. A topic whose logs could not be created answers KAFKA_STORAGE_ERROR to CreateTopics /
CreatePartitions / auto-creation (``wait_for_logs``) and to requests for its partitions, and the
creation is retried on those requests at most once a second (a transient EMFILE passes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.purgatory import DelayedOperationPurgatory
from broker.topic_config_view import config_layers, effective_log_defaults
from controller.image import MetadataDelta, MetadataImage, TopicImage
from protocol.errors import ErrorCode, KafkaApiError
from storage.cleaner import CleanerConfig, LogCleaner
from storage.errors import InvalidConfigError, KafkaStorageError
from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.partition_metadata import topic_id_to_str
from storage.producer_state import ProducerStateManager
from storage.results import AppendInfo, FetchSlice

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# A topic whose local logs could not be made is retried (on the next request for one of its
# partitions) at most this often: a transient EMFILE passes, an offline dir fails fast again.
LOG_CREATION_RETRY_S = 1.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Partition:
    """A partition hosted here: its log and leadership state (owned by the handler loop)."""

    __slots__ = ("topic", "index", "topic_id", "log", "leader", "leader_epoch", "isr", "replicas", "is_internal")

    def __init__(self, topic: str, index: int, topic_id: Any, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader = -1
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.is_internal = False

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id = broker.node_id
        self.base_log_config: LogConfig = broker.config.log_config()
        expiration = broker.config["producer.id.expiration.ms"]
        self.log_manager = LogManager(
            broker.config.log_dirs,
            self.base_log_config,
            node_id=self.node_id,
            producer_state_factory=lambda _t, _p, d: ProducerStateManager(d, expiration),
        )
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", broker.timer)
        self._leader_listeners: list[Callable[[str, int, int], None]] = []
        self._resign_listeners: list[Callable[[str, int], None]] = []
        self._tasks: list[asyncio.Task] = []
        self.cleaner: LogCleaner | None = None
        self._log_admin = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-log-admin")
        self._pending_logs: dict[str, asyncio.Future] = {}
        # Topics whose logs could not all be opened or created here: (reason, monotonic time).
        self._log_failures: dict[str, tuple[str, float]] = {}
        self._started = False
        self._unsubscribe: Callable[[], None] | None = None
        self.log_manager.on_dir_offline = self._dir_offline_threadsafe

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        image = self.image
        self.log_manager.cluster_id = image.cluster_id
        # Dynamic broker defaults stored by the controller apply from the first log opened.
        self.base_log_config = effective_log_defaults(
            self.config, config_layers(self.config, image.broker_configs, self.node_id))
        topic_configs = {name: self.topic_log_config(t) for name, t in image.topics.items()}
        await self._io(self.log_manager.startup, topic_configs)
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
        self._unsubscribe = self.broker.metadata.controller.subscribe(self._on_delta)
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
        if self.cleaner.config.enable:
            # Kafka's LogCleaner threads: one log cleaned per round, then back off.
            self._tasks.append(loop.create_task(self._every(self.cleaner.config.backoff_ms, self.cleaner.clean_once)))

    def _cleanable_upper_bound(self, topic: str, partition: int) -> int | None:
        """Compaction never passes the last stable offset (read from the cleaner's IO thread:
        a racy read of an int only makes one round a little conservative)."""
        part = self.partitions.get((topic, partition))
        return None if part is None else part.last_stable_offset

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.fetch_purgatory.shutdown()
        self._log_admin.shutdown(wait=True)
        await self._io(self.log_manager.shutdown)

    async def _io(self, fn: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.broker.io_pool, fn, *args)

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self._io(fn)
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    def _retention(self) -> int:
        deleted = self.log_manager.run_retention(now_ms())
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted

    # -- metadata ---------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.broker.metadata.image

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
        for name in topics:
            topic = image.topics.get(name)
            if topic is None:
                continue
            for p in topic.partitions.values():
                key = (name, p.partition)
                if self.node_id not in p.replicas:
                    continue
                part = self.partitions.get(key)
                if part is None:
                    lg = self.log_manager.get_log(name, p.partition)
                    if lg is None or (lg.topic_id is not None and lg.topic_id != topic_id_to_str(topic.topic_id)):
                        continue  # its log is still being created (or belongs to a deleted namesake)
                    part = self.partitions[key] = Partition(name, p.partition, topic.topic_id, lg)
                part.is_internal = topic.is_internal
                was_leader = part.leader == self.node_id
                part.leader, part.leader_epoch = p.leader, p.leader_epoch
                part.isr, part.replicas = p.isr, p.replicas
                if p.leader == self.node_id and not was_leader:
                    for cb in self._leader_listeners:
                        cb(name, p.partition, p.leader_epoch)
                elif was_leader and p.leader != self.node_id:
                    for cb in self._resign_listeners:
                        cb(name, p.partition)

    def _on_delta(self, delta: MetadataDelta) -> None:
        """Called on the handler loop after each committed metadata change."""
        image = self.image
        for name, old in delta.deleted_topics.items():
            for index in old.partitions:
                part = self.partitions.pop((name, index), None)
                if part is not None:
                    # Waiting fetches on a deleted partition answer now (with its error).
                    self.fetch_purgatory.check_and_complete((name, index))
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
        if delta.changed_broker_configs:
            self._reload_broker_defaults()

    def _reload_broker_defaults(self) -> None:
        """Dynamic broker config changes to log.* keys become the new topic defaults, with Kafka's
        precedence (a dynamic value also hides its synonyms in lower layers)."""
        layers = config_layers(self.config, self.image.broker_configs, self.node_id)
        self.base_log_config = effective_log_defaults(self.config, layers)
        for name, topic in self.image.topics.items():
            self.log_manager.update_config(name, self.topic_log_config(topic))

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
        """LogManager's callback, from any thread (maybe inside a Log's lock): hand over to the loop."""
        loop = self.broker.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_dir_offline, log_dir, reason)
        except RuntimeError:
            pass  # the loop is closing: the shutdown reports offline dirs itself

    def _on_dir_offline(self, log_dir: Path, reason: str) -> None:
        """A log dir went offline: say so once; stop the broker if it can no longer do its job.

        Its partitions already answer KAFKA_STORAGE_ERROR (their logs are flagged offline), so
        clients move on. Like Kafka, the broker shuts down when no online log dir is left or
        when the dir holds the metadata log (KIP-858): a broker that cannot write anything must
        not look alive.
        """
        if self.broker.stopping:
            return  # found while shutting down: the shutdown's last line reports it
        hosted = [tp for tp in self.partitions if self.log_manager.log_dir_of(*tp) == log_dir]
        log.error("Log directory %s is offline (%s); its %d partitions answer KAFKA_STORAGE_ERROR until "
                  "the broker restarts", log_dir, reason, len(hosted))
        for tp in hosted:
            # Long-polling fetches on them answer now (with the error), not at their timeout.
            self.fetch_purgatory.check_and_complete(tp)
        fatal = self._fatal_log_dir_failure()
        if fatal is not None and self._started:
            self.broker.fail(fatal)  # (during start(), start itself raises it)

    def _fatal_log_dir_failure(self) -> str | None:
        """Kafka's reason to shut the broker down after log dir failures, or None."""
        lm = self.log_manager
        if not lm.online_dirs():
            return f"Shutdown broker because all log dirs in {', '.join(str(d) for d in lm.log_dirs)} have failed"
        metadata = self.broker.metadata
        metadata_dir = getattr(metadata, "metadata_dir", None)
        if metadata_dir is not None:
            for d in lm.offline_dirs:
                if Path(d).resolve() == Path(metadata_dir).resolve():
                    return f"Shutdown broker because the metadata log dir {d} has failed"
        return None

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self._leader_listeners.append(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self._resign_listeners.append(callback)

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
        if part.log.offline:
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                f"Partition {topic}-{index} is in an offline log directory")
        return part

    @staticmethod
    def check_leader_epoch(part: Partition, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client's view of the leader epoch must match ours (-1 = unknown)."""
        if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
            return
        if current_leader_epoch < part.leader_epoch:
            raise KafkaApiError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaApiError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # -- appends ----------------------------------------------------------------------------

    def append(self, part: Partition, records: Any) -> AppendInfo:
        """Append a produced record set to a partition this broker leads; wakes waiting fetches."""
        info = part.log.append(records, leader_epoch=part.leader_epoch)
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete((part.topic, part.index))
            metrics = self.broker.metrics
            if metrics is not None:
                metrics.bytes_in.inc(info.size)
                # Kafka's MessagesInPerSec counts records from the batches' offsets, not by decoding.
                metrics.topic_stats.appended(part.topic, info.size, info.last_offset - info.first_offset + 1)
        return info

    def append_internal(self, topic: str, partition: int, records: bytes) -> int:
        """Append coordinator records (e.g. __consumer_offsets); returns the first offset."""
        part = self.leader_partition(topic, partition)
        return self.append(part, records).first_offset

    def read_internal(self, topic: str, partition: int, start_offset: int, max_bytes: int) -> bytes:
        part = self.leader_partition(topic, partition)
        return part.log.read(start_offset, max_bytes, max_offset=part.high_watermark).read_bytes()

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.leader_partition(topic, partition).log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.leader_partition(topic, partition).log_end_offset

    # -- reads ------------------------------------------------------------------------------

    @staticmethod
    def read(part: Partition, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> FetchSlice:
        return part.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    def log_dirs_info(self) -> dict[Path, list[tuple[TopicPartition, Log]]]:
        out: dict[Path, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_manager.log_dirs}
        for tp, lg in self.log_manager.all_logs().items():
            d = self.log_manager.log_dir_of(*tp)
            if d is not None:
                out.setdefault(d, []).append((tp, lg))
        return out
