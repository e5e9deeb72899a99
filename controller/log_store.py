"""Where committed metadata records live: the ``MetadataLogStore`` interface and its local file store.

The controller appends each operation's records as one batch stamped with its controller epoch,
and at start-up loads the newest snapshot and replays the batches after it; it never touches a
file itself. The interface is
asynchronous because a distributed store answers over the network. Every store keeps the
``odradek.controller.metadata_log`` contract:

1. ``open`` recovers the store (a torn local tail is cut off) and returns its newest snapshot (or
   None) and every committed batch after it, oldest first, for replay: load the snapshot into an
   empty image, then apply the batches. ``next_offset`` and ``newest_epoch`` then describe its end.
2. ``append(records, epoch)`` commits the records as one atomic batch (all or nothing) and returns
   its base offset, together with any batches another writer committed since this store last
   looked (``caught_up``), which the caller applies before its own. An epoch older than the newest
   one committed is refused with ``StaleControllerEpochError`` and nothing is written: this is the
   fencing of a deposed controller.
   A store that could not learn whether an append committed (etcd unreachable or timing out
   mid-Txn) raises ``MetadataStoreUnavailableError``: the caller must not go on from what it
   holds in memory, which may lack that very batch.
3. ``read(from_offset)`` returns what a reader standing at ``from_offset`` needs (a broker or a
   standby catching up; tools): the committed batches holding offsets ``>= from_offset``, and, when
   ``from_offset`` is below the newest snapshot's end offset (the batches it needs were deleted),
   that snapshot first, with every batch after it: the reader then *replaces* its image.
4. ``write_snapshot(snapshot)`` makes a snapshot of the image at ``next_offset`` the store's start
   and deletes the batches it covers (Kafka's snapshot + log truncation), atomically for readers
   (they see the old log or the new snapshot, never neither). False, with nothing changed, when the
   store moved on since the caller's image (another writer appended). ``bytes_since_snapshot`` is
   the size of the batches committed after the newest snapshot: the controller snapshots on it
   (``metadata.log.max.record.bytes.between.snapshots``) and on time.
5. ``close`` releases the store; the records stay.

How an etcd store fits (``odradek.controller.etcd_log_store.EtcdMetadataLogStore``, what a cluster's
controller uses; it also guards each append with the lease, see there): batch ``b`` is the value of key
``<prefix>/log/<base offset, zero-padded>`` (the encoded frame of ``metadata_log.encode_batch``),
and ``<prefix>/head`` holds ``{next_offset, newest_epoch}``. ``append`` is one Txn: compare
``mod_revision(<prefix>/head) == r`` (the revision this store last read), then put the batch key
and the new head. A failed compare means another writer got in: Range the log keys from
``next_offset`` (those are ``caught_up``), refuse if the newest epoch is now newer than ours, else
retry with the new revision. ``open`` and ``read`` are Range reads of ``<prefix>/``; brokers
Watch ``<prefix>/log/`` instead of polling. Snapshots: chunk keys, then one Txn that publishes them
and deletes the covered batch keys, then a compaction of etcd's history (see there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from odradek.controller.metadata_log import (
    MetadataBatch,
    MetadataLog,
    MetadataLogContents,
    MetadataStoreUnavailableError,
)
from odradek.controller.metadata_snapshot import MetadataSnapshot
from odradek.controller.records import MetadataRecord

_T = TypeVar("_T")

__all__ = ["AppendResult", "LocalMetadataLogStore", "MetadataLogStore", "MetadataStoreUnavailableError"]


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    # Batches another writer committed before ours (only possible at a take-over), oldest first.
    caught_up: tuple[MetadataBatch, ...] = ()


class MetadataLogStore(Protocol):
    """The committed metadata records (see the module docstring for the contract)."""

    @property
    def next_offset(self) -> int:
        """Offset the next appended record gets (= number of records committed so far)."""
        ...

    @property
    def newest_epoch(self) -> int:
        """Newest controller epoch committed (-1 when empty)."""
        ...

    @property
    def bytes_since_snapshot(self) -> int:
        """Bytes of the batches committed after the newest snapshot (all of them when there is none)."""
        ...

    async def open(self) -> MetadataLogContents: ...

    async def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> AppendResult: ...

    async def read(self, from_offset: int = 0) -> MetadataLogContents: ...

    async def write_snapshot(self, snapshot: MetadataSnapshot) -> bool: ...

    async def close(self) -> None: ...


class LocalMetadataLogStore:
    """``MetadataLogStore`` on the local ``MetadataLog`` file under ``metadata_dir``.

    Blocking file work runs on ``executor`` (None: the loop's default executor), one call at a
    time. The store may be opened again after ``close`` (a controller restarting in-process).
    """

    def __init__(self, metadata_dir: Path, executor: Executor | None = None) -> None:
        self._metadata_dir = Path(metadata_dir)
        self._executor = executor
        self._lock = asyncio.Lock()
        self._log: MetadataLog | None = None

    @property
    def path(self) -> Path | None:
        """The log file, once open."""
        return None if self._log is None else self._log.path

    @property
    def next_offset(self) -> int:
        return self._open_log().next_offset

    @property
    def newest_epoch(self) -> int:
        return self._open_log().newest_epoch

    def _open_log(self) -> MetadataLog:
        if self._log is None:
            raise RuntimeError(f"the metadata log in {self._metadata_dir} is not open")
        return self._log

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def bytes_since_snapshot(self) -> int:
        return self._open_log().bytes_since_snapshot

    async def open(self) -> MetadataLogContents:
        if self._log is not None:
            raise RuntimeError(f"the metadata log in {self._metadata_dir} is already open")
        metadata_log, batches = await self._run(MetadataLog.open, self._metadata_dir)
        self._log = metadata_log
        return MetadataLogContents(metadata_log.snapshot, tuple(batches))

    async def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> AppendResult:
        return await self._run(_append, self._open_log(), records, controller_epoch)

    async def read(self, from_offset: int = 0) -> MetadataLogContents:
        return await self._run(self._open_log().read, from_offset)

    async def write_snapshot(self, snapshot: MetadataSnapshot) -> bool:
        return await self._run(self._open_log().write_snapshot, snapshot)

    async def close(self) -> None:
        metadata_log, self._log = self._log, None
        if metadata_log is not None:
            await self._run(metadata_log.close)


def _append(metadata_log: MetadataLog, records: Sequence[MetadataRecord], controller_epoch: int) -> AppendResult:
    """One executor call: the append and the batches it caught up on belong together."""
    base_offset = metadata_log.append(records, controller_epoch)
    return AppendResult(base_offset, tuple(metadata_log.take_caught_up()))
