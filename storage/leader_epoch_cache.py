"""Leader epoch cache: which leader epoch started at which offset (Kafka's LeaderEpochFileCache).

On disk, ``leader-epoch-checkpoint`` in the partition directory, Kafka's checkpoint format::

    0
    <count>
    <epoch> <start_offset>
    ...

Entries have strictly increasing epochs and non-decreasing start offsets. A new entry is added
when an append carries an epoch above the latest; the log truncates the cache with itself
(:meth:`truncate_from_end` on truncation, :meth:`truncate_from_start` when the log start offset
advances). OffsetForLeaderEpoch answers with :meth:`end_offset_for_epoch`.

Crash story: the file is rewritten atomically on every change. After an unclean shutdown recovery
rebuilds the cache from the batches' partition_leader_epoch fields, so a stale file is harmless.

Owned by its Log: called with the log's append lock held (appends, truncation) or from
``end_offset_for_epoch`` readers (reads a snapshot list; safe under the GIL).
"""

from __future__ import annotations

import bisect
from pathlib import Path

from odradek.storage.checkpoint_file import CheckpointFormatError, read_checkpoint, write_checkpoint

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, dir: Path, *, load: bool = True) -> None:
        self.path = dir / FILE_NAME
        self._entries: list[tuple[int, int]] = []
        if load:
            try:
                self._entries = [(int(e), int(o)) for e, o in read_checkpoint(self.path, 2)]
            except (CheckpointFormatError, ValueError):
                self._entries = []  # rebuilt from the log by the caller's recovery

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return False
        # Kafka drops entries whose start offset is at or beyond the new one (a leader that
        # appended nothing before losing leadership).
        entries = [e for e in self._entries if e[1] < start_offset]
        entries.append((epoch, start_offset))
        self._entries = entries
        if persist:
            self.flush()
        return True

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers; (-1, -1) if unknown."""
        entries = self._entries
        if epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == entries[-1][0]:
            return epoch, log_end_offset
        epochs = [e for e, _ in entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # newer than anything we know
        if higher == 0:
            return epoch, entries[0][1]  # older than our first epoch
        return entries[higher - 1][0], entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e[1] < end_offset]
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it now starts there."""
        below = [e for e in self._entries if e[1] <= start_offset]
        if not below:
            return
        kept = [(below[-1][0], start_offset)] + [e for e in self._entries if e[1] > start_offset]
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self) -> None:
        write_checkpoint(self.path, self._entries)
