"""The offset index (``<base offset>.index``): sparse map from offset to file position in the .log.

Entry (8 bytes, big-endian): int32 offset relative to the segment's base offset, int32 byte
position of a batch in the .log. The offset recorded is the batch's *last* offset, so the batch at
that position always contains it. An entry is added after every ``index.interval.bytes`` of
appended data. Lookups return the last entry at or below the target; the reader then scans batch
headers forward from that position (at most about one interval).

See :mod:`odradek.storage.index_file` for preallocation, trimming, the crash story and threading.
"""

from __future__ import annotations

import struct
from pathlib import Path

from odradek.storage.index_file import CorruptIndexError, IndexFile

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    entry_size = 8
    _key = struct.Struct(">i")  # relative offset
    _entry_format = _ENTRY.format

    def __init__(self, path: Path, base_offset: int, max_index_size: int, *, writable: bool = True) -> None:
        super().__init__(path, base_offset, max_index_size, writable=writable)
        last = self._last_entry_bytes
        self.last_offset = base_offset + _ENTRY.unpack(last)[0] if last else base_offset

    def entry(self, i: int) -> tuple[int, int]:
        """(absolute offset, position) of entry ``i``."""
        rel, pos = _ENTRY.unpack_from(*self._entry_source(i))
        return self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self.last_offset:
            raise CorruptIndexError(f"{self.path}: offset {offset} not above last entry {self.last_offset}")
        self.last_offset = offset
        self._add_entry(_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The last entry with offset <= target, or (base_offset, 0) if there is none."""
        i = self._largest_at_most(target_offset - self.base_offset, self.entries)
        return self.entry(i) if i >= 0 else (self.base_offset, 0)

    def last_entry_within(self, max_position: int, below_offset: int) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry whose batch starts at or before
        ``max_position`` and whose offset (the batch's last) is below ``below_offset``; None if none.

        Every entry's position is a batch boundary, so a read that must end on one within a byte
        budget jumps to this entry and walks only the batch headers after it, not every header
        from its start (issue 31: a 1 MiB fetch of 64 KiB batches read 16 headers, one pread each).
        Both keys grow with the entry number: the offset bound is a lookup, the position one a
        binary search below it (the last entry tried first, as a caught-up consumer's read ends
        there).
        """
        hi = self._largest_at_most(below_offset - 1 - self.base_offset, self.entries)
        if hi < 0:
            return None
        last = self.entry(hi)
        if last[1] <= max_position:
            return last
        lo, found = 0, -1
        hi -= 1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if self.entry(mid)[1] <= max_position:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return self.entry(found) if found >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        i = self._largest_at_most(offset - 1 - self.base_offset, self.entries)
        self._truncate_entries(i + 1)
        self.last_offset = self.entry(i)[0] if i >= 0 else self.base_offset

    def reset(self) -> None:
        super().reset()
        self.last_offset = self.base_offset

    def sanity_check(self, log_size: int, next_offset: int | None = None) -> None:
        """Raise CorruptIndexError if the file cannot describe a .log of ``log_size`` bytes."""
        entries = self._check_size_and_order()
        if not entries:
            return
        positions = [entry[1] for entry in entries]
        if positions != sorted(positions) or positions[-1] >= max(log_size, 1) or positions[0] < 0:
            raise CorruptIndexError(f"{self.path}: positions out of order or beyond the log ({log_size} bytes)")
        if self.last_offset < self.base_offset or (next_offset is not None and self.last_offset >= next_offset):
            raise CorruptIndexError(f"{self.path}: last offset {self.last_offset} outside the segment")
