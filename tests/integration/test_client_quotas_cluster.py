"""Client quotas on a 3-broker cluster: AlterClientQuotas sent to a broker that is not the
controller is forwarded to it (KIP-590), the ClientQuotaRecord reaches every broker's image
(DescribeClientQuotas on each), and a broker that did not take the change throttles by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.integration.test_client_quotas import produce_request
from tests.support.cluster import cluster_or_skip
from tests.support.real_kafka import wait_until_led
from tests.support.wire import WireClient


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def described(c: ClusterProcesses, node: int) -> list:
    body = {"components": [{"entity_type": "client-id", "match_type": 0, "match": "cluster-app"}], "strict": True}
    return c.request(node, "DescribeClientQuotas", 1, body)["entries"]


def test_quota_set_on_one_broker_is_enforced_by_all(cluster: ClusterProcesses) -> None:
    c = cluster
    controller = c.controller_id()
    other = next(n for n in c.node_ids if n != controller)
    body = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "cluster-app"}],
                         "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}],
            "validate_only": False}
    (entry,) = c.request(other, "AlterClientQuotas", 1, body)["entries"]
    assert entry["error_code"] == 0, entry
    for node in c.node_ids:
        assert c.wait_until(lambda node=node: bool(described(c, node)), 10), f"node {node} never saw the quota"
        assert described(c, node)[0]["values"] == [{"key": "producer_byte_rate", "value": 1000.0}]
    created = c.request(controller, "CreateTopics", 7, {
        "topics": [{"name": "quota-cluster", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000})
    assert created["topics"][0]["error_code"] == 0, created

    def leader_of() -> int:
        md = c.request(controller, "Metadata", 12, {"topics": [{"name": "quota-cluster", "topic_id": None}]})
        return int(md["topics"][0]["partitions"][0]["leader_id"]) if md["topics"][0]["partitions"] else -1

    assert c.wait_until(lambda: leader_of() >= 0, 10)
    md = c.request(controller, "Metadata", 12, {"topics": [{"name": "quota-cluster", "topic_id": None}]})
    leader = md["topics"][0]["partitions"][0]["leader_id"]
    host, port = next((b["host"], b["port"]) for b in md["brokers"] if b["node_id"] == leader)
    with WireClient(host, port) as probe:  # the controller names the leader before the leader has applied it
        wait_until_led(probe, "quota-cluster", 1)
    # 20 KB over the default 10-s minimum window: 2 KB/s against 1 KB/s.
    with WireClient(host, port, client_id="cluster-app") as client:
        response = client.request(0, 9, produce_request("quota-cluster", 20_000))
    assert response["responses"][0]["partition_responses"][0]["error_code"] == 0, response
    assert response["throttle_time_ms"] > 0, f"leader {leader} did not throttle by a quota set on node {other}"
