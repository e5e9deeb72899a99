"""Spark's stock Kafka connector (spark-sql-kafka-0-10, PySpark local[2]) against a 3-broker Odradek
while a partition leader is SIGKILLed under it (issue 13: "Spark's batch and streaming reads keep
working while a broker is killed under them; failOnDataLoss=true must not fire").

The topic has replication factor 3 and min.insync.replicas=2; a librdkafka producer (acks=all,
idempotent) writes unique values and records every acknowledgement (partition, offset, value). The
checks are exact: every acknowledged record reaches Spark once, at the offset it was acknowledged
with, with its value, and nothing else does. A failover that lost acknowledged data, let the high
watermark go backwards or answered offsets out of range would show here as a failOnDataLoss
exception, a missing row or a duplicate.

One SparkSession for the module (tests/support/java_tools.shared_spark, ~10 s to start); each test
has its own cluster (etcd + 3 brokers, a few seconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip
from tests.support.java_tools import shared_spark

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 3

# A listOffsets of the Java AdminClient behind Spark's offset lookups that is bound to the killed
# leader (its fulfilment call targets that node id) waits for the node to come back once the node
# has left Metadata: no new leader lookup, a "Timed out waiting for a node assignment" after
# default.api.timeout.ms (60 s), then Spark retries with a new admin client and the query goes on.
# Reproduced with a bare AdminClient (kafka-clients 3.9) against this cluster, whose Metadata was
# consistent throughout (the new leader listed, the dead node gone), and the same way against a
# 3-node Apache Kafka 3.9.1 with a leader SIGKILLed: a client behaviour. A shorter timeout
# keeps that client-side stall from dominating the test's time (request.timeout.ms may not exceed it).
ADMIN_TIMEOUT = {"kafka.default.api.timeout.ms": "15000", "kafka.request.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def spark():
    return shared_spark()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    # A short lease, so the controller notices the killed broker within ~2 s (etcd's lease TTL).
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "5000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def create_topic(c: ClusterProcesses, topic: str) -> None:
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": topic, "num_partitions": PARTITIONS, "replication_factor": 3,
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    assert c.wait_until(lambda: all(len(p["isr_nodes"]) == 3 and p["leader_id"] >= 0
                                    for p in partitions(c, topic, c.controller_id())), 20), c.logs()


def partitions(c: ClusterProcesses, topic: str, via: int) -> list[dict[str, Any]]:
    md = c.request(via, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    parts: list[dict[str, Any]] = md["topics"][0]["partitions"]
    return parts


def victim_leader(c: ClusterProcesses, topic: str, not_: int = -1) -> int:
    """The leader of a partition that is not the controller (a controller failover is its own test)
    nor ``not_``."""
    controller = c.controller_id()
    leaders = [p["leader_id"] for p in sorted(partitions(c, topic, controller), key=lambda p: p["partition_index"])]
    return next((leader for leader in leaders if leader not in (controller, not_)), leaders[0])


class AckedProducer:
    """Writes unique values ("<n>") round-robin over the partitions, paced, until stopped; keeps every
    acknowledgement as (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, per_second: float = 300.0) -> None:
        self.topic = topic
        self.interval = 1.0 / per_second
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "message.timeout.ms": 60000, "linger.ms": 5, "retry.backoff.ms": 100,
        })
        self.acked: list[tuple[int, int, str]] = []
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value().decode()))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, str(self.sent).encode(), partition=self.sent % PARTITIONS,
                                      on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(self.interval)

    def produce(self, count: int) -> None:
        """Synchronously: ``count`` more records, all acknowledged."""
        for _ in range(count):
            self.producer.produce(self.topic, str(self.sent).encode(), partition=self.sent % PARTITIONS,
                                  on_delivery=self._on_delivery)
            self.sent += 1
        assert self.producer.flush(60) == 0 and not self.failed, self.failed[:3]

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(90) == 0, "the producer could not deliver everything within 90 s"


def assert_exactly_the_acked(rows: list[tuple[int, int, str]], producer: AckedProducer) -> None:
    """``rows`` (partition, offset, value) are the acknowledged records, each once, nothing else."""
    assert not producer.failed, f"acks=all sends failed: {producer.failed[:3]}"
    assert len(producer.acked) == producer.sent, (len(producer.acked), producer.sent)
    duplicates = len(rows) - len(set(rows))
    assert duplicates == 0, f"{duplicates} records read twice"
    missing = sorted(set(producer.acked) - set(rows))
    assert not missing, f"{len(missing)} acknowledged records missing or changed, e.g. {missing[:5]}"
    extra = sorted(set(rows) - set(producer.acked))
    assert not extra, f"{len(extra)} records read that were never acknowledged, e.g. {extra[:5]}"


def batch_rows(spark, bootstrap: str, topic: str) -> list[tuple[int, int, str]]:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("failOnDataLoss", "true").options(**ADMIN_TIMEOUT).load())
    return [(r.partition, r.offset, r.v) for r in
            df.selectExpr("partition", "offset", "cast(value as string) as v").collect()]


def test_stream_keeps_reading_every_acked_record_once_across_a_leader_kill(spark, cluster, tmp_path) -> None:
    topic, sink = "spark-failover", "spark_failover_sink"
    create_topic(cluster, topic)
    producer = AckedProducer(cluster.bootstrap, topic).start()
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("failOnDataLoss", "true")
             .options(**ADMIN_TIMEOUT).load().selectExpr("partition", "offset", "cast(value as string) as v")
             .writeStream.format("memory").queryName(sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())

    def streamed() -> int:
        try:
            return int(spark.sql(f"select count(*) as n from {sink}").collect()[0].n)
        except Exception:  # the sink's view appears with the first batch
            return 0

    victim = -1
    try:
        assert cluster.wait_until(lambda: streamed() >= 300 or not query.isActive, 90, 1.0), \
            (query.exception(), producer.failed[:3])
        assert query.isActive, query.exception()
        # Two failovers: a leader is killed; it comes back, catches up and rejoins the ISR (its log
        # truncated to the new leader's); then the leader of another partition is killed and stays down.
        for round_ in (1, 2):
            if round_ == 2:
                cluster.start(victim)
                assert cluster.wait_until(lambda: all(len(p["isr_nodes"]) == 3 for p in
                                                      partitions(cluster, topic, cluster.controller_id())), 60), \
                    cluster.logs()
                before = victim
                victim = victim_leader(cluster, topic, not_=before)
            else:
                victim = victim_leader(cluster, topic)
            cluster.kill(victim)
            killed_at = time.monotonic()
            acked_at_kill = len(producer.acked)
            # The stream goes on through the failover: new records are acknowledged and read.
            assert cluster.wait_until(lambda n=acked_at_kill: len(producer.acked) >= n + 600, 60), \
                (producer.failed[:3], cluster.logs())
            assert query.isActive, query.exception()
            print(f"round {round_}: leader {victim} killed with {acked_at_kill} acked; 600 more acked "
                  f"{time.monotonic() - killed_at:.1f} s after the kill")
        producer.stop()
        total = len(producer.acked)
        assert cluster.wait_until(lambda: streamed() >= total or not query.isActive, 90, 1.0), \
            (streamed(), total, query.exception())
        assert query.isActive and query.exception() is None, query.exception()
        rows = [(r.partition, r.offset, r.v) for r in spark.sql(f"select * from {sink}").collect()]
        assert_exactly_the_acked(rows, producer)
    finally:
        query.stop()

    # A batch read with the killed broker still down: every acknowledged record, once.
    live = ",".join(cluster.broker(n).bootstrap for n in cluster.node_ids if n != victim)
    assert_exactly_the_acked(batch_rows(spark, cluster.bootstrap, topic), producer)
    assert_exactly_the_acked(batch_rows(spark, live, topic), producer)


def test_batch_read_started_as_a_leader_dies_reads_every_acked_record(spark, cluster) -> None:
    topic = "spark-batch-failover"
    create_topic(cluster, topic)
    producer = AckedProducer(cluster.bootstrap, topic)
    producer.produce(600)
    victim = victim_leader(cluster, topic)
    cluster.kill(victim)  # no wait for the failover: Spark's offset lookups meet it
    assert_exactly_the_acked(batch_rows(spark, cluster.bootstrap, topic), producer)
    # Records acknowledged by the shrunken ISR (2 of 3 >= min.insync.replicas) are read too.
    producer.produce(300)
    assert_exactly_the_acked(batch_rows(spark, cluster.bootstrap, topic), producer)
    # The killed broker comes back, catches up, rejoins the ISR; a read still sees the same records.
    cluster.start(victim)
    assert cluster.wait_until(lambda: all(len(p["isr_nodes"]) == 3 for p in
                                          partitions(cluster, topic, cluster.controller_id())), 60), cluster.logs()
    assert_exactly_the_acked(batch_rows(spark, cluster.bootstrap, topic), producer)
