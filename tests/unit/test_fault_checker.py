"""The fault suite's checker (tests/support/fault_checker.Checker) catches each broken promise: a
passing fault test means something only if every assertion fails on a history that breaks it."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import (  # noqa: E402 (needs confluent_kafka)
    Ack,
    Checker,
    Commit,
    Consumed,
    History,
    LeaderSeen,
    ProduceError,
    RdkafkaProducer,
    Read,
    failover,
)


def _history(*events: Ack | Consumed | Commit | LeaderSeen | ProduceError) -> History:
    h = History()
    for e in events:
        h.add(e)
    return h


GOOD_READ: Read = {0: [(0, b"c.0"), (1, b"c.1"), (2, b"c.2")]}


def test_a_clean_history_passes() -> None:
    h = _history(Ack("c", 0, 0, b"c.0", 1.0), Ack("c", 0, 1, b"c.1", 1.1), Ack("c", 0, 2, b"c.2", 1.2),
                 Consumed("m", 1, 0, 0, b"c.0", 1, 1.0), Consumed("m", 1, 0, 1, b"c.1", 3, 1.1),
                 Consumed("m", 1, 0, 2, b"c.2", 3, 1.2),
                 # a rebalance may rewind a member to the committed offset
                 Consumed("m", 2, 0, 1, b"c.1", 3, 1.3),
                 Commit("m", 0, 1, 1.1), Commit("m", 0, 3, 1.3),
                 LeaderSeen(0, 1, 0, (1, 2), 1, 0, 1.0), LeaderSeen(0, 2, 1, (2,), 2, 0, 2.0),
                 ProduceError("c", "_TRANSPORT", True, False, 1.5))
    Checker(h, GOOD_READ).all()


def test_a_lost_ack_is_named() -> None:
    h = _history(Ack("c", 0, 1, b"c.1", 1.0), Ack("c", 0, 3, b"c.3", 1.0))
    with pytest.raises(AssertionError, match=r"1 of 2 acknowledged records lost.*\('c', 0, 3, b'c.3', None\)"):
        Checker(h, GOOD_READ).no_acked_write_lost()


def test_duplicates_holes_and_order() -> None:
    with pytest.raises(AssertionError, match="more than once"):
        Checker(History(), {0: [(0, b"c.0"), (1, b"c.0")]}).no_duplicates()
    with pytest.raises(AssertionError, match=r"not dense.*\(1, 3\)"):
        Checker(History(), {0: [(0, b"c.0"), (1, b"c.1"), (3, b"c.2")]}).offsets_dense()
    with pytest.raises(AssertionError, match="record 1 at offset 1 follows its record 2"):
        Checker(History(), {0: [(0, b"c.2"), (1, b"c.1")]}).produce_order_kept()


def test_consumer_gaps_rewinds_and_hw() -> None:
    skip = _history(Consumed("m", 1, 0, 0, b"c.0", 3, 1.0), Consumed("m", 1, 0, 2, b"c.2", 3, 1.1))
    with pytest.raises(AssertionError, match=r"skipped: offset 2 \(leader epoch -1, HW 3\) after 0"):
        Checker(skip, GOOD_READ).consumed_dense_and_monotonic()
    rewind = _history(Consumed("m", 1, 0, 1, b"c.1", 3, 1.0), Consumed("m", 1, 0, 0, b"c.0", 3, 1.1))
    with pytest.raises(AssertionError, match=r"went backwards: offset 0 \(leader epoch -1, HW 3\) after 1"):
        Checker(rewind, GOOD_READ).consumed_dense_and_monotonic()
    hw = _history(Consumed("m", 1, 0, 0, b"c.0", 3, 1.0), Consumed("m", 1, 0, 1, b"c.1", 2, 1.1))
    with pytest.raises(AssertionError, match="high watermark go back from 3 to 2"):
        Checker(hw, GOOD_READ).consumer_hw_monotonic()
    with pytest.raises(AssertionError, match="never read 1 acked"):
        Checker(_history(Ack("c", 0, 0, b"c.0", 1.0)), GOOD_READ).consumed_everything_acked()


def test_two_leaders_in_one_epoch_and_commits_going_back() -> None:
    h = _history(LeaderSeen(0, 1, 4, (1, 2), 1, 0, 1.0), LeaderSeen(0, -1, 4, (1, 2), 2, 5, 1.2),
                 LeaderSeen(0, 2, 4, (1, 2), 3, 0, 1.5))
    with pytest.raises(AssertionError, match="epoch 4 has two leaders: broker 1 said 1, broker 3 said 2"):
        Checker(h, GOOD_READ).one_leader_per_epoch()
    h = _history(Commit("a", 0, 5, 1.0), Commit("b", 0, 4, 2.0))
    with pytest.raises(AssertionError, match="went back from 5 \\(a\\) to 4 \\(b\\)"):
        Checker(h, GOOD_READ).commits_monotonic()
    with pytest.raises(AssertionError, match=r"not the partitions' ends: partition -> \(committed, end\) \{0: \(4, 3\)\}"):
        Checker(h, GOOD_READ).committed_to_the_end()


def test_producer_errors() -> None:
    final = _history(ProduceError("java", "NotEnoughReplicasException", True, True, 1.0))
    with pytest.raises(AssertionError, match="1 deliveries failed"):
        Checker(final, GOOD_READ).producer_errors()
    Checker(final, GOOD_READ).producer_errors(allow_final=True)
    fatal = _history(ProduceError("c", "_FENCED", False, False, 1.0))
    with pytest.raises(AssertionError, match="non-retriable errors reached producers"):
        Checker(fatal, GOOD_READ).producer_errors(allow_final=True)


def test_failover_figures() -> None:
    h = _history(Ack("c", 0, 0, b"", 9.9), Ack("c", 0, 1, b"", 12.5), Ack("c", 1, 0, b"", 10.1),
                 LeaderSeen(0, 1, 1, (1,), 2, 0, 10.5), LeaderSeen(0, 3, 2, (3,), 2, 0, 11.0))
    f = failover(h, "kill 1", 10.0, 1, [0])
    assert (f.leader_moved_s, f.ack_stall_s) == (1.0, pytest.approx(2.6))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_a_stopped_rdkafka_producer_leaves_no_client_running() -> None:
    """Even when its records cannot be delivered (the cluster is gone) and the load object stays
    referenced (a failed test's traceback), stopping destroys the librdkafka client: a live one keeps
    reconnecting to dead addresses for the rest of the worker's session."""
    before = _threads()
    producer = RdkafkaProducer("127.0.0.1:1", "gone", 3, History(), rate=50, extra={"log_level": 0}).start()
    time.sleep(0.5)
    assert _threads() > before + 1  # the producer's thread and librdkafka's own
    with pytest.raises(AssertionError, match="still undelivered"):
        producer.stop(timeout=0.5)
    deadline = time.monotonic() + 10
    while _threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _threads() <= before  # (other tests' leftover threads may have ended meanwhile)
    with pytest.raises(RuntimeError, match="stopped"):
        producer.producer.produce("gone", b"late")
