"""The aborted-transaction index of a segment (``<base offset>.txnindex``): Kafka's TransactionIndex.

One entry per aborted transaction whose ABORT marker lies in the segment, in marker order, each
Kafka's AbortedTxn (34 bytes, big-endian)::

    version            int16   0
    producer_id        int64
    first_offset       int64   first offset of the transaction's data
    last_offset        int64   offset of its ABORT marker
    last_stable_offset int64   the LSO once the marker landed: the first offset of the oldest
                               transaction of another producer still open then, else last_offset + 1

A read_committed fetch collects the entries overlapping what it returns (:meth:`collect_aborted`,
Kafka's collectAbortedTxns) so the consumer can drop the aborted batches; ``last_stable_offset``
lets the search stop at the first segment whose entries prove no later one can matter.

Unlike the offset and time indexes the file is not preallocated and not mapped: entries are
appended with ``pwrite`` at the end, and the file is created by the first append (most segments
never see an aborted transaction and have no file). The entries are also kept in memory (34 bytes
on disk, one small tuple here) so a fetch reads no file; they are loaded lazily on first use.

Crash story: the file is written before the marker's append returns but fsynced only with its
segment; a torn or missing tail is harmless because recovery rebuilds the index of every segment it
rescans from the markers in the .log (odradek.storage.log). :meth:`sanity_check` (clean open) rejects a
size that is not a multiple of 34, an unknown version, or entries below the segment, and the
segment is then recovered.

Threading: one writer (the log's append path, under the log's lock); readers on other threads see
``_entries`` replaced or appended to in one step.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from odradek.storage.index_file import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(ABORTED_TXN_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    # True once an entry's last stable offset reached the search's upper bound: later segments
    # hold only transactions aborted after everything the fetch returns was stable.
    is_complete: bool


class TransactionIndex:
    """One segment's ``.txnindex`` (see module doc)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # loaded on first use

    # -- reading --------------------------------------------------------------------------------

    @property
    def entries(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            entries = self._entries = self._read_file()
        return entries

    def _read_file(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        usable = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is ignored (see sanity_check)
        out = []
        for version, *fields in _ENTRY.iter_unpack(memoryview(data)[:usable]):
            if version != ABORTED_TXN_VERSION:
                raise CorruptIndexError(f"{self.path}: unexpected aborted transaction version {version}")
            out.append(AbortedTxn(*fields))
        return out

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries overlapping [fetch_offset, upper_bound_offset) (Kafka's collectAbortedTxns)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError for a file this segment cannot have written (clean open)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {size} is not a multiple of {ENTRY_SIZE}")
        for txn in self.entries:
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: last offset of aborted transaction {txn} is less than "
                                        f"start offset {self.base_offset}")

    # -- writing --------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry at the end; markers come in offset order, so last offsets increase."""
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"the last offset of appended transactions must increase sequentially, but "
                             f"{txn.last_offset} is not greater than current last offset "
                             f"{entries[-1].last_offset} of index {self.path}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.to_bytes())
        finally:
            os.close(fd)
        self._entries = [*entries, txn]  # a new list: readers iterating the old one are unaffected

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset`` (the log was cut there)."""
        entries = self.entries
        keep = [txn for txn in entries if txn.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._rewrite(keep)

    def reset(self) -> None:
        """Forget every entry (recovery rebuilds them from the .log)."""
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if entries:
            with open(self.path, "r+b") as handle:
                handle.truncate(len(entries) * ENTRY_SIZE)
        else:
            self.path.unlink(missing_ok=True)
        self._entries = entries

    def flush(self) -> None:
        if self._entries:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def open_for_fsync(self) -> int | None:
        """A read-only descriptor for an fsync off the log's lock, or None without a file."""
        try:
            return os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None

    def rename(self, new_path: Path) -> None:
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:
            pass  # no aborted transaction here: nothing on disk to move
        self.path = new_path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
