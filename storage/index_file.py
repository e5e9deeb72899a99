"""Shared machinery of the memory-mapped sparse indexes (.index, .timeindex): Kafka's AbstractIndex.

An index file is a flat array of fixed-size big-endian entries. While its segment is active the
file is preallocated (sparse, via ftruncate) to ``segment.index.bytes`` rounded down to a whole
entry; ``entries`` counts the valid ones. When the segment rolls, and on close, the file is
truncated to ``entries * entry_size`` so a later open knows how many entries exist.

File descriptors: an index holds none. Like Kafka's AbstractIndex (map, then close the
RandomAccessFile) the mapping is made through odradek.storage.mapped_file, which keeps no descriptor, and
every write, resize or fsync opens the file for that one call. A segment therefore costs one
descriptor, its .log (Kafka's figure), instead of five (two per index with Python's mmap, which
keeps a duplicate). Opening costs a few microseconds and happens once per 4 KiB page of entries
(see Writes), at roll, flush and close; never per append. The mapping itself is made lazily, by
the first lookup that needs an entry on file (Kafka's LazyIndex): an idle partition maps nothing,
and a segment's log loading drops the mapping its checks used (:meth:`release_mapping`), so old
segments are mapped again only when read.

Crash story: after a crash the file may still have its preallocated length, with zero entries
after the valid ones, or a torn last entry. Opening counts ``file_size // entry_size`` entries;
:meth:`sanity_check` (run by the segment on every open) rejects a size that is not a multiple of
the entry size, entries that are not strictly increasing, or entries beyond the segment, and the
segment then rebuilds the index from its .log. Indexes are never fsynced except by an explicit
flush; they are always rebuildable.

Writes: new entries collect in memory (``_tail``, up to one 4 KiB page) and reach the file with
one ``pwrite`` per page, and before every trim, flush, truncation and close. An append therefore
costs no system call for its index entries; one entry per ``index.interval.bytes`` (4 KiB by
default) made two per 16 KiB batch, about 1 µs each on this project's VM, a tenth of the 16 KiB
append's whole cost. Entries still in memory are lost in a crash, which costs nothing: the active
segment lies beyond the recovery point, so recovery rebuilds its indexes anyway, and a rolled or
flushed segment's entries were written when it rolled or flushed.

Reads go through the mapping for written entries and through the in-memory page for the rest.
Writes never go through the mapping (it is read-only): storing through it costs a write fault
whenever writeback has cleaned the page, and on ext4 that fault can wait for the journal. Measured
here (8-byte entry after each 1 MiB .log write, 768 times): through the map the worst store took
3.8-6.1 ms, with pwrite 0.03-0.2 ms. In whole appends (512 MiB of 1 MiB batches, two runs each)
the worst append fell from 12.4 / 8.0 ms to 2.9 / 1.5 ms. The appending thread is the broker's
handler loop, so those stalls were stalls of every connection.

Threading: one writer (the log's append path). Readers on other threads may look entries up
concurrently: ``entries`` is published after the entry bytes are in place, and ``_tail`` is one
tuple (entries on file, page in memory) read in one step. The page is only ever appended to or
has its last entry overwritten in place; writing it out publishes a new tuple with a new empty
page only after the pwrite, so a reader holding the old tuple still finds every entry. A reader
takes the mapping into a local before using it, and a mapping is unmapped only once nobody holds
it (odradek.storage.mapped_file), so replacing or dropping it never pulls memory from under a reader. The
file is only ever shrunk to the valid entries (trim), and readers read only below ``entries``, so
no read touches a mapped page beyond the file's end.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

from odradek.storage.mapped_file import map_readonly

# Entries waiting in memory are written once they fill a page (see the module docstring).
_TAIL_BYTES = 4096
# Mapping happens on a reader's first lookup; this keeps two readers from mapping one file twice.
_map_lock = threading.Lock()


class CorruptIndexError(Exception):
    """The index file is inconsistent; rebuild it from the segment's log."""


class IndexFile:
    entry_size = 8
    _key: struct.Struct  # the search key at the start of each entry (set by each kind of index)
    _entry_format: str  # the whole entry, for struct.iter_unpack

    def __init__(self, path: Path, base_offset: int, max_index_size: int, *, writable: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        # A plain attribute, not a property: the append path checks it for every batch.
        self.max_entries = self._round(max_index_size) // self.entry_size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            self.entries = length // self.entry_size
            self._length_is_multiple = length % self.entry_size == 0
            # The last entry, for the subclass to load its last offset/timestamp without mapping.
            self._last_entry_bytes = (os.pread(fd, self.entry_size, (self.entries - 1) * self.entry_size)
                                      if self.entries else b"")
            if writable:
                length = max(self._round(max_index_size), self.entries * self.entry_size)
                os.ftruncate(fd, length)
                self._length_is_multiple = True
        finally:
            os.close(fd)
        # The file's length as last set here (it may be shorter than the mapping after a trim).
        self._file_len = length
        self._map: memoryview | None = None  # mapped by the first lookup that needs the file
        # (entries written to the file, bytes of the entries after them): one tuple, read in one step.
        self._tail: tuple[int, bytearray] = (self.entries, bytearray())
        self._closed = False

    # -- sizing ---------------------------------------------------------------------------------
    def _round(self, size: int) -> int:
        return size - size % self.entry_size

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def _open(self, flags: int = os.O_RDWR) -> int:
        """A descriptor for one operation (the index keeps none, module docstring); caller closes."""
        return os.open(self.path, flags)

    def resize(self, new_size: int) -> None:
        """Grow/shrink the file to ``new_size`` (whole entries, never below the valid ones)."""
        new_size = max(self._round(new_size), self.entries * self.entry_size)
        fd = self._open()
        try:
            os.ftruncate(fd, new_size)
        finally:
            os.close(fd)
        self._file_len = new_size
        self._length_is_multiple = True
        self._grew(new_size)

    def ensure_preallocated(self) -> None:
        """Make the file full size again (the segment became active after truncation)."""
        if self._file_len < self._round(self.max_index_size):
            self.resize(self.max_index_size)

    def trim_to_valid_size(self) -> None:
        """Write the in-memory entries and shrink the file to the valid ones; the mapping stays."""
        size = self.entries * self.entry_size
        if not self._tail[1] and self._file_len == size:
            return  # nothing to write or cut (an old segment at close): no need to open the file
        fd = self._open()
        try:
            self._write_tail(fd)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        self._file_len = size

    def flush(self) -> None:
        fd = self._open()
        try:
            self._write_tail(fd)
            os.fsync(fd)  # entries are written with pwrite (module docstring), not through the map
        finally:
            os.close(fd)

    def open_for_fsync(self) -> int:
        """Write the in-memory entries and return a read-only descriptor for a later fsync (the
        caller closes it): a background flush opens its files when it runs, not while queued."""
        self.write_tail()
        return self._open(os.O_RDONLY)

    def close(self) -> None:
        if self._closed:
            return
        self.trim_to_valid_size()
        self._closed = True
        self._map = None  # unmapped once no reader holds it

    def release_mapping(self) -> None:
        """Drop the mapping; the next lookup that needs the file maps it again (Kafka's LazyIndex)."""
        self._map = None

    def rename(self, new_path: Path) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = 0
        self._tail = (0, bytearray())

    # -- entries --------------------------------------------------------------------------------
    def _add_entry(self, entry: bytes) -> None:
        """Append one packed entry in memory; write the page out once it is full."""
        tail = self._tail[1]
        tail += entry
        self.entries += 1  # published after the bytes: concurrent readers only see complete entries
        if len(tail) >= _TAIL_BYTES:
            self.write_tail()

    def _replace_last_entry(self, entry: bytes) -> None:
        """Overwrite the last entry (same size) where it lies: in memory in place, else in the file."""
        written, tail = self._tail
        if tail:
            tail[len(tail) - self.entry_size:] = entry
        else:
            fd = self._open()
            try:
                self._pwrite_all(fd, entry, (written - 1) * self.entry_size)
            finally:
                os.close(fd)

    def write_tail(self) -> None:
        """Write the entries held in memory to the file (then readers find them through the mapping)."""
        if not self._tail[1]:
            return
        fd = self._open()
        try:
            self._write_tail(fd)
        finally:
            os.close(fd)

    def _write_tail(self, fd: int) -> None:
        written, tail = self._tail
        if not tail:
            return
        # Past the file's end (a trimmed index written again) pwrite extends the file.
        end = self.entries * self.entry_size
        self._pwrite_all(fd, tail, written * self.entry_size)
        if end > self._file_len:
            self._file_len = end
            self._grew(end)
        self._tail = (self.entries, bytearray())  # published after the mapping check (see _grew)

    def _grew(self, length: int) -> None:
        """The file now holds ``length`` bytes: drop a mapping shorter than that.

        Called after the file grew and before the new entries are published, under the mapping
        lock: a reader mapping the file at the same moment either saw the new length or has
        installed its shorter mapping before this check, which then drops it.
        """
        with _map_lock:
            mapping = self._map
            if mapping is not None and len(mapping) < length:
                self._map = None

    def _pwrite_all(self, fd: int, data: bytes | bytearray, position: int) -> None:
        done = os.pwrite(fd, data, position)
        while done < len(data):  # a short write: rare (a signal); a full disk raises instead
            n = os.pwrite(fd, data[done:], position + done)
            if n <= 0:
                raise OSError(f"{self.path}: short write")
            done += n

    def _truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries; those after them in the file are overwritten later."""
        self.write_tail()
        self.entries = count
        self._tail = (count, bytearray())

    def _mapping(self, count: int) -> memoryview:
        """The mapping (made here if there is none), which covers at least the first ``count`` entries.

        Readers check only that a mapping exists; the writer drops one the file outgrows
        (:meth:`_grew`), so a mapping in place always covers every entry on file.
        """
        with _map_lock:
            mapping = self._map
            if mapping is None:
                path = self.path
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    if self.path == path:
                        raise
                    # Renamed (``.deleted``, a cleaner swap) between reading the name and opening.
                    fd = os.open(self.path, os.O_RDONLY)
                try:
                    # The whole file: an active index is preallocated, so later entries fit too.
                    length = os.fstat(fd).st_size
                    if length < count * self.entry_size:  # never mapped beyond the end: SIGBUS
                        raise CorruptIndexError(f"{self.path}: {length} bytes hold fewer than {count} entries")
                    mapping = map_readonly(fd, length)
                finally:
                    os.close(fd)
                self._map = mapping
            return mapping

    def _entry_source(self, i: int) -> tuple[memoryview | bytearray, int]:
        """Where entry ``i`` lies: (buffer, byte offset), the in-memory tail or the mapping."""
        written, tail = self._tail
        at = (i - written) * self.entry_size
        if 0 <= at < len(tail):
            return tail, at
        mapping = self._map
        if mapping is None:
            mapping = self._mapping(i + 1)
        return mapping, i * self.entry_size

    def _largest_at_most(self, key: int, count: int) -> int:
        """Index of the last entry whose key <= ``key`` among the first ``count``; -1 if none."""
        written, tail = self._tail
        in_tail = count - written
        if in_tail > 0 and len(tail) >= in_tail * self.entry_size:
            if self._key.unpack_from(tail)[0] <= key:  # the answer is in the tail
                return written + self._last_at_most(tail, key, in_tail)
            count = written
        # Otherwise every entry searched is in the file (a tail shorter than ``in_tail`` entries
        # was written out after this lookup read ``count``).
        mapping = self._map
        if mapping is None and count > 0:
            mapping = self._mapping(count)
        return self._last_at_most(mapping, key, count)

    def _last_at_most(self, buffer: memoryview | bytearray | None, key: int, count: int) -> int:
        """Binary search over the first ``count`` entries of ``buffer`` (the mapping or the tail).

        The last entry is tried first: a consumer that has caught up fetches past it, and one
        probe beats a ~15-probe search (each ~0.3 us in Python here).
        """
        if count <= 0 or buffer is None:  # None only when there is nothing to search (count 0)
            return -1
        unpack, size = self._key.unpack_from, self.entry_size
        if unpack(buffer, (count - 1) * size)[0] <= key:
            return count - 1
        lo, hi = 0, count - 2
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if unpack(buffer, mid * size)[0] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def _written_entries(self) -> list[tuple]:
        """Every entry, unpacked (the sanity checks); the in-memory ones are written out first."""
        self.write_tail()
        count = self.entries
        if count == 0:
            return []
        size = count * self.entry_size
        return list(struct.iter_unpack(self._entry_format, self._mapping(count)[:size]))

    def _check_size_and_order(self) -> list[tuple]:
        """Check the size and that the keys strictly increase; returns the entries for more checks."""
        if not self._length_is_multiple:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.entry_size}")
        entries = self._written_entries()
        keys = [entry[0] for entry in entries]
        # sorted()/set() run in C, which keeps this check fast for ~10^5 entries.
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        return entries
