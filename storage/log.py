"""A partition's log: the directory ``<topic>-<partition>`` and its segments (Kafka's UnifiedLog/LocalLog).

Directory contents::

    00000000000000000000.log / .index / .timeindex   segments (odradek.storage.segment), by base offset
    00000000000000000000.txnindex                      its aborted transactions, if any (odradek.storage.txn_index)
    00000000000000368769.log / ...                     the last one is the active segment
    leader-epoch-checkpoint                            odradek.storage.leader_epoch_cache
    partition.metadata                                 topic id (odradek.storage.partition_metadata)
    *.deleted                                          segments awaiting file.delete.delay.ms

Offsets are dense and assigned here: an append rewrites each batch's base_offset to the next
offset (and partition_leader_epoch to the leader's epoch), never decoding records. The log start
offset is the first offset a reader may fetch; the log end offset (LEO) the next one to assign.

Recompression: a topic whose ``compression.type`` names a codec stores every produced batch in it
(odradek.storage.recompression: the records of a batch in another codec are decompressed, checked and
compressed again, its header kept). :meth:`Log.recompress` does it ahead of the append and changes
nothing (the broker runs it on the IO pool); :meth:`Log.append` does it for sets that were not.

Crash story (:meth:`Log.open`, done by odradek.storage.log_loader.LogLoader): after a clean shutdown every
segment is opened without scanning; otherwise every segment from the one holding the recovery point
onward is rescanned and cut at the first invalid or partial batch, and the leader epoch cache,
producer state and ``.txnindex`` files are rebuilt from what survived. Interrupted compaction swaps
are finished and the leftovers of interrupted deletions removed first. The recovery point is the
offset below which data is known to be fsynced.

Producer state: the log talks to it only through odradek.storage.producer_state_contract.ProducerState
(odradek.storage.producer_state.ProducerStateManager in the broker; NoProducerState when opened without).

Transactions: a transaction ends with a control batch holding one COMMIT or ABORT marker
(:meth:`Log.append_end_txn_marker`, the coordinator's path; clients may not write control batches,
INVALID_RECORD as Kafka). When a marker ends a transaction that had data, producer state says so
and an aborted one is added to the ``.txnindex`` of the segment holding the marker, with the last
stable offset at that moment (Kafka's UnifiedLog.append). :meth:`Log.collect_aborted_txns` reads
them back for read_committed fetches. Recovery rebuilds the ``.txnindex`` of every segment it
rescans: producer state is reloaded from a snapshot at or below the first such segment and the
markers replayed through it (Kafka's LogLoader.recoverSegment).

Retention (:meth:`Log.delete_old_segments`, Kafka's deleteOldSegments): whole segments go, oldest
first, by retention.ms, retention.bytes and the log start offset, never past the partition's high
watermark when the caller knows it. The active segment goes too once the high watermark reached
the log end (a new empty one is rolled there first), so an idle topic does not keep expired records
until segment.ms rolls it; the log start offset then equals the log end offset, which is unchanged.

Durability: by default (flush.messages and flush.ms at Long.MAX) nothing is fsynced on append,
like Kafka; a segment is fsynced when it rolls and on close, and :meth:`flush` fsyncs up to an
offset and advances the recovery point.

Disk errors: an OSError while writing, rolling, flushing or deleting leaves no partial batch
behind (the segment cuts its file back), marks the log offline, calls ``on_dir_failure(log_dir)``
(the LogManager takes the whole log dir offline) and raises LogDirOfflineError; later calls raise
KafkaStorageError.

Moving to another log dir (AlterReplicaLogDirs; odradek.storage.log_manager, odradek.broker.replica.log_dir_mover): a
copy of the log in the other dir (a future log, filled by appending this log's batches as a follower
does) takes this log's place with :meth:`replace_with_future`, under both logs' locks: this Log object
then holds the copy's segments, producer state and epoch cache, in the new directory, so nothing that
holds it has to change; :attr:`truncations` tells the copier when it must match the copy again.

Threading: every mutating method (append, roll, flush, truncate_*, delete_*, close) takes the
log's lock, so they may be called from any IO-pool thread but are serialized per partition.
:meth:`read`, :meth:`offset_for_timestamp` and :meth:`max_timestamp_and_offset` take no lock and may
run concurrently with appends: they snapshot the segment list (replaced copy-on-write) and the LEO,
and a segment publishes its size only after the bytes are written. Reads racing with truncation or
deletion are the caller's business (replication will fence them per partition); deleted segments
keep their fd open for file.delete.delay.ms so a slice already handed out stays valid.
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from odradek.protocol.batch_header import (
    CONTROL_BIT,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
)
from odradek.protocol.checksum import crc32c
from odradek.protocol.records import (
    decode_batch,
    encode_end_txn_marker_batch,
)
from odradek.storage import clock
from odradek.storage.checkpoint_file import fsync_dir, write_atomically
from odradek.storage.errors import (
    CleaningAbortedError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from odradek.storage.leader_epoch_cache import LeaderEpochCache
from odradek.storage.log_config import LONG_MAX, LogConfig
from odradek.storage.log_loader import LogLoader
from odradek.storage.partition_metadata import read_partition_metadata, write_partition_metadata
from odradek.storage.producer_state_contract import DuplicateBatch, NoProducerState, ProducerState
from odradek.storage.producer_state_replay import apply_control_batch, end_txn_marker, rebuild_producer_state
from odradek.storage.recompression import needs_recompression, recompress_batches
from odradek.storage.record_validator import plain_records_ok, uncompressed_limit, validate_records
from odradek.storage.results import EMPTY_SLICE, AppendInfo, FetchSlice
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)
from odradek.storage.time_index import NO_TIMESTAMP
from odradek.storage.txn_index import AbortedTxn

# The append path builds headers from raw tuples: NamedTuple._make and _replace cost more than the
# rest of an append of a small batch.
_HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_make_header = partial(tuple.__new__, BatchHeader)
# Likewise the result: AppendInfo's generated __new__ takes 0.8 µs on this project's VM, this 0.3.
_make_info = partial(tuple.__new__, AppendInfo)
_pack_header = _HEADER_STRUCT.pack
# base_offset, batch_length, partition_leader_epoch: the bytes the leader rewrites (before magic).
_PREFIX = struct.Struct(">qii")
_PREFIX_SIZE = _PREFIX.size
_UINT32 = struct.Struct(">I")
# Linux's IOV_MAX is 1024; a record set with more batches is joined into one buffer instead.
_MAX_IOV = 1024


_flusher_pool: ThreadPoolExecutor | None = None
_flusher_lock = threading.Lock()


def _flusher() -> ThreadPoolExecutor:
    """One thread shared by all logs for roll-time fsyncs (Kafka's scheduler "flush-log" task)."""
    global _flusher_pool
    with _flusher_lock:
        if _flusher_pool is None:
            _flusher_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-log-flusher")
        return _flusher_pool


class _Segments(NamedTuple):
    """Copy-on-write snapshot: segments sorted by base offset and their base offsets."""

    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]


def _snapshot(segments: list[LogSegment] | tuple[LogSegment, ...]) -> _Segments:
    segs = tuple(segments)
    return _Segments(segs, tuple(s.base_offset for s in segs))


class Log:
    """One partition's log. Construct with :meth:`open`."""

    def __init__(self, dir: Path, config: LogConfig) -> None:
        self.dir = dir
        self.config = config
        self._lock = threading.RLock()
        self._state = _Segments((), ())
        self._log_start_offset = 0
        self._log_end_offset = 0
        self.recovery_point = 0
        self.epoch_cache = LeaderEpochCache(dir)
        # Always present (NoProducerState without one): the log calls it without asking.
        self.producer_state: ProducerState = NoProducerState()
        self.on_dir_failure: Callable[[Path], None] | None = None
        self.offline = False
        self.closed = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._unflushed_messages = 0
        self.last_flush_ms = clock.now_ms()
        self.topic_id: str | None = None
        # Bumped by every truncation; a background flush or snapshot begun before one must not
        # advance the recovery point or publish its snapshot afterwards.
        self._truncations = 0
        self._background: list[Future[None]] = []
        self._plain_appends = self._allows_plain_appends(config)
        self._plain_when_kept = self._allows_plain_appends(config, kept=True)

    # ------------------------------------------------------------------------------------------
    # opening and recovery

    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, recovery_point: int = 0, log_start_offset: int = 0,
             clean_shutdown: bool = False, producer_state: ProducerState | None = None,
             now_ms: int | None = None, topic_id: str | None = None,
             on_dir_failure: Callable[[Path], None] | None = None) -> Log:
        """Open (creating if needed) the log in ``dir``; recover it unless ``clean_shutdown``
        (odradek.storage.log_loader).

        ``topic_id`` (Kafka's base64 Uuid string) is written to partition.metadata if the file is
        absent; the stored one is exposed as ``log.topic_id``.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, config)
        if producer_state is not None:
            log.producer_state = producer_state
        log.on_dir_failure = on_dir_failure
        try:
            loaded = LogLoader(dir, config, log.epoch_cache, log.producer_state, recovery_point=recovery_point,
                               log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, now=now).load()
            log._state = _snapshot(loaded.segments)
            log._log_start_offset = loaded.log_start_offset
            log._log_end_offset = loaded.log_end_offset
            log.recovery_point = loaded.recovery_point
            if loaded.retired:
                due = now + config.file_delete_delay_ms
                log._pending_deletes.extend((due, seg) for seg in loaded.retired)
                log._truncations += 1
            stored = read_partition_metadata(dir)
            if stored is None and topic_id is not None:
                write_partition_metadata(dir, topic_id)
                stored = topic_id
            log.topic_id = stored
        except OSError as exc:
            log.close_quietly()
            raise LogDirOfflineError(dir.parent, f"cannot open log {dir}: {exc}") from exc
        return log

    # ------------------------------------------------------------------------------------------
    # properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._state.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._state.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._state.segments)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) if the epoch is unknown."""
        return self.epoch_cache.end_offset_for_epoch(epoch, self._log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply to later appends/rolls; existing index files keep their size."""
        self.config = config
        self._plain_appends = self._allows_plain_appends(config)
        self._plain_when_kept = self._allows_plain_appends(config, kept=True)
        for seg in self._state.segments:
            seg.config = config

    @staticmethod
    def _allows_plain_appends(config: LogConfig, kept: bool = False) -> bool:
        """True when a produced batch needs no more than :meth:`_append_plain_batch` does: no key
        checks (compaction), no LogAppendTime rewrite, no timestamp bounds, no flush by count, no
        recompression (``compression.type`` other than producer) unless ``kept`` (the caller knows
        the topic's codec keeps the batch: :meth:`append_kept`)."""
        return (not config.compact and not config.log_append_time and config.flush_messages == LONG_MAX
                and config.message_timestamp_before_max_ms == LONG_MAX
                and config.message_timestamp_after_max_ms == LONG_MAX and (kept or config.recompression is None))

    def append_kept(self, records: bytes | bytearray | memoryview, *, leader_epoch: int,
                    now_ms: int | None = None) -> AppendInfo:
        """:meth:`append` of a produced set whose every batch the topic's ``compression.type`` keeps as
        sent (the caller checked it with odradek.storage.recompression.needs_recompression under the current
        config): on a recompressing topic it may still take the single-batch fast path."""
        if self._plain_when_kept and len(records) >= HEADER_SIZE:
            view = records if type(records) is memoryview else memoryview(records)
            raw = _HEADER_STRUCT.unpack_from(view, 0)
            if raw[1] + LOG_OVERHEAD == len(view):
                info = self._append_plain_batch(view, raw, leader_epoch, clock.now_ms() if now_ms is None else now_ms)
                if info is not None:
                    return info
        return self.append(records, leader_epoch=leader_epoch, now_ms=now_ms)

    # ------------------------------------------------------------------------------------------
    # append

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int, assign_offsets: bool = True,
               now_ms: int | None = None, coordinator: bool = False,
               recompressed_for: LogConfig | None = None) -> AppendInfo:
        """Validate every batch, then assign offsets and write them all with one pwritev.

        Raises CorruptRecordError / RecordTooLargeError / InvalidRecordError /
        InvalidTimestampError before anything is written; LogDirOfflineError on a disk error.
        ``assign_offsets=False`` (replication) keeps the batches' offsets and epochs; they must
        start at or after the LEO. ``records`` is not modified and not kept after the call.

        This is the produce hot path: per batch one header unpack, one CRC-32C, a 16-byte prefix
        rewrite and no copy of the batch (it is handed to pwritev as is). The records' framing is
        checked by one native pass over the record headers (odradek.storage.record_validator; compressed
        batches are decompressed for it, with an output cap), as Kafka's LogValidator reads every
        record; on compacted topics null keys are refused there too.

        ``coordinator`` is Kafka's AppendOrigin.COORDINATOR: control batches (transaction markers)
        are accepted, and their coordinator epoch checked, instead of refused as from a client.

        A topic whose ``compression.type`` names a codec stores batches in it (odradek.storage.recompression):
        ``records`` built by :meth:`recompress` under the log's current config
        (``recompressed_for``) are appended as they are; any others are recompressed here, in the
        calling thread. Followers' batches (``assign_offsets=False``) are stored as the leader wrote them.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        view = records if type(records) is memoryview else memoryview(records)
        if assign_offsets and self._plain_appends and len(view) >= HEADER_SIZE:
            raw = _HEADER_STRUCT.unpack_from(view, 0)
            if raw[1] + LOG_OVERHEAD == len(view):
                info = self._append_plain_batch(view, raw, leader_epoch, now)
                if info is not None:
                    return info
        batches = self._validate(view, assign_offsets, now, coordinator)
        config = self.config
        if assign_offsets:
            target = config.recompression
            if target is None:
                validate_records(view, batches, self.dir.name, compact=config.compact,
                                 max_message_bytes=config.max_message_bytes)
            elif recompressed_for is not config:
                if needs_recompression(view, target.codec):
                    view = memoryview(recompress_batches(view, batches, target, compact=config.compact,
                                                         max_message_bytes=config.max_message_bytes,
                                                         topic_partition=self.dir.name))
                    # The rebuilt batches' sizes (max.message.bytes, segment.bytes) are checked again.
                    batches = self._validate(view, assign_offsets, now, coordinator)
                else:
                    validate_records(view, batches, self.dir.name, compact=config.compact,
                                     max_message_bytes=config.max_message_bytes)
        with self._lock:
            if self.offline or self.closed:
                self._check_online()
            producer_state = self.producer_state
            # A follower's batches were checked by the leader (Kafka skips the producer checks for
            # AppendOrigin.REPLICATION): a duplicate must not stop its log short of the leader's.
            dup = self._check_producer_state(producer_state, batches) if assign_offsets else None
            if dup is not None:
                return self._duplicate_info(dup, len(batches), len(view))
            if coordinator:
                for pos, header in batches:
                    if header[5] & CONTROL_BIT:
                        marker = end_txn_marker(view[pos: pos + header[1] + LOG_OVERHEAD])
                        if marker is not None:
                            producer_state.check_end_txn_marker(header, marker.coordinator_epoch)
            leo = self._log_end_offset
            log_append = config.log_append_time
            total = len(view)
            if assign_offsets:
                next_offset = leo
                iov: list[Any] = []
                assigned: list[tuple[int, BatchHeader]] = []
                max_ts, offset_of_max = NO_TIMESTAMP, -1
                records_count = 0
                for pos, header in batches:
                    size = header[1] + LOG_OVERHEAD
                    if log_append:
                        # LogAppendTime changes CRC-covered fields: rewrite the whole header.
                        header = _make_header((next_offset, header[1], leader_epoch, header[3], 0,
                                               header[5] | TIMESTAMP_TYPE_BIT, header[6], header[7], now)
                                              + header[9:])
                        prefix = bytearray(_pack_header(*header))
                        crc = crc32c(view[pos + HEADER_SIZE: pos + size], crc32c(prefix[CRC_START:]))
                        _UINT32.pack_into(prefix, CRC_AT, crc)
                        header = header._replace(crc=crc)
                        iov.append(prefix)
                        iov.append(view[pos + HEADER_SIZE: pos + size])
                    else:
                        header = _make_header((next_offset, header[1], leader_epoch) + header[3:])
                        iov.append(_PREFIX.pack(next_offset, header[1], leader_epoch))
                        iov.append(view[pos + _PREFIX_SIZE: pos + size])
                    next_offset += header[6] + 1
                    if header[8] > max_ts:
                        max_ts, offset_of_max = header[8], next_offset - 1
                    records_count += header[12]
                    assigned.append((pos, header))
                if len(iov) > _MAX_IOV:
                    iov = [b"".join(iov)]
                epoch = leader_epoch
            else:
                first_base = batches[0][1][0]
                if first_base < leo:
                    raise InvalidRecordError(f"batch offset {first_base} below log end offset {leo}")
                next_offset = leo
                max_ts, offset_of_max = NO_TIMESTAMP, -1
                records_count = 0
                epoch = -1
                for _, header in batches:
                    if header[0] < next_offset:
                        raise InvalidRecordError("batch offsets are not increasing")
                    next_offset = header[0] + header[6] + 1
                    if header[8] > max_ts:
                        max_ts, offset_of_max = header[8], next_offset - 1
                    records_count += header[12]
                    if header[2] > epoch:
                        epoch = header[2]
                assigned = batches
                iov = [view]
            first_offset = assigned[0][1][0]
            last_offset = next_offset - 1
            try:
                seg = self._state.segments[-1]
                if seg.should_roll(total, max_ts, last_offset, now):
                    seg = self._roll(first_offset, now)
                seg.append_iov(iov, total, assigned)
            except OSError as exc:
                self._fail(exc)
            self._log_end_offset = next_offset
            if epoch > self.epoch_cache.latest_epoch:
                # Only the first batch of a new epoch starts an entry; followers' batches may
                # carry several epochs, so walk them.
                for _, header in assigned:
                    if header[2] > self.epoch_cache.latest_epoch:
                        self._io(self.epoch_cache.assign, header[2], header[0])
            for pos, header in assigned:
                if header[9] >= 0:
                    if header[5] & CONTROL_BIT:  # a marker: may write the segment's .txnindex
                        self._io(apply_control_batch, producer_state, seg, header, view[pos: pos + header[1] + LOG_OVERHEAD], now)
                    else:
                        producer_state.on_append(header, now)
            if config.flush_messages != LONG_MAX:
                self._unflushed_messages += records_count
                if self._unflushed_messages >= config.flush_messages:
                    self._flush(next_offset, now)
            else:
                self._unflushed_messages += records_count
            return _make_info((first_offset, last_offset, max_ts, offset_of_max, now if log_append else -1,
                               self._log_start_offset, len(assigned), total, False))

    def recompress(self, records: bytes | bytearray | memoryview, now_ms: int | None = None) -> tuple[bytes, LogConfig]:
        """``records`` checked as :meth:`append` checks a produced set, with every batch the topic's
        ``compression.type`` does not keep rebuilt in its codec (odradek.storage.recompression); and the
        config that decided it, for ``append(..., recompressed_for=config)``.

        Takes no lock and changes nothing: the broker runs it on the IO pool, so the compression
        does not hold up the handler loop. Raises what :meth:`append` raises for bad input.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        config = self.config
        view = records if type(records) is memoryview else memoryview(records)
        batches = self._validate(view, True, now)
        target = config.recompression
        if target is None:  # the topic went back to producer meanwhile: append() validates it
            return bytes(view), config
        return recompress_batches(view, batches, target, compact=config.compact,
                                  max_message_bytes=config.max_message_bytes, topic_partition=self.dir.name), config

    def _append_plain_batch(self, view: memoryview, raw: tuple, leader_epoch: int, now: int) -> AppendInfo | None:
        """The usual produce: one batch, on a topic whose config allows plain appends.

        Does what the general path does for that case with about half the Python steps (a 16 KiB
        append is mostly those steps, docs/performance.md). Any batch the checks here do not pass
        returns None, and the general path then rejects it with its precise error.
        """
        size = raw[1] + LOG_OVERHEAD
        config = self.config
        # Fields by index as in _validate: 3 magic, 4 crc, 5 attributes, 6 last_offset_delta,
        # 8 max_timestamp, 9 producer_id, 12 records_count.
        if (raw[3] != MAGIC_V2 or size > config.max_message_bytes or size > config.segment_bytes
                or raw[12] <= 0 or raw[12] != raw[6] + 1 or raw[5] & CONTROL_BIT
                or crc32c(view[CRC_START:]) != raw[4]
                or not plain_records_ok(view, size, raw[5], raw[12], config.max_message_bytes)):
            return None
        with self._lock:
            if self.offline or self.closed:
                self._check_online()
            producer_state = self.producer_state if raw[9] >= 0 else None
            if producer_state is not None:
                dup = producer_state.check_append(_make_header(raw))
                if dup is not None:
                    return self._duplicate_info(dup, 1, size)
            first_offset = self._log_end_offset
            last_offset = first_offset + raw[6]
            header = _make_header((first_offset, raw[1], leader_epoch) + raw[3:])
            if raw[8] > NO_TIMESTAMP:
                max_ts, offset_of_max = raw[8], last_offset
            else:
                max_ts, offset_of_max = NO_TIMESTAMP, -1
            try:
                seg = self._state.segments[-1]
                if seg.should_roll(size, max_ts, last_offset, now):
                    seg = self._roll(first_offset, now)
                seg.append_iov([_PREFIX.pack(first_offset, raw[1], leader_epoch), view[_PREFIX_SIZE:]], size,
                               ((0, header),))
            except OSError as exc:
                self._fail(exc)
            self._log_end_offset = last_offset + 1
            if leader_epoch > self.epoch_cache.latest_epoch:
                self._io(self.epoch_cache.assign, leader_epoch, first_offset)
            if producer_state is not None:
                producer_state.on_append(header, now)
            self._unflushed_messages += raw[12]
            return _make_info((first_offset, last_offset, max_ts, offset_of_max, -1, self._log_start_offset, 1, size,
                               False))

    @staticmethod
    def _check_producer_state(producer_state: ProducerState,
                              batches: list[tuple[int, BatchHeader]]) -> DuplicateBatch | None:
        """Run the producer checks; several batches of one producer are checked in order as if the
        earlier ones were already appended (Kafka's per-append ProducerAppendInfo). Returns the
        first duplicate found (the whole append is then answered as that duplicate), else None."""
        idempotent = [h for _, h in batches if h[9] >= 0]
        if not idempotent:
            return None
        if len(idempotent) == 1:
            return producer_state.check_append(idempotent[0])
        return producer_state.check_append_batches(idempotent)

    def _validate(self, view: memoryview, assign_offsets: bool, now: int,
                  coordinator: bool = False) -> list[tuple[int, BatchHeader]]:
        total = len(view)
        if total == 0:
            raise CorruptRecordError("empty record set")
        config = self.config
        max_size = config.max_message_bytes
        before_max, after_max = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
        check_times = (before_max != LONG_MAX or after_max != LONG_MAX) and not config.log_append_time
        batches: list[tuple[int, BatchHeader]] = []
        pos = 0
        while pos < total:
            if total - pos < HEADER_SIZE:
                if total - pos < LOG_OVERHEAD:
                    raise CorruptRecordError(f"{total - pos} trailing bytes are not a record batch")
                raise CorruptRecordError("record batch shorter than its 61-byte header")
            # Fields by index (see odradek.protocol.batch_header): 1 batch_length, 3 magic, 4 crc,
            # 5 attributes, 6 last_offset_delta, 7 base_timestamp, 8 max_timestamp, 12 records_count.
            header = _make_header(_HEADER_STRUCT.unpack_from(view, pos))
            if header[3] != MAGIC_V2:
                raise CorruptRecordError(f"unsupported record batch magic {header[3]}")
            size = header[1] + LOG_OVERHEAD
            if size < HEADER_SIZE:
                raise CorruptRecordError(f"batch length {header[1]} below the header size")
            if size > max_size:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_size}")
            if total - pos < size:
                raise CorruptRecordError(f"batch of {size} bytes truncated at {total - pos}")
            if crc32c(view[pos + CRC_START: pos + size]) != header[4]:
                raise CorruptRecordError("record batch CRC32C mismatch")
            # Kafka's LogValidator.validateBatch, its order and messages.
            if header[6] < 0:
                raise InvalidRecordError(f"Batch has an invalid offset range: [{header[0]}, {header[0] + header[6]}] "
                                         f"in topic partition {self.dir.name}.")
            if assign_offsets:
                if header[12] <= 0:
                    raise InvalidRecordError(f"Invalid reported count for record batch: {header[12]} in topic "
                                             f"partition {self.dir.name}.")
                if header[12] != header[6] + 1:
                    raise InvalidRecordError(f"Inconsistent batch offset range [{header[0]}, {header[0] + header[6]}] "
                                             f"and count of records {header[12]} in topic partition {self.dir.name}.")
                if header[5] & CONTROL_BIT and not coordinator:
                    raise InvalidRecordError("Clients are not allowed to write control records in topic partition "
                                             f"{self.dir.name}.")
            if check_times:
                if before_max != LONG_MAX and header[7] < now - before_max:
                    raise InvalidTimestampError(f"timestamp {header[7]} is too far in the past")
                if after_max != LONG_MAX and header[8] > now + after_max:
                    raise InvalidTimestampError(f"timestamp {header[8]} is too far in the future")
            batches.append((pos, header))
            pos += size
        if pos > config.segment_bytes:
            raise RecordTooLargeError(f"record set of {pos} bytes exceeds segment.bytes")
        return batches

    def _duplicate_info(self, dup: Any, num_batches: int, size: int) -> AppendInfo:
        return AppendInfo(
            first_offset=dup.first_offset, last_offset=dup.last_offset, max_timestamp=NO_TIMESTAMP,
            offset_of_max_timestamp=-1, log_append_time=dup.log_append_time,
            log_start_offset=self._log_start_offset, num_batches=num_batches, size=size, duplicate=True,
        )

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                              *, leader_epoch: int, now_ms: int | None = None,
                              transaction_version: int = 0) -> AppendInfo:
        """Write a COMMIT or ABORT marker for the producer's transaction (the coordinator's path:
        Kafka's appendAsLeader with AppendOrigin.COORDINATOR of MemoryRecords.withEndTransactionMarker).

        Raises INVALID_PRODUCER_EPOCH for an epoch older than the producer's - for a transactions-v2
        marker (``transaction_version`` 2, KIP-1228) also for the producer's own epoch, unless it
        repeats a marker already written - and TRANSACTION_COORDINATOR_FENCED for an older
        coordinator epoch; nothing is written then.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        batch = encode_end_txn_marker_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                            coordinator_epoch=coordinator_epoch, timestamp=now,
                                            partition_leader_epoch=leader_epoch)
        with self._lock:  # the check and the append see the same producer state (the lock is reentrant)
            self.producer_state.check_marker_epoch(producer_id, producer_epoch, transaction_version)
            return self.append(batch, leader_epoch=leader_epoch, now_ms=now, coordinator=True)

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound_offset): the segments' ``.txnindex``
        from the one holding ``start_offset`` on, until one proves the rest cannot overlap (Kafka's
        collectAbortedTransactions). No lock, like :meth:`read`."""
        state = self._state
        i = max(bisect.bisect_right(state.bases, start_offset) - 1, 0)
        found: list[AbortedTxn] = []
        for seg in state.segments[i:]:
            result = seg.txn_index.collect_aborted(start_offset, upper_bound_offset)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    # ------------------------------------------------------------------------------------------
    # read

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchSlice:
        """Whole batches of one segment from the batch holding ``start_offset`` (see FetchSlice).

        Stops before ``max_bytes`` would be exceeded (but returns one batch regardless when
        ``min_one_batch``, KIP-74) and before any batch reaching ``max_offset`` (exclusive: high
        watermark or last stable offset). Raises OffsetOutOfRangeError outside
        [log_start_offset, log_end_offset]; returns an empty slice at the end.
        """
        self._check_online()
        leo = self._log_end_offset
        state = self._state
        if start_offset < self._log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} outside [{self._log_start_offset}, {leo}] of {self.dir.name}")
        limit = leo if max_offset is None else min(max_offset, leo)
        if start_offset >= limit:
            return EMPTY_SLICE
        i = max(bisect.bisect_right(state.bases, start_offset) - 1, 0)
        for seg in state.segments[i:]:
            # Hold the segment's file handle before touching its fd: the segment may be closed on
            # another thread (topic deletion) while we read, and from then on only this reference
            # keeps the fd number from being reused by another file (odradek.storage.file_handle).
            file = seg.file
            if file is None:
                raise KafkaStorageError(f"segment {seg.base_offset} of {self.dir.name} was closed during the read")
            seg_size = seg.size
            # A read among the latest batches (a follower's, a caught-up consumer's) needs no
            # index lookup and no header read: the segment remembers where they lie.
            tail = seg.tail_slice(start_offset, max_bytes, limit, min_one_batch, seg_size)
            if tail is not None:
                if tail[1] == tail[0]:
                    return EMPTY_SLICE
                return FetchSlice(file, tail[0], tail[1] - tail[0], tail[2], tail[3])
            try:
                found = seg.translate_offset(start_offset)
                if found is None:
                    continue  # the offset lies in a gap (compaction) after this segment's last batch
                position, first = found
                end = position
                next_offset = first.base_offset
                # The batches up to the last indexed boundary within the budget and below the
                # limit all fit: the walk starts there (one or two header reads instead of one per
                # batch). The offset after them is the next batch's base offset, its first header's
                # (exact unless compaction left a gap there: then an upper bound, which is all the
                # aborted-transaction lookup, its only user, needs; the entry's own offset until
                # that header is read).
                within = seg.offset_index.last_entry_within(min(position + max_bytes, seg_size - 1), limit)
                walk_from = position
                if within is not None and within[1] > position:
                    walk_from = end = within[1]
                    next_offset = within[0]
                for pos, header in seg.iter_headers(walk_from, seg_size):
                    if pos == walk_from and walk_from > position:
                        next_offset = header.base_offset
                    if header.last_offset >= limit:
                        break
                    if end - position + header.size > max_bytes and not (min_one_batch and end == position):
                        break
                    end = pos + header.size
                    next_offset = header.next_offset
            except OSError as exc:
                if seg.file is None:  # closed under us: its fd became -1 (EBADF), never another file
                    raise KafkaStorageError(
                        f"segment {seg.base_offset} of {self.dir.name} was closed during the read") from exc
                raise
            if end == position:
                return EMPTY_SLICE
            return FetchSlice(file, position, end - position, first.base_offset, next_offset)
        return EMPTY_SLICE

    # ------------------------------------------------------------------------------------------
    # timestamp lookups

    def offset_for_timestamp(self, timestamp: int, *, max_offset: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None.

        Only offsets in [log_start_offset, max_offset) count (max_offset defaults to the LEO).
        """
        self._check_online()
        limit = self._log_end_offset if max_offset is None else max_offset
        start = self._log_start_offset
        for seg in self._state.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            entry = seg.time_index.lookup_before(timestamp)
            from_offset = max(entry[1] if entry else seg.base_offset, start)
            found = seg.translate_offset(from_offset)
            if found is None:
                continue
            for pos, header in seg.iter_headers(found[0]):
                if header.base_offset >= limit:
                    return None
                if header.max_timestamp < timestamp or header.last_offset < start:
                    continue
                hit = self._find_record(seg, pos, header, lambda ts: ts >= timestamp, start, limit,
                                        self.config.max_message_bytes)
                if hit is not None:
                    return hit
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record holding the log's max timestamp (ListOffsets -3).

        None when the log has no record with a timestamp.
        """
        self._check_online()
        best: LogSegment | None = None
        for seg in self._state.segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp) \
                    and seg.next_offset > self._log_start_offset:
                best = seg
        if best is None:
            return None
        max_ts = best.max_timestamp
        found = best.translate_offset(max(best.offset_of_max_timestamp, self._log_start_offset))
        if found is not None:
            hit = self._find_record(best, found[0], found[1], lambda ts: ts == max_ts, self._log_start_offset,
                                    self._log_end_offset, self.config.max_message_bytes)
            if hit is not None:
                return hit[1], hit[0]
        return None

    @staticmethod
    def _find_record(seg: LogSegment, position: int, header: BatchHeader, match: Callable[[int], bool],
                     start: int, limit: int, max_message_bytes: int) -> tuple[int, int] | None:
        """Decode one batch and return (offset, timestamp) of its first matching record."""
        if header.is_log_append_time:
            # Every record of a LogAppendTime batch carries the batch's max_timestamp.
            offset = max(header.base_offset, start)
            if match(header.max_timestamp) and offset < limit and offset <= header.last_offset:
                return offset, header.max_timestamp
            return None
        from odradek.protocol.batch_header import InvalidBatchError

        try:
            batch = decode_batch(seg.read_batch(position, header.size), verify_crc=False,
                                 max_uncompressed=uncompressed_limit(max_message_bytes, header.size))
        except InvalidBatchError:
            # Records that cannot be read (stored before they were validated on produce): answer
            # from the header as for LogAppendTime, the batch's first offset with its max timestamp,
            # so the lookup still lands at or before the wanted records instead of failing.
            offset = max(header.base_offset, start)
            if match(header.max_timestamp) and offset < limit and offset <= header.last_offset:
                return offset, header.max_timestamp
            return None
        for record in batch.records:
            if record.offset is not None and start <= record.offset < limit and match(record.timestamp):
                return record.offset, record.timestamp
        return None

    # ------------------------------------------------------------------------------------------
    # roll and flush

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active segment is empty)."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            try:
                return self._roll(self._log_end_offset, now)
            except OSError as exc:
                self._fail(exc)
                raise  # unreachable

    def _roll(self, new_base: int, now: int) -> LogSegment:
        old = self.active_segment
        if old.size == 0:
            return old
        old.on_become_inactive()
        new = LogSegment.create(self.dir, new_base, self.config, now)
        self._state = _snapshot(self._state.segments + (new,))
        # Kafka snapshots producer state at the new segment's base offset on every roll, so
        # recovery replays at most the active segment. Like Kafka (UnifiedLog.roll takes the
        # snapshot with sync=false) the file is written here, under the lock, and fsynced by the
        # background flush: a process that dies before that flush runs still finds it.
        snapshot = self.producer_state.prepare_snapshot(new_base)
        snapshot_path = None
        if snapshot is not None:
            snapshot_path = snapshot[0]
            write_atomically(snapshot_path, snapshot[1], durable=False)
        # Like Kafka, the rolled segment is fsynced asynchronously (the appender does not wait);
        # the recovery point advances only once that fsync is done.
        self._flush_in_background(new_base, snapshot_path)
        return new

    def _flush_in_background(self, up_to: int, snapshot: Path | None) -> None:
        """fsync every segment below ``up_to`` not yet known durable, on the shared flusher thread.

        Called with the lock held. Only the target is queued: the task picks its segments and opens
        their files when it runs (:meth:`_background_flush`), so a backlog of flushes (fast rolling
        on many partitions against a slow disk) holds no file descriptors, and a segment an earlier
        task already made durable is not fsynced again.
        """
        generation = self._truncations
        future = _flusher().submit(self._background_flush, up_to, generation, snapshot)
        self._background = [f for f in self._background if not f.done()] + [future]

    def _closed_or_truncated_since(self, generation: int) -> bool:
        return self.closed or generation != self._truncations

    def _background_flush(self, up_to: int, generation: int, snapshot: Path | None) -> None:
        failure: OSError | None = None
        fds: list[int] = []
        flushed: list[tuple[LogSegment, int]] = []
        snapshot_synced = False
        with self._lock:
            if self.closed or self.offline or generation != self._truncations:
                return  # closing flushes everything itself; a truncation made ``up_to`` stale
            try:
                # Tasks run in order, so the recovery point already covers what earlier ones flushed.
                for seg in self._state.segments:
                    if seg.base_offset < up_to and seg.next_offset > self.recovery_point:
                        fds.extend(seg.open_for_fsync())
                        flushed.append((seg, seg.size))
                if snapshot is not None:
                    try:
                        fds.append(os.open(snapshot, os.O_RDONLY))
                        snapshot_synced = True
                    except FileNotFoundError:
                        pass  # retention or DeleteRecords deleted it with the segments it describes
                # Last, after the files: the new segment's and the snapshot's directory entries.
                fds.append(os.open(self.dir, os.O_RDONLY))
            except OSError as exc:
                failure = exc
        try:
            if failure is None:
                for fd in fds:
                    os.fsync(fd)
        except OSError as exc:
            failure = exc
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            # Re-read under the lock (not the value seen above): the log may have been closed or
            # truncated while the fsyncs ran without it.
            if self._closed_or_truncated_since(generation):
                return
            if failure is not None:
                self.offline = True
                if self.on_dir_failure is not None:
                    self.on_dir_failure(self.dir.parent)
                return
            if snapshot_synced:
                # Only now that the newest snapshot is durable may the older ones go.
                try:
                    self.producer_state.prune_snapshots()
                except OSError:
                    pass  # an extra snapshot left behind costs nothing but disk
            for seg, size in flushed:
                seg.flushed_size = max(seg.flushed_size, size) if seg.size >= size else seg.flushed_size
            self.recovery_point = max(self.recovery_point, up_to)

    def wait_for_background_flushes(self, timeout: float | None = None) -> None:
        """Block until the roll-time fsyncs submitted so far are done (tests, shutdown)."""
        for future in list(self._background):
            future.result(timeout)

    def flush(self, up_to: int | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets below ``up_to`` (default: LEO); advance the recovery point."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            try:
                self._flush(self._log_end_offset if up_to is None else min(up_to, self._log_end_offset), now)
            except OSError as exc:
                self._fail(exc)

    def _flush(self, up_to: int, now: int) -> None:
        if up_to > self.recovery_point or self._unflushed_messages:
            for seg in self._state.segments:
                if seg.base_offset < up_to and seg.next_offset > self.recovery_point:
                    seg.flush()
            self.recovery_point = max(self.recovery_point, up_to)
        if up_to >= self._log_end_offset:
            self._unflushed_messages = 0
        self.last_flush_ms = now

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.ms has passed since the last flush and there is unflushed data."""
        if self.config.flush_ms == LONG_MAX or self.recovery_point >= self._log_end_offset:
            return False
        if now_ms - self.last_flush_ms < self.config.flush_ms:
            return False
        self.flush(now_ms=now_ms)
        return True

    # ------------------------------------------------------------------------------------------
    # retention, DeleteRecords, truncation

    def delete_old_segments(self, now_ms: int | None = None,
                            high_watermark: int | Callable[[], int | None] | None = None) -> int:
        """Apply retention.ms / retention.bytes (cleanup.policy delete) and the log start offset.

        Kafka's UnifiedLog.deleteOldSegments: segments go oldest first, as long as one of the rules
        holds (retention.ms by the segment's largest timestamp, retention.bytes by what the log
        holds beyond it, or the next segment starting at or below the log start offset).

        ``high_watermark`` is the partition's high watermark, or a callable giving it (called under
        the log's lock, so no truncation or append runs between reading it and using it); None
        when the log has no partition here. With a high watermark Kafka's deletableSegments rule
        bounds every rule: a segment goes only once the high watermark reached its end (the next
        segment's base offset, or the log end offset for the active segment), so the log start
        offset never passes the high watermark; then the active segment may go too, unless it is
        empty, and when every segment goes a new empty one is rolled at the log end offset first
        (Kafka's deleteSegments), so the log keeps a segment and producers keep their offsets.
        Without one the active segment is never deleted (nothing says its records were
        replicated) and the older ones go by the rules alone.

        Deleted segments are renamed ``*.deleted`` and removed by :meth:`remove_deleted_files`
        after file.delete.delay.ms. Returns segments deleted.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            hw = high_watermark() if callable(high_watermark) else high_watermark
            doomed = self._deletable_segments(now, hw)
            if not doomed:
                return 0
            if doomed[-1] is self._state.segments[-1]:
                # Every segment goes: the log must keep one, at the log end offset (Kafka rolls
                # before deleting). The roll's producer snapshot at the new base (written by the
                # roll) survives the pruning of _on_log_start_advanced: it drops those below it.
                # A doomed active segment is never empty (_deletable_segments), so this rolls.
                try:
                    self._roll(self._log_end_offset, now)
                except OSError as exc:
                    self._fail(exc)
            self._delete_segments(doomed, now)
            return len(doomed)

    def _deletable_segments(self, now: int, high_watermark: int | None) -> list[LogSegment]:
        """The oldest segments the retention rules delete (see :meth:`delete_old_segments`)."""
        segments = self._state.segments
        leo = self._log_end_offset
        if high_watermark is None:
            limit = len(segments) - 1
        else:
            # The high watermark never passes the log end, but a follower's truncation lowers the
            # log end before its partition lowers the high watermark: what is read may be stale.
            hw = min(high_watermark, leo)
            limit = 0
            for i, seg in enumerate(segments):
                last = i == len(segments) - 1
                upper_bound = leo if last else segments[i + 1].base_offset
                # An empty active segment is never deleted: it would only be rolled again.
                if hw < upper_bound or (last and seg.size == 0):
                    break
                limit = i + 1
        n = 0
        cfg = self.config
        if cfg.delete and cfg.retention_ms >= 0:
            while n < limit and now - segments[n].largest_timestamp > cfg.retention_ms:
                n += 1
        if cfg.delete and cfg.retention_bytes >= 0:
            excess = self.size_in_bytes - sum(s.size for s in segments[:n]) - cfg.retention_bytes
            while n < limit and excess - segments[n].size >= 0:
                excess -= segments[n].size
                n += 1
        # Segments wholly below the log start offset (DeleteRecords) go whatever the policy; the
        # active one never for this reason (Kafka's rule needs a next segment starting below it).
        while n < limit and n + 1 < len(segments) and segments[n + 1].base_offset <= self._log_start_offset:
            n += 1
        return list(segments[:n])

    def _delete_segments(self, doomed: list[LogSegment], now: int) -> None:
        try:
            remaining = tuple(s for s in self._state.segments if s not in doomed)
            self._state = _snapshot(remaining)
            # Kafka's order (deleteSegments): the files are renamed before the log start offset
            # moves, so a ListOffsets that sees the new log start never finds the old segment
            # under its live name. The epoch checkpoint and snapshot pruning below do IO.
            due = now + self.config.file_delete_delay_ms
            for seg in doomed:
                seg.mark_deleted()
                self._pending_deletes.append((due, seg))
            if remaining and remaining[0].base_offset > self._log_start_offset:
                self._log_start_offset = remaining[0].base_offset
                self.epoch_cache.truncate_from_start(self._log_start_offset)
                self._on_log_start_advanced()
        except OSError as exc:
            self._fail(exc)

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], old_sizes: list[int]) -> None:
        """Swap a cleaned segment (files ``*.cleaned``, complete and fsynced) in for ``old``.

        Kafka's replaceSegments: rename ``.cleaned`` -> ``.swap``, replace the segments in memory,
        rename the old ones ``.deleted`` (removed after file.delete.delay.ms; their fds stay open
        for readers), rename ``.swap`` -> final names. Raises
        CleaningAbortedError (after deleting the cleaned files) if ``old`` is no longer exactly
        part of the log with ``old_sizes`` bytes (truncated, deleted or closed meanwhile).
        """
        with self._lock:
            segments = self._state.segments
            try:
                i = segments.index(old[0])
            except ValueError:
                i = -1
            intact = (not self.closed and not self.offline and i >= 0 and i + len(old) < len(segments)
                      and list(segments[i:i + len(old)]) == old and [s.size for s in old] == old_sizes
                      and cleaned.next_offset == old[-1].next_offset)
            if not intact:
                cleaned.delete_files()
                raise CleaningAbortedError(f"log {self.dir.name} changed during cleaning")
            try:
                cleaned.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
                fsync_dir(self.dir)
                self._state = _snapshot(segments[:i] + (cleaned,) + segments[i + len(old):])
                due = clock.now_ms() + self.config.file_delete_delay_ms
                for seg in old:
                    seg.mark_deleted()
                    self._pending_deletes.append((due, seg))
                cleaned.change_suffix(SWAP_SUFFIX, "")
                fsync_dir(self.dir)
            except OSError as exc:
                self._fail(exc)

    def report_io_error(self, exc: OSError) -> None:
        """An I/O error outside the log's own calls (the cleaner): take the log dir offline."""
        with self._lock:
            try:
                self._fail(exc)
            except LogDirOfflineError:
                pass

    def _on_log_start_advanced(self) -> None:
        """Tell producer state the log start moved; drop snapshots below the first segment."""
        producer_state = self.producer_state
        producer_state.on_log_start_offset_advanced(self._log_start_offset)
        # Every snapshot is taken at a roll or the LEO, so the newest one is never below the
        # first segment; older ones only describe deleted data.
        producer_state.delete_snapshots_before(self._state.segments[0].base_offset)

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms (Kafka's UnifiedLog.removeExpiredProducers,
        run by the log manager every producer.id.expiration.check.interval.ms); returns their ids.

        Under the log's lock: appends on the handler loop update the same map."""
        with self._lock:
            if self.closed or self.offline:
                return []
            return self.producer_state.remove_expired_producers(now_ms)

    def remove_deleted_files(self, now_ms: int | None = None) -> int:
        """Physically remove ``*.deleted`` segments whose file.delete.delay.ms has passed."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            due = [(t, s) for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
            for _, seg in due:
                try:
                    seg.delete_files()
                except OSError as exc:
                    self._fail(exc)
            return len(due)

    def delete_records_before(self, offset: int, now_ms: int | None = None) -> int:
        """DeleteRecords: make ``offset`` the log start offset; whole segments below it go.

        Returns the new log start offset. Raises OffsetOutOfRangeError beyond the LEO.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            if offset > self._log_end_offset or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete records before {offset}: log end is "
                                            f"{self._log_end_offset}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                try:
                    self.epoch_cache.truncate_from_start(offset)
                    self._on_log_start_advanced()
                except OSError as exc:
                    self._fail(exc)
                segs = self._state.segments
                doomed = [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= offset]
                if doomed:
                    self._delete_segments(doomed, now)
            return self._log_start_offset

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything at or after ``offset`` (the whole batch holding it). True if anything went.

        For replication (follower truncation). A full ProducerStateManager is reloaded from its
        newest snapshot at or below the new end and the log replayed after it.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            if offset >= self._log_end_offset:
                return False
            if offset < self._log_start_offset:
                self._truncate_fully_and_start_at(offset, now)
                return True
            try:
                segs = self._state.segments
                doomed = [s for s in segs if s.base_offset > offset]
                keep = [s for s in segs if s.base_offset <= offset]
                if doomed:
                    self._state = _snapshot(keep)
                    due = now + self.config.file_delete_delay_ms
                    for seg in doomed:
                        seg.mark_deleted()
                        self._pending_deletes.append((due, seg))
                active = keep[-1]
                active.truncate_to(offset)
                self._truncations += 1
                self._log_end_offset = active.next_offset
                self.recovery_point = min(self.recovery_point, self._log_end_offset)
                self.epoch_cache.truncate_from_end(self._log_end_offset)
                # Kafka's truncateAndReload: snapshots above the new end go, state is rebuilt.
                rebuild_producer_state(self.producer_state, self._state.segments, self._log_start_offset, self._log_end_offset, now)
            except OSError as exc:
                self._fail(exc)
            return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Drop every segment and start an empty log at ``offset`` (log start = LEO = offset)."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_online()
            try:
                self._truncate_fully_and_start_at(offset, now)
            except OSError as exc:
                self._fail(exc)

    def _truncate_fully_and_start_at(self, offset: int, now: int) -> None:
        due = now + self.config.file_delete_delay_ms
        old = self._state.segments
        for seg in old:
            seg.mark_deleted()
            self._pending_deletes.append((due, seg))
        new = LogSegment.create(self.dir, offset, self.config, now)
        self._state = _snapshot([new])
        self._truncations += 1
        self._log_start_offset = self._log_end_offset = self.recovery_point = offset
        self.epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)

    # ------------------------------------------------------------------------------------------
    # lifecycle and failure

    def close(self) -> None:
        """Flush, write final time index entries, trim indexes and close every file."""
        try:
            self.wait_for_background_flushes()  # outside the lock: those tasks finish under it
        except OSError:
            pass  # reported through on_dir_failure by the task itself
        with self._lock:
            if self.closed:
                return
            try:
                if not self.offline:
                    self._flush(self._log_end_offset, clock.now_ms())
                    self.epoch_cache.flush()
                    # Kafka snapshots at the LEO on clean close: the next open replays nothing.
                    self.producer_state.update_map_end_offset(self._log_end_offset)
                    self.producer_state.take_snapshot(self._log_end_offset)
            except OSError as exc:
                self.close_quietly()
                self._fail(exc)
            self.close_quietly()

    def close_quietly(self) -> None:
        """Close files without flushing (offline dirs, failed opens)."""
        self.closed = True
        for seg in list(self._state.segments) + [s for _, s in self._pending_deletes]:
            try:
                seg.close()
            except OSError:
                pass

    def delete(self) -> None:
        """Close the log and remove its directory and everything in it."""
        with self._lock:
            self.close_quietly()
            self._pending_deletes = []
            shutil.rmtree(self.dir, ignore_errors=True)

    def rename_dir(self, new_dir: Path) -> None:
        """Move the partition directory (LogManager's ``-delete`` and future-log renames); files stay open."""
        with self._lock:
            os.rename(self.dir, new_dir)
            self._repoint(new_dir)

    def _repoint(self, new_dir: Path) -> None:
        """The directory was renamed to ``new_dir``: every path kept in memory follows it (open
        files need nothing; indexes and snapshots are opened by path later)."""
        self.dir = new_dir
        self.epoch_cache.path = new_dir / self.epoch_cache.path.name
        if hasattr(self.producer_state, "partition_dir"):
            self.producer_state.partition_dir = new_dir
        _repoint_segments(list(self._state.segments) + [s for _, s in self._pending_deletes], new_dir)

    @property
    def truncations(self) -> int:
        """How many truncations this log went through: a copy of it (a future log) compares the
        number to know whether what it copied may have been cut away since."""
        return self._truncations

    def replace_with_future(self, future: Log, doomed_dir: Path, new_dir: Path, *, generation: int | None,
                            max_gap_bytes: int) -> list[LogSegment] | None:
        """Take over ``future``'s contents in place (Kafka's replaceCurrentWithFutureLog, done inside
        this Log so that every holder of it - the partition, the log manager, a truncation waiting
        for the lock - goes on with the moved log). Returns the replaced segments, whose files now
        lie in ``doomed_dir`` (open, for reads already under way; the caller closes them and removes
        the directory later), or None when the swap cannot happen now.

        ``future`` is a copy of this log in another log dir, made by appending this log's batches
        as they are. Under both logs' locks, so no append, truncation or deletion runs meanwhile:
        the swap is refused (None) if this log was truncated since the copier last matched the
        copy to it (``generation``), if its log start moved past the copy's, or if more than
        ``max_gap_bytes`` were appended since the copier's last round; else the last batches are
        copied, the copy is fsynced as far as this log was (its recovery point), then this
        directory is renamed ``doomed_dir`` (``<topic>-<partition>.<uuid>-delete``) and the copy's
        ``new_dir`` (``<topic>-<partition>``), in that order: a crash between the two leaves the
        complete copy as the only ``-future`` directory of the partition, which the log manager
        promotes at start-up, and never two current directories. Nothing is fsynced between the
        renames (the loop's appends wait on this lock); the caller fsyncs both parent dirs after.
        """
        with self._lock, future._lock:
            self._check_online()
            future._check_online()
            if generation != self._truncations or self._log_start_offset != future._log_start_offset:
                return None
            copied = 0
            while future._log_end_offset < self._log_end_offset:
                piece = self.read(future._log_end_offset, max(max_gap_bytes, 1))
                if (piece.size == 0 or copied + piece.size > max_gap_bytes
                        or piece.first_offset < future._log_end_offset):
                    return None
                future.append(piece.read_bytes(), leader_epoch=-1, assign_offsets=False)
                copied += piece.size
            if future._log_end_offset != self._log_end_offset:
                return None
            if future.recovery_point < self.recovery_point:
                future.flush(self.recovery_point)
            old_dir = self.dir
            retired = list(self._state.segments) + [s for _, s in self._pending_deletes]
            try:
                os.rename(old_dir, doomed_dir)
            except OSError as exc:
                self._fail(exc)
            _repoint_segments(retired, doomed_dir)
            try:
                os.rename(future.dir, new_dir)
            except OSError as exc:
                # Put this log back where it was, so the partition keeps its data; the copy's dir failed.
                try:
                    os.rename(doomed_dir, old_dir)
                    _repoint_segments(retired, old_dir)
                except OSError:
                    pass
                future._fail(exc)
            future._repoint(new_dir)
            self.dir = new_dir
            self._state = future._state
            self._log_start_offset = future._log_start_offset
            self._log_end_offset = future._log_end_offset
            self.recovery_point = future.recovery_point
            self.epoch_cache = future.epoch_cache
            self.producer_state = future.producer_state
            self._pending_deletes = future._pending_deletes
            self._unflushed_messages = future._unflushed_messages
            self.last_flush_ms = future.last_flush_ms
            # Background flushes queued for the replaced segments must not move the new recovery point.
            self._truncations += 1
            self._background = []
            # The copy's Log object is spent: its segments are ours now, and its own pending background
            # work sees it closed.
            future._state = _Segments((), ())
            future._pending_deletes = []
            future.closed = True
            return retired

    def _check_online(self) -> None:
        if self.offline:
            raise KafkaStorageError(f"log {self.dir.name} is in an offline log directory")
        if self.closed:
            raise KafkaStorageError(f"log {self.dir.name} is closed")

    def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        """A disk error: take the log (and via the callback its log dir) offline and raise."""
        self.offline = True
        log_dir = self.dir.parent
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir)
        raise LogDirOfflineError(log_dir, f"I/O error on {self.dir}: {exc}") from exc

    def __repr__(self) -> str:
        return (f"Log({self.dir.name}, start={self._log_start_offset}, end={self._log_end_offset}, "
                f"segments={len(self._state.segments)})")


def _repoint_segments(segments: list[LogSegment], new_dir: Path) -> None:
    """The segments' directory was renamed to ``new_dir``: their paths follow."""
    for seg in segments:
        seg.dir = new_dir
        seg.log_path = new_dir / seg.log_path.name
        for index in (seg.offset_index, seg.time_index, seg.txn_index):
            index.path = new_dir / index.path.name

