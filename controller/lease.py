"""Epoch-fenced controller lease: who may write cluster metadata, and with which epoch.

The controller writes metadata only while it holds the lease; the lease's ``epoch`` becomes the
controller epoch stamped on every metadata-log append, so a deposed controller's late writes are
refused (see ``odradek.controller.metadata_log``). ``LeaseStore`` is the interface, asynchronous because a
distributed store answers over the network; ``LocalLeaseStore`` is the single-node implementation.
Every store keeps the same contract:

1. ``try_acquire`` returns a lease with an epoch strictly greater than every epoch ever handed out
   by this store, or ``None`` while another holder's lease is live.
2. ``renew`` extends a lease only if it is still the current one (same holder, same epoch, not
   expired); otherwise it raises ``LeaseLostError`` and the holder must stop writing.
3. ``release`` gives the lease up early; the epoch is never reused. ``close`` drops whatever the
   store holds without releasing (what process death does): the lease then lapses by its TTL.
4. ``now_ms`` arguments are the caller's clock; ``Lease.expires_at_ms`` is expressed in it, so the
   controller can renew ahead of expiry without knowing the store's clock.

How an etcd store fits (implemented by ``odradek.controller.etcd_lease.EtcdLeaseStore``, not yet wired into
the broker): ``try_acquire`` = LeaseGrant(ttl) giving ``lease_id``,
then one Txn: compare ``create_revision(<leader key>) == 0`` and ``value(<epoch key>) == e`` (read
just before), put ``<leader key> = holder`` attached to ``lease_id`` and ``<epoch key> = e + 1``; a
failed compare revokes the granted lease and returns ``None``; the returned ``Lease`` carries
``lease_id`` and epoch ``e + 1``. ``renew`` = LeaseKeepAliveOnce(lease_id) plus a Get of the leader
key; a TTL of 0 or a leader key naming another holder/epoch raises ``LeaseLostError``. ``current`` =
Get of the leader key. ``release`` = LeaseRevoke(lease_id), which deletes the leader key; the epoch
key stays, so epochs never repeat. ``close`` closes the client without revoking.

``LocalLeaseStore`` runs the file work of ``LeaseFile`` on an executor (the embedded controller's own
thread, broker/metadata/embedded_controller.py: a renewal must not queue behind log loading), one
call at a time, so the event loop never blocks on the fsync. ``LeaseFile`` on-disk format: a JSON
file (by default ``<metadata dir>/controller.lease``)::

    {"epoch": <int>, "holder_id": <int, -1 when free>, "expires_at_ms": <int>, "ttl_ms": <int>}

``expires_at_ms`` is in the holder's clock, which the controller makes a monotonic one (a step of
the system clock must not expire a lease); only the holder's renewals compare it, and a new holder
takes over by the lock, not by it.

written by write-temp + fsync + rename + fsync(dir), so after a crash the file holds either the old
or the new state, never a mix; the epoch therefore never goes backwards across restarts. Mutual
exclusion between processes uses ``fcntl.flock`` on ``<lease file>.lock``: the holder keeps an
exclusive lock from acquisition until ``release`` (or process death, when the kernel drops it) and
writes its pid into the lock file, so a refused process can say who holds the directory. A
second process on the same data directory, or a second store object in the same process (flock
locks belong to the open file), cannot acquire while the lock is held, even if the first holder's
TTL has lapsed - on one machine the lock, not the clock, is what fences. TTL expiry still matters
locally: an expired lease cannot be renewed, so a holder that stalled past its TTL must re-acquire
and get a new epoch.

``LeaseFile`` is synchronous and not thread-safe (blocking file I/O: a few small writes and an
fsync); ``LocalLeaseStore`` serialises its calls with an asyncio lock.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.checkpoint_file import write_atomically

NO_HOLDER = -1
# Lease.lease_id of a store with no server-side lease object (the local file store).
NO_LEASE_ID = 0

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Lease:
    holder_id: int
    epoch: int
    expires_at_ms: int
    # The store's own handle for the lease (an etcd lease id); NO_LEASE_ID for the local store.
    lease_id: int = NO_LEASE_ID

    def is_live(self, now_ms: int) -> bool:
        return now_ms < self.expires_at_ms


class LeaseLostError(KafkaApiError):
    """The lease was taken over (newer epoch or other holder) or expired; stop acting as controller."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NOT_CONTROLLER, message)


class LeaseStore(Protocol):
    """Where the controller lease lives (see the module docstring for the contract)."""

    async def try_acquire(self, holder_id: int, ttl_ms: int, now_ms: int) -> Lease | None: ...

    async def renew(self, lease: Lease, now_ms: int) -> Lease: ...

    async def current(self, now_ms: int) -> Lease | None: ...

    async def release(self, lease: Lease) -> None: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class _LeaseState:
    epoch: int
    holder_id: int
    expires_at_ms: int
    ttl_ms: int


# One durable-replace helper for every small state file (lease state, meta.properties, checkpoints).
write_file_atomically = write_atomically


class LeaseFile:
    """The local lease, synchronously: a JSON state file plus an flock'd lock file in the data dir."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._lock_fd: int | None = None

    @property
    def path(self) -> Path:
        return self._path

    def _read(self) -> _LeaseState:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return _LeaseState(epoch=0, holder_id=NO_HOLDER, expires_at_ms=0, ttl_ms=0)
        data = json.loads(raw)
        return _LeaseState(
            epoch=int(data["epoch"]),
            holder_id=int(data["holder_id"]),
            expires_at_ms=int(data["expires_at_ms"]),
            ttl_ms=int(data.get("ttl_ms", 0)),
        )

    def _write(self, state: _LeaseState) -> None:
        payload = {
            "epoch": state.epoch,
            "holder_id": state.holder_id,
            "expires_at_ms": state.expires_at_ms,
            "ttl_ms": state.ttl_ms,
        }
        write_file_atomically(self._path, json.dumps(payload).encode())

    def _lock(self) -> bool:
        if self._lock_fd is not None:
            return True
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        # The holder's pid, only so that a second process refused here can name who holds the
        # directory; the flock, not this content, is what excludes.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        return True

    def holder_pid(self) -> int | None:
        """The pid written by the process holding the lock, if it wrote one (None if unknown)."""
        try:
            return int(self._lock_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            try:
                os.ftruncate(self._lock_fd, 0)  # before unlocking: never erase the next holder's pid
            except OSError:
                pass
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def try_acquire(self, holder_id: int, ttl_ms: int, now_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        if not self._lock():
            return None  # another process (or store object) holds the lock
        state = self._read()
        # If the file names another holder with a live lease, that holder died without releasing
        # (nobody holds the lock). On one machine the lock is authoritative, so we take over; the new
        # epoch fences anything the dead holder might still have in flight.
        new_state = _LeaseState(
            epoch=state.epoch + 1, holder_id=holder_id, expires_at_ms=now_ms + ttl_ms, ttl_ms=ttl_ms
        )
        try:
            self._write(new_state)
        except BaseException:
            self._unlock()
            raise
        return Lease(holder_id, new_state.epoch, new_state.expires_at_ms)

    def renew(self, lease: Lease, now_ms: int) -> Lease:
        if self._lock_fd is None:
            raise LeaseLostError(f"lease epoch {lease.epoch} is not held by this store")
        state = self._read()
        if state.epoch != lease.epoch or state.holder_id != lease.holder_id:
            raise LeaseLostError(
                f"lease epoch {lease.epoch} of holder {lease.holder_id} was superseded by epoch "
                f"{state.epoch} of holder {state.holder_id}"
            )
        if now_ms >= state.expires_at_ms:
            raise LeaseLostError(f"lease epoch {lease.epoch} expired at {state.expires_at_ms} ms")
        state.expires_at_ms = now_ms + state.ttl_ms
        self._write(state)
        return Lease(lease.holder_id, lease.epoch, state.expires_at_ms)

    def current(self, now_ms: int) -> Lease | None:
        state = self._read()
        if state.holder_id == NO_HOLDER or now_ms >= state.expires_at_ms:
            return None
        return Lease(state.holder_id, state.epoch, state.expires_at_ms)

    def release(self, lease: Lease) -> None:
        if self._lock_fd is None:
            return
        state = self._read()
        if state.epoch == lease.epoch and state.holder_id == lease.holder_id:
            # Keep the epoch: the next acquisition must still get a larger one.
            self._write(_LeaseState(epoch=state.epoch, holder_id=NO_HOLDER, expires_at_ms=0, ttl_ms=0))
        self._unlock()

    def close(self) -> None:
        """Drop the lock without touching the file (what process death does)."""
        self._unlock()


class LocalLeaseStore:
    """Single-node ``LeaseStore``: a ``LeaseFile`` whose blocking calls run on ``executor``.

    ``executor`` None means the event loop's default executor. Calls are serialised (a renewal
    from the renew timer never overlaps one from a write), as ``LeaseFile`` requires.
    """

    def __init__(self, path: Path, executor: Executor | None = None) -> None:
        self._file = LeaseFile(path)
        self._executor = executor
        self._lock = asyncio.Lock()

    @property
    def path(self) -> Path:
        return self._file.path

    def holder_pid(self) -> int | None:
        """The pid written by the process holding the lock, if it wrote one (a one-line read)."""
        return self._file.holder_pid()

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def try_acquire(self, holder_id: int, ttl_ms: int, now_ms: int) -> Lease | None:
        return await self._run(self._file.try_acquire, holder_id, ttl_ms, now_ms)

    async def renew(self, lease: Lease, now_ms: int) -> Lease:
        return await self._run(self._file.renew, lease, now_ms)

    async def current(self, now_ms: int) -> Lease | None:
        return await self._run(self._file.current, now_ms)

    async def release(self, lease: Lease) -> None:
        await self._run(self._file.release, lease)

    async def close(self) -> None:
        await self._run(self._file.close)
