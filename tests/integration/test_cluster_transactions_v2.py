"""Transactions v2 (KIP-890 part 2) on a 3-broker cluster with Kafka's Java 4.4 producer (issue 28,
item 3): __transaction_state is replicated (RF 3), the topic's three partitions are led by the three
brokers, so the leaders add the partitions to the transaction over AddPartitionsToTxn v5 to the
coordinator and the markers go over WriteTxnMarkers v2. The coordinator's broker is SIGKILLed in the
middle of a transaction: the new leader of the id's __transaction_state partition loads the ongoing
v2 transaction from its replica, the producer finds it and commits, and goes on with two more
transactions; a read_committed consumer sees every record once, and the id's epoch went up by one per
commit (three v2 commits: three bumps; version 1 would not have moved it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_transactions_producers import read_committed
from tests.support.cluster import ClusterProcesses, cluster_or_skip, replicas_in_step
from tests.support.java_tools import JavaDriver
from tests.support.real_kafka import require_toolchain, unique

PARTITIONS = 3
COUNT = 30  # records per phase


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    require_toolchain()
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def leaders(c: ClusterProcesses, node: int, topic: str) -> dict[int, int]:
    md = c.request(node, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}


def coordinator_of(c: ClusterProcesses, node: int, txn_id: str) -> int:
    r = c.request(node, "FindCoordinator", 3, {"key": txn_id, "key_type": 1})
    return r["node_id"] if r["error_code"] == 0 else -1


def transaction(c: ClusterProcesses, node: int, txn_id: str) -> dict[str, Any]:
    return c.request(node, "DescribeTransactions", 0, {"transactional_ids": [txn_id]})["transaction_states"][0]


def test_a_v2_transaction_survives_its_coordinator_being_killed(cluster: ClusterProcesses, tmp_path: Path) -> None:
    topic, txn_id = unique("txv2-cluster"), unique("tx-v2-cluster")
    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": topic, "num_partitions": PARTITIONS, "replication_factor": 3}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    first = cluster.node_ids[0]
    assert cluster.wait_until(lambda: all(n >= 0 for n in leaders(cluster, first, topic).values()), 15)
    assert len(set(leaders(cluster, first, topic).values())) == 3  # remote adds and markers
    assert cluster.wait_until(lambda: coordinator_of(cluster, first, txn_id) >= 0, 30), cluster.logs()

    release = tmp_path / "release"
    result: dict[str, Any] = {}
    with JavaDriver(cluster.bootstrap) as driver:
        holder = threading.Thread(target=lambda: result.update(driver.call(
            "txn_hold", transactional_id=txn_id, topic=topic, partitions=PARTITIONS, count=COUNT,
            release_file=str(release), wait_ms=90_000, then=2, timeout=240)))
        holder.start()
        try:
            coordinator = coordinator_of(cluster, first, txn_id)
            open_txn: dict[str, Any] = {}

            def ongoing_everywhere() -> bool:
                open_txn.update(transaction(cluster, coordinator, txn_id))
                return open_txn["transaction_state"] == "Ongoing" and sum(
                    len(t["partitions"]) for t in open_txn["topics"]) == PARTITIONS

            if not cluster.wait_until(ongoing_everywhere, 60):
                holder.join(60)
                pytest.fail(f"not ongoing on every partition: {open_txn}; the producer: {result}\n{cluster.logs()}")
            epoch = open_txn["producer_epoch"]
            # Every replica of __transaction_state holds the Ongoing record before its leader dies.
            assert cluster.wait_until(lambda: replicas_in_step(cluster, "__transaction_state", range(50), 3,
                                                               require_data=False), 15), cluster.logs()
            cluster.kill(coordinator)
            live = [n for n in cluster.node_ids if n != coordinator]

            def moved() -> bool:
                new = coordinator_of(cluster, live[0], txn_id)
                return new in live and transaction(cluster, new, txn_id)["transaction_state"] == "Ongoing"

            assert cluster.wait_until(moved, 60), cluster.logs()
            new_coordinator = coordinator_of(cluster, live[0], txn_id)
            loaded = transaction(cluster, new_coordinator, txn_id)
            assert (loaded["producer_id"], loaded["producer_epoch"]) == (open_txn["producer_id"], epoch)
            release.touch()
        finally:
            release.touch()
            holder.join(240)
        assert not holder.is_alive()
    assert result.get("error") is None and result["transactions"] == 3, result
    assert result["sent"] == 4 * COUNT

    bootstrap = ",".join(f"{cluster.broker(n).host}:{cluster.broker(n).port}" for n in live)
    expected = [f"{prefix}{i}".encode() for prefix in ("h", "r", "n0-", "n1-") for i in range(COUNT)]
    assert sorted(read_committed(bootstrap, topic, PARTITIONS, len(expected))) == sorted(expected), cluster.logs()
    done = transaction(cluster, coordinator_of(cluster, live[0], txn_id), txn_id)
    assert (done["transaction_state"], done["producer_id"], done["producer_epoch"]) == (
        "CompleteCommit", open_txn["producer_id"], epoch + 3), done

    # The killed broker comes back as a follower and catches up; nothing changes for the readers.
    cluster.start(coordinator)
    assert cluster.wait_members(30), cluster.logs()
    time.sleep(0.5)
    assert sorted(read_committed(cluster.bootstrap, topic, PARTITIONS, len(expected))) == sorted(expected)
