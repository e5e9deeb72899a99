"""Log compaction (Kafka's LogCleaner, LogCleanerManager and Cleaner) for ``cleanup.policy=compact``.

Compaction keeps, for every key, at least the record with the latest offset; older records of
the key are removed. Offsets never change: a cleaned log has gaps, which readers skip.

One cleaning round (:meth:`LogCleaner.clean_once`):

1. *Choose a log.* For every online log with ``compact`` in its cleanup.policy, the dirty section
   is [first dirty offset, first uncleanable offset). The first dirty offset comes from the
   ``cleaner-offset-checkpoint`` of its log dir (reset to the log start offset when it is below
   it or beyond the log end). The first uncleanable offset is the lowest of: the active segment's
   base offset (the active segment is never cleaned), ``upper_bound_offset(topic, partition)``
   (the broker passes the high watermark / last stable offset; default the log end), and the
   base offset of the first dirty segment whose largest timestamp is within
   ``min.compaction.lag.ms`` of now. The dirty ratio is dirty bytes / (clean + dirty bytes) over
   whole segments. A log qualifies if its ratio exceeds ``min.cleanable.dirty.ratio``, or if it
   has dirty bytes and the first batch of some dirty segment is older than
   ``max.compaction.lag.ms``. The log with the highest ratio wins.
2. *Offset map.* Every keyed record in the dirty section is read (decompressed with
   odradek.protocol.records) into a map key -> latest offset. The map is bounded by
   ``log.cleaner.dedupe.buffer.size`` x ``log.cleaner.io.buffer.load.factor`` (we charge 64 bytes
   plus the key length per entry, roughly what a Python dict entry costs); when it is full the
   round ends at the last fully mapped batch and the rest waits for the next round.
3. *Rewrite.* All segments from the log start up to the end of the mapped range (the clean part
   included, as in Kafka) are grouped so that each group fits one segment (segment.bytes, index
   sizes, int32 relative offsets), and each group is rewritten into one new segment. A record is
   kept if it lies beyond the mapped range, or it is its key's latest offset and either has a
   value or is a tombstone whose batch's delete horizon has not passed. A record without a key is
   dropped (a compacted topic rejects them on produce; see odradek.storage.record_validator).
   A batch that keeps all its records and needs no delete horizon is copied byte for byte;
   otherwise it is re-encoded with the same base offset, last offset delta, compression,
   timestamp type, producer id/epoch/base sequence and partition leader epoch.
   *Delete horizon (KIP-534):* the first cleaning that keeps a tombstone sets the batch's
   delete-horizon flag with base_timestamp = now + ``delete.retention.ms``; a later cleaning after
   that time drops the tombstone.
   *Empty batches:* a batch whose records all go is dropped, except (as Kafka) the last batch of
   a producer that still has state, kept empty so its sequence survives, and the last batch of
   each group, kept (empty if need be) so the new segment ends exactly where the group ended -
   that makes the swap's crash recovery exact, and no segment is ever left empty.
   *Transactions* (Kafka's CleanedTransactionMetadata): the aborted transactions overlapping the
   section (from the ``.txnindex``) are known before the pass. A batch of an aborted transaction
   is neither mapped (its keys must not shadow committed records) nor kept. An ABORT marker whose
   transaction still had data in this pass is kept and its entry written to the cleaned segment's
   ``.txnindex``; a COMMIT marker likewise while its transaction had data here. A marker whose
   transaction has no data left is kept until ``delete.retention.ms`` after that was first seen
   (the delete horizon, as for tombstones), then dropped. An emptied control batch (the last of
   a group) counts as a marker with nothing left.
4. *Swap* (Kafka's replaceSegments). The new segment is written as ``<base>.log.cleaned`` (and
   ``.index.cleaned``, ``.timeindex.cleaned``), fsynced, renamed to ``.swap``; then under the log
   lock the old segments are renamed ``.deleted`` (their fds stay open for file.delete.delay.ms,
   so a reader holding a slice of them keeps valid bytes) and the ``.swap`` files renamed into
   place. If the log changed under the cleaner (truncation, retention, deletion), the swap is
   abandoned and the ``.cleaned`` files removed.
5. The first dirty offset of the log becomes the end of the mapped range, in
   ``cleaner-offset-checkpoint`` (Kafka's checkpoint format: ``0``, count, ``topic partition
   offset`` lines), written atomically.

Crash story: ``.cleaned`` files are incomplete and deleted when the log opens; a ``.swap``
segment is complete, so on open the old segments it covers are deleted and it is renamed into
place (odradek.storage.log_loader.LogLoader._complete_swaps). A lost checkpoint only means cleaning again.

Threading: :meth:`LogCleaner.clean_once` does blocking file I/O; the broker calls it
periodically on its IO pool, one call at a time (a lock serializes concurrent calls). Appends,
reads and retention go on concurrently: the cleaner only reads inactive segments and takes the
log's lock just for the swap.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.protocol.batch_header import NO_PRODUCER_ID, BatchHeader, parse_header
from odradek.protocol.records import (
    LOG_APPEND_TIME,
    ControlRecordType,
    Record,
    RecordBatch,
    decode_batch,
    encode_batch,
)
from odradek.storage import clock
from odradek.storage.checkpoint_file import CheckpointFormatError, read_checkpoint, write_checkpoint
from odradek.storage.errors import CleaningAbortedError, KafkaStorageError
from odradek.storage.log import Log
from odradek.storage.log_config import LONG_MAX
from odradek.storage.producer_state_replay import end_txn_marker
from odradek.storage.record_validator import uncompressed_limit
from odradek.storage.segment import CLEANED_SUFFIX, INT32_MAX, LogSegment
from odradek.storage.txn_index import AbortedTxn, TransactionIndex

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_MAP_ENTRY_OVERHEAD = 64  # bytes charged per offset-map entry besides the key itself
_WRITE_CHUNK = 1 << 20

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 524288
    backoff_ms: int = 15000
    min_cleanable_ratio: float = 0.5  # log.cleaner.min.cleanable.ratio (topic default)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, Any]) -> CleanerConfig:
        def get(key: str, default: Any, kind: type) -> Any:
            raw = props.get(key)
            if raw is None or raw == "":
                return default
            if kind is bool:
                return str(raw).strip().lower() == "true"
            return kind(str(raw).strip())

        return cls(
            enable=get("log.cleaner.enable", True, bool),
            threads=get("log.cleaner.threads", 1, int),
            dedupe_buffer_size=get("log.cleaner.dedupe.buffer.size", 134217728, int),
            io_buffer_load_factor=get("log.cleaner.io.buffer.load.factor", 0.9, float),
            io_buffer_size=get("log.cleaner.io.buffer.size", 524288, int),
            backoff_ms=get("log.cleaner.backoff.ms", 15000, int),
            min_cleanable_ratio=get("log.cleaner.min.cleanable.ratio", 0.5, float),
        )


@dataclass
class CleanerStats:
    """What one round did (Kafka's CleanerStats, trimmed)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    segments_cleaned: int = 0
    groups_swapped: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class LogToClean:
    topic: str
    partition: int
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def _segments_in(segments: tuple[LogSegment, ...], start: int, end: int) -> list[LogSegment]:
    """Segments holding any offset of [start, end) (Kafka's logSegments(from, to))."""
    out = []
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if seg.base_offset < end and (next_base is None or next_base > start):
            out.append(seg)
    return out


class LogCleaner:
    """Compacts the logs of a odradek.storage.log_manager.LogManager (see the module docstring)."""

    def __init__(self, log_manager: Any, config: CleanerConfig | None = None, *,
                 upper_bound_offset: Callable[[str, int], int | None] | None = None) -> None:
        self.log_manager = log_manager
        self.config = config or CleanerConfig()
        # The broker's high watermark / last stable offset per partition: never clean beyond it.
        self.upper_bound_offset = upper_bound_offset
        self.uncleanable: set[tuple[str, int]] = set()
        # Partitions whose log is being moved to another log dir (Kafka's abortAndPauseCleaning):
        # not chosen, and a round on one of them stops at its next batch.
        self._paused: set[tuple[str, int]] = set()
        self._cleaning: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._stopped = False

    # -- checkpoints ----------------------------------------------------------------------------
    def read_checkpoint(self, log_dir: Path) -> dict[tuple[str, int], int]:
        try:
            return {(t, int(p)): int(o) for t, p, o in read_checkpoint(log_dir / CLEANER_CHECKPOINT, 3)}
        except (CheckpointFormatError, ValueError):
            return {}  # a broken checkpoint only means re-cleaning from the log start

    def _update_checkpoint(self, log_dir: Path, topic: str, partition: int, offset: int) -> None:
        entries = self.read_checkpoint(log_dir)
        entries[(topic, partition)] = offset
        present = {tp for tp in self.log_manager.all_logs() if self.log_manager.log_dir_of(*tp) == log_dir}
        write_checkpoint(log_dir / CLEANER_CHECKPOINT,
                         [(t, p, o) for (t, p), o in sorted(entries.items()) if (t, p) in present])

    def maybe_truncate_checkpoint(self, topic: str, partition: int, offset: int) -> None:
        """The log was truncated to ``offset``: lower its first dirty offset to it if above (Kafka's
        maybeTruncateCheckpoint), so data appended again below the old checkpoint is mapped.
        The broker calls this after Log.truncate_to on a compacted partition."""
        log_dir = self.log_manager.log_dir_of(topic, partition)
        if log_dir is None:
            return
        with self._lock:
            current = self.read_checkpoint(log_dir).get((topic, partition))
            if current is not None and current > offset:
                self._update_checkpoint(log_dir, topic, partition, offset)

    def alter_checkpoint_dir(self, topic: str, partition: int, source: Path, destination: Path) -> None:
        """The partition's log moved from ``source`` to ``destination`` (Kafka's alterCheckpointDir):
        its first dirty offset moves with it, so the moved log is not cleaned again from its start."""
        with self._lock:
            offset = self.read_checkpoint(source).get((topic, partition))
            if offset is not None:
                self._update_checkpoint(destination, topic, partition, offset)

    # -- pausing (a log being moved between log dirs) ------------------------------------------
    def abort_and_pause(self, topic: str, partition: int) -> None:
        """Stop cleaning the partition until :meth:`resume`: a round on it aborts at its next batch,
        and this returns once no round runs on it (Kafka's abortAndPauseCleaning). Blocking."""
        self._paused.add((topic, partition))
        with self._lock:
            pass  # the round in progress, if any, is over (aborted if it was this partition's)

    def resume(self, topic: str, partition: int) -> None:
        self._paused.discard((topic, partition))

    # -- choosing -------------------------------------------------------------------------------
    def cleanable_offsets(self, topic: str, partition: int, log: Log, checkpoint: int | None,
                          now: int) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset) as Kafka's cleanableOffsets."""
        start = log.log_start_offset
        first_dirty = start if checkpoint is None or checkpoint < start or checkpoint > log.log_end_offset \
            else checkpoint
        segments = log._state.segments
        bounds = [segments[-1].base_offset]
        if self.upper_bound_offset is not None:
            upper = self.upper_bound_offset(topic, partition)
            if upper is not None:
                bounds.append(upper)
        lag = max(log.config.min_compaction_lag_ms, 0)
        if lag > 0:
            for seg in segments[:-1]:
                if seg.next_offset > first_dirty and seg.largest_timestamp > now - lag:
                    bounds.append(seg.base_offset)
                    break
        return first_dirty, max(first_dirty, min(bounds))

    def _log_to_clean(self, topic: str, partition: int, log: Log, checkpoint: int | None,
                      now: int) -> LogToClean:
        first_dirty, first_uncleanable = self.cleanable_offsets(topic, partition, log, checkpoint, now)
        segments = log._state.segments
        # Dirty bytes count whole segments up to the segment holding the uncleanable offset.
        uncleanable_base = segments[-1].base_offset
        for seg in segments[:-1]:
            if seg.next_offset > first_uncleanable:
                uncleanable_base = seg.base_offset
                break
        clean_bytes = sum(s.size for s in _segments_in(segments, -1, first_dirty))
        cleanable_bytes = sum(s.size for s in _segments_in(segments, min(first_dirty, uncleanable_base),
                                                           uncleanable_base))
        max_lag = log.config.max_compaction_lag_ms
        need_now = False
        if max_lag < LONG_MAX:
            for seg in segments[:-1]:
                if seg.next_offset > first_dirty:
                    first_ts = seg.first_batch_timestamp()
                    if 0 < first_ts < now - max(max_lag, 0):
                        need_now = True
                        break
        return LogToClean(topic, partition, log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                          need_now)

    def grab_filthiest_log(self, now: int) -> LogToClean | None:
        """The compacted log most in need of cleaning, or None (Kafka's grabFilthiestCompactedLog)."""
        checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        candidates = []
        for (topic, partition), log in self.log_manager.all_logs().items():
            if (not log.config.compact or (topic, partition) in self.uncleanable or (topic, partition) in self._paused
                    or log.offline or log.closed):
                continue
            log_dir = self.log_manager.log_dir_of(topic, partition)
            if log_dir not in checkpoints:
                checkpoints[log_dir] = self.read_checkpoint(log_dir)
            ltc = self._log_to_clean(topic, partition, log, checkpoints[log_dir].get((topic, partition)), now)
            if ltc.clean_bytes + ltc.cleanable_bytes == 0:
                continue
            if (ltc.need_compaction_now and ltc.cleanable_bytes > 0) or \
                    ltc.cleanable_ratio > log.config.min_cleanable_dirty_ratio:
                candidates.append(ltc)
        return max(candidates, key=lambda c: c.cleanable_ratio, default=None)

    # -- running --------------------------------------------------------------------------------
    def clean_once(self, now_ms: int | None = None) -> CleanerStats | None:
        """Clean the filthiest compacted log, if any qualifies; returns what was done or None.

        A log whose cleaning fails unexpectedly is marked uncleanable (skipped until restart), as
        in Kafka; an I/O error takes its log dir offline through the log.
        """
        if not self.config.enable or self._stopped:
            return None
        with self._lock:
            now = clock.now_ms() if now_ms is None else now_ms
            ltc = self.grab_filthiest_log(now)
            if ltc is None:
                return None
            self._cleaning = (ltc.topic, ltc.partition)
            try:
                stats = clean_log(ltc, now, self.config, self._check_running)
            except CleaningAbortedError:
                return None
            except KafkaStorageError:
                return None  # the log dir went offline meanwhile
            except OSError as exc:
                ltc.log.report_io_error(exc)
                return None
            except Exception:
                logger.exception("cleaning %s-%d failed; marking it uncleanable", ltc.topic, ltc.partition)
                self.uncleanable.add((ltc.topic, ltc.partition))
                return None
            log_dir = self.log_manager.log_dir_of(ltc.topic, ltc.partition)
            if log_dir is not None:
                try:
                    self._update_checkpoint(log_dir, ltc.topic, ltc.partition, stats.end_offset)
                except OSError as exc:
                    ltc.log.report_io_error(exc)
            return stats

    def shutdown(self) -> None:
        """Stop: a round in progress aborts at its next batch; later calls do nothing."""
        self._stopped = True

    def _check_running(self) -> None:
        if self._stopped:
            raise CleaningAbortedError("cleaner shut down")
        if self._cleaning in self._paused:
            raise CleaningAbortedError("the log is being moved to another log dir")


# -----------------------------------------------------------------------------------------------
# one cleaning round on one log


def clean_log(ltc: LogToClean, now: int, config: CleanerConfig,
              check_done: Callable[[], None] = lambda: None) -> CleanerStats:
    """Build the offset map for the dirty section, then rewrite and swap every segment group."""
    started = time.perf_counter()
    log = ltc.log
    stats = CleanerStats(ltc.topic, ltc.partition, ltc.first_dirty_offset)
    offset_map, latest = build_offset_map(log, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                                          config, stats, check_done)
    end_offset = latest + 1
    stats.end_offset = max(end_offset, ltc.first_dirty_offset)
    segments = log._state.segments
    to_clean = [s for s in _segments_in(segments, -1, end_offset) if s is not segments[-1]]
    producers = _last_offsets_of_active_producers(log)
    for group in group_segments_by_size(to_clean, log.config.segment_bytes, log.config.segment_index_bytes):
        check_done()
        sizes = [s.size for s in group]
        cleaned = _clean_group(log, group, offset_map, latest, producers, now, stats, check_done)
        log.replace_segments(cleaned, group, sizes)
        stats.groups_swapped += 1
        stats.segments_cleaned += len(group)
    stats.elapsed_s = time.perf_counter() - started
    return stats


def build_offset_map(log: Log, start: int, end: int, config: CleanerConfig, stats: CleanerStats,
                     check_done: Callable[[], None] = lambda: None) -> tuple[dict[bytes, int], int]:
    """key -> latest offset over the batches in [start, end); returns (map, last mapped offset).

    Stops early (at a batch boundary) when the map is full. The last mapped offset is at least
    ``start - 1`` (nothing mapped).
    """
    budget = int(config.dedupe_buffer_size / max(config.threads, 1) * config.io_buffer_load_factor)
    used = 0
    offset_map: dict[bytes, int] = {}
    latest = start - 1
    segments = log._state.segments
    dirty = [s for s in _segments_in(segments, start, end) if s is not segments[-1]]
    transactions = CleanedTransactions(log.collect_aborted_txns(start, end))
    for i, seg in enumerate(dirty):
        check_done()
        next_base = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        found = seg.translate_offset(start)
        if found is None:
            latest = max(latest, min(next_base, end) - 1)
            continue
        for pos, header in seg.iter_headers(found[0]):
            if header.last_offset >= end:
                return offset_map, latest
            if header.last_offset < start:
                continue
            if header.is_control:
                transactions.on_control_batch(header, _read_batch(seg, pos, header))
            elif transactions.on_data_batch(header):
                stats.messages_read += header.records_count  # aborted: not mapped
            else:
                batch = _decode(_read_batch(seg, pos, header), header, log.config.max_message_bytes)
                stats.bytes_read += header.size
                pending = {}
                for record in batch.records:
                    stats.messages_read += 1
                    if record.key is not None and record.offset is not None and record.offset >= start:
                        pending[record.key] = record.offset
                cost = sum(len(k) + _MAP_ENTRY_OVERHEAD for k in pending if k not in offset_map)
                if used + cost > budget and latest >= start:
                    return offset_map, latest  # full: this batch waits for the next round
                used += cost
                offset_map.update(pending)
            latest = header.last_offset
        # Offset gaps at a segment's end belong to it (Kafka fast-forwards to the next base).
        latest = max(latest, min(next_base, end) - 1)
    return offset_map, latest


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int) -> list[list[LogSegment]]:
    """Consecutive segments whose sum fits one segment and its indexes (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes
        time_index_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < len(segments):
            seg = segments[i]
            if (size + seg.size > max_size or index_size + seg.offset_index.size_in_bytes > max_index_size
                    or time_index_size + seg.time_index.size_in_bytes > max_index_size
                    or seg.next_offset - 1 - group[0].base_offset > INT32_MAX):
                break
            group.append(seg)
            size += seg.size
            index_size += seg.offset_index.size_in_bytes
            time_index_size += seg.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


def _decode(raw: bytes, header: BatchHeader, max_message_bytes: int) -> RecordBatch:
    """Decode a stored batch with decompression bounded as on produce (odradek.storage.record_validator):
    a compression bomb stored before records were validated fails this log's cleaning (Kafka marks
    it uncleanable too) instead of exhausting the broker's memory."""
    return decode_batch(raw, max_uncompressed=uncompressed_limit(max_message_bytes, header.size))


def _read_batch(seg: LogSegment, position: int, header: BatchHeader) -> bytes:
    raw = seg.read_batch(position, header.size)
    if len(raw) != header.size:
        # Truncated or deleted under us (follower truncation, retention): try again next round.
        raise CleaningAbortedError(f"{seg.log_path} shrank while being cleaned")
    return raw


def _last_offsets_of_active_producers(log: Log) -> dict[int, int]:
    """producer id -> last data offset, for producers producer state still tracks (Kafka's
    lastRecordsOfActiveProducers): their last batch is kept, even empty, to keep the sequence."""
    return log.producer_state.last_data_offsets()


def _clean_group(log: Log, group: list[LogSegment], offset_map: dict[bytes, int], latest: int,
                 producers: dict[int, int], now: int, stats: CleanerStats,
                 check_done: Callable[[], None]) -> LogSegment:
    cleaned = LogSegment.create(log.dir, group[0].base_offset, log.config, now, suffix=CLEANED_SUFFIX)
    try:
        group_end = group[-1].next_offset
        transactions = CleanedTransactions(log.collect_aborted_txns(group[0].base_offset, group_end),
                                           cleaned.txn_index)
        delete_retention_ms = log.config.delete_retention_ms
        out = bytearray()
        out_batches: list[tuple[int, BatchHeader]] = []
        for seg in group:
            for pos, header in seg.iter_headers(0):
                check_done()
                raw = _read_batch(seg, pos, header)
                kept = _filter_batch(raw, header, offset_map, latest, producers, group_end, now,
                                     delete_retention_ms, stats, log.config.max_message_bytes, transactions)
                if kept is None:
                    continue
                out_batches.append((len(out), parse_header(kept)))
                out += kept
                if len(out) >= _WRITE_CHUNK:
                    cleaned.append(out, out_batches)
                    stats.bytes_written += len(out)
                    out, out_batches = bytearray(), []
        if out:
            cleaned.append(out, out_batches)
            stats.bytes_written += len(out)
        cleaned.on_become_inactive()
        cleaned.flush()
        return cleaned
    except BaseException:
        cleaned.delete_files()
        raise


def _filter_batch(raw: bytes, header: BatchHeader, offset_map: dict[bytes, int], latest: int,
                  producers: dict[int, int], group_end: int, now: int, delete_retention_ms: int,
                  stats: CleanerStats, max_message_bytes: int, transactions: CleanedTransactions) -> bytes | None:
    """The batch's bytes after cleaning: as is, re-encoded, an empty batch, or None (dropped)."""
    if header.is_control:
        return _filter_control_batch(raw, header, group_end, now, delete_retention_ms, max_message_bytes,
                                     transactions)
    batch = _decode(raw, header, max_message_bytes)
    horizon = batch.delete_horizon_ms
    retained: list[Record] = []
    has_tombstone = False
    aborted = transactions.on_data_batch(header)
    for record in [] if aborted else batch.records:
        offset = record.offset
        assert offset is not None
        if offset > latest:
            keep = True
        elif record.key is None:
            keep = False
        else:
            keep = offset >= offset_map.get(record.key, -1) and (
                record.value is not None or horizon is None or now < horizon)
        if keep:
            retained.append(record)
            has_tombstone = has_tombstone or record.value is None
    stats.messages_written += len(retained)
    keep_empty = (header.producer_id != NO_PRODUCER_ID and producers.get(header.producer_id) == header.last_offset) \
        or header.next_offset == group_end
    if not retained and not keep_empty:
        return None
    needs_horizon = has_tombstone and horizon is None
    if len(retained) == len(batch.records) and not needs_horizon:
        return raw
    new_horizon = now + delete_retention_ms if needs_horizon else horizon
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    return encode_batch(
        retained,
        base_offset=header.base_offset,
        # An empty batch is a bare header, codec none (Kafka's DefaultRecordBatch.writeEmptyHeader): a
        # compressed empty payload makes librdkafka abort (rdbuf.c, rd_slice_init_full).
        compression=header.compression if retained else 0,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        timestamp_type=batch.timestamp_type,
        log_append_time=header.max_timestamp if log_append else None,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon_ms=new_horizon if retained else None,
        last_offset_delta=header.last_offset_delta,
    )


def _filter_control_batch(raw: bytes, header: BatchHeader, group_end: int, now: int, delete_retention_ms: int,
                          max_message_bytes: int, transactions: CleanedTransactions) -> bytes | None:
    """A marker: kept while its transaction has data; once it has none, kept with a delete horizon
    until that passes, then dropped (Kafka's checkBatchRetention for control batches)."""
    can_discard = transactions.on_control_batch(header, raw)
    if not can_discard:
        return raw
    batch = _decode(raw, header, max_message_bytes)
    horizon = batch.delete_horizon_ms
    if horizon is not None and horizon <= now:
        if header.next_offset != group_end:
            return None
        records: list[Record] = []  # the group's last batch stays, empty (see the module doc)
    elif horizon is not None or not batch.records:
        return raw
    else:
        records = list(batch.records)
        horizon = now + delete_retention_ms
    return encode_batch(
        records,
        base_offset=header.base_offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=True,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon_ms=horizon if records else None,
        last_offset_delta=header.last_offset_delta,
    )


class CleanedTransactions:
    """What one cleaning pass knows of transactions (Kafka's CleanedTransactionMetadata): the
    aborted ones overlapping it, by first offset, and which producers' transactions the pass has
    seen data of. Batches must be shown in offset order."""

    def __init__(self, aborted: list[AbortedTxn], cleaned_index: TransactionIndex | None = None) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        # producer id -> (its aborted transaction, whether this pass saw data of it)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._ongoing_committed: set[int] = set()
        self._cleaned_index = cleaned_index

    def _start_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True if the batch belongs to an aborted transaction (its records go)."""
        self._start_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[header.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, raw: bytes) -> bool:
        """True if the marker may go (after its delete horizon): its transaction has no data in
        this pass. An ABORT marker that stays writes its entry to the cleaned ``.txnindex``."""
        self._start_aborted_up_to(header.last_offset)
        marker = end_txn_marker(raw)
        if marker is None:
            return True  # an emptied control batch: its transaction was cleaned away already
        producer_id = header.producer_id
        if marker.control_type == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1]:
                if self._cleaned_index is not None:
                    self._cleaned_index.append(ongoing[0])
                return False
            return True
        if marker.control_type == ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False


def remove_cleaned_leftovers(dir: Path) -> None:
    """Delete ``*.cleaned`` files in a partition dir (Log.open does this itself; for tools)."""
    for name in os.listdir(dir):
        if name.endswith(CLEANED_SUFFIX):
            (dir / name).unlink(missing_ok=True)
