"""Loading a partition's log from its directory, and recovery after a crash (Kafka's LogLoader).

What it finds in ``<topic>-<partition>/`` (the directory format is odradek.storage.log's) and does with it::

    *.deleted, *.tmp                   leftovers of a deletion or checkpoint cut short: removed
    *.cleaned                          a cleaned segment not yet complete (odradek.storage.cleaner): removed
    <base>.log.swap (+ its indexes)    a complete, fsynced cleaned segment: the segments it replaces
                                       (base offsets in [swap base, swap end)) are removed if still
                                       there, then it is renamed into place
    <base>.index/.timeindex/.txnindex  without their <base>.log: orphans, removed
    <base>.log                         a segment (odradek.storage.segment), loaded in base offset order

Crash story: after a clean shutdown every segment is opened without scanning (indexes are still
sanity-checked and rebuilt if broken). Otherwise every segment from the one holding the recovery
point onward is rescanned (odradek.storage.segment.LogSegment.recover): the first invalid or partial batch
and everything after it, including later segments, is dropped; indexes and the leader epoch cache
are rebuilt from the surviving batches. The recovery point is the offset below which data is
known to be fsynced; after loading it is the log end (the rescanned segments are fsynced).

Then, as Kafka's load(): the last surviving segment is the active one (its indexes preallocated to
grow), the others' indexes trimmed; the epoch cache loses entries past the log end or before the
log start; if the log start offset (from the checkpoint: DeleteRecords or retention moved it) lies
beyond what survived, the log starts over, empty, there. Last, producer state is rebuilt from its
newest snapshot and the batches after it (odradek.storage.producer_state_replay), which also refills the
``.txnindex`` of every rescanned segment.

A LogLoader runs once, before anyone else holds the log; it raises OSError for the caller
(odradek.storage.log.Log.open) to turn into LogDirOfflineError.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from odradek.protocol.batch_header import BatchHeader
from odradek.storage.checkpoint_file import fsync_dir
from odradek.storage.leader_epoch_cache import LeaderEpochCache
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state_contract import ProducerState
from odradek.storage.producer_state_replay import rebuild_producer_state
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from odradek.storage.txn_index import TXN_INDEX_SUFFIX

_SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class LoadedLog(NamedTuple):
    """What :meth:`LogLoader.load` hands the log (Kafka's LoadedLogOffsets, with the segments)."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    # Segments the log dropped by starting over at a log start beyond them, renamed ``.deleted``:
    # the log removes their files after file.delete.delay.ms, as any deleted segment's.
    retired: list[LogSegment]


class LogLoader:
    """Loads one partition directory into segments, updating ``epoch_cache`` and ``producer_state``."""

    def __init__(self, dir: Path, config: LogConfig, epoch_cache: LeaderEpochCache, producer_state: ProducerState,
                 *, recovery_point: int, log_start_offset: int, clean_shutdown: bool, now: int) -> None:
        self.dir = dir
        self.config = config
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown
        self.now = now

    def load(self) -> LoadedLog:
        self._complete_swaps()
        bases = self._remove_leftovers()
        segments = self._load_segments(bases)
        retired: list[LogSegment] = []
        if not segments:
            start = self.log_start_offset if not bases else max(self.log_start_offset, bases[0])
            segments.append(LogSegment.create(self.dir, start, self.config, self.now))
        # The last surviving segment is the active one: its indexes need room to grow.
        active = segments[-1]
        if bases:
            active.offset_index.ensure_preallocated()
            active.time_index.ensure_preallocated()
            for seg in segments[:-1]:
                seg.offset_index.trim_to_valid_size()
                seg.time_index.trim_to_valid_size()
        log_end = active.next_offset
        log_start = max(self.log_start_offset, segments[0].base_offset)
        self.epoch_cache.truncate_from_end(log_end)
        if log_start > log_end:
            # DeleteRecords/retention moved the start beyond what survived: start over there.
            for seg in segments:
                seg.mark_deleted()
            retired = segments
            segments = [LogSegment.create(self.dir, log_start, self.config, self.now)]
            log_end = log_start
            self.epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(log_start)
        elif bases:
            self.epoch_cache.truncate_from_start(log_start)
        try:
            rebuild_producer_state(self.producer_state, segments, log_start, log_end, self.now)
        except OSError:
            for seg in segments + retired:
                seg.close()
            raise
        # Clean shutdown flushed everything; after recovery the rescanned segments were fsynced.
        return LoadedLog(segments, log_start, log_end, log_end, retired)

    def _remove_leftovers(self) -> list[int]:
        """Remove what a crash left half done; return the base offsets of the ``.log`` files, sorted."""
        bases: list[int] = []
        for entry in os.scandir(self.dir):
            name = entry.name
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                os.unlink(entry.path)  # leftovers of a deletion/checkpoint interrupted by a crash
            elif name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[:-len(LOG_SUFFIX)]))
        bases.sort()
        present = set(bases)
        for entry in os.scandir(self.dir):
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                stem = entry.name[:-len(suffix)]
                if entry.name.endswith(suffix) and stem.isdigit() and int(stem) not in present:
                    os.unlink(entry.path)  # an index whose .log is gone: orphan
        return bases

    def _load_segments(self, bases: list[int]) -> list[LogSegment]:
        """Open the segments at ``bases``, rescanning from the one holding the recovery point (Kafka's
        loadSegmentFiles and recoverLog); a segment after the first torn one is deleted."""
        # The segment holding the recovery point and everything after it must be rescanned.
        first_unflushed = (len(bases) if self.clean_shutdown
                           else max(bisect.bisect_right(bases, self.recovery_point) - 1, 0))
        segments: list[LogSegment] = []
        corrupted = False
        for i, base in enumerate(bases):
            active = i == len(bases) - 1
            if corrupted:
                # Everything after a torn segment is unreachable: Kafka deletes it.
                for suffix in _SEGMENT_FILE_SUFFIXES:
                    (self.dir / f"{base:020d}{suffix}").unlink(missing_ok=True)
                continue
            next_base = bases[i + 1] if not active else None
            if i < first_unflushed:
                seg = LogSegment.load(self.dir, base, self.config, active=active, next_segment_base=next_base,
                                      now_ms=self.now)
            else:
                seg = LogSegment(self.dir, base, self.config, created_ms=self.now, active=True, create=False)
                truncated = seg.recover(self._epoch_cache_hook())
                if next_base is not None and seg.next_offset != next_base:
                    # Overlapping segments, or a segment that lost whole batches at its end (a cut
                    # on a batch boundary truncates nothing yet leaves a hole before the next
                    # segment): offsets must stay dense, so everything after is dropped.
                    truncated = 1
                if truncated:
                    corrupted = True
                if seg.size == 0 and next_base is not None:
                    # We never leave an empty segment before another one (roll of an empty
                    # segment is a no-op, and the cleaner keeps at least the last batch of each
                    # segment group it rewrites), so its data was lost: nothing after it is reachable.
                    corrupted = True
                    seg.delete_files()
                    continue
                seg.flush()
            segments.append(seg)
        return segments

    def _complete_swaps(self) -> None:
        """Finish or undo a compaction swap interrupted by a crash (see odradek.storage.cleaner).

        ``*.cleaned`` files are a cleaned segment not yet complete: delete them. A ``*.log.swap``
        is complete and fsynced: the segments it replaces (base offsets in [swap base, swap end))
        are deleted if still present, then it is renamed into place. Kafka's LogLoader does the same.
        """
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith(CLEANED_SUFFIX):
                os.unlink(self.dir / name)
        for name in sorted(names):
            if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                continue
            stem = name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
            if not stem.isdigit():
                continue
            swap = LogSegment(self.dir, int(stem), self.config, created_ms=self.now, active=True, create=False,
                              suffix=SWAP_SUFFIX)
            swap.recover(keep_txn_index=True)  # it was fsynced before the rename, but its indexes are rebuilt cheaply
            end = swap.next_offset
            for other in os.listdir(self.dir):
                other_stem = other[:20]
                if (other.endswith(_SEGMENT_FILE_SUFFIXES)
                        and other_stem.isdigit()
                        and len(other) in (20 + len(LOG_SUFFIX), 20 + len(INDEX_SUFFIX), 20 + len(TIME_INDEX_SUFFIX),
                                           20 + len(TXN_INDEX_SUFFIX))
                        and swap.base_offset <= int(other_stem) < max(end, swap.base_offset + 1)):
                    os.unlink(self.dir / other)
            swap.change_suffix(SWAP_SUFFIX, "")
            swap.close()
        fsync_dir(self.dir)

    def _epoch_cache_hook(self) -> Callable[[BatchHeader], None]:
        # Recovery rebuilds the leader epoch cache; producer state is rebuilt afterwards, from its
        # snapshot, by rebuild_producer_state.
        cache = self.epoch_cache

        def on_batch(header: BatchHeader) -> None:
            if header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, header.base_offset)

        return on_batch
