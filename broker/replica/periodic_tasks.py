"""The replica manager's periodic work: retention, flushes, checkpoints, producer expiry, ISR
expiration and the log cleaner (Kafka's kafka-log-retention, kafka-log-flusher,
kafka-recovery-point-checkpoint, highwatermark-checkpoint, isr-expiration and LogCleaner threads).

Blocking work (retention, flushes, checkpoints, cleaning) runs on the IO pool; what reads
loop-owned partition state (the HW checkpoint's collection, the ISR check) runs on the loop.
A failing round is logged and the next one runs on schedule.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.broker.replica.high_watermark_checkpoint import HighWatermarkWriter
from odradek.storage.cleaner import CleanerConfig, LogCleaner
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.replica.partition import Partition
    from odradek.storage.log import Log
    from odradek.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class PeriodicTasks:
    """Starts the periodic tasks with the replica manager and stops them at its shutdown."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, partitions: Mapping[TopicPartition, Partition],
                 io_pool: Executor, call_on_loop: Callable[..., None], shrink_isrs: Callable[[], None]) -> None:
        self.config = config
        self.log_manager = log_manager
        self.partitions = partitions
        self.io_pool = io_pool
        self._call_on_loop = call_on_loop
        self._shrink_isrs = shrink_isrs
        # Every replication-offset-checkpoint write, periodic or at shutdown, one at a time.
        self.hw_writer = HighWatermarkWriter(log_manager.report_dir_failure)
        self.cleaner: LogCleaner | None = None  # made at start, with the tasks
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        lm = self.log_manager
        self.cleaner = LogCleaner(lm, CleanerConfig.from_broker_props(cfg), upper_bound_offset=self._cleanable_upper_bound)
        self._tasks = [
            loop.create_task(self._every(cfg["log.retention.check.interval.ms"], self.retention)),
            loop.create_task(self._every(cfg.log_flush_interval_ms, lm.flush_dirty)),
            loop.create_task(self._every(cfg["log.flush.offset.checkpoint.interval.ms"], lm.checkpoint)),
            loop.create_task(self._every(cfg["producer.id.expiration.check.interval.ms"], lm.remove_expired_producers)),
        ]
        self._tasks.append(loop.create_task(self._every_on_loop(
            cfg["replica.high.watermark.checkpoint.interval.ms"], self.checkpoint_high_watermarks)))
        # Kafka's isr-expiration task: every half of replica.lag.time.max.ms.
        self._tasks.append(loop.create_task(self._every_on_loop(cfg["replica.lag.time.max.ms"] // 2,
                                                                self._shrink_isrs)))
        if self.cleaner.config.enable:
            # Kafka's LogCleaner threads: one log cleaned per round, then back off.
            self._tasks.append(loop.create_task(self._every(self.cleaner.config.backoff_ms, self.cleaner.clean_once)))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.shutdown()

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        interval = max(interval_ms, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.get_running_loop().run_in_executor(self.io_pool, fn)
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

    def _cleanable_upper_bound(self, topic: str, partition: int) -> int | None:
        """Compaction never passes the last stable offset (read from the cleaner's IO thread:
        a racy read of an int only makes one round a little conservative)."""
        part = self.partitions.get((topic, partition))
        return None if part is None else part.last_stable_offset

    # -- high watermark checkpoints (replication-offset-checkpoint) ----------------------------

    def high_watermarks_by_dir(self) -> dict[Path, list[tuple[str, int, int]]]:
        """Each online log dir's (topic, partition, HW), read on the loop."""
        lm = self.log_manager
        by_dir: dict[Path, list[tuple[str, int, int]]] = {d: [] for d in lm.online_dirs()}
        for (topic, index), part in self.partitions.items():
            entries = by_dir.get(lm.log_dir_of(topic, index))  # type: ignore[arg-type]
            if entries is not None:
                entries.append((topic, index, part.high_watermark))
        return by_dir

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's checkpointHighWatermarks: collected on the loop, written on the IO pool."""
        self.io_pool.submit(self.hw_writer.write_later(self.high_watermarks_by_dir()))

    # -- retention ------------------------------------------------------------------------

    def retention(self) -> int:
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
