"""A real 3-broker Odradek cluster for tests: etcd plus broker processes on free ports in a temp dir.

``ClusterProcesses`` is what the ``odradek_cluster`` pytest fixture (broker.pytest_plugin) and the
project's fault tests (tests/support/cluster.py) drive: ``bootstrap``, ``kill(node_id)`` (SIGKILL),
``stop(node_id)`` (SIGTERM, graceful), ``start(node_id)``, ``pause``/``resume`` (SIGSTOP/SIGCONT),
``wait_until(predicate, timeout)``, ``controller_id()``, ``metadata()``, each process's log. The
processes are broker.cluster_launcher's, the same ones ``odradek cluster`` runs; etcd runs with short
timings (a 1 s minimum lease TTL) so lease-lapse tests stay short.

Needs an etcd binary (broker.etcd_binary); ``etcd_binary()`` says why there is none.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker.cluster_launcher import (
    BrokerNode,
    EtcdProcess,
    LocalCluster,
    kafka_request,
    wait_until,
)
from broker.etcd_binary import find_etcd_binary

# Test-friendly broker defaults, like broker.testing.RunningBroker's.
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
