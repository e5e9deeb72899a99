"""Fetch (api key 1): read record batches, zero-copy, with long polls and fetch sessions.

Versions 4-17 (v0-3 predate message format v2; Kafka 4 dropped them too, KIP-896).
- v4: isolation_level, last_stable_offset, aborted_transactions.
- v5: log_start_offset.
- v7: fetch sessions (KIP-227): session_id/epoch, forgotten topics, top-level error_code.
- v9: current_leader_epoch (KIP-320): FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH.
- v11: rack_id, preferred_read_replica (always -1: no follower fetching here).
- v12: flexible; last_fetched_epoch; diverging_epoch/current_leader/snapshot_id tagged.
- v13: topic ids instead of names (KIP-516): UNKNOWN_TOPIC_ID.
- v14-17: same for consumers (tiered storage, KIP-903 replica state, KIP-951, KIP-853).

Every requested partition is answered, and no other (a sessionless or full fetch); incremental
session fetches answer only partitions with news (broker/fetch_session.py). Batches start at the
one holding the fetch offset (the client skips records below it), never pass the high watermark
(last stable offset under read_committed, equal to it until transactions exist), stay within
``partition_max_bytes`` and the response limit min(request ``max_bytes``, broker
``fetch.max.bytes``) — except that the first batch of the first partition with data is returned
whole even if it is larger (KIP-74; Kafka's ReplicaManager.readFromLog ``minOneMessage``), so a
consumer always makes progress. Record bytes are not copied: the response carries file regions
(holding the segment's file handle) that the connection writes with ``os.sendfile``.

A segment file cut short under the broker (storage.errors.SegmentTruncatedError) is Kafka's
"truncated during write": the fetching connection is closed and the broker logs one error per
segment file; the log dir stays online and other partitions and clients are served.

A fetch that finds fewer than ``min_bytes`` waits in the fetch purgatory for up to
``max_wait_ms``; an append to any of its partitions re-checks it, so it answers as soon as enough
data arrives, or at the deadline with what there is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.connection import FileRegion
from broker.fetch_session import CachedPartition, FetchContext
from broker.purgatory import DelayedOperation
from protocol.errors import ErrorCode, KafkaApiError
from storage.errors import SegmentTruncatedError

log = logging.getLogger(__name__)

API_KEY = 1
NAME = "Fetch"
VERSIONS = (4, 17)

READ_COMMITTED = 1


def _partition_response(index: int, code: int, hw: int = -1, lso: int = -1, log_start: int = -1,
                        aborted: list | None = None, records: Any = None) -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": lso,
        "log_start_offset": log_start,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": records,
    }


class _Read:
    """The outcome of reading a fetch's partitions once."""

    __slots__ = ("partitions", "total_bytes", "has_error", "close_connection", "bytes_by_topic")

    def __init__(self) -> None:
        self.partitions: list[tuple[CachedPartition, dict, int]] = []  # (entry, response, record bytes)
        self.total_bytes = 0
        self.has_error = False
        self.close_connection = False  # a segment was truncated under the broker: answer nothing
        self.bytes_by_topic: dict[str, int] = {}  # record bytes read, by topic name (for metrics)


def read_partitions(request: Any, ctx: FetchContext) -> _Read:
    broker = request.broker
    body = request.body
    rm = broker.replica_manager
    image = broker.metadata.image
    uses_ids = request.api_version >= 13
    read_committed = body["isolation_level"] == READ_COMMITTED
    aborted = [] if read_committed else None
    # Kafka's KafkaApis: fetchMaxBytes = min(request max_bytes, fetch.max.bytes).
    budget = min(body["max_bytes"], broker.config["fetch.max.bytes"])
    zero_copy = broker.config["odradek.fetch.sendfile"]
    out = _Read()
    for cp in ctx.partitions:
        if uses_ids:
            topic = image.topics_by_id.get(cp.topic_id)
            if topic is None:
                out.partitions.append((cp, _partition_response(cp.partition, ErrorCode.UNKNOWN_TOPIC_ID), 0))
                out.has_error = True
                continue
            name = topic.name
        else:
            name = cp.topic
        try:
            part = rm.leader_partition(name, cp.partition)
            rm.check_leader_epoch(part, cp.current_leader_epoch)
            hw = part.high_watermark
            lso = part.last_stable_offset
            max_offset = lso if read_committed else hw
            min_one = out.total_bytes == 0
            limit = min(cp.partition_max_bytes, max(budget - out.total_bytes, 0))
            if limit <= 0 and not min_one:
                piece = None
            else:
                piece = rm.read(part, cp.fetch_offset, limit, max_offset, min_one)
            size = piece.size if piece is not None else 0
            if not size:
                records: Any = b""
            elif zero_copy:
                records = FileRegion(piece.file, piece.position, size)
            else:
                records = piece.read_bytes()
            resp = _partition_response(cp.partition, ErrorCode.NONE, hw, lso, part.log_start_offset, aborted, records)
            out.total_bytes += size
            out.partitions.append((cp, resp, size))
            if size:
                out.bytes_by_topic[name] = out.bytes_by_topic.get(name, 0) + size
        except SegmentTruncatedError as exc:
            _report_truncated(exc)
            out.close_connection = True
            out.partitions.clear()  # drop regions already read: nothing of this response is sent
            return out
        except KafkaApiError as exc:
            out.has_error = True
            resp = _partition_response(cp.partition, exc.code)
            part = rm.partitions.get((name, cp.partition))
            if part is not None and exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                resp["high_watermark"] = part.high_watermark
                resp["last_stable_offset"] = part.last_stable_offset
                resp["log_start_offset"] = part.log_start_offset
            out.partitions.append((cp, resp, 0))
    return out


def build_response(request: Any, ctx: FetchContext, result: _Read) -> dict:
    uses_ids = request.api_version >= 13
    topics: list[dict] = []
    by_topic: dict[Any, dict] = {}
    metrics = request.broker.metrics
    if metrics is not None:
        # Kafka's BytesOutPerSec: record bytes sent to consumers (followers are refused in
        # handle()); counted here, once per response, not on each re-read of a waiting fetch.
        for name, size in result.bytes_by_topic.items():
            metrics.topic_stats.sent(name, size)
    for cp, resp, size in result.partitions:
        # must_respond also records what the client was told, for the next incremental fetch.
        changed = cp.must_respond(resp, size > 0)
        if ctx.incremental and not changed:
            continue
        key = cp.topic_id if uses_ids else cp.topic
        entry = by_topic.get(key)
        if entry is None:
            entry = by_topic[key] = {"topic": cp.topic, "topic_id": cp.topic_id, "partitions": []}
            topics.append(entry)
        entry["partitions"].append(resp)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": ctx.session_id, "responses": topics}


class DelayedFetch(DelayedOperation):
    """A long-poll fetch waiting for ``min_bytes`` (Kafka's DelayedFetch)."""

    def __init__(self, delay_ms: int, request: Any, ctx: FetchContext, future: asyncio.Future) -> None:
        super().__init__(delay_ms)
        self.request = request
        self.ctx = ctx
        self.future = future
        self.min_bytes = _min_bytes(request)

    def try_complete(self) -> bool:
        if self.request.conn.closed:
            return self.force_complete()
        result = read_partitions(self.request, self.ctx)
        if result.total_bytes >= self.min_bytes or result.has_error or result.close_connection:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.future.done():
            return
        try:
            result = read_partitions(self.request, self.ctx)
            if result.close_connection:
                self.request.conn.close_threadsafe()
                self.future.set_result(None)
                return
            self.future.set_result(build_response(self.request, self.ctx, result))
        except Exception as exc:  # surfaced by the dispatcher as a failed handler
            self.future.set_exception(exc)

    def on_expiration(self) -> None:
        pass


def handle(request: Any) -> Any:
    body = request.body
    broker = request.broker
    if body["replica_id"] >= 0 or (body["replica_state"] or {}).get("replica_id", -1) >= 0:
        # Follower fetching arrives with replication; until then only consumers fetch.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "session_id": 0,
                "responses": []}
    ctx = broker.fetch_sessions.new_context(body, request.api_version >= 13)
    if ctx.error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": ctx.error, "session_id": 0, "responses": []}
    result = read_partitions(request, ctx)
    if result.close_connection:
        request.conn.close_threadsafe()
        return None
    max_wait = body["max_wait_ms"]
    if max_wait <= 0 or result.total_bytes >= _min_bytes(request) or result.has_error or not ctx.partitions:
        return build_response(request, ctx, result)
    future = asyncio.get_running_loop().create_future()
    op = DelayedFetch(max_wait, request, ctx, future)
    keys = list({(_topic_name(broker, cp, request.api_version), cp.partition) for cp in ctx.partitions})
    broker.replica_manager.fetch_purgatory.try_complete_else_watch(op, keys)
    return future


def _min_bytes(request: Any) -> int:
    # Kafka's KafkaApis: fetchMinBytes = min(request min_bytes, fetchMaxBytes).
    return min(request.body["min_bytes"], request.body["max_bytes"], request.broker.config["fetch.max.bytes"])


_reported_truncations: set[str] = set()


def _report_truncated(exc: SegmentTruncatedError) -> None:
    """One error per truncated segment file (each retrying consumer would otherwise log again);
    later fetches of it close their connections quietly."""
    if exc.path in _reported_truncations:
        log.debug("closing a fetch connection: %s", exc)
        return
    if len(_reported_truncations) < 10_000:
        _reported_truncations.add(exc.path)
    log.error("%s; closing the fetching connection (Kafka: truncated during read)", exc)


def _topic_name(broker: Any, cp: CachedPartition, version: int) -> str | None:
    if version < 13:
        return cp.topic
    topic = broker.metadata.image.topics_by_id.get(cp.topic_id)
    return topic.name if topic is not None else None


def error_response(request: Any, code: int) -> dict:
    """Every requested partition with ``code`` (v4-6 have no top-level error field)."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "session_id": 0,
        "responses": [
            {"topic": t["topic"], "topic_id": t["topic_id"],
             "partitions": [_partition_response(p["partition"], code) for p in t["partitions"]]}
            for t in request.body["topics"]
        ],
    }
