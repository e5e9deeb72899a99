"""A ShareFetch that finds nothing to acquire waits, as Kafka 4.4's DelayedShareFetch does, in a
purgatory, and answers when its partition gets records, when records of its share-partition are
released (by an acknowledgement, a closed connection, an expired acquisition lock), or when
max_wait_ms passes - not by looking again every so often.

Over raw sockets against the real daemon. The latency figures are measured here, each over
several rounds (medians), between the moment the event's own request was answered and the moment
the waiting fetch's answer arrived; the bound on the median (5 ms) is generous for an answer sent
in the same loop turn as the append or release (well under 1 ms here), and far below what a 50 ms
poll gives (a median about 25 ms: the event comes at a random point of the poll's period).
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.integration.test_share_fetch_wire import (
    RELEASE,
    acquired,
    fetch_topics,
    open_share_partition,
    produce,
    share_fetch,
)
from tests.integration.test_share_groups_wire import wait_for_coordinator
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(180)

ROUNDS = 15
MEDIAN_BOUND_S = 0.005


def _timed_fetch(c: WireClient, **fields) -> tuple[dict, float]:
    r = share_fetch(c, **fields)
    return r, time.monotonic()


def _park(pool: ThreadPoolExecutor, c: WireClient, **fields) -> Future[tuple[dict, float]]:
    """Send a ShareFetch from another thread and give the broker time to park it (a random extra
    part of 50 ms, so that the event does not come in step with a poll's period)."""
    waiting = pool.submit(_timed_fetch, c, **fields)
    time.sleep(0.3 + random.uniform(0, 0.05))
    assert not waiting.done(), "the fetch answered before anything happened"
    return waiting


def test_waiting_share_fetch_answers_when_records_are_produced(broker) -> None:
    with WireClient(broker.host, broker.port) as c, WireClient(broker.host, broker.port) as p, \
            ThreadPoolExecutor(1) as pool:
        topic_id = create_topic(c, "sw", 1)
        wait_for_coordinator(c)
        assert acquired(open_share_partition(c, topic_id)) == {0: []}  # starts at "latest"
        latencies = []
        epoch = 1
        for i in range(ROUNDS):
            acks = {0: [(5 * (i - 1), 5 * i - 1, [1])]} if i else {}  # accept the last round's records
            waiting = _park(pool, c, share_session_epoch=epoch, max_wait_ms=20_000,
                            topics=fetch_topics(topic_id, [0], acks) if acks else [])
            epoch += 1
            produce(p, "sw", 0, 5)
            produced = time.monotonic()
            r, answered = waiting.result(30)
            assert acquired(r) == {0: [(5 * i, 5 * i + 4, 1)]}
            latencies.append(answered - produced)
        # The answer comes with the append, not max_wait_ms (20 s) later nor at a poll's next look.
        assert max(latencies) < 5.0, latencies
        assert statistics.median(latencies) < MEDIAN_BOUND_S, latencies


def test_share_fetch_waits_max_wait_ms_when_nothing_comes(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sn", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        start = time.monotonic()
        r = share_fetch(c, share_session_epoch=1, max_wait_ms=700)
        waited = time.monotonic() - start
        assert acquired(r) == {}
        assert 0.65 <= waited < 3.0, waited  # Kafka's max_wait_ms: neither early nor much later


def test_min_bytes_holds_the_answer_until_enough_is_there(broker) -> None:
    with WireClient(broker.host, broker.port) as c, WireClient(broker.host, broker.port) as p, \
            ThreadPoolExecutor(1) as pool:
        topic_id = create_topic(c, "sm", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        produce(p, "sm", 0, 1)  # one small batch: far below min_bytes
        waiting = _park(pool, c, share_session_epoch=1, max_wait_ms=20_000, min_bytes=2000)
        produce(p, "sm", 0, 1)
        time.sleep(0.3)
        assert not waiting.done(), "answered below min_bytes"
        for _ in range(40):  # 40 more one-record batches: well past 2000 bytes
            produce(p, "sm", 0, 1)
        r, _ = waiting.result(10)
        ranges = acquired(r)[0]
        assert ranges[0][0] == 0 and ranges[-1][1] >= 20, ranges


def test_min_bytes_not_reached_answers_what_there_is_at_max_wait(broker) -> None:
    with WireClient(broker.host, broker.port) as c, WireClient(broker.host, broker.port) as p:
        topic_id = create_topic(c, "sx", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        produce(p, "sx", 0, 3)
        start = time.monotonic()
        r = share_fetch(c, share_session_epoch=1, max_wait_ms=600, min_bytes=1 << 20)
        assert time.monotonic() - start >= 0.55
        assert acquired(r) == {0: [(0, 2, 1)]}  # Kafka's onComplete acquires what is there


def test_released_records_wake_a_waiting_fetch(broker_factory) -> None:
    broker = broker_factory({"group.share.delivery.count.limit": "10"})
    with WireClient(broker.host, broker.port) as a, WireClient(broker.host, broker.port) as b, \
            WireClient(broker.host, broker.port) as p, ThreadPoolExecutor(1) as pool:
        topic_id = create_topic(a, "sr", 1)
        wait_for_coordinator(a)
        open_share_partition(a, topic_id, member_id="a")
        share_fetch(b, member_id="b", topics=fetch_topics(topic_id, [0]))
        produce(p, "sr", 0, 4)
        holder, holder_epoch = a, 1
        waiter, waiter_epoch = b, 1
        names = {id(a): "a", id(b): "b"}
        assert acquired(share_fetch(holder, member_id="a", share_session_epoch=1)) == {0: [(0, 3, 1)]}
        holder_epoch = 2
        latencies = []
        for i in range(8):  # the delivery count goes 2..9, below the limit (10)
            waiting = _park(pool, waiter, member_id=names[id(waiter)], share_session_epoch=waiter_epoch,
                            max_wait_ms=20_000)
            waiter_epoch += 1
            r = holder.request(79, 1, {"group_id": "sg", "member_id": names[id(holder)],
                                       "share_session_epoch": holder_epoch,
                                       "topics": fetch_topics(topic_id, [0], {0: [(0, 3, [RELEASE])]})})
            released = time.monotonic()
            holder_epoch += 1
            assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0, r
            r, answered = waiting.result(30)
            assert acquired(r) == {0: [(0, 3, i + 2)]}
            latencies.append(answered - released)
            holder, holder_epoch, waiter, waiter_epoch = waiter, waiter_epoch, holder, holder_epoch
        assert statistics.median(latencies) < MEDIAN_BOUND_S, latencies


def test_a_closed_connection_wakes_a_waiting_fetch(broker) -> None:
    with WireClient(broker.host, broker.port) as c, WireClient(broker.host, broker.port) as p, \
            ThreadPoolExecutor(1) as pool:
        topic_id = create_topic(c, "sd", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        produce(p, "sd", 0, 5)
        holder = WireClient(broker.host, broker.port)
        assert acquired(share_fetch(holder, member_id="h", topics=fetch_topics(topic_id, [0]))) == {0: [(0, 4, 1)]}
        waiting = _park(pool, c, share_session_epoch=1, max_wait_ms=20_000)
        holder.close()
        closed = time.monotonic()
        r, answered = waiting.result(30)
        assert acquired(r) == {0: [(0, 4, 2)]}
        assert answered - closed < 2.0


def test_an_expired_lock_wakes_a_waiting_fetch(broker_factory) -> None:
    broker = broker_factory({"group.share.record.lock.duration.ms": "1000",
                             "group.share.min.record.lock.duration.ms": "1000"})
    with WireClient(broker.host, broker.port) as c, WireClient(broker.host, broker.port) as holder, \
            WireClient(broker.host, broker.port) as p, ThreadPoolExecutor(1) as pool:
        topic_id = create_topic(c, "se", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        produce(p, "se", 0, 5)
        r = share_fetch(holder, member_id="h", topics=fetch_topics(topic_id, [0]))
        locked = time.monotonic()
        assert acquired(r) == {0: [(0, 4, 1)]} and r["acquisition_lock_timeout_ms"] == 1000
        waiting = _park(pool, c, share_session_epoch=1, max_wait_ms=20_000)
        r, answered = waiting.result(30)
        # The holder is still connected: its records come back when the lock expires, not before.
        assert acquired(r) == {0: [(0, 4, 2)]}
        assert 0.9 <= answered - locked < 3.0, answered - locked


def test_an_unknown_topic_answers_at_once_without_waiting(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        wait_for_coordinator(c)
        start = time.monotonic()
        r = share_fetch(c, max_wait_ms=5000, topics=fetch_topics(uuid.uuid4(), [0]))
        assert time.monotonic() - start < 2.0
        assert r["responses"][0]["partitions"][0]["error_code"] == 100  # UNKNOWN_TOPIC_ID
