"""A real 3-broker Odradek cluster for tests: etcd plus broker processes on free ports in a temp dir.

``ClusterProcesses`` is what the ``odradek_cluster`` pytest fixture (odradek.testing.pytest_plugin) and the
project's fault tests (tests/support/cluster.py) drive: ``bootstrap``, ``kill(node_id)`` (SIGKILL),
``stop(node_id)`` (SIGTERM, graceful), ``start(node_id)``, ``pause``/``resume`` (SIGSTOP/SIGCONT),
``wait_until(predicate, timeout)``, ``controller_id()``, ``metadata()``, ``move_leader(topic, partition,
node_id)`` (a partition's leadership moved while every broker runs), each process's log. The
processes are odradek.broker.launcher.cluster_launcher's, the same ones ``odradek cluster`` runs; etcd runs with short
timings (a 1 s minimum lease TTL) so lease-lapse tests stay short.

Needs an etcd binary (odradek.broker.launcher.etcd_binary); ``etcd_binary()`` says why there is none.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from odradek.broker.launcher.cluster_launcher import (
    BrokerNode,
    EtcdProcess,
    LocalCluster,
    kafka_request,
    wait_until,
)
from odradek.broker.launcher.etcd_binary import find_etcd_binary

# Test-friendly broker defaults, like odradek.testing.single_broker.RunningBroker's.
TEST_OVERRIDES: Mapping[str, str] = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
}


class NoEtcdError(RuntimeError):
    """No etcd binary on this machine; the message says how to get one."""


def etcd_binary() -> str:
    binary, why = find_etcd_binary()
    if binary is None:
        raise NoEtcdError(why)
    return binary


class ClusterProcesses:
    """etcd plus ``brokers`` broker processes (node ids 1..N) on 127.0.0.1 free ports, data under ``data_dir``."""

    def __init__(self, data_dir: Path | None = None, brokers: int = 3,
                 overrides: Mapping[str, str] | None = None, etcd: str | None = None,
                 log_level: str = "INFO", node_overrides: Mapping[int, Mapping[str, str]] | None = None) -> None:
        """``overrides`` for every broker; ``node_overrides``: node id -> that broker's own settings
        (``{1: {"broker.rack": "a"}}``)."""
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="odradek-cluster-")) if data_dir is None else Path(data_dir)
        merged = dict(TEST_OVERRIDES)
        merged.update(overrides or {})
        self.cluster = LocalCluster(self.data_dir, brokers, base_port=None, etcd_port=None,
                                    etcd_binary=etcd or etcd_binary(), overrides=merged, fast_etcd=True,
                                    log_level=log_level, node_overrides=node_overrides)

    # --- the processes -------------------------------------------------------------------------
    @property
    def etcd(self) -> EtcdProcess:
        return self.cluster.etcd

    @property
    def brokers(self) -> dict[int, BrokerNode]:
        return self.cluster.brokers

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.brokers)

    def broker(self, node_id: int) -> BrokerNode:
        return self.brokers[node_id]

    @property
    def bootstrap(self) -> str:
        """Every broker's host:port, comma-separated (``bootstrap.servers``)."""
        return self.cluster.bootstrap

    def live_ids(self) -> list[int]:
        return [n for n in self.node_ids if self.brokers[n].alive()]

    # --- lifecycle -----------------------------------------------------------------------------
    def start_all(self, timeout: float = 60.0) -> ClusterProcesses:
        """etcd, then every broker; returns once all answer (and, in cluster mode, see each other)."""
        self.cluster.start(timeout)
        return self

    def wait_members(self, timeout: float = 30.0) -> bool:
        """Until Metadata from every live broker lists every live broker."""
        return self.cluster.wait_members(timeout)

    def start(self, node_id: int, timeout: float = 30.0) -> BrokerNode:
        """(Re)start one broker, same port and data dir; returns once it answers.

        Right after a ``kill`` the node's old registration lives on in etcd until its lease lapses;
        the broker waits that out itself (one ``controller.lease.ttl.ms`` at most) before serving.
        """
        return self.brokers[node_id].start(timeout)

    def stop(self, node_id: int, timeout: float = 30.0) -> int | None:
        """SIGTERM (controlled shutdown); SIGKILL after ``timeout``. Returns the exit code."""
        return self.brokers[node_id].stop(timeout)

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node dies without a word (its etcd lease lapses by TTL)."""
        self.brokers[node_id].kill()

    def pause(self, node_id: int) -> None:
        """SIGSTOP: alive but silent (no lease renewals, no answers) until ``resume``."""
        import signal

        self.brokers[node_id].send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        import signal

        self.brokers[node_id].send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop every broker, then etcd; remove the temp dir if this object made it."""
        self.cluster.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ClusterProcesses:
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- looking at it -------------------------------------------------------------------------
    @staticmethod
    def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> bool:
        """Poll ``predicate`` until true (connection errors count as false); False after ``timeout``."""
        return wait_until(predicate, timeout, interval)

    def request(self, node_id: int, api: str, version: int, body: Mapping[str, Any],
                timeout: float = 5.0) -> dict[str, Any]:
        """One raw Kafka request to broker ``node_id`` (e.g. ``("Metadata", 12, {"topics": None})``)."""
        node = self.brokers[node_id]
        return kafka_request(node.host, node.port, api, version, body, timeout)

    def metadata(self, node_id: int | None = None) -> dict[str, Any]:
        """Metadata v12 (all topics) from ``node_id`` or the first live broker."""
        return self.brokers[node_id or self._any_live()].metadata()

    def controller_id(self, node_id: int | None = None) -> int:
        """The controller as broker ``node_id`` (or the first live one) sees it (DescribeCluster; -1: none)."""
        response = self.request(node_id or self._any_live(), "DescribeCluster", 0, {})
        return int(response["controller_id"])

    def partition_state(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR) of one partition, from Metadata (leader -1: none; KeyError: unknown)."""
        for t in self.metadata()["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    if p["partition_index"] == partition:
                        return p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"])
        raise KeyError(f"{topic}-{partition}")

    def move_leader(self, topic: str, partition: int, node_id: int, timeout: float = 30.0) -> None:
        """Make ``node_id`` the partition's leader while every broker keeps running, as an operator
        does: its replicas reordered with ``node_id`` first (AlterPartitionReassignments; the same
        replica set, so it completes at once), then a preferred leader election (ElectLeaders).
        Clients of the old leader get NOT_LEADER_OR_FOLLOWER and must find the new one. ``node_id``
        must be an in-sync replica (ValueError otherwise); raises TimeoutError if the move does not
        show in Metadata within ``timeout``."""
        leader, replicas, isr = self.partition_state(topic, partition)
        if node_id not in isr:
            raise ValueError(f"broker {node_id} is not an in-sync replica of {topic}-{partition} "
                             f"(replicas {replicas}, ISR {isr})")
        if leader == node_id:
            return
        order = [node_id, *[r for r in replicas if r != node_id]]
        reply = self.request(self.controller_id(), "AlterPartitionReassignments", 0, {
            "timeout_ms": int(timeout * 1000),
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "replicas": order}]}]})
        code = reply["error_code"] or reply["responses"][0]["partitions"][0]["error_code"]
        if code:
            raise RuntimeError(f"reassigning {topic}-{partition} to {order} failed: {reply}")
        if not self.wait_until(lambda: self.partition_state(topic, partition)[1] == order, timeout):
            raise TimeoutError(f"{topic}-{partition}'s replicas did not become {order} within {timeout} s")
        elected = self.request(self.controller_id(), "ElectLeaders", 2, {
            "election_type": 0, "timeout_ms": int(timeout * 1000),
            "topic_partitions": [{"topic": topic, "partitions": [partition]}]})
        (result,) = elected["replica_election_results"][0]["partition_result"]
        if result["error_code"] not in (0, 84):  # 84: ELECTION_NOT_NEEDED (it led already)
            raise RuntimeError(f"electing {node_id} for {topic}-{partition} failed: {elected}")
        if not self.wait_until(lambda: self.partition_state(topic, partition)[0] == node_id, timeout):
            raise TimeoutError(f"{node_id} did not become {topic}-{partition}'s leader within {timeout} s")

    def log_text(self, node_id: int | None = None, limit: int = 20000) -> str:
        """Broker ``node_id``'s log tail, or etcd's with ``None``."""
        proc = self.etcd if node_id is None else self.brokers[node_id]
        return proc.log_text(limit)

    def logs(self) -> str:
        """Every process's log tail, headed by its name (for an assertion message)."""
        return "\n".join(f"===== {p.name} ({p.log_path}) =====\n{p.log_text(6000)}"
                         for p in self.cluster.processes())

    def _any_live(self) -> int:
        live = self.live_ids()
        if not live:
            raise RuntimeError("no broker of the cluster is running")
        return live[0]

    def __repr__(self) -> str:
        return f"<ClusterProcesses {self.bootstrap} etcd={self.etcd.endpoint} data_dir={self.data_dir}>"
