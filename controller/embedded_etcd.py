"""The metadata store of a host's processes: the subset of etcd's v3 gRPC API Odradek's stores use,
served by ``odradek --processes N``'s supervisor, so N brokers on one host form one cluster with no
other service installed.

Why this and not another design. A cluster's brokers already share everything through etcd
(``odradek.controller.etcd_lease``, ``odradek.controller.etcd_log_store``, ``odradek.broker.cluster``: the controller lease
and its fencing, the metadata log and its snapshots, registrations under session leases, producer-id
blocks, the watch that wakes followers). Serving that same API from the supervisor keeps one code
path for one host and for many: nothing in the broker or the controller changes, every cluster test
covers it, and a deployment grows from one host to several by pointing ``metadata.store`` at a real
etcd. The alternative, one child embedding the controller and the others following it over a new
protocol, would be a second metadata path to keep correct, and the leader child's death would stop
metadata for all until it came back; here the store lives in the supervisor, which outlives every
child (the children die with it: ``PR_SET_PDEATHSIG``). The runtime install already has grpcio and
etcd's generated messages (aetcd's, ``aetcd.rpc``), so this costs no dependency. It is one member,
not a Raft group: the host is the failure domain of its processes anyway.

What is served (what ``aetcd.Client`` calls and the stores use), with etcd's semantics:

- KV: ``Range`` (one key, ``[key, range_end)``, ``range_end == b"\\0"`` for "from key on"; ``limit``,
  ``count_only``, ``keys_only``; the current revision only, a compacted one is OUT_OF_RANGE), ``Put``
  (``lease``, ``prev_kv``; an unknown lease is NOT_FOUND "requested lease not found"), ``DeleteRange``,
  ``Txn`` (compares on VERSION, CREATE, MOD, VALUE, LEASE with EQUAL/GREATER/LESS/NOT_EQUAL, over a
  key or a range; nested Txns; one revision for all its writes), ``Compact``.
- Lease: ``LeaseGrant``, ``LeaseRevoke`` (deletes the keys attached), ``LeaseKeepAlive`` (a stream),
  ``LeaseTimeToLive``, ``LeaseLeases``; a lease not kept alive for its TTL is revoked by a timer.
- Watch: one bidirectional stream holding many watches; ``start_revision`` replays the history kept
  since the last compaction (older: the ``compact_revision`` answer etcd gives), NOPUT/NODELETE
  filters, ``prev_kv``, cancel. The history is also compacted by itself past ``HISTORY_LIMIT``
  revisions (etcd's ``--auto-compaction``), so it never grows without bound.
- Maintenance: ``Status`` (version, revision, db size), for tools and health checks.
Anything else answers UNIMPLEMENTED.

On disk: ``<data dir>/store.wal``, records appended in revision order, each::

    u32 payload length (big-endian) | u32 CRC32C of the payload | payload (JSON, UTF-8)

with payload ``{"rev": r, "ops": [["p", key, value, lease] | ["d", key], ...]}`` (key and value
base64) for the writes of revision ``r``, or ``{"rev": r, "state": [[key, value, create, mod,
version, lease], ...]}``, a whole state that replaces everything before it (a rewrite writes one
such record to ``store.wal.tmp``, fsyncs it and renames it over ``store.wal`` once the log holds 4x
the live data). Every write is fsynced before it is answered. Crash story: a torn or corrupt tail
record is cut off at open (it was never answered); leases are not stored, so keys attached to a lease
are dropped at open - their holders were the supervisor's children, which died with it.

Not thread-safe: everything runs on the supervisor's event loop, which owns the state.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import random
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints (aetcd brings it)
from aetcd.rpc import kv_pb2, rpc_pb2, rpc_pb2_grpc

log = logging.getLogger(__name__)

# Revisions of history kept for watchers that start in the past; older ones are compacted away.
HISTORY_LIMIT = 10_000
# The log is rewritten as one state record once it is this many times the live data (and over 1 MiB).
REWRITE_RATIO = 4
REWRITE_MIN_BYTES = 1 << 20
# etcd's --max-request-bytes default, and the gRPC room it allows above it: a write larger than this is
# refused as etcd refuses it, so what works against the embedded store works against a real etcd.
MAX_REQUEST_BYTES = 1_572_864
_GRPC_OVERHEAD_BYTES = 512 * 1024
# What Status reports as the server version: the etcd API level these semantics follow.
ETCD_API_VERSION = "3.5.0"
_HEADER = struct.Struct(">II")
_Compare = rpc_pb2.Compare


class StoreError(Exception):
    """A request etcd would refuse: ``code`` is the gRPC status it answers with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _Key:
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    def to_pb(self, key: bytes, keys_only: bool = False) -> Any:
        return kv_pb2.KeyValue(key=key, value=b"" if keys_only else self.value, create_revision=self.create_revision,
                               mod_revision=self.mod_revision, version=self.version, lease=self.lease)


@dataclass(slots=True)
class _Lease:
    lease_id: int
    granted_ttl: int
    expires_at: float
    keys: set[bytes] = field(default_factory=set)


def _in_range(key: bytes, start: bytes, end: bytes) -> bool:
    """etcd's key selection: one key when ``end`` is empty, ``[start, end)`` otherwise, and every key
    from ``start`` on when ``end`` is ``b"\\0"``."""
    if not end:
        return key == start
    if end == b"\0":
        return key >= start
    return start <= key < end


def _compare(actual: Any, result: int, expected: Any) -> bool:
    if result == _Compare.EQUAL:
        return bool(actual == expected)
    if result == _Compare.NOT_EQUAL:
        return bool(actual != expected)
    if result == _Compare.GREATER:
        return bool(actual > expected)
    return bool(actual < expected)


class _Watch:
    """One watch of a stream: its range, filters and where its answers go."""

    def __init__(self, watch_id: int, request: Any, out: asyncio.Queue[Any]) -> None:
        self.watch_id = watch_id
        self.start, self.end = bytes(request.key), bytes(request.range_end)
        filters = set(request.filters)
        self.no_put = rpc_pb2.WatchCreateRequest.NOPUT in filters
        self.no_delete = rpc_pb2.WatchCreateRequest.NODELETE in filters
        self.prev_kv = bool(request.prev_kv)
        self.out = out

    def select(self, events: Iterable[Any]) -> list[Any]:
        chosen = []
        for event in events:
            if not _in_range(event.kv.key, self.start, self.end):
                continue
            if (event.type == kv_pb2.Event.PUT and self.no_put) or (event.type == kv_pb2.Event.DELETE and self.no_delete):
                continue
            if not self.prev_kv and event.HasField("prev_kv"):
                event = kv_pb2.Event(type=event.type, kv=event.kv)
            chosen.append(event)
        return chosen


class MetadataKeyStore:
    """The keys, revisions, leases and history of one store, and its log on disk (see the module docstring)."""

    def __init__(self, data_dir: Path, fsync: bool = True) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / "store.wal"
        self._fsync = fsync
        self.revision = 1  # etcd's first revision: an empty store answers revision 1
        self.compact_revision = 0
        self.keys: dict[bytes, _Key] = {}
        self.leases: dict[int, _Lease] = {}
        # (revision, events) after compact_revision, oldest first: what a watch from the past replays.
        self.history: list[tuple[int, list[Any]]] = []
        self.watches: dict[int, _Watch] = {}
        self._next_lease_id = random.SystemRandom().randrange(1 << 40, 1 << 56)
        self._live_bytes = 0
        self._load()
        self._file = open(self.path, "ab")

    # --- the log --------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, checksum = _HEADER.unpack_from(data, offset)
            payload = data[offset + _HEADER.size: offset + _HEADER.size + length]
            if len(payload) < length or crc32c.crc32c(payload) != checksum:
                break
            self._replay(json.loads(payload))
            offset += _HEADER.size + length
        if offset < len(data):
            log.warning("metadata store %s: cutting a torn tail of %d bytes at offset %d (never answered)",
                        self.path, len(data) - offset, offset)
            with open(self.path, "r+b") as f:
                f.truncate(offset)
                os.fsync(f.fileno())
        # Leases died with the process that granted them; so do the keys attached to them.
        for key in [k for k, v in self.keys.items() if v.lease]:
            del self.keys[key]
        self._live_bytes = sum(len(k) + len(v.value) for k, v in self.keys.items())
        self.compact_revision = self.revision

    def _replay(self, record: dict[str, Any]) -> None:
        revision = int(record["rev"])
        if "state" in record:
            self.keys = {base64.b64decode(k): _Key(base64.b64decode(v), c, m, ver, lease)
                         for k, v, c, m, ver, lease in record["state"]}
        for op in record.get("ops", ()):
            key = base64.b64decode(op[1])
            if op[0] == "p":
                old = self.keys.get(key)
                self.keys[key] = _Key(base64.b64decode(op[2]), old.create_revision if old else revision, revision,
                                      old.version + 1 if old else 1, int(op[3]))
            else:
                self.keys.pop(key, None)
        self.revision = max(self.revision, revision)

    def _append(self, record: dict[str, Any]) -> None:
        payload = json.dumps(record, separators=(",", ":")).encode()
        self._file.write(_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def _maybe_rewrite(self) -> None:
        size = self._file.tell()
        if size < REWRITE_MIN_BYTES or size < REWRITE_RATIO * max(self._live_bytes, 1):
            return
        state = [[base64.b64encode(k).decode(), base64.b64encode(v.value).decode(), v.create_revision,
                  v.mod_revision, v.version, v.lease] for k, v in self.keys.items()]
        payload = json.dumps({"rev": self.revision, "state": state}, separators=(",", ":")).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._file.close()
        self._file = open(self.path, "ab")

    def close(self) -> None:
        self._file.close()

    # --- reads ----------------------------------------------------------------------------------
    def header(self) -> Any:
        return rpc_pb2.ResponseHeader(cluster_id=1, member_id=1, revision=self.revision, raft_term=1)

    def select(self, start: bytes, end: bytes) -> list[bytes]:
        if not end:
            return [start] if start in self.keys else []
        return sorted(k for k in self.keys if _in_range(k, start, end))

    def range(self, request: Any) -> Any:
        start, end = bytes(request.key), bytes(request.range_end)
        if request.revision and request.revision != self.revision:
            if request.revision <= self.compact_revision:
                raise StoreError(grpc.StatusCode.OUT_OF_RANGE, "mvcc: required revision has been compacted")
            if request.revision > self.revision:
                raise StoreError(grpc.StatusCode.OUT_OF_RANGE, "mvcc: required revision is a future revision")
            found = self._at_revision(request.revision, start, end)
        else:
            found = {k: self.keys[k].to_pb(k) for k in self.select(start, end)}
        keys = sorted(found, reverse=request.sort_order == rpc_pb2.RangeRequest.DESCEND)
        response = rpc_pb2.RangeResponse(header=self.header(), count=len(keys))
        if request.count_only:
            return response
        limited = keys[: request.limit] if request.limit else keys
        response.more = len(limited) < len(keys)
        for key in limited:
            kv = found[key]
            if request.keys_only:
                kv.value = b""
            response.kvs.append(kv)
        return response

    def _at_revision(self, revision: int, start: bytes, end: bytes) -> dict[bytes, Any]:
        """The keys in range as they were at ``revision`` (> compact_revision): today's, with the
        history after it undone newest first (each event holds the key's previous value)."""
        found = {k: self.keys[k].to_pb(k) for k in self.select(start, end)}
        for rev, events in reversed(self.history):
            if rev <= revision:
                break
            for event in reversed(events):
                key = bytes(event.kv.key)
                if not _in_range(key, start, end or b""):
                    continue
                if event.HasField("prev_kv"):
                    found[key] = kv_pb2.KeyValue()
                    found[key].CopyFrom(event.prev_kv)
                else:
                    found.pop(key, None)
        return found

    def _compare_holds(self, compare: Any) -> bool:
        keys = self.select(bytes(compare.key), bytes(compare.range_end))
        if not compare.range_end:
            keys = [bytes(compare.key)]
        target = compare.target
        for key in keys:
            entry = self.keys.get(key)
            if target == _Compare.VALUE:
                if entry is None or not _compare(entry.value, compare.result, bytes(compare.value)):
                    return False
            elif target == _Compare.VERSION:
                if not _compare(entry.version if entry else 0, compare.result, compare.version):
                    return False
            elif target == _Compare.CREATE:
                if not _compare(entry.create_revision if entry else 0, compare.result, compare.create_revision):
                    return False
            elif target == _Compare.MOD:
                if not _compare(entry.mod_revision if entry else 0, compare.result, compare.mod_revision):
                    return False
            elif not _compare(entry.lease if entry else 0, compare.result, compare.lease):
                return False
        return True

    # --- writes ---------------------------------------------------------------------------------
    def write(self, apply: Callable[[_Batch], Any]) -> Any:
        """Run ``apply`` on a batch at the next revision; commit it (log, history, watches) if it wrote."""
        batch = _Batch(self, self.revision + 1)
        try:
            result = apply(batch)
        except StoreError:
            batch.roll_back()  # etcd refuses a request whole: none of its writes happened
            raise
        if batch.events:
            self.revision = batch.revision
            self._append({"rev": batch.revision, "ops": batch.ops})
            self._publish(batch.revision, batch.events)
            self._maybe_rewrite()
        return result

    def _publish(self, revision: int, events: list[Any]) -> None:
        self.history.append((revision, events))
        if len(self.history) > HISTORY_LIMIT:
            self.compact(self.history[-HISTORY_LIMIT][0] - 1)
        header = self.header()
        for watch in self.watches.values():
            chosen = watch.select(events)
            if chosen:
                watch.out.put_nowait(rpc_pb2.WatchResponse(header=header, watch_id=watch.watch_id, events=chosen))

    def compact(self, revision: int) -> None:
        if revision <= self.compact_revision:
            raise StoreError(grpc.StatusCode.OUT_OF_RANGE, "mvcc: required revision has been compacted")
        if revision > self.revision:
            raise StoreError(grpc.StatusCode.OUT_OF_RANGE, "mvcc: required revision is a future revision")
        self.compact_revision = revision
        self.history = [(r, e) for r, e in self.history if r > revision]

    def grant(self, ttl: int, lease_id: int) -> _Lease:
        if lease_id == 0:
            lease_id = self._next_lease_id
            self._next_lease_id += 1
        elif lease_id in self.leases:
            raise StoreError(grpc.StatusCode.FAILED_PRECONDITION, "etcdserver: lease already exists")
        lease = _Lease(lease_id, max(ttl, 1), time.monotonic() + max(ttl, 1))
        self.leases[lease_id] = lease
        return lease

    def revoke(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is None:
            raise StoreError(grpc.StatusCode.NOT_FOUND, "etcdserver: requested lease not found")

        def delete_keys(batch: _Batch) -> None:
            for key in sorted(lease.keys):
                batch.delete(key)

        self.write(delete_keys)

    def keep_alive(self, lease_id: int) -> int:
        lease = self.leases.get(lease_id)
        if lease is None or lease.expires_at <= time.monotonic():
            return 0
        lease.expires_at = time.monotonic() + lease.granted_ttl
        return lease.granted_ttl

    def expire_leases(self) -> None:
        now = time.monotonic()
        for lease_id in [i for i, lease in self.leases.items() if lease.expires_at <= now]:
            self.revoke(lease_id)


class _Batch:
    """The writes of one revision: applied to the keys at once, logged and published by ``write``."""

    def __init__(self, store: MetadataKeyStore, revision: int) -> None:
        self.store = store
        self.revision = revision
        self.ops: list[list[Any]] = []
        self.events: list[Any] = []
        self._undo: list[tuple[bytes, _Key | None]] = []

    def roll_back(self) -> None:
        store = self.store
        for key, old in reversed(self._undo):
            current = store.keys.pop(key, None)
            if current is not None and current.lease in store.leases:
                store.leases[current.lease].keys.discard(key)
            if old is not None:
                store.keys[key] = old
                if old.lease in store.leases:
                    store.leases[old.lease].keys.add(key)
        store._live_bytes = sum(len(k) + len(v.value) for k, v in store.keys.items())
        self.ops.clear()
        self.events.clear()

    def put(self, request: Any) -> Any:
        store, key = self.store, bytes(request.key)
        old = store.keys.get(key)
        lease = old.lease if request.ignore_lease and old else request.lease
        if request.ignore_value and old is None or request.ignore_lease and old is None:
            raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: key not found")
        if lease and lease not in store.leases:
            raise StoreError(grpc.StatusCode.NOT_FOUND, "etcdserver: requested lease not found")
        value = old.value if request.ignore_value and old else bytes(request.value)
        entry = _Key(value, old.create_revision if old else self.revision, self.revision,
                     old.version + 1 if old else 1, lease)
        self._undo.append((key, old))
        if old is not None:
            store._live_bytes -= len(key) + len(old.value)
            if old.lease and old.lease != lease and old.lease in store.leases:
                store.leases[old.lease].keys.discard(key)
        store.keys[key] = entry
        store._live_bytes += len(key) + len(value)
        if lease:
            store.leases[lease].keys.add(key)
        self.ops.append(["p", base64.b64encode(key).decode(), base64.b64encode(value).decode(), lease])
        prev = old.to_pb(key) if old is not None else None
        self.events.append(kv_pb2.Event(type=kv_pb2.Event.PUT, kv=entry.to_pb(key), prev_kv=prev))
        response = rpc_pb2.PutResponse(header=self._header())
        if request.prev_kv and prev is not None:
            response.prev_kv.CopyFrom(prev)
        return response

    def delete(self, key: bytes) -> Any | None:
        store = self.store
        old = store.keys.pop(key, None)
        if old is None:
            return None
        self._undo.append((key, old))
        store._live_bytes -= len(key) + len(old.value)
        if old.lease in store.leases:
            store.leases[old.lease].keys.discard(key)
        self.ops.append(["d", base64.b64encode(key).decode()])
        prev = old.to_pb(key)
        self.events.append(kv_pb2.Event(type=kv_pb2.Event.DELETE,
                                        kv=kv_pb2.KeyValue(key=key, mod_revision=self.revision), prev_kv=prev))
        return prev

    def delete_range(self, request: Any) -> Any:
        deleted = [p for k in self.store.select(bytes(request.key), bytes(request.range_end))
                   if (p := self.delete(k)) is not None]
        response = rpc_pb2.DeleteRangeResponse(header=self._header(), deleted=len(deleted))
        if request.prev_kv:
            response.prev_kvs.extend(deleted)
        return response

    def txn(self, request: Any) -> Any:
        succeeded = all(self.store._compare_holds(c) for c in request.compare)
        response = rpc_pb2.TxnResponse(succeeded=succeeded)
        for op in request.success if succeeded else request.failure:
            kind = op.WhichOneof("request")
            if kind == "request_range":
                response.responses.add(response_range=self.store.range(op.request_range))
            elif kind == "request_put":
                response.responses.add(response_put=self.put(op.request_put))
            elif kind == "request_delete_range":
                response.responses.add(response_delete_range=self.delete_range(op.request_delete_range))
            elif kind == "request_txn":
                response.responses.add(response_txn=self.txn(op.request_txn))
        response.header.CopyFrom(self._header())
        return response

    def _header(self) -> Any:
        # Inside a Txn etcd stamps each answer with the Txn's revision (the stores read it back).
        revision = self.revision if self.events else self.store.revision
        return rpc_pb2.ResponseHeader(cluster_id=1, member_id=1, revision=revision, raft_term=1)


def _check_size(request: Any) -> None:
    if request.ByteSize() > MAX_REQUEST_BYTES:
        raise StoreError(grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: request is too large")


async def _answer(context: grpc.aio.ServicerContext, call: Callable[[], Any], request: Any = None) -> Any:
    try:
        if request is not None:
            _check_size(request)
        return call()
    except StoreError as exc:
        await context.abort(exc.code, str(exc))


class _KV(rpc_pb2_grpc.KVServicer):
    def __init__(self, store: MetadataKeyStore) -> None:
        self.store = store

    async def Range(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802 (gRPC's names)
        return await _answer(context, lambda: self.store.range(request))

    async def Put(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await _answer(context, lambda: self.store.write(lambda b: b.put(request)), request)

    async def DeleteRange(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await _answer(context, lambda: self.store.write(lambda b: b.delete_range(request)))

    async def Txn(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await _answer(context, lambda: self.store.write(lambda b: b.txn(request)), request)

    async def Compact(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        def compact() -> Any:
            self.store.compact(request.revision)
            return rpc_pb2.CompactionResponse(header=self.store.header())

        return await _answer(context, compact)


class _Leases(rpc_pb2_grpc.LeaseServicer):
    def __init__(self, store: MetadataKeyStore) -> None:
        self.store = store

    async def LeaseGrant(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        def grant() -> Any:
            lease = self.store.grant(request.TTL, request.ID)
            return rpc_pb2.LeaseGrantResponse(header=self.store.header(), ID=lease.lease_id, TTL=lease.granted_ttl)

        return await _answer(context, grant)

    async def LeaseRevoke(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        def revoke() -> Any:
            self.store.revoke(request.ID)
            return rpc_pb2.LeaseRevokeResponse(header=self.store.header())

        return await _answer(context, revoke)

    async def LeaseKeepAlive(self, request_iterator: AsyncIterator[Any],  # noqa: N802
                             context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for request in request_iterator:
            ttl = self.store.keep_alive(request.ID)
            yield rpc_pb2.LeaseKeepAliveResponse(header=self.store.header(), ID=request.ID, TTL=ttl)

    async def LeaseTimeToLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        lease = self.store.leases.get(request.ID)
        response = rpc_pb2.LeaseTimeToLiveResponse(header=self.store.header(), ID=request.ID, TTL=-1)
        if lease is not None:
            response.TTL = max(0, int(lease.expires_at - time.monotonic()))
            response.grantedTTL = lease.granted_ttl
            if request.keys:
                response.keys.extend(sorted(lease.keys))
        return response

    async def LeaseLeases(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        response = rpc_pb2.LeaseLeasesResponse(header=self.store.header())
        for lease_id in self.store.leases:
            response.leases.add(ID=lease_id)
        return response


class _Watches(rpc_pb2_grpc.WatchServicer):
    def __init__(self, store: MetadataKeyStore) -> None:
        self.store = store
        self._next_id = 1

    async def Watch(self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:  # noqa: N802
        out: asyncio.Queue[Any] = asyncio.Queue()
        mine: list[int] = []

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    kind = request.WhichOneof("request_union")
                    if kind == "create_request":
                        self._create(request.create_request, out, mine)
                    elif kind == "cancel_request":
                        watch_id = request.cancel_request.watch_id
                        if self.store.watches.pop(watch_id, None) is not None:
                            mine.remove(watch_id)
                        out.put_nowait(rpc_pb2.WatchResponse(header=self.store.header(), watch_id=watch_id,
                                                             canceled=True))
                    elif kind == "progress_request":
                        out.put_nowait(rpc_pb2.WatchResponse(header=self.store.header(), watch_id=-1))
            finally:
                out.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read_requests())
        try:
            while (response := await out.get()) is not None:
                await context.write(response)
        finally:
            reader.cancel()
            for watch_id in mine:
                self.store.watches.pop(watch_id, None)

    def _create(self, request: Any, out: asyncio.Queue[Any], mine: list[int]) -> None:
        store = self.store
        watch_id = request.watch_id or self._next_id
        self._next_id = max(self._next_id, watch_id) + 1
        start = request.start_revision
        if start and start <= store.compact_revision:
            # etcd answers a watch from a compacted revision with created, then the compact revision.
            out.put_nowait(rpc_pb2.WatchResponse(header=store.header(), watch_id=watch_id, created=True))
            out.put_nowait(rpc_pb2.WatchResponse(header=store.header(), watch_id=watch_id, canceled=True,
                                                 compact_revision=store.compact_revision))
            return
        watch = _Watch(watch_id, request, out)
        out.put_nowait(rpc_pb2.WatchResponse(header=store.header(), watch_id=watch_id, created=True))
        if start:
            for revision, events in store.history:
                chosen = watch.select(events) if revision >= start else []
                if chosen:
                    header = rpc_pb2.ResponseHeader(cluster_id=1, member_id=1, revision=revision, raft_term=1)
                    out.put_nowait(rpc_pb2.WatchResponse(header=header, watch_id=watch_id, events=chosen))
        store.watches[watch_id] = watch
        mine.append(watch_id)


class _Maintenance(rpc_pb2_grpc.MaintenanceServicer):
    def __init__(self, store: MetadataKeyStore) -> None:
        self.store = store

    async def Status(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        size = self.store.path.stat().st_size if self.store.path.exists() else 0
        return rpc_pb2.StatusResponse(header=self.store.header(), version=ETCD_API_VERSION, dbSize=size,
                                      dbSizeInUse=self.store._live_bytes, leader=1, raftIndex=self.store.revision,
                                      raftTerm=1, raftAppliedIndex=self.store.revision)


class EmbeddedEtcd:
    """The store served on ``host:port`` (0: a free port, see ``port`` after ``start``) on the running loop."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int = 0, fsync: bool = True) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.store: MetadataKeyStore | None = None
        self._fsync = fsync
        self._server: grpc.aio.Server | None = None
        self._expiry: asyncio.Task[None] | None = None

    @property
    def endpoint(self) -> str:
        """host:port, what ``metadata.store=etcd://...`` names."""
        return f"{self.host}:{self.port}"

    async def start(self) -> EmbeddedEtcd:
        store = self.store = MetadataKeyStore(self.data_dir, self._fsync)
        server = self._server = grpc.aio.server(options=[("grpc.max_receive_message_length",
                                                          MAX_REQUEST_BYTES + _GRPC_OVERHEAD_BYTES),
                                                         ("grpc.max_send_message_length", 1 << 30)])
        rpc_pb2_grpc.add_KVServicer_to_server(_KV(store), server)
        rpc_pb2_grpc.add_LeaseServicer_to_server(_Leases(store), server)
        rpc_pb2_grpc.add_WatchServicer_to_server(_Watches(store), server)
        rpc_pb2_grpc.add_MaintenanceServicer_to_server(_Maintenance(store), server)
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"the metadata store cannot listen on {self.host}:{self.port}")
        self.port = bound
        await server.start()
        self._expiry = asyncio.get_running_loop().create_task(self._expire_forever())
        return self

    async def _expire_forever(self) -> None:
        assert self.store is not None
        while True:
            await asyncio.sleep(0.1)
            self.store.expire_leases()

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        if self._server is not None:
            await self._server.stop(0.5)
        if self.store is not None:
            self.store.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m odradek.controller.embedded_etcd --data-dir D [--port P]``: the store alone (tests, tools)."""
    parser = argparse.ArgumentParser(prog="python -m odradek.controller.embedded_etcd")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")

    async def serve() -> None:
        server = await EmbeddedEtcd(Path(args.data_dir), args.host, args.port).start()
        print(f"serving {server.endpoint}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
