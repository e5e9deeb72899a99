"""A 3-broker cluster with the authorizer on: ACLs made through any broker reach every broker, and
the brokers' own requests (replica fetches, forwarding to the controller) need CLUSTER_ACTION.

On PLAINTEXT the brokers connect to each other as User:ANONYMOUS, like the clients. The cluster
starts with allow.everyone.if.no.acl.found=true and no super user, so the cluster resource is open
until an ACL names it; once only CLUSTER_ACTION is granted on it, replication and forwarding keep
working while the clients lose ACL management (ALTER on the cluster).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.bad_batches import records, wrap
from tests.support.cluster import cluster_or_skip

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000", "authorizer.class.name": STANDARD,
                                      "allow.everyone.if.no.acl.found": "true"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def acl(rtype: int, name: str, op: int, perm: int, principal: str = ANON) -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": 3, "principal": principal,
            "host": "*", "operation": op, "permission_type": perm}


def produce(c: ClusterProcesses, node: int, topic: str) -> int:
    resp = c.request(node, "Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]}, timeout=15)
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def leader(c: ClusterProcesses, node: int, topic: str) -> int:
    md = c.request(node, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return md["topics"][0]["partitions"][0]["leader_id"]


def listed(c: ClusterProcesses, node: int) -> list[str]:
    resp = c.request(node, "DescribeAcls", 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                               "permission_type": 1, "resource_name_filter": None,
                                               "principal_filter": None, "host_filter": None})
    return sorted(r["resource_name"] for r in resp["resources"])


def test_acls_reach_every_broker_and_brokers_need_cluster_action(cluster: ClusterProcesses) -> None:
    controller = cluster.controller_id()
    other = next(n for n in cluster.node_ids if n != controller)
    resp = cluster.request(other, "CreateTopics", 7, {"topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 3} for n in ("open", "secret")], "timeout_ms": 10000})
    assert [t["error_code"] for t in resp["topics"]] == [0, 0], resp
    # Made on a broker that is not the controller: forwarded, stored, applied by every broker.
    # Once an ACL applies to "secret", allow.everyone.if.no.acl.found no longer does: DESCRIBE and WRITE
    # are granted, and a DENY WRITE for User:* overrides the ALLOW.
    resp = cluster.request(other, "CreateAcls", 3, {"creations": [
        acl(2, "secret", 8, 3), acl(2, "secret", 4, 3), acl(2, "secret", 4, 2, "User:*")]})
    assert [r["error_code"] for r in resp["results"]] == [0, 0, 0], resp
    for n in cluster.node_ids:
        assert cluster.wait_until(lambda n=n: listed(cluster, n) == ["secret"], 10), n
    assert cluster.wait_until(lambda: leader(cluster, 1, "open") >= 0 and leader(cluster, 1, "secret") >= 0, 10)
    assert produce(cluster, leader(cluster, 1, "secret"), "secret") == 29  # DENY WRITE for User:*
    assert produce(cluster, leader(cluster, 1, "open"), "open") == 0  # acks=-1: the followers fetched

    # Only CLUSTER_ACTION on the cluster now: the brokers' fetches and forwarding go on, the clients'
    # ACL management (ALTER on the cluster) stops.
    resp = cluster.request(other, "CreateAcls", 3, {"creations": [acl(4, "kafka-cluster", 9, 3)]})
    assert resp["results"][0]["error_code"] == 0, resp
    for n in cluster.node_ids:
        assert cluster.wait_until(lambda n=n: len(cluster.request(n, "CreateAcls", 3, {"creations": [
            acl(2, "x", 3, 3)]})["results"]) == 1 and cluster.request(n, "CreateAcls", 3, {"creations": [
                acl(2, "x", 3, 3)]})["results"][0]["error_code"] == 31, 10), n
    assert produce(cluster, leader(cluster, 1, "open"), "open") == 0
    # A topic created through a non-controller broker: CREATE on the topic (no ACL names it), then
    # forwarded to the controller under the broker's CLUSTER_ACTION.
    resp = cluster.request(other, "CreateTopics", 7, {"topics": [
        {"name": "later", "num_partitions": 1, "replication_factor": 3}], "timeout_ms": 10000})
    assert resp["topics"][0]["error_code"] == 0, resp
    assert cluster.wait_until(lambda: leader(cluster, 1, "later") >= 0, 10)
    assert produce(cluster, leader(cluster, 1, "later"), "later") == 0
