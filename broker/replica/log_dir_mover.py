"""Moving a replica between this broker's log dirs (Kafka's ReplicaManager.alterReplicaLogDirs and its
ReplicaAlterLogDirsManager/Thread, KIP-113).

AlterReplicaLogDirs (broker/api/handlers/alter_replica_log_dirs.py) names, per partition, the log dir its
replica on this broker should live in. :meth:`LogDirMover.alter` answers as Kafka's ReplicaManager does,
in its order, per partition:

1. INVALID_TOPIC_EXCEPTION when ``<topic>-<partition>.<uuid>-future`` would pass 255 characters (KAFKA-4893);
2. LOG_DIR_NOT_FOUND unless the path is exactly the absolute path of one of ``log.dirs``;
   KAFKA_STORAGE_ERROR when that dir is offline, or the partition's log is;
3. a move already going to another dir is cancelled (its future log deleted);
4. the dir is remembered as the partition's preferred dir (odradek.storage.log_manager), so a replica made here
   later - by a reassignment, or a topic created later - is made in it;
5. a partition this broker holds no replica of: UNKNOWN_TOPIC_OR_PARTITION if the metadata does not
   know it, else REPLICA_NOT_AVAILABLE (Kafka keeps that code here for compatibility);
6. NONE: nothing to do when the replica is in that dir already (or being moved there); else a future
   log is made there - KAFKA_STORAGE_ERROR while any log dir is offline, as in Kafka - and copied.

The copy (``_run``, one job per moving partition on this class's own threads, one per log dir as
Kafka's num.replica.alter.log.dirs.threads defaults to) works like a follower of the partition's own
log: it reads whole batches from the current log and appends them to the future log as they are
(offsets, epochs, producer state and transaction indexes rebuilt as a follower's are), never decoding
records, while the partition keeps serving - as leader or follower - from its current log. Each round
first matches the copy to the current log: when the current log was truncated since (a follower's
truncation), the copy is cut where the two diverge, by leader epoch as Kafka's
ReplicaAlterLogDirsThread does; when its log start moved (retention, DeleteRecords), the copy's
follows. Once the copy has caught up, it is fsynced outside any lock, and the swap
(LogManager.replace_current_with_future -> Log.replace_with_future) runs under the partition log's
lock: the batches appended meanwhile are copied, and the directories renamed; appends to the partition
wait those few milliseconds. The replaced files are removed after file.delete.delay.ms (reads already
under way keep using them). Compaction of the partition is paused while it moves (Kafka's
abortAndPauseCleaning) and its cleaner checkpoint moves with it.

A crash leaves one consistent replica (odradek.storage.log_manager's start-up): a future log is loaded and its
copy resumed (:meth:`resume_all`), or promoted if the swap had already marked the old log for deletion.

The copies of all moves together read at most ``replica.alter.log.dirs.io.max.bytes.per.second``
(a dynamic broker config, Kafka's quota for its alter-log-dirs threads; kafka-reassign-partitions
``--replica-alter-log-dirs-throttle`` sets it), paced by :class:`Throttle`.

Not done (Kafka has it): reporting the directory to the controller (Odradek's metadata has no
directory assignments, KIP-858), so a restart decides from the files alone (odradek.storage.log_manager).

Threading: :meth:`alter`, :meth:`resume_all` and :meth:`shutdown` run on the handler loop; the jobs
on the mover's threads touch only the two logs and the log manager (both thread-safe), never the
loop-owned partition state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.broker.config.broker_config import LONG_MAX
from odradek.broker.metadata.topic_config_view import config_layers, effective_broker_config
from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    SegmentTruncatedError,
)
from odradek.storage.log import Log
from odradek.storage.log_manager import FUTURE_DIR_SUFFIX, RetiredLog

if TYPE_CHECKING:
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.controller.image import MetadataDelta

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Kafka's limit on a file name (KAFKA-4893): a future dir name longer than this cannot be made.
MAX_DIR_NAME = 255
# Bytes read and appended per copy step (one segment's worth at most: a follower append is one set).
COPY_CHUNK_BYTES = 1024 * 1024
# Bytes a job copies before it looks at cancellation and at the current log again.
ROUND_BYTES = 16 * 1024 * 1024
# At most this much may be left to copy inside the swap, under the partition log's lock.
SWAP_GAP_BYTES = 1024 * 1024
# A job with nothing to copy (the current log's end is in a gap) waits this long before looking again.
IDLE_WAIT_S = 0.05


def future_dir_name_length(topic: str, partition: int) -> int:
    """Characters of ``<topic>-<partition>.<32 hex digits>-future`` (Kafka's UnifiedLog.logFutureDirName,
    whose String length Kafka compares with 255)."""
    return len(f"{topic}-{partition}") + 1 + 32 + len(FUTURE_DIR_SUFFIX)


THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"


class Throttle:
    """A token bucket shared by the mover's threads: at most ``rate`` bytes a second, in bursts of one
    second's worth. :meth:`pace` holds the calling thread (and, through the lock, the other copies)
    until the bytes it copied fit the rate; it looks at the rate, which may change at any time (a
    dynamic config), and at ``stopped`` every 0.1 s."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._tokens = 0.0
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def pace(self, nbytes: int, stopped: Callable[[], bool]) -> None:
        if self.rate >= LONG_MAX:
            return
        with self._lock:
            self._refill()
            self._tokens -= nbytes
            while self._tokens < 0 and not stopped():
                rate = self.rate
                if rate >= LONG_MAX:
                    self._tokens = 0.0
                    return
                time.sleep(min(-self._tokens / rate, 0.1) if rate > 0 else 0.1)
                self._refill()

    def _refill(self) -> None:
        now = time.monotonic()
        rate = self.rate
        if rate < LONG_MAX:
            self._tokens = min(self._tokens + (now - self._at) * rate, float(rate))
        self._at = now


@dataclass
class _Move:
    """One partition's copy into its future log."""

    tp: TopicPartition
    future: Log
    # The current log's truncation count when the copy last matched it; None: not matched yet.
    generation: int | None
    cancelled: bool = False
    job: Future[None] | None = field(default=None, repr=False)


def match_future(current: Log, future: Log, generation: int | None) -> int:
    """Bring the copy back to a prefix of the current log, and return the current log's truncation
    count it now matches: when the current log was truncated since ``generation`` (None: never
    matched), the copy is cut where the two diverge (Kafka's ReplicaAlterLogDirsThread truncation,
    by leader epoch); its log start follows the current one's. Blocking."""
    seen = current.truncations  # read first: a truncation after this one is seen at the next call
    if seen != generation or future.log_end_offset > current.log_end_offset:
        target = divergence(current, future)
        if target is None:
            future.truncate_fully_and_start_at(current.log_start_offset)
        elif target < future.log_end_offset:
            log.info("Truncating the future log %s to %d", future.dir.name, target)
            future.truncate_to(target)
    start = current.log_start_offset
    if start > future.log_start_offset:
        if start <= future.log_end_offset:
            future.delete_records_before(start)
        else:
            future.truncate_fully_and_start_at(start)
    return seen


def divergence(current: Log, future: Log) -> int | None:
    """The offset from which the copy no longer agrees with the current log, as a follower finds it
    with OffsetForLeaderEpoch (Kafka's getOffsetTruncationState); None: nothing in common."""
    epoch = future.latest_epoch
    if epoch < 0:
        return None if future.log_end_offset > future.log_start_offset else future.log_end_offset
    current_epoch, current_end = current.end_offset_for_epoch(epoch)
    if current_epoch < 0:
        return None
    if current_epoch == epoch:
        return min(current_end, future.log_end_offset)
    # The current log lacks the copy's latest epoch: the copy is cut where its largest smaller one ends.
    future_epoch, future_end = future.end_offset_for_epoch(current_epoch)
    return min(current_end, future_end if future_epoch >= 0 else current_end, future.log_end_offset)


def copy_batches(current: Log, future: Log, budget: int, throttle: Throttle | None = None,
                 stopped: Callable[[], bool] = lambda: False) -> int | None:
    """Append the current log's batches after the copy's end, as they are, until the copy reaches
    the current log's end or ``budget`` bytes were copied; returns the bytes copied, or None when
    the copy must be matched again first (:func:`match_future`). Blocking."""
    copied = 0
    chunk = max(min(COPY_CHUNK_BYTES, current.config.segment_bytes), 1)
    if throttle is not None:
        chunk = max(min(chunk, throttle.rate), 1)
    while copied < budget and not stopped():
        start = future.log_end_offset
        if start >= current.log_end_offset:
            break
        try:
            piece = current.read(start, chunk)
            if piece.size == 0:
                break
            data = piece.read_bytes()
            if piece.first_offset < start:
                if future.log_end_offset != future.log_start_offset:
                    # The copy ends inside one of the current log's batches (they diverged there):
                    # that batch is copied again, whole.
                    future.truncate_to(piece.first_offset)
                    continue
                # The copy is empty at a log start that cuts this batch (DeleteRecords): as a
                # follower does, it restarts at the batch, then takes the current log start back.
                future.truncate_fully_and_start_at(piece.first_offset)
                future.append(data, leader_epoch=-1, assign_offsets=False)
                future.delete_records_before(start)
            else:
                future.append(data, leader_epoch=-1, assign_offsets=False)
        except OffsetOutOfRangeError:
            return None  # the current log's start passed the copy's end
        except (SegmentTruncatedError, CorruptRecordError, InvalidRecordError) as exc:
            # The read raced with a truncation of the current log (reads take no lock).
            log.debug("Copying %s at %d: %s; matching the copy again", future.dir.name, start, exc)
            return None
        copied += piece.size
        if throttle is not None:
            throttle.pace(piece.size, stopped)
    return copied


class LogDirMover:
    """The replica manager's moves of partitions between its log dirs (see the module docstring)."""

    def __init__(self, replica_manager: ReplicaManager, threads: int) -> None:
        self.rm = replica_manager
        self.log_manager = replica_manager.log_manager
        self._pool = ThreadPoolExecutor(max_workers=max(threads, 1), thread_name_prefix="odradek-alter-log-dirs")
        self._moves: dict[TopicPartition, _Move] = {}
        self._moves_lock = threading.Lock()
        self._stopping = False
        # Kafka's replicaStateChangeLock around alterReplicaLogDirs: one request's partitions at a time.
        self._alter_lock = asyncio.Lock()
        self._removals: set[asyncio.TimerHandle] = set()
        self.throttle = Throttle(replica_manager.config[THROTTLE_CONFIG])
        self._unsubscribe: Callable[[], None] | None = None

    # -- AlterReplicaLogDirs (on the loop) ---------------------------------------------------------

    async def alter(self, requested: dict[TopicPartition, str]) -> dict[TopicPartition, int]:
        """Each partition's error code for moving its replica here to the named dir."""
        async with self._alter_lock:
            return {tp: await self._alter_one(tp, path) for tp, path in requested.items()}

    async def _alter_one(self, tp: TopicPartition, path: str) -> int:
        topic, index = tp
        lm = self.log_manager
        if future_dir_name_length(topic, index) > MAX_DIR_NAME:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        dest = lm.log_dir_by_path(path)
        if dest is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if dest in lm.offline_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        part = self.rm.partitions.get(tp)
        if part is not None:
            if part.offline:
                return ErrorCode.KAFKA_STORAGE_ERROR
            moving_to = lm.future_log_dir_of(topic, index)
            if moving_to is not None and moving_to != dest:
                await self._cancel(tp)
        lm.maybe_update_preferred_log_dir(topic, index, dest)
        if part is None or self.rm.partitions.get(tp) is not part:
            t = self.rm.image.topics.get(topic)
            return ErrorCode.REPLICA_NOT_AVAILABLE if t is not None and index in t.partitions \
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if lm.log_dir_of(topic, index) == dest:
            return ErrorCode.NONE
        try:
            future = await self.rm.run_blocking(lm.create_future_log, topic, index, dest)
        except KafkaStorageError as exc:
            log.warning("Unable to alter the log dir of %s-%d to %s: %s", topic, index, dest, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        except ValueError:
            # Moved meanwhile (a swap finished between the checks and here): ask again to go back.
            return ErrorCode.NONE
        self._start(tp, future, generation=None)
        return ErrorCode.NONE

    async def _cancel(self, tp: TopicPartition) -> None:
        """Stop the partition's move and delete its future log (Kafka's removeFutureLocalReplica)."""
        with self._moves_lock:
            move = self._moves.pop(tp, None)
        if move is not None:
            move.cancelled = True
        await self.rm.run_blocking(self.log_manager.delete_future_log, *tp)
        cleaner = self.rm.cleaner
        if cleaner is not None:
            cleaner.resume(*tp)
        log.info("Cancelled the move of %s-%d", *tp)

    # -- jobs --------------------------------------------------------------------------------------

    def resume_all(self) -> None:
        """At start-up: follow the throttle's dynamic config, and resume the copy of every future log
        whose partition is served here (Kafka's maybeAddLogDirFetchers)."""
        self._reload_throttle()
        self._unsubscribe = self.rm.metadata.subscribe(self._on_delta)
        for tp, (_dir, future) in self.log_manager.future_logs().items():
            if tp in self.rm.partitions:
                log.info("Resuming the move of %s-%d to %s", *tp, _dir)
                self._start(tp, future, generation=None)

    def _on_delta(self, delta: MetadataDelta) -> None:
        if delta.changed_broker_configs:
            self._reload_throttle()

    def _reload_throttle(self) -> None:
        """The throttle's value with the dynamic broker configs applied (on the loop)."""
        rm = self.rm
        layers = config_layers(rm.config, rm.image.broker_configs, rm.node_id)
        self.throttle.rate = effective_broker_config(rm.config, layers)[THROTTLE_CONFIG]

    def _start(self, tp: TopicPartition, future: Log, generation: int | None) -> None:
        with self._moves_lock:
            move = self._moves.get(tp)
            if move is not None and move.future is future and move.job is not None and not move.job.done():
                return  # already copying
            move = self._moves[tp] = _Move(tp, future, generation)
            move.job = self._pool.submit(self._run, move)

    def moving(self) -> list[TopicPartition]:
        with self._moves_lock:
            return list(self._moves)

    def _run(self, move: _Move) -> None:
        """One partition's copy, on a mover thread, until it is swapped in, cancelled or fails."""
        tp = move.tp
        lm = self.log_manager
        cleaner = self.rm.cleaner
        started = time.monotonic()

        def stopped() -> bool:
            return move.cancelled or self._stopping

        try:
            if cleaner is not None:
                cleaner.abort_and_pause(*tp)
            while not (move.cancelled or self._stopping):
                current = lm.get_log(*tp)
                if current is None or lm.get_future_log(*tp) is not move.future:
                    return  # the partition or its future log went away
                future = move.future
                move.generation = match_future(current, future, move.generation)
                copied = copy_batches(current, future, ROUND_BYTES, self.throttle, stopped)
                if copied is None:
                    move.generation = None  # match again
                    time.sleep(IDLE_WAIT_S)
                    continue
                # The copy's transactions settle with the partition's high watermark, as the current
                # log's do (Kafka's futureLog.updateHighWatermark): a racy read of the loop's int, and
                # this thread is the only one touching the copy's producer state before the swap.
                part = self.rm.partitions.get(tp)
                if part is not None and part.log is current:
                    future.producer_state.on_high_watermark_updated(min(part.high_watermark, future.log_end_offset))
                if future.log_end_offset < current.log_end_offset:
                    if copied == 0:
                        time.sleep(IDLE_WAIT_S)
                    continue
                future.flush()  # outside the lock: the swap then fsyncs little or nothing
                retired = lm.replace_current_with_future(*tp, generation=move.generation,
                                                         max_gap_bytes=SWAP_GAP_BYTES)
                if retired is not None:
                    self._finished(move, retired, time.monotonic() - started)
                    return
        except KafkaStorageError as exc:
            # A dir went offline or a log was closed (deleted, shutting down): the copy stops; a
            # future log in a dir still online is resumed at the next start.
            if not (move.cancelled or self._stopping):
                log.warning("The move of %s-%d stopped: %s", *tp, exc)
        except Exception:
            log.exception("The move of %s-%d failed; its future log stays until the next request or restart", *tp)
        finally:
            with self._moves_lock:
                if self._moves.get(tp) is move:
                    del self._moves[tp]
            if cleaner is not None and lm.get_future_log(*tp) is None:
                cleaner.resume(*tp)

    def _finished(self, move: _Move, retired: RetiredLog, elapsed_s: float) -> None:
        """After the swap (mover thread): the cleaner follows the log, the old files go later."""
        topic, index = move.tp
        lm = self.log_manager
        new_dir = lm.log_dir_of(topic, index)
        cleaner = self.rm.cleaner
        if cleaner is not None and new_dir is not None:
            try:
                cleaner.alter_checkpoint_dir(topic, index, retired.dir.parent, new_dir)
            except OSError as exc:
                log.warning("Could not move the cleaner checkpoint of %s-%d: %s", topic, index, exc)
        log.info("Moved %s-%d from %s to %s in %.1f s", topic, index, retired.dir.parent, new_dir, elapsed_s)
        current = lm.get_log(topic, index)
        delay_s = (current.config.file_delete_delay_ms if current is not None else 60_000) / 1000
        self.rm.call_on_loop(self._remove_later, retired, delay_s)

    def _remove_later(self, retired: RetiredLog, delay_s: float) -> None:
        """On the loop: the replaced files go after file.delete.delay.ms, on the IO pool."""
        if self._stopping:
            return  # removed at the next start (a ``-delete`` dir)
        loop = asyncio.get_running_loop()

        def due() -> None:
            self._removals.discard(handle)
            loop.run_in_executor(self.rm.io_pool, retired.remove)

        handle = loop.call_later(delay_s, due)
        self._removals.add(handle)

    async def shutdown(self) -> None:
        """Stop every copy (each stops within one chunk); the future logs are closed, and resumed at
        the next start, by the log manager."""
        self._stopping = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        for handle in self._removals:
            handle.cancel()
        self._removals.clear()
        with self._moves_lock:
            for move in self._moves.values():
                move.cancelled = True
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown, True)
