"""The time index (``<base offset>.timeindex``): sparse map from timestamp to offset.

Entry (12 bytes, big-endian): int64 timestamp, int32 offset relative to the segment's base
offset. An entry (t, o) means: the largest record timestamp in the segment up to and including the
batch ending at offset o is t. Entries are added alongside offset index entries, only when the
timestamp grew, so timestamps and offsets are both strictly increasing. When the segment rolls or
closes, a final entry records the segment's largest timestamp, so the last entry of an inactive
segment is its max timestamp (used by time-based retention after a restart).

Lookup for ``offset_for_timestamp(t)``: the last entry with timestamp *strictly below* t. Every
record at or before that entry's offset has a timestamp < t, so the scan for the first record >= t
can start at that offset without missing an earlier record with timestamp == t.

See :mod:`odradek.storage.index_file` for preallocation, trimming, the crash story and threading.
"""

from __future__ import annotations

import struct
from pathlib import Path

from odradek.storage.index_file import CorruptIndexError, IndexFile

_ENTRY = struct.Struct(">qi")
_TS = struct.Struct(">q")
NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    entry_size = 12
    _key = _TS  # timestamp
    _entry_format = _ENTRY.format

    def __init__(self, path: Path, base_offset: int, max_index_size: int, *, writable: bool = True) -> None:
        super().__init__(path, base_offset, max_index_size, writable=writable)
        last = self._last_entry_bytes
        if last:  # read at open, so opening maps nothing (odradek.storage.index_file)
            self.last_timestamp, rel = _ENTRY.unpack(last)
            self.last_offset = self.base_offset + rel
        else:
            self.last_timestamp, self.last_offset = NO_TIMESTAMP, self.base_offset

    def _load_last(self) -> None:
        if self.entries:
            self.last_timestamp, self.last_offset = self.entry(self.entries - 1)
        else:
            self.last_timestamp, self.last_offset = NO_TIMESTAMP, self.base_offset

    def entry(self, i: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry ``i``."""
        ts, rel = _ENTRY.unpack_from(*self._entry_source(i))
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if the timestamp grew; True if an entry was added."""
        if timestamp <= self.last_timestamp or (self.entries and offset < self.last_offset):
            return False
        entry = _ENTRY.pack(timestamp, offset - self.base_offset)
        if self.entries and offset == self.last_offset:
            # Same offset, larger timestamp (the roll-time final entry): replace the last entry.
            self._replace_last_entry(entry)
        elif not skip_full_check and self.is_full:
            return False
        else:
            self._add_entry(entry)
        self.last_timestamp, self.last_offset = timestamp, offset
        return True

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """The last entry with timestamp < ``timestamp``, or None."""
        i = self._largest_at_most(timestamp - 1, self.entries)
        return self.entry(i) if i >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        count = self.entries
        while count and self.entry(count - 1)[1] >= offset:
            count -= 1
        self._truncate_entries(count)
        self._load_last()

    def reset(self) -> None:
        super().reset()
        self._load_last()

    def sanity_check(self, next_offset: int | None = None) -> None:
        entries = self._check_size_and_order()
        if not entries:
            return
        offsets = [self.base_offset + entry[1] for entry in entries]
        if offsets != sorted(offsets) or offsets[0] < self.base_offset:
            raise CorruptIndexError(f"{self.path}: offsets out of order")
        if next_offset is not None and offsets[-1] >= next_offset:
            raise CorruptIndexError(f"{self.path}: last offset {offsets[-1]} outside the segment")
