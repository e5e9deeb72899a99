"""The fault suite's checker (tests/support/fault_checker.Checker) catches each broken promise: a
passing fault test means something only if every assertion fails on a history that breaks it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.api.dispatcher import CATCH_ALL_LOG

pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import (  # noqa: E402 (needs confluent_kafka)
    Ack,
    Checker,
    ClientError,
    Commit,
    Consumed,
    History,
    LeaderSeen,
    ProduceError,
    RdkafkaProducer,
    Read,
    failover,
    unknown_server_errors_logged,
)


def _history(*events: Ack | Consumed | Commit | LeaderSeen | ProduceError | ClientError) -> History:
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


def test_a_failed_delivery_passes_only_when_its_record_is_written_once_in_order() -> None:
    """A delivery failure whose record is nevertheless in the log once, in its producer's order, is an
    ambiguous outcome Kafka allows (the Java client expiring a batch the new leader already holds);
    one absent from the log, written twice, out of order, elsewhere, or unnamed still fails."""
    expired = "Expiring 1 record(s) for t-0:120000 ms has passed since batch creation"
    read: Read = {0: [(0, b"2.0"), (1, b"c.0"), (2, b"2.1"), (3, b"2.2")], 1: [(0, b"c.1")]}

    def checker(value: bytes | None, partition: int = -1, log: Read = read) -> Checker:
        final = ProduceError("java", "TimeoutException", True, True, 1.0, expired, value, partition)
        retried = ProduceError("java", "NotLeaderOrFollowerException", True, False, 0.5)
        return Checker(_history(final, retried), log)

    written = checker(b"2.1")
    written.producer_errors()
    written.all(group=False)
    assert written.failed_but_written() == [written.h.errors[0]]
    assert "(1 final, 1 of them failed but written)" in written.summary()
    checker(b"c.1", partition=1).producer_errors()  # librdkafka names the partition too

    with pytest.raises(AssertionError, match=r"1 deliveries failed \(0 more .*b'2.3', 'not in the log'"):
        checker(b"2.3").producer_errors()
    twice: Read = {0: [*read[0], (4, b"2.1")]}
    with pytest.raises(AssertionError, match=r"1 deliveries failed .*2 times, at \[\(0, 2\), \(0, 4\)\]"):
        checker(b"2.1", log=twice).producer_errors()
    disordered: Read = {0: [(0, b"2.0"), (1, b"2.2"), (2, b"2.1")]}
    with pytest.raises(AssertionError, match=r"at \(0, 2\): follows its record 2 at offset 1"):
        checker(b"2.1", log=disordered).producer_errors()
    with pytest.raises(AssertionError, match=r"at \(0, 2\): precedes its record 1 at offset 3"):
        checker(b"2.2", log={0: [(0, b"2.0"), (2, b"2.2"), (3, b"2.1")]}).producer_errors()
    with pytest.raises(AssertionError, match=r"at \(1, 0\), not in partition 0"):
        checker(b"c.1", partition=0).producer_errors()
    with pytest.raises(AssertionError, match="the error names no record"):
        checker(None).producer_errors()
    checker(b"2.3").producer_errors(allow_final=True)  # a scenario that allows failed deliveries
    assert checker(b"2.3").failed_but_written() == []


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


@pytest.mark.parametrize("event", [
    ClientError("faults-0", "UNKNOWN", 1.0, "commit: Unknown broker error"),   # librdkafka's name for -1
    ProduceError("java", "UnknownServerException", False, True, 1.0, "The server experienced an unexpected error"),
    ProduceError("rdkafka", "UNKNOWN", False, False, 1.0, "Unknown broker error"),
    ClientError("java", "UNKNOWN_SERVER_ERROR", 1.0, "Got error produce response ... Error: UNKNOWN_SERVER_ERROR"),
    LeaderSeen(0, 1, 3, (1, 2), 2, -1, 1.0),                                  # a raw Metadata answer's code
], ids=["librdkafka-commit", "java-final", "librdkafka-transient", "java-log", "metadata"])
def test_any_unknown_server_error_a_client_saw_fails_the_run(event: Any) -> None:
    with pytest.raises(AssertionError, match="UNKNOWN_SERVER_ERROR"):
        Checker(_history(event), GOOD_READ).no_unknown_server_error()


def test_kafkas_specific_coordinator_errors_pass() -> None:
    h = _history(ClientError("faults-0", "COORDINATOR_NOT_AVAILABLE", 1.0, "commit: Broker: Coordinator not available"),
                 ClientError("faults-1", "NOT_COORDINATOR", 1.0, "commit of partition 2: Broker: Not coordinator"),
                 ClientError("faults-1", "UNKNOWN_MEMBER_ID", 1.0, "Broker: Unknown member"),
                 ClientError("metadata via 2", "UNKNOWN_TOPIC_OR_PARTITION", 1.0, "topic durable"))
    Checker(h, GOOD_READ).no_unknown_server_error()


def test_the_dispatchers_catch_all_line_is_found_in_a_broker_log(tmp_path: Path) -> None:
    clean = tmp_path / "broker-1.log"
    clean.write_text("INFO loaded 1 __consumer_offsets partition\nINFO OffsetCommit v8 failed: NOT_COORDINATOR\n")
    bad = tmp_path / "broker-2.log"
    line = "ERROR odradek.broker.api.dispatcher: " + CATCH_ALL_LOG % ("OffsetCommit", 8)
    bad.write_text(f"INFO started\n{line}\nTraceback (most recent call last):\nStopIteration\n")
    assert unknown_server_errors_logged([clean, tmp_path / "never-written.log"]) == []
    (found,) = unknown_server_errors_logged([clean, bad])
    assert found.startswith(f"{bad}:2: {line}") and "StopIteration" in found
