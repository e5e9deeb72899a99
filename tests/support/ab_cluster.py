"""The A/B harness at three nodes: a 3-node Apache Kafka 4.4 cluster and a 3-node Odradek cluster with
the same replication settings, behind one interface, for tests that kill a partition's leader.

- Kafka: bench/clusters.py's ``KafkaClusterTarget`` (three tools/kafka_dist.KafkaServer processes, each a
  KRaft broker and controller, one 3-voter quorum), with small heaps (``HEAP``) and ``SETTINGS`` added.
- Odradek: odradek/testing/cluster.py's ``ClusterProcesses`` (etcd plus three broker processes) with
  bench/clusters.py's ``CLUSTER_SETTINGS`` and the same ``SETTINGS``.

Both: RF=3 by default, min.insync.replicas 2, ``__consumer_offsets`` and ``__share_group_state``
replicated 3 times with min ISR 2 (Kafka's defaults for the share state topic; the test defaults of
kafka_dist.KafkaServer say 1), and few partitions of the internal topics (3 each), so a test can name
the node that leads the partition holding a group's state.

``ClusterTarget``: ``name``, ``bootstrap`` (the live nodes), ``node_ids``, ``kill(node)`` (SIGKILL),
``restart(node)`` (same ports and data), ``partition_state(topic, partition)`` (leader, replicas, ISR from
Metadata), ``topic_id``, ``wait_leader_elsewhere`` (a new leader after a kill), ``wait_in_sync`` (every
partition's ISR full again after a restart: the next kill must leave min ISR), ``logs()``.

``cluster_target(name, data_dir)`` is a context manager that starts one (skipping, with the reason,
without Java or etcd) and stops it. Who may call it: pytest's main thread.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.clusters import CLUSTER_SETTINGS, MIN_INSYNC_REPLICAS, NODES, KafkaClusterTarget, wait_for_brokers
from tests.support.cluster import ClusterProcesses, cluster_or_skip
from tests.support.real_kafka import require_toolchain
from tests.support.wire import WireClient
from tools.kafka_dist import KafkaServer

HEAP = "512m"  # three JVMs beside three Odradek brokers on a shared 2-core, 23 GiB machine

SETTINGS = {
    "share.coordinator.state.topic.replication.factor": str(NODES),
    "share.coordinator.state.topic.min.isr": str(MIN_INSYNC_REPLICAS),
    "share.coordinator.state.topic.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": str(NODES),
    "transaction.state.log.min.isr": str(MIN_INSYNC_REPLICAS),
}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``predicate`` (a connection error, or a topic not yet in Metadata, counts as not yet) until
    true; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (OSError, LookupError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class ClusterTarget:
    """What the tests do to either cluster; the subclasses start, kill and restart the processes."""

    name = ""

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, NODES + 1))

    def address(self, node_id: int) -> tuple[str, int]:
        raise NotImplementedError

    def alive(self, node_id: int) -> bool:
        raise NotImplementedError

    def kill(self, node_id: int) -> None:
        raise NotImplementedError

    def restart(self, node_id: int) -> None:
        raise NotImplementedError

    def logs(self) -> str:
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        """The live nodes' host:port, comma-separated (a client must not be pointed at a dead one)."""
        return ",".join(f"{h}:{p}" for h, p in (self.address(n) for n in self.node_ids if self.alive(n)))

    def live(self) -> list[int]:
        return [n for n in self.node_ids if self.alive(n)]

    def request(self, node_id: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        host, port = self.address(node_id)
        with WireClient(host, port, timeout=10) as c:
            return c.request(api_key, version, body)

    def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        """Metadata v12 from the first live node (every topic when ``topics`` is None)."""
        body = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        return self.request(self.live()[0], 3, 12, body)

    def partition_state(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR) of one partition (leader -1: none; KeyError: not in Metadata)."""
        for t in self.metadata([topic])["topics"]:
            if t["name"] == topic and t["error_code"] == 0:
                for p in t["partitions"]:
                    if p["partition_index"] == partition:
                        return p["leader_id"], sorted(p["replica_nodes"]), sorted(p["isr_nodes"])
        raise KeyError(f"{topic}-{partition}")

    def leader(self, topic: str, partition: int) -> int:
        return self.partition_state(topic, partition)[0]

    def topic_id(self, topic: str) -> uuid.UUID:
        (t,) = self.metadata([topic])["topics"]
        assert t["error_code"] == 0, t
        return t["topic_id"]

    def wait_leader_elsewhere(self, topic: str, partition: int, old: int, timeout: float = 60) -> int:
        """Until a live node other than ``old`` leads the partition; returns it."""
        wait_until(lambda: self.leader(topic, partition) not in (-1, old), timeout,
                   f"{self.name}: a new leader of {topic}-{partition} (was {old})")
        return self.leader(topic, partition)

    def wait_in_sync(self, timeout: float = 120) -> None:
        """Until every node serves and every partition of every topic has its whole replica set in
        its ISR: a restarted node has caught up, so the next kill leaves min.insync.replicas."""
        def in_sync() -> bool:
            if len(self.live()) != NODES:
                return False
            md = self.metadata()
            if len(md["brokers"]) != NODES:
                return False
            return all(p["leader_id"] >= 0 and sorted(p["isr_nodes"]) == sorted(p["replica_nodes"])
                       for t in md["topics"] for p in t["partitions"])
        wait_until(in_sync, timeout, f"{self.name}: every replica in sync")


class _KafkaNodes(KafkaClusterTarget):
    """bench's 3-node Kafka with this module's settings on every node."""

    def make_servers(self) -> list[KafkaServer]:
        servers = super().make_servers()
        for s in servers:
            s.properties.update(SETTINGS)
        return servers


class KafkaCluster(ClusterTarget):
    name = "kafka"

    def __init__(self, data_dir: Path) -> None:
        self.nodes = _KafkaNodes(data_dir, heap=HEAP)

    def server(self, node_id: int) -> KafkaServer:
        return self.nodes.servers[node_id - 1]

    def start(self) -> None:
        self.nodes.start()

    def address(self, node_id: int) -> tuple[str, int]:
        s = self.server(node_id)
        return s.host, s.port

    def alive(self, node_id: int) -> bool:
        return self.server(node_id).alive()

    def kill(self, node_id: int) -> None:
        self.server(node_id).kill()

    def restart(self, node_id: int) -> None:
        # Its log dir is formatted already: same cluster id, same data, same ports.
        self.server(node_id).start(timeout=180)
        wait_for_brokers(self.bootstrap, NODES, timeout=120)

    def stop(self) -> None:
        # SIGKILL: a controlled shutdown of the last voters waits for a quorum that is going away.
        for s in self.nodes.servers:
            s.kill()
        shutil.rmtree(self.nodes.data_dir, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(f"===== kafka node {n} =====\n{self.server(n).log_text()[-6000:]}" for n in self.node_ids)


class OdradekCluster(ClusterTarget):
    name = "odradek"

    def __init__(self, data_dir: Path) -> None:
        self.processes: ClusterProcesses = cluster_or_skip(data_dir, NODES, {**CLUSTER_SETTINGS, **SETTINGS})

    def start(self) -> None:
        self.processes.start_all(60)
        if not self.processes.wait_members(60):
            raise AssertionError(f"odradek brokers did not see each other within 60 s\n{self.logs()}")
        wait_for_brokers(self.bootstrap, NODES)

    def address(self, node_id: int) -> tuple[str, int]:
        b = self.processes.broker(node_id)
        return b.host, b.port

    def alive(self, node_id: int) -> bool:
        return self.processes.broker(node_id).alive()

    def kill(self, node_id: int) -> None:
        self.processes.kill(node_id)

    def restart(self, node_id: int) -> None:
        # The killed node's registration outlives it until its etcd lease lapses; start waits that out.
        self.processes.start(node_id, timeout=60)
        wait_for_brokers(self.bootstrap, NODES, timeout=120)

    def stop(self) -> None:
        self.processes.close()

    def logs(self) -> str:
        return self.processes.logs()


@contextmanager
def cluster_target(name: str, data_dir: Path) -> Iterator[ClusterTarget]:
    """A started 3-node cluster of ``name`` ("kafka" or "odradek"), stopped on exit."""
    target: KafkaCluster | OdradekCluster
    if name == "kafka":
        require_toolchain()
        target = KafkaCluster(data_dir)
    elif name == "odradek":
        target = OdradekCluster(data_dir)
    else:
        raise ValueError(name)
    try:
        target.start()
        yield target
    finally:
        target.stop()

