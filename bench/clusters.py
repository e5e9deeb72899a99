"""The two 3-node clusters of ``make bench``'s ``cluster3`` case, on this machine, with equivalent
settings: RF=3 by default, min.insync.replicas=2, ``__consumer_offsets`` replicated 3 times.

- ``KafkaClusterTarget``: three Apache Kafka 4.4.0 processes (tools/kafka_dist.KafkaServer), each a
  KRaft broker *and* controller (combined mode, a 3-voter quorum), one cluster id, own ports and dirs.
  Combined mode keeps the process count at three, like Odradek's three brokers.
- ``OdradekClusterTarget``: broker/cluster_launcher.LocalCluster: one etcd member plus three
  ``python -m odradek.broker.main`` processes. etcd is Odradek's metadata store and controller lease, the job
  Kafka's combined controllers do inside the broker JVMs; its CPU time is kept apart (``etcd_cpu``)
  so the per-GB figure can be read with and without it.

Both expose what bench/compare.py's targets expose: ``bootstrap`` (every node, comma-separated),
``start()`` (seconds until every node answers and sees the others), ``stop()``, ``cpu()`` (the sum of
utime+stime over the broker processes), ``pids`` (for the RSS sampler).

Who may call it: bench/compare.py's main thread.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.servers import COMMON_SETTINGS, cpu_seconds, rss_bytes  # noqa: E402
from tools.kafka_dist import KafkaServer, random_cluster_id  # noqa: E402

if TYPE_CHECKING:
    from odradek.broker.launcher.cluster_launcher import LocalCluster

NODES = 3
MIN_INSYNC_REPLICAS = 2

# What both clusters get on top of the single-node settings (bench/servers.COMMON_SETTINGS).
CLUSTER_SETTINGS = {
    **COMMON_SETTINGS,
    "default.replication.factor": str(NODES),
    "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
    "offsets.topic.replication.factor": str(NODES),
}


def wait_for_brokers(bootstrap: str, count: int, timeout: float = 60.0) -> None:
    """Until Metadata lists ``count`` brokers (a topic with RF=count can then be created)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = len(admin.list_topics(timeout=5).brokers)
        except Exception:  # not serving yet
            seen = 0
        if seen >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{bootstrap}: {seen} of {count} brokers in Metadata after {timeout} s")


class KafkaClusterTarget:
    name = "kafka"

    def __init__(self, data_dir: Path, heap: str = "1g") -> None:
        self.data_dir = Path(data_dir)
        self.heap = heap
        self.servers: list[KafkaServer] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(s.bootstrap for s in self.servers)

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.servers if s.proc is not None]

    def command_line(self) -> str:
        return (f"{NODES} x kafka.Kafka server.properties (-Xmx{self.heap} -Xms{self.heap} -XX:+UseG1GC), "
                f"process.roles=broker,controller, controller.quorum.voters=1@..,2@..,3@.., "
                + ", ".join(f"{k}={v}" for k, v in CLUSTER_SETTINGS.items()))

    def make_servers(self) -> list[KafkaServer]:
        """The three nodes, not started: node ids 1-3, own ports and dirs, one 3-voter quorum of
        their controller listeners, one cluster id to format every log dir with."""
        servers = [KafkaServer(self.data_dir / f"node-{i}", overrides={**CLUSTER_SETTINGS, "node.id": str(i)},
                               heap=self.heap) for i in range(1, NODES + 1)]
        voters = ",".join(f"{i}@{s.host}:{s.controller_port}" for i, s in enumerate(servers, 1))
        cluster_id = random_cluster_id()
        for s in servers:
            s.properties["controller.quorum.voters"] = voters
            s.properties["transaction.state.log.replication.factor"] = str(NODES)
            s.properties["transaction.state.log.min.isr"] = str(MIN_INSYNC_REPLICAS)
            s.cluster_id = cluster_id
        return servers

    def start(self) -> float:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.servers = self.make_servers()
        errors: list[BaseException] = []

        def launch(server: KafkaServer) -> None:
            try:
                server.start(timeout=180)
            except BaseException as exc:  # reported below
                errors.append(exc)

        t0 = time.monotonic()
        # All at once: a node finishes starting only once the controller quorum has a majority.
        threads = [threading.Thread(target=launch, args=(s,), daemon=True) for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(200)
        if errors:
            self.stop()
            raise RuntimeError(f"kafka cluster failed to start: {errors[0]}")
        wait_for_brokers(self.bootstrap, NODES)
        return time.monotonic() - t0

    def stop(self) -> None:
        for s in self.servers:
            if s.alive() and s.proc is not None:
                s.proc.terminate()
        for s in self.servers:
            s.stop()

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def etcd_cpu(self) -> float:
        return 0.0  # the controllers run inside the broker JVMs: already in cpu()

    def rss(self) -> int:
        return sum(rss_bytes(pid) for pid in self.pids)


class OdradekClusterTarget:
    name = "odradek"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.cluster: LocalCluster | None = None

    @property
    def bootstrap(self) -> str:
        assert self.cluster is not None
        return str(self.cluster.bootstrap)

    @property
    def pids(self) -> list[int]:
        if self.cluster is None:
            return []
        return [pid for pid in (b.pid for b in self.cluster.brokers.values()) if pid is not None]

    def command_line(self) -> str:
        return ("odradek cluster (broker/cluster_launcher.LocalCluster): etcd + "
                f"{NODES} x python -m odradek.broker.main --log-level WARNING --override metadata.store=etcd://<etcd> "
                + " ".join(f"--override {k}={v}" for k, v in CLUSTER_SETTINGS.items()))

    def start(self) -> float:
        from odradek.broker.launcher.cluster_launcher import LocalCluster

        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.cluster = LocalCluster(self.data_dir, NODES, base_port=None, etcd_port=None,
                                    overrides=CLUSTER_SETTINGS, log_level="WARNING")
        t0 = time.monotonic()
        self.cluster.start(timeout=60)
        if not self.cluster.wait_members(60):
            self.stop()
            raise RuntimeError("odradek brokers did not see each other within 60 s")
        wait_for_brokers(self.bootstrap, NODES)
        return time.monotonic() - t0

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def etcd_cpu(self) -> float:
        if self.cluster is None:
            return 0.0
        pid = self.cluster.etcd.pid
        return cpu_seconds(pid) if pid is not None else 0.0

    def rss(self) -> int:
        return sum(rss_bytes(pid) for pid in self.pids)
