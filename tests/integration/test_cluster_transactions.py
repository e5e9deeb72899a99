"""Transactions on a 3-broker cluster: __transaction_state is created replicated (RF 3), the
coordinator of a transactional id is the leader of its partition, and the markers of a
transaction whose partitions have other leaders go over WriteTxnMarkers (inter-broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, encode_batch
from tests.integration.test_transactions_producers import read_committed
from tests.support.cluster import ClusterProcesses, cluster_or_skip, replicas_in_step

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

    verification_across_brokers(cluster)

    # __transaction_state is replicated on all three brokers.
    md = cluster.request(cluster.node_ids[0], "Metadata", 12,
                         {"topics": [{"name": "__transaction_state", "topic_id": None}]})
    parts = md["topics"][0]["partitions"]
    assert len(parts) == 50 and all(len(p["replica_nodes"]) == 3 for p in parts)


def verification_across_brokers(cluster: ClusterProcesses) -> None:
    """KIP-890 part 1 between brokers: a leader that does not coordinate the transactional id asks
    the coordinator (AddPartitionsToTxn v4 verify_only) before appending a transactional batch."""
    txn_id = "tx-verify"
    coordinator = -1
    for _ in range(100):
        r = cluster.request(cluster.node_ids[0], "FindCoordinator", 3, {"key": txn_id, "key_type": 1})
        if r["error_code"] == 0:
            coordinator = r["node_id"]
            break
        time.sleep(0.1)
    assert coordinator >= 0
    init: dict = {}
    for _ in range(100):
        init = cluster.request(coordinator, "InitProducerId", 4, {"transactional_id": txn_id,
                                                                  "transaction_timeout_ms": 60000,
                                                                  "producer_id": -1, "producer_epoch": -1})
        if init["error_code"] == 0:
            break
        time.sleep(0.1)
    pid, epoch = init["producer_id"], init["producer_epoch"]
    partition, leader = next((p, n) for p, n in leaders(cluster, TOPIC).items() if n != coordinator)

    def produce(seq: int) -> int:
        records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=b"v")],
                               producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        r = cluster.request(leader, "Produce", 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 5000,
                                                   "topic_data": [{"name": TOPIC, "partition_data": [
                                                       {"index": partition, "records": records}]}]})
        return r["responses"][0]["partition_responses"][0]["error_code"]

    assert produce(0) == ErrorCode.INVALID_TXN_STATE  # not added: the remote coordinator says so
    r = cluster.request(coordinator, "AddPartitionsToTxn", 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}]})
    assert r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
    assert produce(0) == 0
    assert produce(1) == 0  # the transaction is open on the partition: no second question
    r = cluster.request(coordinator, "EndTxn", 3, {"transactional_id": txn_id, "producer_id": pid,
                                                   "producer_epoch": epoch, "committed": False})
    assert r["error_code"] == 0


def test_a_transaction_survives_its_coordinator_moving(cluster: ClusterProcesses) -> None:
    """The coordinator's broker stops mid-transaction (controlled shutdown): the new leader of the
    __transaction_state partition loads the transaction from its replica, the producer finds it and
    commits, and a read_committed consumer sees the records."""
    from confluent_kafka import Producer

    topic = "txn-move"
    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 3}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    assert cluster.wait_until(lambda: leaders(cluster, topic)[0] >= 0, 15)
    txn_id = "tx-move"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"m{i}".encode(), partition=0)
    p.flush(30)
    coordinator = cluster.request(cluster.node_ids[0], "FindCoordinator", 3,
                                  {"key": txn_id, "key_type": 1})["node_id"]
    # The followers of __transaction_state hold the id's state records (Ongoing, with the partition
    # added) before the coordinator stops, so the new one can load them: every partition of it
    # (50, transaction.state.log.num.partitions) is the same size on its three replicas.
    assert cluster.wait_until(lambda: replicas_in_step(cluster, "__transaction_state", range(50), 3,
                                                       require_data=False), 15), cluster.logs()
    cluster.stop(coordinator)
    p.commit_transaction(60)
    live = [n for n in cluster.node_ids if n != coordinator]
    moved = cluster.request(live[0], "FindCoordinator", 3, {"key": txn_id, "key_type": 1})
    assert moved["error_code"] == 0 and moved["node_id"] != coordinator
    bootstrap = ",".join(f"{cluster.broker(n).host}:{cluster.broker(n).port}" for n in live)
    assert sorted(read_committed(bootstrap, topic, 1, 5)) == [f"m{i}".encode() for i in range(5)], cluster.logs()
