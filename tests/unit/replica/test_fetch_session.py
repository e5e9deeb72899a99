"""Fetch sessions (KIP-227) without a broker: full, incremental, forgotten, eviction, errors."""

from __future__ import annotations

from odradek.broker.replica.fetch_session import FetchSessionCache
from odradek.protocol.errors import ErrorCode


def body(session_id: int, epoch: int, *partitions: tuple[str, int], forgotten: tuple[str, int] | None = None) -> dict:
    return {"session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "topic_id": None, "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 100, "log_start_offset": -1,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1}]} for t, p in partitions],
            "forgotten_topics_data": [] if forgotten is None else [
                {"topic": forgotten[0], "topic_id": None, "partitions": [forgotten[1]]}]}


def sent(hw: int) -> dict:
    return {"error_code": 0, "high_watermark": hw, "last_stable_offset": hw, "log_start_offset": 0}


def test_sessionless_and_new_session() -> None:
    cache = FetchSessionCache(2)
    ctx = cache.new_context(body(0, -1, ("a", 0)), False)
    assert ctx.session_id == 0 and not ctx.incremental and len(ctx.partitions) == 1
    ctx = cache.new_context(body(0, 0, ("a", 0), ("a", 1)), False)
    assert ctx.session_id > 0 and len(ctx.partitions) == 2 and ctx.session_id in cache.sessions


def test_incremental_adds_forgets_and_reports_changes() -> None:
    cache = FetchSessionCache(2)
    full = cache.new_context(body(0, 0, ("a", 0)), False)
    (cp,) = full.partitions
    assert cp.must_respond(sent(5), False) is True  # first time: always listed
    inc = cache.new_context(body(full.session_id, 1, ("a", 1)), False)
    assert inc.incremental and [c.partition for c in inc.partitions] == [0, 1]
    assert inc.partitions[0].must_respond(sent(5), False) is False  # nothing new
    assert inc.partitions[0].must_respond(sent(6), False) is True  # the HW moved
    inc = cache.new_context(body(full.session_id, 2, forgotten=("a", 0)), False)
    assert [c.partition for c in inc.partitions] == [1]


def test_session_errors_and_eviction() -> None:
    cache = FetchSessionCache(1)
    assert cache.new_context(body(12345, 1), False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    first = cache.new_context(body(0, 0, ("a", 0)), False)
    assert cache.new_context(body(first.session_id, 7), False).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    second = cache.new_context(body(0, 0, ("b", 0)), False)
    assert list(cache.sessions) == [second.session_id]  # the least recently used one went
    closed = cache.new_context(body(second.session_id, -1, ("b", 0)), False)
    assert closed.session_id == 0 and not cache.sessions
