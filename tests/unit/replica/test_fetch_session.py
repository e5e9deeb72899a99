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
    # Kafka's tryEvict: a session under 2 minutes old and in use is not evicted by a consumer's.
    assert second.session_id == 0 and list(cache.sessions) == [first.session_id]
    closed = cache.new_context(body(first.session_id, -1, ("b", 0)), False)
    assert closed.session_id == 0 and not cache.sessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_followers_session_is_kept_when_consumers_fill_the_cache() -> None:
    # Kafka's FetchSessionCache: followers' sessions are privileged. With the cache full, a
    # consumer's new session gets no slot (session id 0) while the follower's session lives on; a
    # follower's new session evicts the consumer session with the fewest partitions, not the
    # least recently used one. (Odradek evicted the least recently used session, whoever held it.)
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    follower = cache.new_context(body(0, 0, ("a", 0), ("a", 1)), False, privileged=True)
    small = cache.new_context(body(0, 0, ("b", 0)), False)
    clock.now += 10
    assert cache.new_context(body(follower.session_id, 1), False).incremental  # the follower fetches on
    consumer = cache.new_context(body(0, 0, ("c", 0), ("c", 1), ("c", 2)), False)
    assert consumer.session_id == 0 and set(cache.sessions) == {follower.session_id, small.session_id}
    assert cache.new_context(body(follower.session_id, 2), False).incremental
    other = cache.new_context(body(0, 0, ("d", 0)), False, privileged=True)
    assert other.session_id > 0 and set(cache.sessions) == {follower.session_id, other.session_id}
    assert cache.new_context(body(small.session_id, 1), False).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Followers' sessions do not evict each other while they are fresh and in use.
    third = cache.new_context(body(0, 0, ("e", 0), ("e", 1), ("e", 2)), False, privileged=True)
    assert third.session_id == 0 and set(cache.sessions) == {follower.session_id, other.session_id}


def test_a_stale_session_goes_first_and_an_old_one_only_to_a_larger_one() -> None:
    # tryEvict's other rules: the least recently used session goes once unused for 2 minutes;
    # a session over 2 minutes old (at its last use) goes to a new one with more partitions, the
    # smallest of them first.
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    idle = cache.new_context(body(0, 0, ("a", 0), ("a", 1), ("a", 2)), False, privileged=True)
    busy = cache.new_context(body(0, 0, ("b", 0), ("b", 1)), False)
    clock.now += 121
    assert cache.new_context(body(busy.session_id, 1), False).incremental  # now old, and in use
    fresh = cache.new_context(body(0, 0, ("c", 0)), False)
    assert fresh.session_id > 0 and set(cache.sessions) == {busy.session_id, fresh.session_id}  # idle was stale
    assert cache.new_context(body(0, 0, ("d", 0), ("d", 1)), False).session_id == 0  # not larger than busy
    larger = cache.new_context(body(0, 0, ("e", 0), ("e", 1), ("e", 2)), False)
    assert larger.session_id > 0 and set(cache.sessions) == {fresh.session_id, larger.session_id}
    assert idle.session_id not in cache.sessions
