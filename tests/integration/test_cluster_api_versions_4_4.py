"""Kafka 4.4's DescribeCluster v2 and AlterPartitionReassignments v1 where they need more than one
broker (issue 28; the single-node comparison with a real Kafka is test_kafka_4_4_versions.py).

- DescribeCluster v2 (KIP-1073): a registered but fenced broker is listed, with is_fenced, only when
  the request sets include_fenced_brokers; v0/v1 and Metadata never show it. The fenced broker is a
  registration of node 7 written into etcd by the test, of a release that cannot read the metadata
  format, which the controller registers fenced (odradek.controller.metadata_format, rule 5).
- AlterPartitionReassignments v1 with allow_replication_factor_change false: a target of another
  size than the replica set is refused with INVALID_REPLICATION_FACTOR and Kafka's message, a move
  of the same size is not; sent to the broker that is not the controller, so the flag travels in the
  forwarded request (v1); with the flag true the same target starts the reassignment.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from odradek.controller import metadata_format
from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

FENCED_NODE = 7
NONE, INVALID_REPLICATION_FACTOR = 0, 38


def register_unreadable_broker(cluster: ClusterProcesses, node_id: int) -> None:
    """Write a broker registration for ``node_id`` (a copy of a live one's, other ports) whose release
    reads only metadata formats below the cluster's."""

    async def put() -> None:
        from odradek.controller.etcd_client import etcd_client

        client = etcd_client(cluster.etcd.endpoint)
        try:
            live = [kv for kv in await client.get_prefix(b"/odradek/") if b"/brokers/" in bytes(kv.key)]
            key = bytes(live[0].key)
            value = json.loads(bytes(live[0].value))
            value.update(node_id=node_id, port=1, endpoints=[[name, host, 1] for name, host, _ in value["endpoints"]],
                         incarnation_id="00000000-0000-0000-0000-000000000007",
                         features=[[metadata_format.FEATURE, 1, metadata_format.LATEST - 1]])
            await client.put(key[:key.rindex(b"/") + 1] + str(node_id).encode(), json.dumps(value).encode())
        finally:
            await client.close()

    asyncio.run(put())


def describe_cluster(cluster: ClusterProcesses, node_id: int, version: int, include_fenced: bool) -> list[tuple]:
    resp = cluster.request(node_id, "DescribeCluster", version, {
        "include_cluster_authorized_operations": False, "endpoint_type": 1, "include_fenced_brokers": include_fenced})
    assert resp["error_code"] == NONE, resp
    return [(b["broker_id"], b["port"], b["is_fenced"]) for b in resp["brokers"]]


def reassign(cluster: ClusterProcesses, node_id: int, topic: str, replicas: list[int], allow: bool) -> dict:
    resp = cluster.request(node_id, "AlterPartitionReassignments", 1, {
        "timeout_ms": 10000, "allow_replication_factor_change": allow,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
    assert resp["error_code"] == NONE and resp["allow_replication_factor_change"] is allow, resp
    return resp["responses"][0]["partitions"][0]


def test_fenced_brokers_and_replication_factor_changes(tmp_path: Path) -> None:
    c = cluster_or_skip(tmp_path, 2, {"controller.lease.ttl.ms": "2000"})
    with c:
        assert c.wait_members(30), c.logs()
        controller = c.controller_id()
        other = next(n for n in c.node_ids if n != controller)
        live = {n: c.broker(n).port for n in c.node_ids}

        register_unreadable_broker(c, FENCED_NODE)
        assert c.wait_until(lambda: FENCED_NODE in [b[0] for b in describe_cluster(c, other, 2, True)], 15), c.logs()
        for node in c.node_ids:
            assert describe_cluster(c, node, 2, True) == sorted(
                [(n, port, False) for n, port in live.items()] + [(FENCED_NODE, 1, True)])
            unfenced = sorted((n, port, False) for n, port in live.items())
            assert describe_cluster(c, node, 2, False) == describe_cluster(c, node, 1, False) == unfenced
            assert sorted(b["node_id"] for b in c.metadata(node)["brokers"]) == sorted(live)

        created = c.request(controller, "CreateTopics", 7, {"topics": [{
            "name": "rf-one", "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [controller]}]}], "timeout_ms": 10000})
        assert created["topics"][0]["error_code"] == NONE, created
        refused = reassign(c, other, "rf-one", [controller, other], allow=False)
        assert (refused["error_code"], refused["error_message"]) == (
            INVALID_REPLICATION_FACTOR, "The replication factor is changed from 1 to 2")
        assert c.request(other, "ListPartitionReassignments", 0, {"timeout_ms": 5000, "topics": None})["topics"] == []
        assert reassign(c, other, "rf-one", [other], allow=False)["error_code"] == NONE  # a move, same size
        assert c.wait_until(lambda: [p["replica_nodes"] for t in c.metadata(other)["topics"] if t["name"] == "rf-one"
                                     for p in t["partitions"]] == [[other]], 30), c.logs()
        assert reassign(c, other, "rf-one", [other, controller], allow=True)["error_code"] == NONE
        assert c.wait_until(lambda: [sorted(p["replica_nodes"]) for t in c.metadata(other)["topics"]
                                     if t["name"] == "rf-one" for p in t["partitions"]] == [sorted(live)], 30), c.logs()
