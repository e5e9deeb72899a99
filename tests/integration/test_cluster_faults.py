"""Faults under real client load, with a checker over what the clients saw (issues 12 and 13).

A librdkafka producer (acks=all, idempotent) writes numbered records to a replicated topic while a
broker is SIGKILLed or SIGSTOPped; afterwards a consumer reads every partition from the start. The
checker asserts what Kafka promises: every acknowledged record is there, at the offset it was
acknowledged with, with its value; no record appears twice; each partition's values keep the order
they were produced in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.testing_cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "durable"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "5000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


class LoadProducer:
    """Produces "<n>" values round-robin over the partitions until stopped; records every ack."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "message.timeout.ms": 60000, "linger.ms": 5, "retry.backoff.ms": 100,
        })
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            value = str(self.sent).encode()
            try:
                self.producer.produce(TOPIC, value, partition=self.sent % PARTITIONS, on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if self.sent % 50 else 0.02)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(90) == 0, "the producer could not deliver everything within 90 s"


def read_all(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                                        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tps = [confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)}
        consumer.assign(tps)
        seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any((seen[p][-1][0] + 1 if seen[p] else 0) < ends[p] for p in seen) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen[msg.partition()].append((msg.offset(), msg.value()))
        return seen
    finally:
        consumer.close()


def check(producer: LoadProducer, seen: dict[int, list[tuple[int, bytes]]]) -> None:
    at = {(p, off): value for p, records in seen.items() for off, value in records}
    lost = [(p, off, v) for p, off, v in producer.acked if at.get((p, off)) != v]
    assert not lost, f"{len(lost)} acknowledged records missing or changed, e.g. {lost[:5]}"
    values = [v for records in seen.values() for _, v in records]
    assert len(values) == len(set(values)), "a record was written twice"
    for p, records in seen.items():
        numbers = [int(v) for _, v in records]
        assert numbers == sorted(numbers), f"partition {p} is out of produce order"


def create_topic(c: ClusterProcesses) -> None:
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 3,
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply


def leader_of(c: ClusterProcesses, partition: int, via: int) -> int:
    md = c.request(via, "Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}]})
    return next(p["leader_id"] for p in md["topics"][0]["partitions"] if p["partition_index"] == partition)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_acknowledged_writes_survive_losing_a_leader(cluster: ClusterProcesses, fault: str) -> None:
    create_topic(cluster)
    controller = cluster.controller_id()
    assert cluster.wait_until(lambda: all(leader_of(cluster, p, n) >= 0 for p in range(PARTITIONS)
                                          for n in cluster.node_ids), 10)
    # The victim leads partition 0 and is not the controller (a controller failover is its own test).
    victim = leader_of(cluster, 0, controller)
    if victim == controller:
        victim = next(leader_of(cluster, p, controller) for p in range(PARTITIONS)
                      if leader_of(cluster, p, controller) != controller)
    producer = LoadProducer(cluster.bootstrap).start()
    try:
        assert cluster.wait_until(lambda: len(producer.acked) >= 300, 30), producer.failed[:3]
        if fault == "kill":
            cluster.kill(victim)
        else:
            cluster.pause(victim)
        acked_at_fault = len(producer.acked)
        assert cluster.wait_until(lambda: len(producer.acked) >= acked_at_fault + 600, 60), \
            (producer.failed[:3], cluster.logs())
    finally:
        producer.stop()
        if fault == "pause":
            cluster.resume(victim)
    survivors = ",".join(cluster.broker(n).bootstrap for n in cluster.node_ids if n != victim)
    check(producer, read_all(survivors))
