"""``EtcdMetadataLogStore``: the committed metadata records (``odradek.controller.log_store.MetadataLogStore``) in etcd v3.

Keys under ``prefix`` (``/odradek/<cluster-id>/metadata`` in a cluster):

- ``<prefix>/log/<base offset, 20 digits>``: one batch, the same frame ``metadata_log.encode_batch``
  writes to the local file (length, CRC32C, base offset, controller epoch, JSON records), so a
  replay decodes exactly the records the local store would give; zero-padding makes etcd's key
  order the offset order.
- ``<prefix>/head``: ``{"next_offset": n, "newest_epoch": e}`` (JSON), rewritten by every append.
  Its ``mod_revision`` is the version of the whole log: every append changes it.
- ``<prefix>/snapshot``: the newest snapshot's manifest, ``{"version": 1, "end_offset": n,
  "controller_epoch": e, "chunks": c, "chunk_prefix": "<prefix>/snapshots/<n, 20 digits>-<token>/"}``
  (JSON; ``version`` is ``metadata_snapshot.SNAPSHOT_FORMAT_VERSION``). Absent: no snapshot yet.
- ``<chunk_prefix><i, 10 digits>``: chunk ``i`` of that snapshot (``metadata_snapshot``'s chunk
  format, each under etcd's 1.5 MiB request limit). Chunk sets no manifest names (a snapshot that
  failed half way) are ignored by readers and deleted by the next snapshot.

``open`` is one Range over ``<prefix>/`` (head, snapshot and batches from one consistent revision):
the snapshot named by the manifest, then the batches from its end offset. ``append`` is one Txn:
compare ``mod_revision(head) == r`` (the revision this store last saw), then put the batch key and
the new head. If another writer got in, the same Txn's failure branch reads the head, the manifest
and the batch keys from our ``next_offset`` on: those batches are ``caught_up``. If the newest epoch
is now newer than ours, the append is refused with ``StaleControllerEpochError`` and nothing is
written; if another writer snapshotted past our ``next_offset`` (the batches we missed are gone)
it fails with ``MetadataStoreUnavailableError`` (the controller steps down and replays); otherwise
it is retried on the new revision.

``write_snapshot``: (1) put the chunks under a fresh chunk prefix, one request each; (2) one Txn,
guarded exactly as an append (head revision, and the lease fence), puts the manifest and deletes
every batch key below the snapshot's end offset and every other chunk set; (3) compact etcd's
revision history up to that Txn's revision, so etcd's database stops holding the deleted batches'
old revisions (the space is reused by etcd; ``etcdctl defrag`` gives it back to the filesystem:
docs/architecture.md). Readers see the old log or the new snapshot + tail, never a mix: (2) is one
revision. A crash or a failed guard after (1) leaves an orphan chunk set only; after (2), an
uncompacted history that the next snapshot's compaction (or etcd's ``--auto-compaction-*``) drops.

With a ``fence`` (``EtcdLeaseStore.fence(node_id)``) every append and snapshot Txn also compares the
leader key to this holder at the append's epoch, so a controller whose lease lapsed or was taken
over is refused by etcd itself (``LeaseFencedError``, a ``StaleControllerEpochError``) even before its
successor wrote anything: "every metadata write is guarded by: the epoch is still mine". Brokers read
with ``read_from`` (``odradek.broker.cluster.metadata_follower``), woken by a Watch on ``<prefix>/log/``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aetcd.utils import prefix_range_end

from odradek.controller.etcd_client import EtcdError, etcd_client
from odradek.controller.etcd_lease import LeaseFence
from odradek.controller.log_store import AppendResult, MetadataStoreUnavailableError
from odradek.controller.metadata_log import (
    MetadataBatch,
    MetadataLogContents,
    MetadataLogCorruptError,
    StaleControllerEpochError,
    decode_batches,
    encode_batch,
)
from odradek.controller.metadata_snapshot import (
    SNAPSHOT_FORMAT_VERSION,
    MetadataSnapshot,
    SnapshotCorruptError,
    decode_snapshot,
    encode_snapshot,
)
from odradek.controller.records import MetadataRecord

log = logging.getLogger(__name__)

OFFSET_DIGITS = 20  # an int64 offset in decimal
CHUNK_INDEX_DIGITS = 10


@dataclass(frozen=True, slots=True)
class EtcdMetadataKeys:
    """The keys of one metadata log in etcd (module docstring)."""

    base: str

    @classmethod
    def under(cls, prefix: str) -> EtcdMetadataKeys:
        return cls(prefix.rstrip("/"))

    @property
    def range_start(self) -> bytes:
        return f"{self.base}/".encode()

    @property
    def head(self) -> bytes:
        return f"{self.base}/head".encode()

    @property
    def log_prefix(self) -> bytes:
        return f"{self.base}/log/".encode()

    @property
    def manifest(self) -> bytes:
        return f"{self.base}/snapshot".encode()

    @property
    def snapshots_prefix(self) -> bytes:
        return f"{self.base}/snapshots/".encode()

    def batch_key(self, base_offset: int) -> bytes:
        return self.log_prefix + str(base_offset).zfill(OFFSET_DIGITS).encode()

    def new_chunk_prefix(self, end_offset: int) -> bytes:
        return self.snapshots_prefix + f"{end_offset:0{OFFSET_DIGITS}d}-{uuid.uuid4().hex}/".encode()


@dataclass(frozen=True, slots=True)
class _Manifest:
    end_offset: int
    controller_epoch: int
    chunks: int
    chunk_prefix: bytes

    def encode(self) -> bytes:
        return json.dumps({"version": SNAPSHOT_FORMAT_VERSION, "end_offset": self.end_offset,
                           "controller_epoch": self.controller_epoch, "chunks": self.chunks,
                           "chunk_prefix": self.chunk_prefix.decode()}).encode()

    @classmethod
    def decode(cls, value: bytes) -> _Manifest:
        try:
            data = json.loads(value)
            version = int(data["version"])
            manifest = cls(int(data["end_offset"]), int(data["controller_epoch"]), int(data["chunks"]),
                           str(data["chunk_prefix"]).encode())
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataLogCorruptError(f"undecodable etcd metadata snapshot manifest {value!r}: {e}") from e
        if version != SNAPSHOT_FORMAT_VERSION:
            raise MetadataLogCorruptError(f"etcd metadata snapshot format version {version}; this build reads "
                                          f"version {SNAPSHOT_FORMAT_VERSION}")
        return manifest


@dataclass(slots=True)
class _Stored:
    """Everything under the prefix, read at one revision."""

    head: Any
    snapshot: MetadataSnapshot | None
    batches: list[MetadataBatch]
    log_bytes: int  # of the batch values: what the controller's snapshot-by-size counts


def _parse(keys: EtcdMetadataKeys, kvs: list[Any]) -> _Stored:
    head = None
    manifest = None
    log_kvs: list[Any] = []
    chunk_kvs: dict[bytes, bytes] = {}
    for kv in kvs:
        key = bytes(kv.key)
        if key == keys.head:
            head = kv
        elif key == keys.manifest:
            manifest = _Manifest.decode(bytes(kv.value))
        elif key.startswith(keys.log_prefix):
            log_kvs.append(kv)
        elif key.startswith(keys.snapshots_prefix):
            chunk_kvs[key] = bytes(kv.value)
    snapshot = None if manifest is None else _load_snapshot(manifest, chunk_kvs)
    start = 0 if snapshot is None else snapshot.end_offset
    epoch = -1 if snapshot is None else snapshot.controller_epoch
    values = [bytes(kv.value) for kv in log_kvs]
    batches = _decode_batches(values, start, epoch)
    return _Stored(head, snapshot, batches, sum(len(v) for v in values))


def _load_snapshot(manifest: _Manifest, chunk_kvs: dict[bytes, bytes]) -> MetadataSnapshot:
    names = [manifest.chunk_prefix + f"{i:0{CHUNK_INDEX_DIGITS}d}".encode() for i in range(manifest.chunks)]
    missing = [n for n in names if n not in chunk_kvs]
    if missing:
        raise MetadataLogCorruptError(f"etcd metadata snapshot at offset {manifest.end_offset}: chunk keys missing "
                                      f"({missing[0]!r} and {len(missing) - 1} more)")
    try:
        snapshot = decode_snapshot(chunk_kvs[n] for n in names)
    except SnapshotCorruptError as e:
        raise MetadataLogCorruptError(f"etcd metadata snapshot at offset {manifest.end_offset}: {e}") from e
    if (snapshot.end_offset, snapshot.controller_epoch) != (manifest.end_offset, manifest.controller_epoch):
        raise MetadataLogCorruptError(f"etcd metadata snapshot chunks hold offset {snapshot.end_offset} epoch "
                                      f"{snapshot.controller_epoch}; the manifest names offset "
                                      f"{manifest.end_offset} epoch {manifest.controller_epoch}")
    return snapshot


def _decode_batches(values: list[bytes], next_offset: int, newest_epoch: int) -> list[MetadataBatch]:
    """Batches from log values in key (= offset) order, checked as the local log checks its frames."""
    return decode_batches(b"".join(values), next_offset, newest_epoch)


async def read_from(client: Any, keys: EtcdMetadataKeys, from_offset: int) -> MetadataLogContents:
    """What a reader whose image stands at ``from_offset`` (a batch boundary) needs: the batches from
    there, or, when the newest snapshot ends above it (those batches were deleted), the snapshot and
    every batch after it. The usual case is one Txn of two Ranges; a snapshot costs one more Range."""
    t = client.transactions
    _, (manifest_range, log_range) = await client.transaction(
        compare=[], success=[t.get(keys.manifest), t.get(keys.batch_key(from_offset), prefix_range_end(keys.log_prefix))],
        failure=[])
    manifest = _Manifest.decode(bytes(manifest_range[0][0])) if manifest_range else None
    if manifest is None or from_offset >= manifest.end_offset:
        return MetadataLogContents(None, tuple(_decode_batches([bytes(v) for v, _ in log_range], from_offset, -1)))
    stored = _parse(keys, list(await client.get_prefix(keys.range_start)))
    return MetadataLogContents(stored.snapshot, tuple(stored.batches))


class EtcdMetadataLogStore:
    """``MetadataLogStore`` on etcd at ``endpoint`` (``host:port``), keys under ``prefix``.

    The store may be opened again after ``close`` (a controller restarting in-process).
    """

    def __init__(self, endpoint: str, prefix: str, timeout_s: float = 5.0, fence: LeaseFence | None = None) -> None:
        self._client = etcd_client(endpoint, timeout_s)
        self._fence = fence
        self._keys = EtcdMetadataKeys.under(prefix)
        self._open = False
        self._next_offset = 0
        self._newest_epoch = -1
        self._head_revision = 0  # mod_revision of the head key as this store last saw it; 0: absent
        self._bytes_since_snapshot = 0
        # Batches read from other writers and not yet handed out: a refused append keeps them for the
        # next append that succeeds (as the local log's take_caught_up does), so none is ever skipped.
        self._caught_up: list[MetadataBatch] = []

    @property
    def keys(self) -> EtcdMetadataKeys:
        return self._keys

    def batch_key(self, base_offset: int) -> bytes:
        return self._keys.batch_key(base_offset)

    @property
    def head_key(self) -> bytes:
        return self._keys.head

    @property
    def next_offset(self) -> int:
        self._check_open()
        return self._next_offset

    @property
    def newest_epoch(self) -> int:
        self._check_open()
        return self._newest_epoch

    @property
    def bytes_since_snapshot(self) -> int:
        self._check_open()
        return self._bytes_since_snapshot

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError(f"the etcd metadata log under {self._keys.base}/ is not open")

    async def open(self) -> MetadataLogContents:
        if self._open:
            raise RuntimeError(f"the etcd metadata log under {self._keys.base}/ is already open")
        stored = _parse(self._keys, list(await self._client.get_prefix(self._keys.range_start)))
        contents = MetadataLogContents(stored.snapshot, tuple(stored.batches))
        next_offset = contents.next_offset
        self._next_offset = 0 if next_offset is None else next_offset
        if stored.batches:
            self._newest_epoch = stored.batches[-1].controller_epoch
        else:
            self._newest_epoch = -1 if stored.snapshot is None else stored.snapshot.controller_epoch
        self._head_revision = 0 if stored.head is None else int(stored.head.mod_revision)
        self._bytes_since_snapshot = stored.log_bytes
        self._caught_up = []
        if stored.head is not None and _decode_head(stored.head.value) != (self._next_offset, self._newest_epoch):
            raise MetadataLogCorruptError(
                f"etcd metadata head {stored.head.value!r} disagrees with its batches (next offset "
                f"{self._next_offset}, newest epoch {self._newest_epoch})")
        self._open = True
        return contents

    def _guards(self, controller_epoch: int) -> tuple[list[Any], list[Any]]:
        """The compares of a write at ``controller_epoch`` and the reads its failure branch returns:
        head, batches from our next offset, manifest (then leader key and epoch key with a fence)."""
        t = self._client.transactions
        compare = [t.mod(self._keys.head) == self._head_revision]
        failure = [t.get(self._keys.head),
                   t.get(self.batch_key(self._next_offset), prefix_range_end(self._keys.log_prefix)),
                   t.get(self._keys.manifest)]
        if self._fence is not None:
            compare.append(t.value(self._fence.leader_key) == self._fence.leader_value(controller_epoch))
            failure += [t.get(self._fence.leader_key), t.get(self._fence.epoch_key)]
        return compare, failure

    def _absorb(self, controller_epoch: int, responses: list[Any]) -> None:
        """A guarded write failed: take what other writers committed, then raise if this writer may
        not go on (fenced, stale, or compacted beneath); return to retry."""
        head_range, log_range, manifest_range = responses[:3]
        if manifest_range:
            manifest = _Manifest.decode(bytes(manifest_range[0][0]))
            if manifest.end_offset > self._next_offset:
                newest = _decode_head(head_range[0][0])[1] if head_range else manifest.controller_epoch
                self._newest_epoch = max(self._newest_epoch, newest, manifest.controller_epoch)
                if controller_epoch < self._newest_epoch:
                    raise StaleControllerEpochError(controller_epoch, self._newest_epoch)
                raise MetadataStoreUnavailableError(
                    f"the etcd metadata log was compacted to a snapshot at offset {manifest.end_offset} by another "
                    f"writer while this one stood at offset {self._next_offset}")
        values = [bytes(kv.value) for _, kv in log_range]
        new = _decode_batches(values, self._next_offset, self._newest_epoch)
        self._caught_up.extend(new)
        if new:
            self._next_offset = new[-1].next_offset
            self._newest_epoch = new[-1].controller_epoch
            self._bytes_since_snapshot += sum(len(v) for v in values)
        self._head_revision = int(head_range[0][1].mod_revision) if head_range else 0
        if self._fence is not None:
            self._check_fence(controller_epoch, responses[3], responses[4])

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
            frame = encode_batch(base_offset, controller_epoch, frame_records)
            compare, failure = self._guards(controller_epoch)
            try:
                succeeded, responses = await self._client.transaction(
                    compare=compare,
                    success=[t.put(self.batch_key(base_offset), frame), t.put(self._keys.head, head)],
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
                self._bytes_since_snapshot += len(frame)
                caught_up, self._caught_up = tuple(self._caught_up), []
                return AppendResult(base_offset, caught_up)
            # Another writer appended since we last looked (take its batches, then decide again),
            # or the fence failed (refuse once caught up, so the caller learns what it missed).
            self._absorb(controller_epoch, responses)

    async def write_snapshot(self, snapshot: MetadataSnapshot) -> bool:
        """Steps (1)-(3) of the module docstring; False, with only an orphan chunk set left to the next
        snapshot, when another writer appended since (its batches are handed out by the next append)."""
        self._check_open()
        if self._caught_up or snapshot.end_offset != self._next_offset:
            return False
        keys = self._keys
        chunks = encode_snapshot(snapshot)
        chunk_prefix = keys.new_chunk_prefix(snapshot.end_offset)
        manifest = _Manifest(snapshot.end_offset, snapshot.controller_epoch, len(chunks), chunk_prefix)
        t = self._client.transactions
        try:
            for index, chunk in enumerate(chunks):
                await self._client.put(chunk_prefix + f"{index:0{CHUNK_INDEX_DIGITS}d}".encode(), chunk)
            compare, failure = self._guards(snapshot.controller_epoch)
            succeeded, responses = await self._client.transaction(
                compare=compare,
                success=[t.put(keys.manifest, manifest.encode()),
                         t.delete(keys.log_prefix, keys.batch_key(snapshot.end_offset)),
                         t.delete(keys.snapshots_prefix, chunk_prefix),
                         t.delete(prefix_range_end(chunk_prefix), prefix_range_end(keys.snapshots_prefix))],
                failure=failure,
            )
        except EtcdError:
            await self._delete_quietly(chunk_prefix)
            raise
        if not succeeded:
            await self._delete_quietly(chunk_prefix)
            self._absorb(snapshot.controller_epoch, responses)
            return False
        self._bytes_since_snapshot = 0
        revision = int(responses[0].response_put.header.revision)
        try:
            await self._client.compact(revision)
        except EtcdError as exc:  # e.g. --auto-compaction got there first: the history is gone either way
            log.info("compacting etcd's history at revision %d after the metadata snapshot: %s", revision, exc)
        return True

    async def _delete_quietly(self, chunk_prefix: bytes) -> None:
        try:
            await self._client.delete_prefix(chunk_prefix)
        except EtcdError:
            pass  # an orphan chunk set: readers ignore it, the next snapshot deletes it

    async def read(self, from_offset: int = 0) -> MetadataLogContents:
        self._check_open()
        stored = _parse(self._keys, list(await self._client.get_prefix(self._keys.range_start)))
        if stored.snapshot is not None and from_offset < stored.snapshot.end_offset:
            return MetadataLogContents(stored.snapshot, tuple(stored.batches))
        return MetadataLogContents(None, tuple(b for b in stored.batches if b.next_offset > from_offset))

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


def _decode_head(value: bytes) -> tuple[int, int]:
    data = json.loads(value)
    return int(data["next_offset"]), int(data["newest_epoch"])
