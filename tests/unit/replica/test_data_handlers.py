"""The Produce, Fetch, ListOffsets, DeleteRecords and OffsetForLeaderEpoch handlers driven against a
ReplicaManager on real temp-dir logs: wire dicts in, wire dicts out, no broker process."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

from odradek.broker.api.handlers import delete_records, fetch, list_offsets, offset_for_leader_epoch, produce
from odradek.broker.api.registry import services_for
from odradek.broker.api.request_types import CLOSE_CONNECTION
from odradek.broker.security.authz import AuthHelper
from odradek.broker.security.principal import ANONYMOUS
from odradek.protocol.errors import ErrorCode
from odradek.storage.results import FetchSlice
from tests.unit.replica.conftest import Node, batch


class Session:
    """What a handler may see of the connection: whether the client is gone (a long poll's end)."""

    closed = False


class Request:
    """The request as a handler sees it (broker/api/request_types.py ApiRequest)."""

    def __init__(self, node: Node, body: dict, version: int) -> None:
        self.node = node
        self.body = body
        self.api_version = version
        self.client_id = "test"
        self.principal = ANONYMOUS
        self.peer = "127.0.0.1:50000"
        self.listener = "PLAINTEXT"
        self.session = Session()


def call(module: Any, request: Request) -> Any:
    """The handler as the registry binds it: its ``Services`` from the node's parts, no authorizer."""
    node = request.node
    lent = SimpleNamespace(config=node.config, metadata=node.metadata, replica_manager=node.rm,
                           fetch_sessions=node.fetch_sessions, metrics=None, authz=AuthHelper(None),
                           txn_coordinator=None)  # no transactional request here
    return module.handle(services_for(module.Services, lent, {}), request)  # type: ignore[arg-type]


def produce_body(acks: int, *parts: tuple[str, int, Any]) -> dict:
    topics: dict[str, list[dict]] = {}
    for name, index, records in parts:
        topics.setdefault(name, []).append({"index": index, "records": records})
    return {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()]}


def fetch_body(*parts: tuple[str, int, int], min_bytes: int = 1, max_wait_ms: int = 0, session_epoch: int = -1,
               session_id: int = 0, isolation: int = 0) -> dict:
    return {"replica_id": -1, "replica_state": None, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": session_id,
            "session_epoch": session_epoch, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": t, "topic_id": None, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]} for t, p, off in parts]}


def partition_results(response: dict) -> list[tuple[int, int]]:
    return [(p["error_code"], p["base_offset"]) for t in response["responses"] for p in t["partition_responses"]]


async def test_produce_answers_per_partition(node: Node) -> None:
    req = Request(node, produce_body(1, ("t", 0, batch(2)), ("t", 0, batch()), ("x", 0, batch())), 9)
    response = call(produce, req)
    assert partition_results(response) == [(0, 0), (0, 2), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]


async def test_produce_acks_all_answers_at_once_and_bad_acks_refused(node: Node) -> None:
    assert partition_results(call(produce, Request(node, produce_body(-1, ("t", 0, batch())), 9))) == [(0, 0)]
    bad = call(produce, Request(node, produce_body(2, ("t", 0, batch())), 9))
    assert partition_results(bad) == [(ErrorCode.INVALID_REQUIRED_ACKS, -1)]
    assert node.rm.leader_partition("t", 0).log_end_offset == 1


async def test_produce_acks_all_waits_for_the_high_watermark(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.isr = (1, 2)
    part.update_follower_fetch_state(2, 0)
    later = call(produce, Request(node, produce_body(-1, ("t", 0, batch())), 9))
    assert inspect.isawaitable(later) and node.rm.produce_purgatory.delayed == 1
    part.update_follower_fetch_state(2, 1)
    node.rm.try_complete_delayed_requests(("t", 0))
    assert node.rm.produce_purgatory.delayed == 0
    assert partition_results(await later) == [(0, 0)]


async def test_produce_acks_zero_closes_the_connection_on_error(node: Node) -> None:
    ok = Request(node, produce_body(0, ("t", 0, batch())), 9)
    assert call(produce, ok) is None
    bad = Request(node, produce_body(0, ("nope", 0, batch())), 9)
    assert call(produce, bad) is CLOSE_CONNECTION


async def test_produce_zstd_needs_v7(node: Node) -> None:
    raw = bytearray(batch())
    raw[22] |= 4  # attributes' low byte: codec 4 = zstd
    response = call(produce, Request(node, produce_body(1, ("t", 0, bytes(raw))), 6))
    assert partition_results(response) == [(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1)]


async def test_fetch_reads_zero_copy_and_long_polls(node: Node, monkeypatch) -> None:
    raw = batch(2)
    call(produce, Request(node, produce_body(1, ("t", 0, raw)), 9))
    response = call(fetch, Request(node, fetch_body(("t", 0, 0)), 12))
    (p,) = response["responses"][0]["partitions"]
    assert (p["error_code"], p["high_watermark"], p["last_stable_offset"]) == (0, 2, 2)
    assert isinstance(p["records"], FetchSlice) and p["records"].size == len(raw)
    assert p["aborted_transactions"] is None
    waiting = call(fetch, Request(node, fetch_body(("t", 0, 2), max_wait_ms=500), 12))
    assert inspect.isawaitable(waiting) and node.rm.fetch_purgatory.delayed == 1
    built: list[int] = []
    real_build = fetch.build_response
    monkeypatch.setattr(fetch, "build_response", lambda *a: built.append(1) or real_build(*a))
    call(produce, Request(node, produce_body(1, ("t", 0, batch())), 9))
    # The append completed the DelayedFetch, but the produce path never ran fetch handler code:
    # the response is built on the fetch's own turn.
    assert node.rm.fetch_purgatory.delayed == 0 and built == []
    (p,) = (await waiting)["responses"][0]["partitions"]
    assert p["high_watermark"] == 3 and p["records"].size > 0 and built == [1]


async def test_fetch_read_committed_lists_no_aborted_transactions(node: Node) -> None:
    response = call(fetch, Request(node, fetch_body(("t", 0, 0), isolation=1), 12))
    (p,) = response["responses"][0]["partitions"]
    assert p["aborted_transactions"] == [] and p["records"] == b""


async def test_fetch_errors_and_follower_refusal(node: Node) -> None:
    response = call(fetch, Request(node, fetch_body(("t", 0, 5), ("gone", 0, 0)), 12))
    codes = [p["error_code"] for t in response["responses"] for p in t["partitions"]]
    assert codes == [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    # Empty records, not null (Kafka's MemoryRecords.EMPTY): librdkafka refuses a null record set.
    assert all(p["records"] == b"" for t in response["responses"] for p in t["partitions"])
    assert all(p["records"] == b"" for t in fetch.error_response(Request(node, fetch_body(("t", 0, 0)), 12),
                                                                  ErrorCode.NOT_LEADER_OR_FOLLOWER)["responses"]
               for p in t["partitions"])
    # Broker 2 is not a replica of t-0: its fetch is refused per partition (Kafka's
    # NotLeaderOrFollowerException "fetch request from a non-replica").
    body = fetch_body(("t", 0, 0))
    body["replica_id"] = 2
    response = call(fetch, Request(node, body, 12))
    assert response["error_code"] == ErrorCode.NONE
    assert [(p["error_code"], p["records"]) for t in response["responses"] for p in t["partitions"]] == [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, b"")]


async def test_follower_fetch_reads_past_the_high_watermark_and_moves_it(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.replicas = part.isr = (1, 2)
    waiting_produce = call(produce, Request(node, produce_body(-1, ("t", 0, batch(2))), 9))
    assert inspect.isawaitable(waiting_produce) and part.high_watermark == 0
    consumer = call(fetch, Request(node, fetch_body(("t", 0, 0), max_wait_ms=5000), 12))
    assert inspect.isawaitable(consumer)  # nothing below the HW yet: a long poll
    # v15: the replica id comes in replica_state (KIP-903).
    body = fetch_body(("t", 0, 0))
    body["replica_state"] = {"replica_id": 2, "replica_epoch": -1}
    body["topics"][0]["topic_id"] = part.topic_id
    first = call(fetch, Request(node, body, 15))
    (p,) = first["responses"][0]["partitions"]
    assert p["error_code"] == 0 and p["records"].size > 0 and p["high_watermark"] == 0
    assert node.rm.produce_purgatory.delayed == 1  # the follower has not got them yet
    body["topics"][0]["partitions"][0]["fetch_offset"] = 2
    second = call(fetch, Request(node, body, 15))
    (p,) = second["responses"][0]["partitions"]
    assert (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"]) == (2, 2, 0)
    assert partition_results(await waiting_produce) == [(0, 0)]
    (c,) = (await consumer)["responses"][0]["partitions"]
    assert c["high_watermark"] == 2 and c["records"].size > 0


async def test_a_followers_fetch_session_outranks_consumers_when_the_cache_is_full(node: Node) -> None:
    # Kafka's KafkaApis creates a follower's session as privileged (isFromFollower): with every
    # slot taken, a consumer's full fetch gets no session and the follower keeps its own; a
    # follower's full fetch takes a consumer's slot. (Odradek evicted the least recently used.)
    part = node.rm.leader_partition("t", 0)
    part.replicas = part.isr = (1, 2)
    node.fetch_sessions.max_slots = 1
    body = fetch_body(("t", 0, 0), session_epoch=0)
    body["replica_state"] = {"replica_id": 2, "replica_epoch": -1}
    body["topics"][0]["topic_id"] = part.topic_id
    follower = call(fetch, Request(node, body, 15))["session_id"]
    assert follower > 0
    assert call(fetch, Request(node, fetch_body(("t", 0, 0), session_epoch=0), 12))["session_id"] == 0
    assert list(node.fetch_sessions.sessions) == [follower]
    node.fetch_sessions.sessions.clear()
    consumer = call(fetch, Request(node, fetch_body(("t", 0, 0), session_epoch=0), 12))["session_id"]
    assert consumer > 0
    again = call(fetch, Request(node, body, 15))["session_id"]
    assert again > 0 and list(node.fetch_sessions.sessions) == [again]


async def test_incremental_fetch_session_lists_only_news(node: Node) -> None:
    full = call(fetch, Request(node, fetch_body(("t", 0, 0), session_epoch=0), 12))
    session = full["session_id"]
    assert session > 0 and len(full["responses"]) == 1
    quiet = call(fetch, Request(node, fetch_body(session_id=session, session_epoch=1), 12))
    assert quiet["responses"] == []
    call(produce, Request(node, produce_body(1, ("t", 0, batch())), 9))
    news = call(fetch, Request(node, fetch_body(session_id=session, session_epoch=2), 12))
    assert news["responses"][0]["partitions"][0]["high_watermark"] == 1
    stale = call(fetch, Request(node, fetch_body(session_id=session, session_epoch=9), 12))
    assert stale["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH


async def test_list_offsets_delete_records_offset_for_leader_epoch(node: Node) -> None:
    call(produce, Request(node, produce_body(1, ("t", 0, batch(4, ts=[10, 20, 30, 40]))), 9))
    lo = call(list_offsets, Request(node, {"replica_id": -1, "isolation_level": 0, "timeout_ms": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": 25}]}]}, 9))
    assert lo["topics"][0]["partitions"][0]["offset"] == 2
    dr = await call(delete_records, Request(node, {"timeout_ms": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "offset": 3}]}]}, 2))
    assert dr["topics"][0]["partitions"][0] == {"partition_index": 0, "low_watermark": 3, "error_code": 0}
    ofle = call(offset_for_leader_epoch, Request(node, {"replica_id": -1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]}, 4))
    assert ofle["topics"][0]["partitions"][0]["end_offset"] == 4
