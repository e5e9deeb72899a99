"""Fetch (api key 1): read record batches, zero-copy, with long polls and fetch sessions.

Versions 4-18 (v0-3 predate message format v2; Kafka 4 dropped them too, KIP-896).
- v4: isolation_level, last_stable_offset, aborted_transactions.
- v5: log_start_offset.
- v7: fetch sessions (KIP-227): session_id/epoch, forgotten topics, top-level error_code.
- v9: current_leader_epoch (KIP-320): FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH.
- v11: rack_id, preferred_read_replica (KIP-392: with ``replica.selector.class`` set, a leader
  names a replica in the consumer's rack and sends no records of that partition; a follower
  serves a consumer's v11+ fetch up to its own high watermark).
- v12: flexible; last_fetched_epoch; diverging_epoch/current_leader/snapshot_id tagged.
- v13: topic ids instead of names (KIP-516): UNKNOWN_TOPIC_ID.
- v14-17: same for consumers (tiered storage, KIP-903 replica state, KIP-951, KIP-853).
- v16: node_endpoints (KIP-951): a partition refused with NOT_LEADER_OR_FOLLOWER or
  FENCED_LEADER_EPOCH carries current_leader, its leader's endpoint joins node_endpoints
  (broker/api/handlers/current_leader.py); v12-15 leave current_leader out, as Kafka.
- v18: a partition's high_watermark, the one the fetching replica knows (KIP-1166, tagged): only
  KRaft's own replication reads it; a broker's Fetch ignores it, as Kafka 4.4's does (its
  FetchRequest.PartitionData does not carry it).

Followers (replication) fetch with their broker id: ``replica_id`` before v15,
``replica_state.replica_id`` from v15 (KIP-903). They read up to the log end offset, not the high
watermark, and their fetch offset moves the leader's high watermark
(``ReplicaManager.read_from_local_log``); a broker that is not a replica of a partition gets
UNKNOWN_LEADER_EPOCH for it (NOT_LEADER_OR_FOLLOWER without a current leader epoch). Their bytes are not counted as BytesOut (Kafka counts them as
ReplicationBytesOut).

Every requested partition is answered, and no other (a sessionless or full fetch); incremental
session fetches answer only partitions with news (broker/replica/fetch_session.py). Batches start at the
one holding the fetch offset (the client skips records below it), never pass the high watermark
(the last stable offset under read_committed: the first offset of the oldest open transaction), stay within
``partition_max_bytes`` and the response limit min(request ``max_bytes``, broker
``fetch.max.bytes``) — except that the first batch of the first partition with data is returned
whole even if it is larger (KIP-74; Kafka's ReplicaManager.readFromLog ``minOneMessage``), so a
consumer always makes progress. Record bytes are not copied: the response carries file regions
(holding the segment's file handle) that the connection writes with ``os.sendfile``.

With an authorizer (``_authorize``): a consumer needs READ on each topic, a follower CLUSTER_ACTION
on the cluster; refused partitions answer TOPIC_AUTHORIZATION_FAILED and are not read. Without one
the request pays one attribute test.

A segment file cut short under the broker is Kafka's "truncated during write": the fetching
connection is closed and the broker logs one error per segment file; the log dir stays online
and other partitions and clients are served.

The reading, and the wait of a fetch that finds fewer than ``min_bytes`` (up to ``max_wait_ms``,
answered as soon as enough data is below the high watermark), are the replica manager's
(``ReplicaManager.fetch_messages``, broker/replica/delayed_fetch.py); this module translates the
request into its call and its result into the response.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.current_leader import FETCH_FROM_VERSION, CurrentLeaders
from odradek.broker.api.request_types import CLOSE_CONNECTION, Answer, ApiRequest, CloseConnection, Later
from odradek.broker.replica.fetch_params import FetchParams, FetchResult, LogReadResult
from odradek.broker.replica.fetch_session import CachedPartition, FetchContext
from odradek.broker.runtime.completion import Completion
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.fetch_session import FetchSessionCache
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.runtime.metrics import BrokerMetrics
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        AbortedTransaction,
        FetchableTopicResponse,
        FetchRequest,
        FetchResponse,
        FetchResponseLeaderIdAndEpoch,
        FetchResponsePartitionData,
        Records,
    )

API_KEY = 1
NAME = "Fetch"
VERSIONS = (4, 18)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    replica_manager: ReplicaManager
    fetch_sessions: FetchSessionCache
    authz: AuthHelper
    metrics: BrokerMetrics | None


READ_COMMITTED = 1


def _partition_response(index: int, code: int, hw: int = -1, lso: int = -1, log_start: int = -1,
                        aborted: list[AbortedTransaction] | None = None, records: Records | None = b"",
                        preferred: int = -1) -> FetchResponsePartitionData:
    # An error partition carries empty records, never null (Kafka's MemoryRecords.EMPTY):
    # librdkafka refuses a null record set ("invalid MessageSetSize -1"), fails the whole response and
    # never sees the error code (the fault suite saw consumers re-read and skip offsets).
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": lso,
        "log_start_offset": log_start,
        "aborted_transactions": aborted,
        "preferred_read_replica": preferred,
        "records": records,
    }


def _aborted(read: LogReadResult) -> list[AbortedTransaction]:
    """For read_committed (read_uncommitted answers null): the aborted transactions overlapping the
    records, from the partition's .txnindex (the client drops their batches; control batches it
    never shows)."""
    txns = read.aborted_transactions
    if not txns:
        return []
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset} for txn in txns]


def build_response(services: Services, request: ApiRequest[FetchRequest], ctx: FetchContext, result: FetchResult,
                   denied: Sequence[CachedPartition] = ()) -> FetchResponse:
    uses_ids = request.api_version >= 13
    read_committed = request.body["isolation_level"] == READ_COMMITTED
    topics: list[FetchableTopicResponse] = []
    by_topic: dict[Any, FetchableTopicResponse] = {}

    def add(cp: CachedPartition, resp: FetchResponsePartitionData) -> None:
        key = cp.topic_id if uses_ids else cp.topic
        entry = by_topic.get(key)
        if entry is None:
            # cp.topic is None only from v13, which writes topic_id instead.
            entry = by_topic[key] = {"topic": cp.topic or "", "topic_id": cp.topic_id, "partitions": []}
            topics.append(entry)
        entry["partitions"].append(resp)

    metrics = services.metrics
    if metrics is not None:
        # Kafka's BytesOutPerSec: record bytes sent to consumers (read_from_local_log does not
        # count followers' reads); counted once per response.
        for name, size in result.bytes_by_topic.items():
            metrics.topic_stats.sent(name, size)
    incremental = ctx.incremental
    leaders: CurrentLeaders | None = None  # KIP-951, made for the first partition that needs it
    for read in result.partitions:
        cp = read.partition
        code = read.error_code
        if code:
            resp = _partition_response(cp.partition, code, read.high_watermark, read.last_stable_offset,
                                       read.log_start_offset)
            if code in _LEADER_MOVED and request.api_version >= FETCH_FROM_VERSION:
                if leaders is None:
                    leaders = CurrentLeaders(services.replica_manager, services.metadata, request.listener)
                resp["current_leader"] = _current_leader(services, request, leaders, cp)
        else:
            resp = _partition_response(cp.partition, code, read.high_watermark, read.last_stable_offset,
                                       read.log_start_offset, _aborted(read) if read_committed else None,
                                       read.records, read.preferred_read_replica)
        # must_respond also records what the client was told, for the next incremental fetch.
        # (A preferred read replica is always sent, as Kafka's CachedPartition does.)
        changed = cp.must_respond(resp, read.size > 0 or read.preferred_read_replica >= 0)
        if incremental and not changed:
            continue
        add(cp, resp)
    for cp in denied:
        resp = _partition_response(cp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if not cp.must_respond(resp, False) and incremental:
            continue
        add(cp, resp)
    response: FetchResponse = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": ctx.session_id,
                               "responses": topics}
    if leaders is not None:
        response["node_endpoints"] = leaders.node_endpoints()
    return response


# The errors whose partitions carry current_leader from v16 (Kafka's handleFetchRequest).
_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _current_leader(services: Services, request: ApiRequest[FetchRequest], leaders: CurrentLeaders,
                    cp: CachedPartition) -> FetchResponseLeaderIdAndEpoch:
    if request.api_version >= 13:  # named by topic id only; the error means the id is known
        topic = services.metadata.image.topics_by_id.get(cp.topic_id)
        if topic is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return leaders.leader_of(topic.name, cp.partition)
    return leaders.leader_of(cp.topic or "", cp.partition)


def _respond(services: Services, request: ApiRequest[FetchRequest], ctx: FetchContext, result: FetchResult,
             denied: Sequence[CachedPartition] = ()) -> FetchResponse | CloseConnection:
    if result.truncated is not None:
        return CLOSE_CONNECTION  # nothing of this response may be sent
    return build_response(services, request, ctx, result, denied)


def _authorize(services: Services, request: ApiRequest[FetchRequest], partitions: list[CachedPartition], replica_id: int,
               uses_ids: bool) -> tuple[list[CachedPartition], list[CachedPartition]]:
    """(allowed, denied) partitions (KafkaApis.handleFetchRequest): a follower needs CLUSTER_ACTION on
    the cluster, a consumer READ on each topic; the others answer TOPIC_AUTHORIZATION_FAILED. From v13
    a partition names its topic by id only (the name in the request is empty): the name the ACLs
    match is the image's. An unknown topic id is left to the replica manager (UNKNOWN_TOPIC_ID)."""
    if replica_id >= 0:
        if services.authz.cluster_allowed(request, authz.CLUSTER_ACTION):
            return partitions, []
        return [], partitions
    if uses_ids:
        by_id = services.metadata.image.topics_by_id
        names: dict[int, str | None] = {}
        for cp in partitions:
            topic = by_id.get(cp.topic_id)
            names[id(cp)] = None if topic is None else topic.name
    else:
        names = {id(cp): cp.topic for cp in partitions}
    readable = set(services.authz.filter_allowed(request, authz.READ, authz.TOPIC,
                                        {name for name in names.values() if name is not None}))
    allowed = [cp for cp in partitions if names[id(cp)] is None or names[id(cp)] in readable]
    return allowed, [cp for cp in partitions if names[id(cp)] is not None and names[id(cp)] not in readable]


def handle(services: Services, request: ApiRequest[FetchRequest]) -> Answer[FetchResponse]:
    body = request.body
    if request.api_version < 15:
        replica_id, replica_epoch = body["replica_id"], -1
    else:  # KIP-903: a tagged struct, absent (consumers) or holding the broker id and epoch
        state = body["replica_state"] or {}
        replica_id, replica_epoch = state.get("replica_id", -1), state.get("replica_epoch", -1)
    uses_ids = request.api_version >= 13
    ctx = services.fetch_sessions.new_context(body, uses_ids, privileged=replica_id >= 0)
    if ctx.error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": ctx.error, "session_id": 0, "responses": []}
    # Kafka's KafkaApis: fetchMaxBytes = min(request max_bytes, fetch.max.bytes), and
    # fetchMinBytes = min(request min_bytes, fetchMaxBytes).
    max_bytes = min(body["max_bytes"], services.config["fetch.max.bytes"])
    partitions: list[CachedPartition] = ctx.partitions
    denied: list[CachedPartition] = []
    max_wait_ms = body["max_wait_ms"]
    if services.authz.authorizer is not None:
        partitions, denied = _authorize(services, request, ctx.partitions, replica_id, uses_ids)
        if not partitions:
            max_wait_ms = 0  # nothing to wait for (Kafka answers at once when no partition is left)
    session = request.session
    # KIP-392: a consumer's v11+ fetch carries its client.rack (Kafka's clientMetadata).
    client_rack = body["rack_id"] if request.api_version >= 11 and replica_id < 0 else None
    params = FetchParams(max_wait_ms, min(body["min_bytes"], max_bytes), max_bytes,
                         body["isolation_level"], uses_ids, lambda: session.closed, replica_id, replica_epoch,
                         client_rack)
    done: Completion[FetchResult] = Completion()
    services.replica_manager.fetch_messages(params, partitions, done)
    if done.done:
        return _respond(services, request, ctx, done.value, denied)
    # A long poll: the replica manager's DelayedFetch completes the future; the response is
    # built on this request's own turn (the future's done callback), not inside the append that
    # woke it.
    return Later(done.wait(), functools.partial(_respond, services, request, ctx, denied=denied))


def error_response(request: ApiRequest[FetchRequest], code: int) -> FetchResponse:
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
