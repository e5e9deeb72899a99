"""Kafka's Java client in a consume-transform-produce loop: Kafka's own TransactionalMessageCopier
(the tool Kafka's system tests use for exactly-once) copies a partition transactionally with
sendOffsetsToTransaction, aborting transactions at random; the read_committed output holds every
input record exactly once and the group's committed offset is the input's end."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_transactions_producers import read_committed
from tests.support.java_tools import run_tool
from tests.support.wire import WireClient, create_topic

RECORDS = 60


def test_java_transactional_copier_is_exactly_once_with_random_aborts(broker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    source, sink = f"jin-{uuid.uuid4().hex[:6]}", f"jout-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, source, 1)
        create_topic(c, sink, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(RECORDS):
        p.produce(source, f"r{i}".encode(), partition=0)
    p.flush(10)
    group = f"copier-{uuid.uuid4().hex[:6]}"
    out = run_tool("org.apache.kafka.tools.TransactionalMessageCopier", [
        "--broker-list", broker.bootstrap, "--input-topic", source, "--input-partition", "0",
        "--output-topic", sink, "--transactional-id", f"copier-{group}", "--consumer-group", group,
        "--transaction-size", "7", "--enable-random-aborts", "--use-group-metadata",
        "--max-messages", str(RECORDS)], timeout=120)
    assert '"remaining":0' in out.stdout.replace(" ", ""), out.stdout[-2000:]
    got = read_committed(broker.bootstrap, sink, 1, RECORDS)
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(RECORDS))  # each exactly once
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset == RECORDS
    consumer.close()


def test_kafka_transactions_list_and_describe(broker) -> None:
    """kafka-transactions.sh list / describe (Kafka's TransactionsCommand: ListTransactions on every
    broker, FindCoordinator + DescribeTransactions) show an open transaction as Kafka's do."""
    from confluent_kafka import Producer

    topic = f"jtx-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-admin"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"x", partition=1)
    p.flush(10)
    tool = "org.apache.kafka.tools.TransactionsCommand"
    listed = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "list"]).stdout
    row = next(line.split() for line in listed.splitlines() if line.startswith("tx-admin"))
    assert row[-1] == "Ongoing", listed  # TransactionalId Coordinator ProducerId TransactionState
    described = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "describe", "--transactional-id",
                                "tx-admin"]).stdout
    assert "Ongoing" in described and f"{topic}-1" in described, described
    producers = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", topic,
                                "--partition", "1"]).stdout
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset
    row = producers.splitlines()[1].split()
    assert row[1] == "0" and row[3] == "0" and row[-1] == "0", producers  # epoch 0, seq 0, txn from offset 0
    p.commit_transaction(30)
    described = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "describe", "--transactional-id",
                                "tx-admin"]).stdout
    assert "CompleteCommit" in described, described
    producers = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", topic,
                                "--partition", "1"]).stdout
    assert producers.splitlines()[1].split()[-1] == "None", producers  # the transaction ended
    missing = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "describe", "--transactional-id",
                              "tx-nobody"], check=False)
    assert missing.returncode != 0 and "could not be found" in missing.stderr, missing.stderr


@pytest.mark.parametrize("transaction_ms", [100, 15])
def test_java_producer_performance_in_transactions(broker, transaction_ms: int) -> None:
    """Kafka's ProducerPerformance with --transactional-id (a transaction every 100 ms, and every
    15 ms as ``make bench``'s case): every record is committed; the read_committed end (LSO) is the
    log end, markers included. With 15 ms transactions the Java 4.4 producer (transactions v2: the
    leader adds each partition, asking the coordinator) has several requests of a new transaction in
    flight while the coordinator still completes the last one; they used to reach the log out of
    order and the producer failed with OutOfOrderSequenceException (here one run in two; the
    deterministic case: test_transactions_v2_pipelining.py)."""
    from bench.perf_tools import PRODUCER_PERF, parse_producer, producer_args

    topic = f"jperf-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, topic, 1)
    records = 20_000 if transaction_ms == 100 else 100_000
    out = run_tool(PRODUCER_PERF, producer_args(broker.bootstrap, topic, records, 1024, "all") + [
        "--transactional-id", f"tx-perf-{transaction_ms}", "--transaction-duration-ms", str(transaction_ms)],
        timeout=180).stdout
    assert parse_producer(out).records == records
    got = read_committed(broker.bootstrap, topic, 1, records)
    assert len(got) == records
    with WireClient(broker.host, broker.port) as c:
        ends = [c.request(2, 7, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}
        )["topics"][0]["partitions"][0]["offset"] for level in (0, 1)]
    assert ends[0] == ends[1] > records  # the COMMIT markers take offsets too


def test_kafka_transactions_find_hanging_and_abort(broker) -> None:
    """A transaction no coordinator knows (its batch written into the partition while the broker
    was down: what a coordinator that lost its state leaves) holds the LSO; kafka-transactions.sh
    find-hanging (DescribeProducers, ListTransactions, DescribeTransactions) lists it, and abort
    (DescribeProducers, then the admin client's WriteTxnMarkers) ends it: the LSO moves past it and
    a read_committed consumer sees the records after it, not its own."""
    import time

    from odradek.protocol.records import Record, encode_batch
    from odradek.storage.log import Log
    from odradek.storage.log_config import LogConfig
    from odradek.storage.producer_state import ProducerStateManager

    topic = f"jhang-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, topic, 1)
    assert broker.stop() == 0
    d = broker.data_dir / "logs" / f"{topic}-0"
    log = Log.open(d, LogConfig(), producer_state=ProducerStateManager(d), recovery_point=0)
    hanging_pid = 987_654
    log.append(encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=b"hanging")],
                            producer_id=hanging_pid, producer_epoch=4, base_sequence=0, is_transactional=True),
               leader_epoch=0)
    log.close()
    broker.start()
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        p.produce(topic, f"after-{i}".encode(), partition=0)
    p.flush(10)
    assert len(read_committed(broker.bootstrap, topic, 1, 4, "read_uncommitted")) == 4
    assert read_committed(broker.bootstrap, topic, 1, 0) == []  # held at the hanging transaction
    tool = "org.apache.kafka.tools.TransactionsCommand"
    time.sleep(0.05)  # find-hanging wants a transaction older than the timeout (0 minutes here)
    found = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "find-hanging", "--broker-id", "1",
                            "--max-transaction-timeout", "0"]).stdout
    # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration(min)
    rows = [line.split() for line in found.splitlines()[1:] if line.strip()]
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in rows] == [(topic, "0", str(hanging_pid), "4", "0")], found
    run_tool(tool, ["--bootstrap-server", broker.bootstrap, "abort", "--topic", topic, "--partition", "0",
                    "--start-offset", "0"])
    assert read_committed(broker.bootstrap, topic, 1, 3) == [b"after-0", b"after-1", b"after-2"]
    with WireClient(broker.host, broker.port) as c:
        ends = [c.request(2, 7, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}
        )["topics"][0]["partitions"][0]["offset"] for level in (0, 1)]
    assert ends == [5, 5]  # 1 aborted + 3 records + the ABORT marker; the LSO is the log end
    found = run_tool(tool, ["--bootstrap-server", broker.bootstrap, "find-hanging", "--broker-id", "1",
                            "--max-transaction-timeout", "0"]).stdout
    assert not [line for line in found.splitlines()[1:] if line.strip()], found
