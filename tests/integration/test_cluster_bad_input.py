"""Cluster mode refusing what it must, and riding out what it can (issue 12's bad input).

- a node whose data directory belongs to another cluster refuses to start, naming both ids;
- a second process with a node.id that is live in the cluster refuses to start, naming the holder;
- etcd unreachable at start: clear error lines, retries with backoff, no crash; the broker comes up
  as soon as etcd does;
- etcd lost while running: metadata writes are refused, the logs say why, brokers keep answering;
  when etcd returns, a controller is elected again and writes work.
"""

from __future__ import annotations

import time
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import BrokerNode, EtcdProcess, free_port
from odradek.protocol.errors import ErrorCode
from tests.support.cluster import cluster_or_skip
from tests.support.etcd import etcd_binary_or_skip

FAST = {"controller.lease.ttl.ms": "2000"}


def create_topic_error(node: BrokerNode, name: str, timeout: float = 15) -> int:
    from odradek.broker.launcher.cluster_launcher import kafka_request

    response = kafka_request(node.host, node.port, "CreateTopics", 7, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000}, timeout=timeout)
    return int(response["topics"][0]["error_code"])


def wait_exit(node: BrokerNode, timeout: float = 20.0) -> int | None:
    deadline = time.monotonic() + timeout
    while node.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return node.returncode()


def test_a_node_with_another_clusters_data_refuses_to_start(tmp_path: Path) -> None:
    with cluster_or_skip(tmp_path / "c", 1, FAST) as c:
        stranger_dir = tmp_path / "stranger"
        stranger_dir.mkdir()
        (stranger_dir / "meta.properties").write_text("version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=7\n")
        node = BrokerNode(7, stranger_dir, free_port(), overrides={"metadata.store": f"etcd://{c.etcd.endpoint}",
                                                                   **FAST})
        node.spawn()
        try:
            assert wait_exit(node) == 1, node.log_text()
            text = node.log_text()
            assert "MkU3OEVBNTcwNTJENDM2Qg" in text and c.metadata()["cluster_id"] in text, text
            assert "another cluster's data" in text and "Traceback" not in text
        finally:
            node.kill()
        assert [b["node_id"] for b in c.metadata()["brokers"]] == [1]


def test_a_duplicate_node_id_refuses_to_start(tmp_path: Path) -> None:
    with cluster_or_skip(tmp_path / "c", 2, FAST) as c:
        assert c.wait_members(30)
        twin = BrokerNode(2, tmp_path / "twin", free_port(), overrides={"metadata.store": f"etcd://{c.etcd.endpoint}",
                                                                         **FAST})
        twin.spawn()
        try:
            assert wait_exit(twin) == 1, twin.log_text()
            text = twin.log_text()
            assert "node.id 2 is already registered" in text and c.broker(2).bootstrap in text, text
            assert "Traceback" not in text
        finally:
            twin.kill()
        # The original node 2 is untouched.
        assert sorted(b["node_id"] for b in c.metadata(1)["brokers"]) == [1, 2]
        assert c.broker(2).alive()


def test_etcd_unreachable_at_start_retries_then_joins(tmp_path: Path) -> None:
    etcd = EtcdProcess(etcd_binary_or_skip(), tmp_path / "etcd", fast=True)
    node = BrokerNode(1, tmp_path / "b1", free_port(), overrides={"metadata.store": f"etcd://{etcd.endpoint}", **FAST})
    node.spawn()
    try:
        deadline = time.monotonic() + 20
        while node.log_text().count("retrying in") < 3 and time.monotonic() < deadline:
            assert node.alive(), node.log_text()
            time.sleep(0.1)
        text = node.log_text()
        assert text.count("retrying in") >= 3, text
        assert f"metadata store etcd://{etcd.endpoint} unreachable" in text
        assert "Traceback" not in text
        # Backoff: the retries are spaced out, not a busy loop.
        assert "retrying in 0.5 s" in text and "retrying in 1.0 s" in text and "retrying in 2.0 s" in text
        etcd.start()
        node.wait_serving(30)
        assert [b["node_id"] for b in node.metadata()["brokers"]] == [1]
        assert create_topic_error(node, "after-etcd-came") == 0
    finally:
        node.kill()
        etcd.stop()


def test_etcd_lost_while_running_refuses_writes_then_recovers(tmp_path: Path) -> None:
    with cluster_or_skip(tmp_path / "c", 3, FAST) as c:
        assert c.wait_members(30)
        controller = c.controller_id()
        c.etcd.stop(10)
        node = c.broker(controller)
        # Writes are refused (no controller can prove it leads), reads still answer. Once the node
        # has stepped down it forwards, and with no controller known the forwarded request waits out
        # the forwarding timeout (30 s; Kafka's forwarding channel retries for 60 s) before
        # REQUEST_TIMED_OUT: the client waits longer than that.
        refused: list[int] = []
        assert c.wait_until(lambda: refused.append(create_topic_error(node, "while-etcd-down", timeout=45))
                            or refused[-1] != 0, 60), (refused, c.logs())
        assert refused[-1] in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER), refused
        assert node.metadata()["brokers"]
        assert c.wait_until(lambda: "cannot reach the metadata store" in c.log_text(controller)
                            or "stops acting as controller" in c.log_text(controller), 20), c.log_text(controller)
        c.etcd.start()
        assert c.wait_until(lambda: c.controller_id() in c.node_ids, 30), c.logs()
        assert c.wait_until(lambda: create_topic_error(c.broker(c.controller_id()), "after-etcd-back") == 0, 30), \
            c.logs()
        assert c.wait_members(30), c.logs()


def test_a_restart_right_after_a_crash_waits_for_the_old_registration(tmp_path: Path) -> None:
    with cluster_or_skip(tmp_path / "c", 2, FAST) as c:
        assert c.wait_members(30)
        c.kill(2)
        t0 = time.monotonic()
        c.start(2)  # the dead run's key still lives (up to one TTL): the new run waits, then registers
        assert time.monotonic() - t0 < 2.0 + 10
        assert c.wait_until(lambda: sorted(b["node_id"] for b in c.metadata(1)["brokers"]) == [1, 2], 20), c.logs()
        assert "Traceback" not in c.log_text(2)
