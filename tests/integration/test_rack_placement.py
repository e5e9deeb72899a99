"""Rack-aware replica placement on a real 6-broker cluster (issue 31, item 2), Kafka 4.4's rules.

Brokers 1-2 have ``broker.rack=rack-a``, 3-4 ``rack-b``, 5-6 ``rack-c``. What clients see, through
Metadata and DescribeCluster: each broker's rack; CreateTopics with RF 3 and RF 2 and CreatePartitions
put no two replicas of a partition in one rack; leaders spread as Kafka's StripedReplicaPlacer spreads
them (each request's partitions start one rack further each, so six RF-3 partitions have six different
leaders and six RF-2 partitions two leaders per rack). Kafka 4.4's ``kafka-reassign-partitions
--generate`` (a proposal computed by the tool from the racks the cluster reports) proposes distinct
racks too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain

pytestmark = pytest.mark.timeout(300)

RACKS = {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b", 5: "rack-c", 6: "rack-c"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path_factory.mktemp("racks"), 6,
                        node_overrides={n: {"broker.rack": rack} for n, rack in RACKS.items()})
    with c:
        assert c.wait_members(60), c.logs()
        # Placement by Kafka's rules takes every broker as unfenced only once the controller has them so.
        assert c.wait_until(lambda: len(unfenced(c, c.controller_id())) == 6, 30), c.logs()
        yield c


def unfenced(c: ClusterProcesses, via: int) -> dict[int, str | None]:
    """DescribeCluster v0 (unfenced brokers only): broker id -> rack."""
    described = c.request(via, "DescribeCluster", 0, {"include_cluster_authorized_operations": False})
    return {b["broker_id"]: b["rack"] for b in described["brokers"]}


def partitions(c: ClusterProcesses, topic: str) -> dict[int, dict]:
    md = c.request(c.node_ids[-1], "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return {p["partition_index"]: p for p in md["topics"][0]["partitions"]}


def reported_racks(c: ClusterProcesses) -> dict[int, str | None]:
    """Each broker's rack as Metadata reports it (what clients and Kafka's tools go by)."""
    return {b["node_id"]: b["rack"] for b in c.metadata(1)["brokers"]}


def create(c: ClusterProcesses, topics: list[tuple[str, int, int]]) -> None:
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [
        {"name": name, "num_partitions": n, "replication_factor": rf, "assignments": [], "configs": []}
        for name, n, rf in topics], "timeout_ms": 10000})
    assert [t["error_code"] for t in reply["topics"]] == [0] * len(topics), reply
    for name, n, _ in topics:
        assert c.wait_until(lambda name=name, n=n: len(partitions(c, name)) == n, 20), partitions(c, name)


def test_metadata_and_describe_cluster_report_each_brokers_rack(cluster: ClusterProcesses) -> None:
    assert reported_racks(cluster) == RACKS
    assert unfenced(cluster, 2) == RACKS


def test_create_topics_and_partitions_put_replicas_on_distinct_racks(cluster: ClusterProcesses) -> None:
    racks = reported_racks(cluster)
    create(cluster, [("striped-3", 6, 3), ("striped-2", 6, 2)])
    three, two = partitions(cluster, "striped-3"), partitions(cluster, "striped-2")
    for p in (*three.values(), *two.values()):
        assert len({racks[b] for b in p["replica_nodes"]}) == len(p["replica_nodes"]), p
        assert p["leader_id"] == p["replica_nodes"][0], p
    assert all(len(p["replica_nodes"]) == 3 for p in three.values())
    assert sorted(p["leader_id"] for p in three.values()) == [1, 2, 3, 4, 5, 6]
    assert Counter(racks[p["leader_id"]] for p in two.values()) == {"rack-a": 2, "rack-b": 2, "rack-c": 2}

    reply = cluster.request(cluster.controller_id(), "CreatePartitions", 3, {
        "topics": [{"name": "striped-3", "count": 12, "assignments": None}], "timeout_ms": 10000,
        "validate_only": False})
    assert reply["results"][0]["error_code"] == 0, reply
    assert cluster.wait_until(lambda: len(partitions(cluster, "striped-3")) == 12, 20)
    added = [p for i, p in partitions(cluster, "striped-3").items() if i >= 6]
    for p in added:
        assert sorted(racks[b] for b in p["replica_nodes"]) == ["rack-a", "rack-b", "rack-c"], p
    assert sorted(p["leader_id"] for p in added) == [1, 2, 3, 4, 5, 6]


def test_kafka_reassign_partitions_generate_proposes_distinct_racks(cluster: ClusterProcesses,
                                                                    tmp_path: Path) -> None:
    """The proposal is Kafka's tool's own (rack-aware unless --disable-rack-aware), from the racks the
    cluster reports: with them it spreads each partition over the racks."""
    require_toolchain()
    create(cluster, [("to-move", 8, 3)])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "to-move"}]}))
    out = run_tool("kafka-reassign-partitions", [
        "--bootstrap-server", cluster.bootstrap, "--generate", "--topics-to-move-json-file", str(topics),
        "--broker-list", "1,2,3,4,5,6"]).stdout
    lines = out.splitlines()
    proposal = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert sorted(p["partition"] for p in proposal["partitions"]) == list(range(8)), out
    for p in proposal["partitions"]:
        assert sorted(RACKS[b] for b in p["replicas"]) == ["rack-a", "rack-b", "rack-c"], out
