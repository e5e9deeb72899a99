"""What the cluster reports with a broker down, and after it is back (issue 13).

Three brokers; topic ``spread`` has 3 partitions on all three brokers, ``alone`` one partition on the
victim only. With the victim SIGKILLed: Metadata lists it as an offline replica and not in any ISR,
``alone`` has no leader; DescribeCluster lists the two live brokers; DescribeLogDirs of a survivor
shows its replicas; Kafka's own ``kafka-topics --describe --under-replicated-partitions`` lists
exactly the ``spread`` partitions and ``--unavailable-partitions`` exactly ``alone``'s - and both
list nothing while the cluster is healthy, before the kill and after the restart; the min ISR
options follow ``min.insync.replicas`` (2 for ``spread``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(240)

SPREAD, ALONE = "spread", "alone"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    require_toolchain()
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "3000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def partitions(c: ClusterProcesses, via: int) -> dict[tuple[str, int], dict]:
    md = c.request(via, "Metadata", 12, {"topics": [{"name": SPREAD, "topic_id": None},
                                                    {"name": ALONE, "topic_id": None}]})
    return {(t["name"], p["partition_index"]): p for t in md["topics"] for p in t["partitions"]}


def listed(c: ClusterProcesses, via: int, option: str) -> list[tuple[str, int]]:
    """The partitions ``kafka-topics --describe <option>`` prints."""
    out = run_tool("kafka-topics", ["--bootstrap-server", c.broker(via).bootstrap, "--describe", option]).stdout
    return sorted((m.group(1), int(m.group(2))) for m in re.finditer(r"Topic: (\S+)\s+Partition: (\d+)", out))


def healthy(c: ClusterProcesses, via: int) -> bool:
    seen = partitions(c, via)
    return len(seen) == 4 and all(len(p["isr_nodes"]) == len(p["replica_nodes"]) and p["leader_id"] >= 0 and not p["offline_replicas"]
               for p in seen.values())


def test_a_broker_down_is_reported_truthfully(cluster: ClusterProcesses) -> None:
    controller = cluster.controller_id()
    victim = next(n for n in cluster.node_ids if n != controller)
    reply = cluster.request(controller, "CreateTopics", 7, {"topics": [
        {"name": SPREAD, "num_partitions": 3, "replication_factor": 3, "assignments": [],
         "configs": [{"name": "min.insync.replicas", "value": "2"}]},
        {"name": ALONE, "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [victim]}], "configs": []}], "timeout_ms": 10000})
    assert [t["error_code"] for t in reply["topics"]] == [0, 0], reply
    assert cluster.wait_until(lambda: healthy(cluster, controller), 20), partitions(cluster, controller)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(90):
        producer.produce(SPREAD, b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    assert listed(cluster, controller, "--under-replicated-partitions") == []
    assert listed(cluster, controller, "--unavailable-partitions") == []
    assert listed(cluster, controller, "--under-min-isr-partitions") == []
    # Kafka's rule is ISR size == min.insync.replicas: ``alone`` (1 of 1) is at its minimum.
    assert listed(cluster, controller, "--at-min-isr-partitions") == [(ALONE, 0)]

    cluster.kill(victim)
    survivor = next(n for n in cluster.node_ids if n not in (victim, controller))
    # The controller fences the victim once its registration lapses; each broker applies the fence
    # from its own watch of the metadata, so both are asked (the fresh-clone run at 03a0b72 asked the
    # controller's Metadata while only the survivor's image had the fence).
    assert cluster.wait_until(lambda: all(len(cluster.request(via, "DescribeCluster", 0, {
        "include_cluster_authorized_operations": False})["brokers"]) == 2 for via in (controller, survivor)),
        30), cluster.logs()
    brokers = cluster.request(survivor, "DescribeCluster", 0, {"include_cluster_authorized_operations": False})
    assert sorted(b["broker_id"] for b in brokers["brokers"]) == sorted({controller, survivor})
    assert brokers["controller_id"] == controller

    for via in (controller, survivor):
        seen = partitions(cluster, via)
        for p in range(3):
            part = seen[(SPREAD, p)]
            assert part["offline_replicas"] == [victim], part
            assert victim not in part["isr_nodes"] and part["leader_id"] in (controller, survivor), part
            assert sorted(part["replica_nodes"]) == [1, 2, 3]
        alone = seen[(ALONE, 0)]
        # Kafka: no live replica, no leader (LEADER_NOT_AVAILABLE); the last ISR member is kept.
        assert (alone["error_code"], alone["leader_id"], alone["offline_replicas"], alone["isr_nodes"]) == \
            (5, -1, [victim], [victim]), alone

    assert listed(cluster, survivor, "--under-replicated-partitions") == [(SPREAD, 0), (SPREAD, 1), (SPREAD, 2)]
    assert listed(cluster, survivor, "--unavailable-partitions") == [(ALONE, 0)]
    # Without a leader a partition is under its min ISR whatever its ISR says (Kafka's TopicCommand).
    assert listed(cluster, survivor, "--under-min-isr-partitions") == [(ALONE, 0)]
    assert listed(cluster, survivor, "--at-min-isr-partitions") == [(ALONE, 0), (SPREAD, 0), (SPREAD, 1), (SPREAD, 2)]

    # A survivor's log dir holds its replicas of ``spread`` (the same size on both survivors).
    sizes = []
    for via in (controller, survivor):
        dirs = cluster.request(via, "DescribeLogDirs", 4, {"topics": None})
        assert dirs["error_code"] == 0 and len(dirs["results"]) == 1, dirs
        (result,) = dirs["results"]
        held = {(t["name"], p["partition_index"]): p for t in result["topics"] for p in t["partitions"]}
        assert sorted(k for k in held if k[0] in (SPREAD, ALONE)) == [(SPREAD, 0), (SPREAD, 1), (SPREAD, 2)]
        assert all(held[(SPREAD, p)]["offset_lag"] == 0 for p in range(3))
        sizes.append([held[(SPREAD, p)]["partition_size"] for p in range(3)])
    assert sizes[0] == sizes[1] and all(size > 0 for size in sizes[0]), sizes

    cluster.start(victim)
    assert cluster.wait_until(lambda: healthy(cluster, survivor), 60), (partitions(cluster, survivor), cluster.logs())
    assert listed(cluster, survivor, "--under-replicated-partitions") == []
    assert listed(cluster, survivor, "--unavailable-partitions") == []
