"""Kafka's Java client (4.4.0, via the odradek-driver JVM) as a transactional producer, against a real
Apache Kafka and against Odradek (issue 14): commit and abort, a read_committed consumer sees exactly the
committed records, a second producer with the same transactional.id fences the first, a transaction left
open past its timeout is aborted by the broker, and a consume-transform-produce loop with
sendOffsetsToTransaction copies exactly once.

Both brokers finalize transaction.version 2, so the client runs transactions v2 (KIP-890 part 2): no
AddPartitionsToTxn or AddOffsetsToTxn, Produce v12+ (v13), TxnOffsetCommit v5+, EndTxn v5 bumping the epoch
of every transaction; the last test shows from Odradek's request log that it did (issue 28).

Each test runs once per target and asserts the same outcome on both, so Kafka is the reference. Odradek
runs with a short abort-check interval (Kafka's default of 10 s stays on the shared Kafka); the timeout
scenario waits for the abort instead of sleeping a fixed time.
"""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import JavaDriver
from tests.support.real_kafka import FETCH, PRODUCE, TARGETS, Target, open_target, unique
from tests.support.request_log import request_log_args, versions_used
from tests.support.wire import WireClient

TXN = ("FindCoordinator", "InitProducerId", "EndTxn")
# What the Java client 4.4.0 throws from commitTransaction once a newer incarnation's InitProducerId
# has bumped its epoch, on Kafka 4.4.0.
FENCED = "ProducerFencedException"
# What it throws from a commit after the broker aborted the transaction on its timeout, on Kafka 4.4.0
# with transaction.version=2 (KIP-890's transactions v2, finalised by default since 4.0): the abort
# bumped the epoch, so the late EndTxn v5 names the epoch before it - a retry of an ended transaction -
# and a commit of an aborted one is INVALID_TXN_STATE. (At transaction.version=1 it is
# ProducerFencedException, seen on Kafka 4.4.0 formatted with --feature transaction.version=1.)
TIMED_OUT = "InvalidTxnStateException"


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    if request.param == "kafka":
        with open_target("kafka", tmp_path_factory.mktemp("kafka")) as t:
            yield t
        return
    data_dir = tmp_path_factory.mktemp("odradek")
    b = BrokerProcess(data_dir, args=request_log_args(data_dir), overrides={
        "auto.create.topics.enable": "false",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    b.start()
    try:
        yield Target("odradek", b.host, b.port, b)
    finally:
        b.kill()


@pytest.fixture(scope="module")
def driver(target):
    with JavaDriver(target.bootstrap) as d:
        yield d


def new_topic(target: Target, driver: JavaDriver, partitions: int = 1) -> str:
    target.require("CreateTopics", *PRODUCE, *FETCH, *TXN)
    name = unique("jtxn")
    driver.admin("create_topic", topic=name, partitions=partitions, configs={})
    return name


def read(driver: JavaDriver, topic: str, isolation: str, expected: int) -> dict:
    """Everything a consumer with this isolation level reads from the start (waits a little past
    ``expected`` so extra records would show)."""
    return driver.call("consume_assign", topic=topic, seek="earliest", max_records=expected + 1,
                       timeout_ms=4000, config={"isolation.level": isolation})


def values(got: dict) -> list[str]:
    return [r["value"] for r in got["records"]]


def test_commit_and_abort_read_committed_sees_exactly_the_committed(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    tx = unique("tx-java")
    committed = driver.call("txn_produce", transactional_id=tx, topic=topic, commit=True,
                            records=[{"value": f"c{i}", "partition": i % 2} for i in range(6)])
    assert committed["committed"] is True and committed["sent"] == 6
    driver.call("txn_produce", transactional_id=tx, topic=topic, commit=False,
                records=[{"value": f"a{i}", "partition": i % 2} for i in range(4)])
    driver.call("txn_produce", transactional_id=tx, topic=topic, commit=True,
                records=[{"value": "c-last", "partition": 0}])

    got = read(driver, topic, "read_committed", 7)
    assert sorted(values(got)) == sorted([f"c{i}" for i in range(6)] + ["c-last"])
    # Per partition: records, a COMMIT marker, the aborted records, an ABORT marker, the last
    # transaction (+ marker). Positions are past every marker: the LSO is the log end.
    # p0: c0 c2 c4 M a0 a2 M c-last M = 9; p1: c1 c3 c5 M a1 a3 M = 7
    assert got["positions"] == {"0": 9, "1": 7}
    offsets_p0 = [r["offset"] for r in got["records"] if r["partition"] == 0]
    assert offsets_p0 == [0, 1, 2, 7]
    # read_uncommitted sees the aborted records too (they are in the log), never the markers.
    uncommitted = read(driver, topic, "read_uncommitted", 11)
    assert sorted(values(uncommitted)) == sorted(
        [f"c{i}" for i in range(6)] + [f"a{i}" for i in range(4)] + ["c-last"])
    assert driver.call("end_offsets", topic=topic, isolation_level="read_committed") == {"0": 9, "1": 7}


def test_second_producer_fences_the_first(target, driver) -> None:
    topic = new_topic(target, driver)
    out = driver.call("txn_fence", transactional_id=unique("tx-fence"), topic=topic, count=3, partition=0)
    assert out["first_error"] is not None, out
    assert out["first_error"]["class"] == FENCED, out
    assert out["second_committed"] == 3
    got = read(driver, topic, "read_committed", 3)
    assert values(got) == ["b0", "b1", "b2"]  # the fenced producer's records stay invisible
    # Its records are in the log, aborted: a0-a2, ABORT, b0-b2, COMMIT.
    assert [r["offset"] for r in got["records"]] == [4, 5, 6]
    assert got["positions"] == {"0": 8}
    assert sorted(values(read(driver, topic, "read_uncommitted", 6))) == ["a0", "a1", "a2", "b0", "b1", "b2"]


def test_transaction_open_past_its_timeout_is_aborted_by_the_broker(target, driver) -> None:
    topic = new_topic(target, driver)
    out = driver.call("txn_timeout", transactional_id=unique("tx-timeout"), topic=topic, count=2, partition=0,
                      transaction_timeout_ms=1000, wait_ms=40000, timeout=90)
    # The broker aborted it (marker appended, the LSO moved past it) ...
    assert out["aborted_seen"], out
    assert out["end_offsets"] == out["stable_offsets"] == {"0": 3}, out
    # ... and the producer's late commit fails as Kafka's does: its epoch was bumped by the abort.
    assert out["commit_error"] is not None and out["commit_error"]["class"] == TIMED_OUT, out
    got = read(driver, topic, "read_committed", 0)
    assert got["count"] == 0 and got["positions"] == {"0": 3}


def test_consume_transform_produce_with_send_offsets_to_transaction(target, driver) -> None:
    """A consume-transform-produce loop (sendOffsetsToTransaction with the consumer's group metadata):
    the first transaction is aborted and redone, so the read_committed output holds every input record
    exactly once and the group's committed offset is the input's end."""
    target.require("AddOffsetsToTxn", "TxnOffsetCommit", "OffsetFetch")
    source, sink = new_topic(target, driver), new_topic(target, driver)
    driver.call("produce", topic=source, count=12, value_prefix="r", partition=0, idempotent=True)
    group = unique("jcopy")
    out = driver.call("txn_copy", transactional_id=unique("tx-copy"), input=source, output=sink, group=group,
                      batch=5, abort_first=1)
    assert out["aborted_txns"] == 1 and out["committed_txns"] >= 3, out
    assert out["position"] == 12 and out["committed_offset"] == 12, out
    got = read(driver, sink, "read_committed", 12)
    assert values(got) == [f"r{i}-out" for i in range(12)]  # each exactly once, in order
    # The aborted copy is in the log too (the driver flushes before aborting; read_uncommitted shows
    # it), never in read_committed.
    assert len(values(read(driver, sink, "read_uncommitted", 12 + 5))) > 12


def test_open_transaction_holds_the_lso_and_list_offsets_latest_differs_by_isolation(target, driver) -> None:
    """ListOffsets latest (the consumer's endOffsets) is the high watermark under read_uncommitted and
    the LSO — the first open transaction's first offset — under read_committed; the commit moves it."""
    topic = new_topic(target, driver)
    driver.call("txn_produce", transactional_id=unique("tx-before"), topic=topic, commit=True,
                records=[{"value": "c0", "partition": 0}, {"value": "c1", "partition": 0}])  # 0, 1, marker 2
    out = driver.call("txn_lso", transactional_id=unique("tx-lso"), topic=topic, count=3, partition=0)
    assert out["open"] == {"read_committed": {"0": 3}, "read_uncommitted": {"0": 6}}, out
    assert out["committed"] == {"read_committed": {"0": 7}, "read_uncommitted": {"0": 7}}, out
    assert values(read(driver, topic, "read_committed", 5)) == ["c0", "c1", "o0", "o1", "o2"]


def test_the_client_ran_transactions_v2(target, driver) -> None:
    """Last in the module: both brokers finalize transaction.version 2, and the Java client used
    transactions v2 against Odradek in every test above - EndTxn v5 only, Produce v13, TxnOffsetCommit
    v5 or v6 - and never AddPartitionsToTxn or AddOffsetsToTxn (the leaders add the partitions)."""
    with WireClient(target.host, target.port) as c:
        finalized = c.request(18, 3, {"client_software_name": "odradek-tests",
                                      "client_software_version": "1"})["finalized_features"]
    assert {f["name"]: f["max_version_level"] for f in finalized}["transaction.version"] == 2
    if not target.is_odradek:
        return  # Kafka's request log is not read here; its answers above are the reference
    used = versions_used(target.broker)
    assert used["EndTxn"] == {5}, used
    # Transactions v2's Produce is v12 and later: this client sends v13, topics by id (KIP-516).
    assert used["Produce"] == {13}, used
    assert used["TxnOffsetCommit"] and used["TxnOffsetCommit"] <= {5, 6}, used
    assert "AddPartitionsToTxn" not in used and "AddOffsetsToTxn" not in used, used
