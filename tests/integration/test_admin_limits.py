"""Admin requests that ask for huge partition counts are refused before anything proportional to
the count is allocated (Kafka's MAX_PARTITIONS_PER_BATCH = 10,000 per request), and the per-broker
cap max.broker.partitions holds. Each answer must come fast, leave the broker small, change nothing,
and every other client must keep being served."""

from __future__ import annotations

import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient, create_topic

EXCESSIVE = "Excessively large number of partitions per request."
HUGE = [2**24, 2**31 - 1]


def rss_mb(broker) -> float:
    with open(f"/proc/{broker.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def served(broker) -> None:
    """Another client is answered at once, and the broker is alive."""
    with WireClient(broker.host, broker.port, timeout=5) as other:
        t = time.monotonic()
        assert other.request(18, 0, {})["error_code"] == 0
        assert time.monotonic() - t < 2
    assert broker.alive()


def topic_partitions(c: WireClient, name: str) -> int | None:
    resp = c.request(3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    t = resp["topics"][0]
    return None if t["error_code"] else len(t["partitions"])


def create(c: WireClient, topics: list[dict], validate_only: bool = False) -> list[tuple]:
    resp = c.request(19, 7, {"topics": topics, "timeout_ms": 5000, "validate_only": validate_only})
    return [(t["name"], t["error_code"], t["error_message"]) for t in resp["topics"]]


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_huge_partition_count_is_refused_at_once(broker, validate_only: bool) -> None:
    with WireClient(broker.host, broker.port, timeout=10) as c:
        before = rss_mb(broker)
        for n in HUGE:
            t = time.monotonic()
            got = create(c, [{"name": f"huge-{n}", "num_partitions": n, "replication_factor": 1}], validate_only)
            assert time.monotonic() - t < 2
            assert got == [(f"huge-{n}", ErrorCode.POLICY_VIOLATION, EXCESSIVE)]
            assert topic_partitions(c, f"huge-{n}") is None
            served(broker)
        assert rss_mb(broker) - before < 50


def test_the_cap_counts_the_whole_request_and_every_topic_fails(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        # 6,000 + 5,000 > 10,000: both topics fail, although each alone is under the cap (Kafka).
        got = create(c, [{"name": "a", "num_partitions": 6000, "replication_factor": 1},
                         {"name": "b", "num_partitions": 5000, "replication_factor": 1}])
        assert got == [("a", ErrorCode.POLICY_VIOLATION, EXCESSIVE), ("b", ErrorCode.POLICY_VIOLATION, EXCESSIVE)]
        # Manual assignments count one partition each.
        assignments = [{"partition_index": i, "broker_ids": [1]} for i in range(10_001)]
        got = create(c, [{"name": "m", "num_partitions": -1, "replication_factor": -1, "assignments": assignments}])
        assert got == [("m", ErrorCode.POLICY_VIOLATION, EXCESSIVE)]
        assert [topic_partitions(c, n) for n in ("a", "b", "m")] == [None, None, None]
        create_topic(c, "fine", 3)  # an ordinary request still works
    served(broker)


def test_create_partitions_to_a_huge_count_is_refused_at_once(broker) -> None:
    with WireClient(broker.host, broker.port, timeout=10) as c:
        create_topic(c, "grow", 2)
        before = rss_mb(broker)
        for count in [2**30, 2**31 - 1]:
            for validate_only in (True, False):
                t = time.monotonic()
                resp = c.request(37, 3, {"topics": [{"name": "grow", "count": count, "assignments": None}],
                                         "timeout_ms": 5000, "validate_only": validate_only})
                assert time.monotonic() - t < 2
                assert [(r["name"], r["error_code"], r["error_message"]) for r in resp["results"]] == [
                    ("grow", ErrorCode.INVALID_PARTITIONS, EXCESSIVE)]
        assert topic_partitions(c, "grow") == 2
        assert rss_mb(broker) - before < 50
        resp = c.request(37, 3, {"topics": [{"name": "grow", "count": 4, "assignments": None}],
                                 "timeout_ms": 5000, "validate_only": False})
        assert resp["results"][0]["error_code"] == 0
        assert topic_partitions(c, "grow") == 4
    served(broker)


def test_max_broker_partitions_caps_what_one_broker_hosts(broker_factory) -> None:
    broker = broker_factory({"max.broker.partitions": "10"})
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "first", 8)
        (got,) = create(c, [{"name": "second", "num_partitions": 3, "replication_factor": 1}])
        assert got[:2] == ("second", ErrorCode.POLICY_VIOLATION) and "max.broker.partitions (10)" in got[2]
        # Topics of one request are counted in order: the first fits, the second no longer does.
        got = create(c, [{"name": "x", "num_partitions": 2, "replication_factor": 1},
                         {"name": "y", "num_partitions": 1, "replication_factor": 1}])
        assert [(n, e) for n, e, _ in got] == [("x", 0), ("y", ErrorCode.POLICY_VIOLATION)]
        resp = c.request(37, 3, {"topics": [{"name": "first", "count": 9, "assignments": None}],
                                 "timeout_ms": 5000, "validate_only": False})
        assert resp["results"][0]["error_code"] == ErrorCode.POLICY_VIOLATION
        assert "max.broker.partitions" in resp["results"][0]["error_message"]
        assert [topic_partitions(c, n) for n in ("first", "second", "x", "y")] == [8, None, 2, None]
    served(broker)
