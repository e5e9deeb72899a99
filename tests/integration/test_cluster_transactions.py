"""Transactions on a 3-broker cluster: __transaction_state is created replicated (RF 3), the
coordinator of a transactional id is the leader of its partition, and the markers of a
transaction whose partitions have other leaders go over WriteTxnMarkers (inter-broker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_transactions_producers import read_committed
from tests.support.cluster import ClusterProcesses, cluster_or_skip

TOPIC = "txn-cluster"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def leaders(c: ClusterProcesses, topic: str) -> dict[int, int]:
    md = c.request(c.node_ids[0], "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}


def test_transaction_over_partitions_led_by_every_broker(cluster: ClusterProcesses) -> None:
    from confluent_kafka import Producer

    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 3}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    assert cluster.wait_until(lambda: all(v >= 0 for v in leaders(cluster, TOPIC).values()), 15)
    assert len(set(leaders(cluster, TOPIC).values())) == 3  # one leader per broker: remote markers

    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-cluster", "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(9):
        p.produce(TOPIC, f"c{i}".encode(), partition=i % PARTITIONS)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, f"a{i}".encode(), partition=i % PARTITIONS)
    p.flush(30)
    p.abort_transaction(60)

    got = read_committed(cluster.bootstrap, TOPIC, PARTITIONS, 9)
    assert sorted(got) == sorted(f"c{i}".encode() for i in range(9)), cluster.logs()

    # __transaction_state is replicated on all three brokers.
    md = cluster.request(cluster.node_ids[0], "Metadata", 12,
                         {"topics": [{"name": "__transaction_state", "topic_id": None}]})
    parts = md["topics"][0]["partitions"]
    assert len(parts) == 50 and all(len(p["replica_nodes"]) == 3 for p in parts)
