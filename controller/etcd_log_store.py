"""``EtcdMetadataLogStore``: the committed metadata records (``controller.log_store.MetadataLogStore``) in etcd v3.

Keys under ``prefix`` (``/odradek/<cluster-id>/metadata`` in a cluster):

- ``<prefix>/log/<base offset, 20 digits>``: one batch, the same frame ``metadata_log.encode_batch``
  writes to the local file (length, CRC32C, base offset, controller epoch, JSON records), so a
  replay decodes exactly the records the local store would give; zero-padding makes etcd's key
  order the offset order.
- ``<prefix>/head``: ``{"next_offset": n, "newest_epoch": e}`` (JSON), rewritten by every append.
  Its ``mod_revision`` is the version of the whole log: every append changes it.

``open`` is one Range over ``<prefix>/`` (head and batches from one consistent revision).
``append`` is one Txn: compare ``mod_revision(head) == r`` (the revision this store last saw), then
put the batch key and the new head. If another writer got in, the same Txn's failure branch reads
the head and the batch keys from our ``next_offset`` on: those batches are ``caught_up``. If the
newest epoch is now newer than ours, the append is refused with ``StaleControllerEpochError`` and
nothing is written; otherwise it is retried on the new revision.

With a ``fence`` (``EtcdLeaseStore.fence(node_id)``) every append Txn also compares the leader key to
this holder at the append's epoch, so a controller whose lease lapsed or was taken over is refused
by etcd itself (``LeaseFencedError``, a ``StaleControllerEpochError``) even before its successor
wrote anything: "every metadata write is guarded by: the epoch is still mine". Brokers will Watch
``<prefix>/log/`` (the next step of issue 12); ``read`` is a Range.

Like the local log there is no compaction yet (``controller.metadata_log``'s TODO(snapshot)).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aetcd.utils import prefix_range_end

from controller.etcd_client import EtcdError, etcd_client
from controller.etcd_lease import LeaseFence
from controller.log_store import AppendResult, MetadataStoreUnavailableError
from controller.metadata_log import (
    MetadataBatch,
    MetadataLogCorruptError,
    StaleControllerEpochError,
    decode_batches,
    encode_batch,
)
from controller.records import MetadataRecord

OFFSET_DIGITS = 20  # an int64 offset in decimal


class EtcdMetadataLogStore:
    """``MetadataLogStore`` on etcd at ``endpoint`` (``host:port``), keys under ``prefix``.

    The store may be opened again after ``close`` (a controller restarting in-process).
    """

    def __init__(self, endpoint: str, prefix: str, timeout_s: float = 5.0, fence: LeaseFence | None = None) -> None:
        self._client = etcd_client(endpoint, timeout_s)
        self._fence = fence
        base = prefix.rstrip("/")
        self._range_start = f"{base}/".encode()
        self._head_key = f"{base}/head".encode()
        self._log_prefix = f"{base}/log/".encode()
        self._open = False
        self._next_offset = 0
        self._newest_epoch = -1
        self._head_revision = 0  # mod_revision of the head key as this store last saw it; 0: absent
        # Batches read from other writers and not yet handed out: a refused append keeps them for the
        # next append that succeeds (as the local log's take_caught_up does), so none is ever skipped.
        self._caught_up: list[MetadataBatch] = []

    def batch_key(self, base_offset: int) -> bytes:
        return self._log_prefix + str(base_offset).zfill(OFFSET_DIGITS).encode()

    @property
    def head_key(self) -> bytes:
        return self._head_key

    @property
    def next_offset(self) -> int:
        self._check_open()
        return self._next_offset

    @property
    def newest_epoch(self) -> int:
        self._check_open()
        return self._newest_epoch

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError(f"the etcd metadata log under {self._range_start.decode()} is not open")

    async def open(self) -> list[MetadataBatch]:
        if self._open:
            raise RuntimeError(f"the etcd metadata log under {self._range_start.decode()} is already open")
        kvs = list(await self._client.get_prefix(self._range_start))
        head = next((kv for kv in kvs if kv.key == self._head_key), None)
        batches = self._decode([kv for kv in kvs if kv.key.startswith(self._log_prefix)], 0, -1)
        self._next_offset = batches[-1].next_offset if batches else 0
        self._newest_epoch = batches[-1].controller_epoch if batches else -1
        self._head_revision = 0 if head is None else int(head.mod_revision)
        self._caught_up = []
        if head is not None and _decode_head(head) != (self._next_offset, self._newest_epoch):
            raise MetadataLogCorruptError(
                f"etcd metadata head {head.value!r} disagrees with its batches (next offset "
                f"{self._next_offset}, newest epoch {self._newest_epoch})")
        self._open = True
        return batches

    async def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> AppendResult:
        self._check_open()
        if not records:
            raise ValueError("a metadata batch needs at least one record")
        frame_records = tuple(records)
        t = self._client.transactions
        while True:
            if controller_epoch < self._newest_epoch:
                raise StaleControllerEpochError(controller_epoch, self._newest_epoch)
            base_offset = self._next_offset
            next_offset = base_offset + len(frame_records)
            head = json.dumps({"next_offset": next_offset, "newest_epoch": controller_epoch}).encode()
            compare = [t.mod(self._head_key) == self._head_revision]
            failure = [t.get(self._head_key), t.get(self.batch_key(base_offset), prefix_range_end(self._log_prefix))]
            if self._fence is not None:
                compare.append(t.value(self._fence.leader_key) == self._fence.leader_value(controller_epoch))
                failure += [t.get(self._fence.leader_key), t.get(self._fence.epoch_key)]
            try:
                succeeded, responses = await self._client.transaction(
                    compare=compare,
                    success=[t.put(self.batch_key(base_offset),
                                   encode_batch(base_offset, controller_epoch, frame_records)),
                             t.put(self._head_key, head)],
                    failure=failure,
                )
            except EtcdError as exc:
                # The Txn may or may not have committed; this store's view (revision, next offset)
                # is now in doubt too.
                raise MetadataStoreUnavailableError(
                    f"metadata append at offset {base_offset} has an unknown outcome: etcd did not answer ({exc})"
                ) from exc
            if succeeded:
                self._head_revision = int(responses[1].response_put.header.revision)
                self._next_offset = next_offset
                self._newest_epoch = controller_epoch
                caught_up, self._caught_up = tuple(self._caught_up), []
                return AppendResult(base_offset, caught_up)
            # Another writer appended since we last looked (take its batches, then decide again),
            # or the fence failed (refuse once caught up, so the caller learns what it missed).
            head_range, log_range = responses[:2]
            new = self._decode([kv for _, kv in log_range], self._next_offset, self._newest_epoch)
            self._caught_up.extend(new)
            if new:
                self._next_offset = new[-1].next_offset
                self._newest_epoch = new[-1].controller_epoch
            self._head_revision = int(head_range[0][1].mod_revision) if head_range else 0
            if self._fence is not None:
                self._check_fence(controller_epoch, responses[2], responses[3])

    async def read(self, from_offset: int = 0) -> list[MetadataBatch]:
        self._check_open()
        kvs = list(await self._client.get_prefix(self._log_prefix))
        return [b for b in self._decode(kvs, 0, -1) if b.next_offset > from_offset]

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self._client.close()

    def _check_fence(self, controller_epoch: int, leader_range: list[Any], epoch_range: list[Any]) -> None:
        """Raise unless the leader key still names this holder at ``controller_epoch``."""
        assert self._fence is not None
        leader = leader_range[0][0] if leader_range else None
        if leader == self._fence.leader_value(controller_epoch):
            return  # only the head moved: retry
        newest_lease_epoch = int(epoch_range[0][0]) if epoch_range else 0
        raise LeaseFencedError(controller_epoch, newest_lease_epoch, self._fence.holder_id, leader)

    @staticmethod
    def _decode(kvs: list[Any], next_offset: int, newest_epoch: int) -> list[MetadataBatch]:
        """Batches from log kvs in key (= offset) order, checked as the local log checks its frames."""
        return decode_batches(b"".join(bytes(kv.value) for kv in kvs), next_offset, newest_epoch)


class LeaseFencedError(StaleControllerEpochError):
    """An append whose holder no longer holds the lease at its epoch (lapsed, revoked or taken over):
    refused by etcd before anything was written. A ``StaleControllerEpochError``, so the controller
    steps down exactly as when the log holds a newer epoch."""

    def __init__(self, epoch: int, newest_lease_epoch: int, holder_id: int, leader: bytes | None) -> None:
        super().__init__(epoch, max(epoch, newest_lease_epoch))
        now = "no holder" if leader is None else leader.decode(errors="replace")
        self.message = (f"Controller {holder_id} no longer holds the lease at epoch {epoch} "
                        f"(leader key: {now}; newest lease epoch {newest_lease_epoch}); nothing was written.")
        self.args = (self.message,)


def _decode_head(kv: Any) -> tuple[int, int]:
    data = json.loads(kv.value)
    return int(data["next_offset"]), int(data["newest_epoch"])
