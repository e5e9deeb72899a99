"""``EtcdLeaseStore``: the controller lease (``odradek.controller.lease.LeaseStore``) held in etcd v3.

Keys under ``prefix`` (``/odradek/<cluster-id>`` in a cluster):

- ``<prefix>/controller``: the leader key, ``{"holder_id": h, "epoch": e}`` (JSON), attached to the
  holder's etcd lease, so etcd deletes it when the lease is revoked or lapses by its TTL.
- ``<prefix>/controller_epoch``: the newest epoch ever handed out (decimal). Never attached to a
  lease and never deleted, so epochs never repeat, across holders and across etcd restarts
  (etcd keeps it on disk like any key).

The operations, as ``controller.lease`` describes them:

- ``try_acquire``: read the epoch key (``e``, 0 when absent), LeaseGrant(ttl), then one Txn:
  compare ``create_revision(leader) == 0`` (no live holder) and the epoch key still ``e``; put the
  leader key under the new lease and the epoch key ``e + 1``. A failed compare (someone holds it, or
  won the race) revokes the granted lease and returns ``None``.
- ``renew``: LeaseKeepAliveOnce, then Get of the leader key; a TTL of 0 (lapsed or revoked) or a
  leader key naming another lease raises ``LeaseLostError``. So does a lease this store did not
  grant (or forgot at ``close``), a lease the caller's clock says has expired (it is revoked first,
  so a successor need not wait for etcd's TTL), and etcd being unreachable: the holder cannot prove
  it still leads, so it must stop writing (fencing first; it campaigns again when etcd is back).
- ``current``: Get of the leader key plus the lease's remaining TTL.
- ``release``: LeaseRevoke, which deletes the leader key; the epoch key stays.
- ``close``: closes the client without revoking (what process death does): the lease lapses by its
  TTL, after which another candidate's ``try_acquire`` succeeds with a higher epoch.

Fencing of writes: ``fence(holder_id)`` gives the compare ``EtcdMetadataLogStore`` adds to each append
Txn: the leader key's value is still exactly ``{"holder_id": h, "epoch": e}`` for the append's epoch.
A holder whose lease lapsed (cut off from etcd, stalled) cannot write even before a successor has
written anything: the epoch guard of the issue's design, enforced by etcd itself.

etcd leases count whole seconds and etcd raises a TTL below its minimum (1.5 election timeouts,
2 s with etcd's defaults) to that minimum; ``ttl_ms`` is rounded up to whole seconds. The returned
``Lease.expires_at_ms`` is ``now_ms + min(ttl_ms, granted TTL)`` in the caller's clock: never later
than etcd's own expiry, since etcd started counting after ``now_ms`` was read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from odradek.controller.etcd_client import EtcdError, etcd_client
from odradek.controller.lease import Lease, LeaseLostError

LEADER_KEY = "controller"
EPOCH_KEY = "controller_epoch"


class EtcdLeaseStore:
    """``LeaseStore`` on etcd at ``endpoint`` (``host:port``), keys under ``prefix``."""

    def __init__(self, endpoint: str, prefix: str, timeout_s: float = 5.0) -> None:
        self._client = etcd_client(endpoint, timeout_s)
        base = prefix.rstrip("/")
        self._leader_key = f"{base}/{LEADER_KEY}".encode()
        self._epoch_key = f"{base}/{EPOCH_KEY}".encode()
        # etcd lease id -> the TTL the holder asked for, for the leases this store granted and holds.
        self._held_ttl_ms: dict[int, int] = {}

    @property
    def leader_key(self) -> bytes:
        return self._leader_key

    @property
    def epoch_key(self) -> bytes:
        return self._epoch_key

    def fence(self, holder_id: int) -> LeaseFence:
        """The guard ``EtcdMetadataLogStore`` adds to every append of ``holder_id``."""
        return LeaseFence(self._leader_key, self._epoch_key, holder_id)

    async def _read_epoch(self) -> int:
        kv = await self._client.get(self._epoch_key)
        return 0 if kv is None else int(kv.value)

    async def try_acquire(self, holder_id: int, ttl_ms: int, now_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        epoch = await self._read_epoch()
        granted = await self._client.lease(max(1, math.ceil(ttl_ms / 1000)))
        lease_id = int(granted.id)
        t = self._client.transactions
        epoch_unchanged = t.create(self._epoch_key) == 0 if epoch == 0 else t.value(self._epoch_key) == str(epoch)
        value = leader_value(holder_id, epoch + 1)
        try:
            succeeded, _ = await self._client.transaction(
                compare=[t.create(self._leader_key) == 0, epoch_unchanged],
                success=[t.put(self._leader_key, value, lease=lease_id),
                         t.put(self._epoch_key, str(epoch + 1).encode())],
                failure=[],
            )
        except BaseException:
            await self._revoke_quietly(lease_id)
            raise
        if not succeeded:
            await self._revoke_quietly(lease_id)
            return None
        self._held_ttl_ms[lease_id] = ttl_ms
        return Lease(holder_id, epoch + 1, now_ms + min(ttl_ms, int(granted.ttl) * 1000), lease_id)

    async def renew(self, lease: Lease, now_ms: int) -> Lease:
        ttl_ms = self._held_ttl_ms.get(lease.lease_id)
        if ttl_ms is None:
            raise LeaseLostError(f"lease epoch {lease.epoch} is not held by this store")
        if now_ms >= lease.expires_at_ms:
            await self._forget_and_revoke(lease.lease_id)
            raise LeaseLostError(f"lease epoch {lease.epoch} expired at {lease.expires_at_ms} ms")
        try:
            reply = await self._client.refresh_lease(lease.lease_id)
            kv = await self._client.get(self._leader_key)
        except EtcdError as e:
            raise LeaseLostError(f"cannot renew lease epoch {lease.epoch}: etcd unreachable ({e})") from e
        granted_ttl_s = 0 if reply is None else int(reply.TTL)
        if granted_ttl_s <= 0:
            self._held_ttl_ms.pop(lease.lease_id, None)
            raise LeaseLostError(f"lease epoch {lease.epoch} lapsed in etcd")
        holder = None if kv is None else _decode_holder(kv)
        if kv is None or int(kv.lease) != lease.lease_id or holder != (lease.holder_id, lease.epoch):
            await self._forget_and_revoke(lease.lease_id)
            raise LeaseLostError(f"lease epoch {lease.epoch} of holder {lease.holder_id} was superseded"
                                 f" by {holder}")
        return Lease(lease.holder_id, lease.epoch, now_ms + min(ttl_ms, granted_ttl_s * 1000), lease.lease_id)

    async def current(self, now_ms: int) -> Lease | None:
        kv = await self._client.get(self._leader_key)
        if kv is None:
            return None
        lease_id = int(kv.lease)
        info = await self._client.get_lease_info(lease_id, keys=False)
        remaining_s = int(info.TTL)
        if remaining_s < 0:
            return None  # -1: the lease lapsed just now; etcd deletes the key with it
        holder_id, epoch = _decode_holder(kv)
        # etcd rounds the remaining TTL down to whole seconds (0 = under a second); the key still
        # exists, so the lease is live "now" at least.
        return Lease(holder_id, epoch, now_ms + max(remaining_s * 1000, 1), lease_id)

    async def release(self, lease: Lease) -> None:
        await self._forget_and_revoke(lease.lease_id)

    async def close(self) -> None:
        """Forget the held leases without revoking them (they lapse by TTL) and close the client."""
        self._held_ttl_ms.clear()
        await self._client.close()

    async def _forget_and_revoke(self, lease_id: int) -> None:
        if self._held_ttl_ms.pop(lease_id, None) is not None:
            await self._revoke_quietly(lease_id)

    async def _revoke_quietly(self, lease_id: int) -> None:
        """Revoke; a lease that already lapsed (or an etcd that is gone) has nothing left to revoke."""
        try:
            await self._client.revoke_lease(lease_id)
        except EtcdError:
            pass


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """"The lease of ``holder_id`` at the append's epoch is still live": a compare on the leader
    key's exact value, which etcd deletes with the lease (a lapsed or revoked lease fails it at once,
    before any successor has written) and a successor overwrites with its own epoch."""

    leader_key: bytes
    epoch_key: bytes
    holder_id: int

    def leader_value(self, epoch: int) -> bytes:
        return leader_value(self.holder_id, epoch)


def leader_value(holder_id: int, epoch: int) -> bytes:
    """The leader key's value; byte-exact, since the fence compares it."""
    return json.dumps({"holder_id": holder_id, "epoch": epoch}).encode()


def _decode_holder(kv: Any) -> tuple[int, int]:
    data = json.loads(kv.value)
    return int(data["holder_id"]), int(data["epoch"])
