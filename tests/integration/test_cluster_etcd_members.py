"""``metadata.store`` naming several etcd members: the cluster rides out the loss of one member.

Three etcd members form one etcd cluster; two brokers list all three in ``metadata.store``. Killing the
member every broker talks to first leaves a quorum of two: the brokers move to the next member
(controller_candidate, registration and follower alike), stay registered, and metadata writes go on.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import BrokerNode, free_port, kafka_request, wait_until
from tests.support.etcd import etcd_binary_or_skip


def start_etcd_members(binary: str, root: Path, n: int = 3) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    clients = [free_port() for _ in range(n)]
    peers = [free_port() for _ in range(n)]
    initial = ",".join(f"m{i}=http://127.0.0.1:{peers[i]}" for i in range(n))
    procs = []
    for i in range(n):
        log = open(root / f"etcd-{i}.log", "ab")
        procs.append(subprocess.Popen([
            binary, "--name", f"m{i}", "--data-dir", str(root / f"etcd-{i}"),
            "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
            "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
            "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
            "--initial-cluster", initial, "--initial-cluster-state", "new",
            "--heartbeat-interval", "20", "--election-timeout", "200", "--log-level", "warn",
        ], stdout=log, stderr=subprocess.STDOUT))
    return procs, [f"127.0.0.1:{p}" for p in clients]


def test_brokers_survive_the_loss_of_one_etcd_member(tmp_path: Path) -> None:
    procs, endpoints = start_etcd_members(etcd_binary_or_skip(), tmp_path)
    store = "etcd://" + ",".join(endpoints)
    nodes = [BrokerNode(i, tmp_path / f"b{i}", free_port(),
                        overrides={"metadata.store": store, "controller.lease.ttl.ms": "3000"}) for i in (1, 2)]
    try:
        for node in nodes:
            node.start(60)

        def members(node: BrokerNode) -> list[int]:
            return sorted(b["node_id"] for b in node.metadata()["brokers"])

        assert wait_until(lambda: all(members(n) == [1, 2] for n in nodes), 30)
        procs[0].kill()  # the first listed member: every client's first choice
        procs[0].wait()
        time.sleep(4)  # longer than a lease TTL: renewals must have gone to another member

        def create(name: str) -> int:
            controller = kafka_request(nodes[0].host, nodes[0].port, "DescribeCluster", 0, {})["controller_id"]
            node = next(n for n in nodes if n.node_id == controller)
            reply = kafka_request(node.host, node.port, "CreateTopics", 7, {
                "topics": [{"name": name, "num_partitions": 1, "replication_factor": 2}], "timeout_ms": 5000},
                timeout=15)
            return int(reply["topics"][0]["error_code"])

        assert wait_until(lambda: create("one-member-down") == 0, 30), nodes[0].log_text() + nodes[1].log_text()
        assert all(members(n) == [1, 2] for n in nodes)
        assert "lapsed" not in nodes[0].log_text() + nodes[1].log_text()  # no registration lapsed
    finally:
        for node in nodes:
            node.kill()
        for p in procs:
            p.kill()
            p.wait()
