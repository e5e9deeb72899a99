"""KIP-392 with a real client: a librdkafka consumer with ``client.rack`` reads from the replica in its rack.

Three brokers in racks rack-1..3, ``replica.selector.class`` set to Kafka's RackAwareReplicaSelector.
A consumer whose ``client.rack`` is a follower's rack is sent there by the leader
(preferred_read_replica) and reads every record from that follower; librdkafka's fetch debug log
says which broker it fetched from.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

TOPIC = "nearby"
COUNT = 200


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000",
                                      "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
    for node_id, node in c.brokers.items():
        node.overrides["broker.rack"] = f"rack-{node_id}"
    with c:
        assert c.wait_members(30), c.logs()
        yield c


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def partition_of(cluster: ClusterProcesses) -> dict:
    md = cluster.request(1, "Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}]})
    partitions = md["topics"][0]["partitions"]
    return dict(partitions[0]) if partitions else {"isr_nodes": []}


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: ClusterProcesses) -> None:
    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": 1, "replication_factor": 3, "configs": []}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(COUNT):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    # Every broker's metadata may lag the controller's a little: wait for the full ISR on broker 1.
    assert cluster.wait_until(lambda: len(partition_of(cluster)["isr_nodes"]) == 3, 20), cluster.logs()
    partition = partition_of(cluster)
    leader = partition["leader_id"]
    follower = next(n for n in partition["isr_nodes"] if n != leader)

    lines = Lines()
    logger = logging.getLogger(f"rdkafka-{TOPIC}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": "near", "client.rack": f"rack-{follower}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "debug": "fetch"}, logger=logger)
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
        got: list[int] = []
        deadline = time.monotonic() + 60
        # The fetch from COUNT follows the one that brought the last record, and librdkafka hands its
        # log lines to this logger only from poll(): keep polling until that fetch is logged too.
        while (len(got) < COUNT or COUNT not in fetched_at(lines, follower)) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(int(msg.value()))
        assert got == list(range(COUNT))
    finally:
        consumer.close()
        logger.removeHandler(lines)
    text = "\n".join(lines.lines)
    # librdkafka logs the delegation to the preferred replica, then fetches from that broker.
    assert re.search(rf"migrating from broker {leader} to {follower} \(leader is {leader}\): preferred replica updated",
                     text), text[-6000:]
    # The follower was asked from offset 0 and next from COUNT: it served every record.
    at_follower = fetched_at(lines, follower)
    assert at_follower[:1] == [0] and COUNT in at_follower, text[-6000:]


def fetched_at(lines: Lines, broker: int) -> list[int]:
    """The offsets librdkafka's fetch log says it asked ``broker`` for, in order."""
    return [int(m.group(1)) for ln in list(lines.lines) if f"/{broker}]" in ln
            for m in [re.search(rf"Fetch topic {TOPIC} \[0\] at offset (\d+)", ln)] if m]
