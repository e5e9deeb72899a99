"""A log segment: ``<base offset:020d>.log`` plus its ``.index`` and ``.timeindex`` (Kafka's LogSegment).

On disk, in the partition directory::

    00000000000000000000.log        v2 record batches back to back, exactly as produced except
                                    base_offset and partition_leader_epoch (and, for
                                    LogAppendTime, max_timestamp + CRC) rewritten by the leader
    00000000000000000000.index      sparse offset -> position (odradek.storage.offset_index)
    00000000000000000000.timeindex  sparse timestamp -> offset (odradek.storage.time_index)
    00000000000000000000.txnindex   aborted transactions whose ABORT marker is in this segment
                                    (odradek.storage.txn_index; only once there is one)

The file name is the segment's base offset: every batch in it has base_offset >= that value and
below the next segment's base offset, with relative offsets fitting an int32.

Writes: one ``pwrite`` of all batches of an append at the current end. On an OSError the file is
truncated back to its previous size so no partial batch stays behind, and the error propagates
(the log turns it into LogDirOfflineError). Nothing is fsynced on append; :meth:`flush` fsyncs.

Crash story: the .log may end in a torn batch and the indexes may be stale, preallocated with
zeros, or missing their newest entries (those are written a page at a time, odradek.storage.index_file).
:meth:`recover` rescans the .log in 8 MiB chunks, checks each batch's header and CRC32C,
truncates at the first invalid byte and rebuilds both indexes. :meth:`load` (clean open) trusts the
.log but sanity-checks the indexes and rebuilds them if they are inconsistent.

File descriptors: one per segment, the .log's (Kafka's figure); the indexes are mapped without
one and open their files only for a write, resize or fsync (odradek.storage.index_file). A broker with
many partitions or segments therefore needs about one descriptor for each.

Deleted segments are renamed with a ``.deleted`` suffix and keep their file descriptor open until
:meth:`delete_files`. The .log descriptor is owned through a :class:`~odradek.storage.file_handle.FileHandle`
(``file``) that fetch slices share: closing the segment drops only its own reference, so a response
still queued for a slow reader sends from this file, never from whatever reuses the fd number.

Compaction (odradek.storage.cleaner) writes a new segment whose three files carry an extra suffix:
``.cleaned`` while being written, ``.swap`` once complete and fsynced, then none when swapped in
(:meth:`change_suffix`). See odradek.storage.log for what :meth:`Log.open` does with leftovers.

Threading: one writer (the log's append path, serialized per partition). Readers may call
:meth:`translate_offset`, :meth:`read_header` and friends concurrently: they only read bytes
below ``size``, which is published after the bytes are written and indexed.

In memory only, the segment remembers where the batches appended since it was opened lie (the
latest :data:`TAIL_BATCHES` at most, the active segment only): a read among them (:meth:`tail_slice`, a follower's usual
read just behind the log end) needs no index lookup and no header read.
"""

from __future__ import annotations

import bisect
import os
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from odradek.protocol.batch_header import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatchError,
    parse_header,
)
from odradek.protocol.checksum import crc32c
from odradek.storage.errors import SegmentTruncatedError
from odradek.storage.file_handle import FileHandle
from odradek.storage.index_file import CorruptIndexError
from odradek.storage.log_config import LogConfig
from odradek.storage.offset_index import OffsetIndex
from odradek.storage.time_index import NO_TIMESTAMP, TimeIndex
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
RECOVERY_CHUNK = 8 * 1024 * 1024
INT32_MAX = 2**31 - 1

# Batch-header scans (iter_headers): after a batch of SCAN_SKIP_BATCH bytes or more, the next read
# is one page (the next header, not the body: copying 16 KiB costs about what a read call does);
# after smaller ones 64 KiB, so a run of them costs few reads.
SCAN_CHUNK_SMALL = 4096
SCAN_CHUNK_LARGE = 65536
SCAN_SKIP_BATCH = 16384

# The tail (LogSegment.tail_slice) remembers at most this many of the latest batches of the active
# segment; when full, the older half is dropped. A read further behind than that takes the header
# walk. A follower is usually a batch or a few behind; 32 entries cost ~6 KiB per partition.
TAIL_BATCHES = 32

# One tail entry: a batch's base offset, last offset, position and end position.
TailEntry = tuple[int, int, int, int]


def _last_offset(entry: TailEntry) -> int:
    return entry[1]


def _end_position(entry: TailEntry) -> int:
    return entry[3]


def file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    def __init__(self, dir: Path, base_offset: int, config: LogConfig, *, created_ms: int,
                 active: bool, create: bool, suffix: str = "") -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        stem = file_stem(base_offset)
        self.log_path = dir / (stem + LOG_SUFFIX + suffix)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(self.log_path, flags, 0o644)
        # Fetch slices hold this handle, not the number: see odradek.storage.file_handle.
        self.file: FileHandle | None = FileHandle(self.fd)
        self.size = os.fstat(self.fd).st_size
        index_path = dir / (stem + INDEX_SUFFIX + suffix)
        time_index_path = dir / (stem + TIME_INDEX_SUFFIX + suffix)
        self.indexes_missing = not index_path.exists() or not time_index_path.exists()
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes, writable=active)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes, writable=active)
        self.txn_index = TransactionIndex(dir / (stem + TXN_INDEX_SUFFIX + suffix), base_offset)
        # True once recover() emptied the .txnindex: the log refills it when it replays producer state.
        self.txn_index_stale = False
        self.created_ms = created_ms
        # Kafka draws the roll jitter once per segment so a fleet of partitions does not roll at once.
        self.roll_jitter_ms = random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding max_timestamp
        self.rolling_based_timestamp: int | None = None
        self.next_offset = base_offset  # offset after the last batch in this segment
        self.flushed_size = self.size if not create else 0
        self.deleted = False
        # The batches appended since the segment was opened or last cut, back to back up to
        # ``size`` (see tail_slice). Replaced, never changed in place except by appending, so a
        # reader holding it sees a consistent prefix while the writer goes on.
        self._tail: list[TailEntry] = []

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    def create(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int, *, suffix: str = "") -> LogSegment:
        """A new empty segment; ``suffix`` (``.cleaned``) for the cleaner's segments under construction."""
        for kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            # Stale index files of a truncated-away segment with the same base offset.
            (dir / (file_stem(base_offset) + kind + suffix)).unlink(missing_ok=True)
        return cls(dir, base_offset, config, created_ms=now_ms, active=True, create=True, suffix=suffix)

    @classmethod
    def load(cls, dir: Path, base_offset: int, config: LogConfig, *, active: bool,
             next_segment_base: int | None, now_ms: int) -> LogSegment:
        """Open an existing segment after a clean shutdown; rebuild indexes that fail sanity checks."""
        seg = cls(dir, base_offset, config, created_ms=now_ms, active=active, create=False)
        try:
            if seg.indexes_missing and seg.size > 0:
                raise CorruptIndexError(f"{seg.log_path}: index files missing")
            seg.offset_index.sanity_check(seg.size, next_segment_base)
            seg.time_index.sanity_check(next_segment_base)
            seg.txn_index.sanity_check()
            seg._load_tail()
            if next_segment_base is not None and seg.next_offset > next_segment_base:
                raise CorruptIndexError(f"{seg.log_path}: batches beyond the next segment")
        except (CorruptIndexError, InvalidBatchError):
            seg.recover()
        # The checks mapped the indexes; an old segment's are mapped again only when read.
        seg.offset_index.release_mapping()
        seg.time_index.release_mapping()
        return seg

    def _load_tail(self) -> None:
        """Find next_offset and the max timestamp from the last index entries plus a short scan."""
        _, position = self.offset_index.lookup(self.offset_index.last_offset)
        if self.offset_index.entries == 0:
            position = 0
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_timestamp, \
            self.time_index.last_offset
        last_pos = position
        for pos, header in self.iter_headers(position):
            self.next_offset = header.next_offset
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            last_pos = pos + header.size
        if last_pos != self.size:
            raise InvalidBatchError(f"{self.log_path}: partial batch at the end of a cleanly closed segment")
        if position == 0 and self.size == 0:
            self.next_offset = self.base_offset
        self.bytes_since_last_index_entry = self.size - position

    # -- appending ------------------------------------------------------------------------------
    def append(self, buf: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]]) -> None:
        """Write ``buf`` (whole batches with offsets assigned) at the end; index each batch.

        ``batches`` holds (position within buf, header) for each batch. On OSError the file is
        cut back to its previous size and the error re-raised.
        """
        self.append_iov([buf], len(buf), batches)

    def append_iov(self, iov: list, total: int, batches: Sequence[tuple[int, BatchHeader]]) -> None:
        """Like :meth:`append` with the bytes given as buffers written back to back (one pwritev).

        The append path passes each batch as a rewritten 16-byte prefix plus the caller's own
        bytes, so a produced batch is never copied in user space.
        """
        start = self.size
        fd = self.fd
        try:
            n = os.pwritev(fd, iov, start) if len(iov) > 1 else os.pwrite(fd, iov[0], start)
            if n != total:
                # Short write (rare: signals, huge iovecs): write the rest from a joined copy.
                rest = memoryview(b"".join(iov))
                while n < total:
                    written = os.pwrite(fd, rest[n:], start + n)
                    if written <= 0:
                        raise OSError("short write")
                    n += written
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass  # the log dir goes offline anyway; recovery truncates the torn tail
            raise
        tail = self._tail
        if len(tail) + len(batches) > TAIL_BATCHES:
            tail = self._tail = tail[-(TAIL_BATCHES // 2):]
        for rel_pos, header in batches:
            position = start + rel_pos
            self._index_batch(position, header)
            tail.append((header[0], header[0] + header[6], position, position + header[1] + LOG_OVERHEAD))
        self.size = start + total  # published last: readers never see unindexed bytes

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        max_timestamp = header.max_timestamp
        last_offset = header.base_offset + header.last_offset_delta
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.batch_length + LOG_OVERHEAD
        self.next_offset = last_offset + 1

    def should_roll(self, batch_bytes: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll: size, segment.ms (+jitter), full index, or offset overflow."""
        size = self.size
        config = self.config
        if size > config.segment_bytes - batch_bytes:
            return size > 0
        if size > 0:
            first_ts = self.rolling_based_timestamp
            if first_ts is None:
                first_ts = self.first_batch_timestamp()
            waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - self.created_ms
            if waited > config.segment_ms - self.roll_jitter_ms:
                return True
        offset_index, time_index = self.offset_index, self.time_index
        return (offset_index.entries >= offset_index.max_entries or time_index.entries >= time_index.max_entries
                or last_offset - self.base_offset > INT32_MAX)

    def first_batch_timestamp(self) -> int:
        if self.rolling_based_timestamp is None and self.size >= HEADER_SIZE:
            self.rolling_based_timestamp = self.read_header(0).max_timestamp
        return self.rolling_based_timestamp if self.rolling_based_timestamp is not None else NO_TIMESTAMP

    def on_become_inactive(self) -> None:
        """Called at roll: final time index entry, trim both indexes (Kafka's onBecomeInactiveSegment)."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._tail = []  # reads move to the new active segment; its memory is for those

    # -- reading --------------------------------------------------------------------------------
    def read_header(self, position: int) -> BatchHeader:
        data = os.pread(self.fd, HEADER_SIZE, position)
        return parse_header(data)

    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` up to ``end`` (default: size).

        Only headers are wanted, so reads follow the batch sizes (like Kafka's FileLogInputStream,
        which reads each batch's header and skips its body): a page at first and after a large
        batch (its body is skipped, not copied), 64 KiB after small ones (one read holds many
        headers). A fetch of 1 MiB of 64 KiB batches so reads ~16 pages, not the whole MiB.

        Raises InvalidBatchError on a malformed header, SegmentTruncatedError if the file ends
        before ``end``, and stops before a batch that does not end by ``end``.
        """
        end = self.size if end is None else end
        chunk_size = SCAN_CHUNK_SMALL
        while end - position >= HEADER_SIZE:
            want = min(chunk_size, end - position)
            data = os.pread(self.fd, want, position)
            if len(data) < want:
                # Bytes below ``size`` are never missing unless the file was cut from outside.
                raise SegmentTruncatedError(self.log_path, position + len(data), end)
            consumed = 0
            # A whole header is in ``data`` (want >= HEADER_SIZE), so each pass parses at least one;
            # the last batch parsed may run past ``data``: the next read starts after it.
            while len(data) - consumed >= HEADER_SIZE:
                header = parse_header(data, consumed)
                if position + consumed + header.size > end:
                    return
                yield position + consumed, header
                consumed += header.size
            position += consumed
            chunk_size = SCAN_CHUNK_SMALL if header.size >= SCAN_SKIP_BATCH else SCAN_CHUNK_LARGE

    def tail_slice(self, offset: int, max_bytes: int, limit: int, min_one_batch: bool,
                   size: int) -> tuple[int, int, int, int] | None:
        """Log.read's slice from the batches appended lately, without reading the file: (position,
        end, first batch's base offset, offset after the slice), or None when ``offset`` lies
        before them (the caller walks the headers then).

        A follower fetches just behind the log end (what the leader appended since its last
        fetch), so its read is nearly always here; from the index and the headers it cost a
        lookup and two preads. ``size`` is the segment size the caller saw: later batches are
        not taken. Bounds as in Log.read: the batch whose last offset reaches ``offset`` first,
        whole batches below ``limit`` within ``max_bytes`` (one regardless with
        ``min_one_batch``).
        """
        tail = self._tail
        n = len(tail)
        if n == 0 or tail[-1][1] < offset:
            return None
        # The first entry whose last offset >= offset; before the tail's first batch only if
        # that batch holds the offset (else an older batch might).
        first = bisect.bisect_left(tail, offset, 0, n, key=_last_offset)
        if first == 0 and tail[0][0] > offset:
            return None
        position = tail[first][2]
        stop = min(bisect.bisect_left(tail, limit, first, n, key=_last_offset),
                   bisect.bisect_right(tail, min(position + max_bytes, size), first, n, key=_end_position))
        if stop == first:
            if not min_one_batch or tail[first][1] >= limit or tail[first][3] > size:
                return position, position, tail[first][0], tail[first][0]
            stop = first + 1
        last = tail[stop - 1]
        return position, last[3], tail[first][0], last[1] + 1

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= ``offset``; None if past the end."""
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, start_position)
        for position, header in self.iter_headers(pos):
            if header.last_offset >= offset:
                return position, header
        return None

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    # -- recovery -------------------------------------------------------------------------------
    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None, *, keep_txn_index: bool = False) -> int:
        """Rescan the .log: check headers and CRCs, truncate at the first bad byte, rebuild indexes.

        ``on_batch`` sees every valid batch in order (leader epoch cache, producer state).
        The ``.txnindex`` is emptied for the log to rebuild (``txn_index_stale``), unless
        ``keep_txn_index`` (a cleaner's complete swap segment: its index was written with it).
        Returns the number of bytes truncated.
        """
        self._tail = []
        self.offset_index.reset()
        self.time_index.reset()
        # Rebuilt by the log as it replays producer state over this segment (odradek.storage.log).
        if not keep_txn_index:
            self.txn_index.reset()
            self.txn_index_stale = True
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp = None
        self.next_offset = self.base_offset
        file_size = os.fstat(self.fd).st_size
        valid_end = 0
        pending = b""
        pending_pos = 0  # file position of pending[0]
        read_pos = 0
        expected_min_offset = self.base_offset
        done = False
        while not done and read_pos < file_size:
            chunk = os.pread(self.fd, RECOVERY_CHUNK, read_pos)
            if not chunk:
                break
            read_pos += len(chunk)
            buf = pending + chunk if pending else chunk
            view = memoryview(buf)
            pos = 0
            while len(buf) - pos >= LOG_OVERHEAD:
                try:
                    header = parse_header(buf, pos) if len(buf) - pos >= HEADER_SIZE else None
                except InvalidBatchError:
                    done = True
                    break
                if header is None:
                    break  # need more bytes
                if len(buf) - pos < header.size:
                    break  # need more bytes (or a torn tail, cut below)
                if (crc32c(view[pos + CRC_START: pos + header.size]) != header.crc
                        or header.base_offset < expected_min_offset
                        or header.last_offset - self.base_offset > INT32_MAX):
                    done = True
                    break
                self._index_batch(pending_pos + pos, header)
                expected_min_offset = header.next_offset
                if on_batch is not None:
                    on_batch(header)
                pos += header.size
                valid_end = pending_pos + pos
            view.release()
            pending = buf[pos:]
            pending_pos += pos
        truncated = file_size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        return truncated

    # -- truncation -----------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop batches whose last offset >= ``offset`` (the batch holding ``offset`` goes too).

        Returns bytes removed. Indexes are cut to match and the max timestamp recomputed.
        """
        found = self.translate_offset(offset)
        if found is None:
            return 0
        self._tail = []
        position = found[0]
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.flushed_size = min(self.flushed_size, position)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        # The segment is the active one again: give its indexes room to grow.
        self.offset_index.ensure_preallocated()
        self.time_index.ensure_preallocated()
        if position == 0:
            self.rolling_based_timestamp = None
        # Rescan the tail after the last surviving index entry for next_offset and max timestamp.
        self._load_tail()
        return removed

    # -- durability and lifecycle ---------------------------------------------------------------
    def flush(self) -> None:
        if self.flushed_size != self.size:
            os.fsync(self.fd)
            self.flushed_size = self.size
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def update_txn_index(self, aborted: AbortedTxn) -> None:
        """An ABORT marker in this segment ended a transaction with data (Kafka's updateTxnIndex)."""
        self.txn_index.append(aborted)

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.max_timestamp != NO_TIMESTAMP and not self.deleted:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                             skip_full_check=True)
            try:
                self.offset_index.close()
            finally:
                self.time_index.close()
        finally:
            # Drop our reference to the .log (the segment's one descriptor; the indexes hold none):
            # the fd closes now, or once the last pending fetch region is gone. Never leaked.
            self.fd = -1
            self.file = None

    def open_for_fsync(self) -> list[int]:
        """Descriptors of the .log and both indexes for an fsync off the log's lock (caller closes).

        A duplicate of the .log's descriptor and the indexes opened read-only (they keep none):
        fsync through them works even if the segment is closed meanwhile. Taken when the fsync
        runs, so flushes waiting in the queue hold no descriptors.
        """
        fds = [os.dup(self.fd)]
        try:
            for index in (self.offset_index, self.time_index):
                fds.append(index.open_for_fsync())  # writes entries still in memory first
            txn_fd = self.txn_index.open_for_fsync()
            if txn_fd is not None:
                fds.append(txn_fd)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the three files from ``<name><old>`` to ``<name><new>`` (cleaner's swap protocol)."""
        paths = [self.log_path, self.offset_index.path, self.time_index.path]
        renamed = [p.with_name(p.name[: len(p.name) - len(old)] + new) for p in paths]
        os.rename(paths[0], renamed[0])
        self.log_path = renamed[0]
        self.offset_index.rename(renamed[1])
        self.time_index.rename(renamed[2])
        txn_path = self.txn_index.path
        self.txn_index.rename(txn_path.with_name(txn_path.name[: len(txn_path.name) - len(old)] + new))

    def mark_deleted(self) -> None:
        """Rename files to ``*.deleted``; the fd stays open for in-flight readers."""
        self.deleted = True
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        self.deleted = True
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            path.unlink(missing_ok=True)

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime if no batch had one (Kafka's largestTimestamp)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
