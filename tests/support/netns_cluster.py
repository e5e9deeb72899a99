"""The test cluster (etcd plus N brokers) with every process a host of its own: its own network namespace
and address (tests/support/netns.py's ``NamespaceNetwork``), so a test can partition one broker from the
others and from etcd while the test's clients, in the root namespace, still reach it.

``NetnsCluster`` is a ``odradek.testing.cluster.ClusterProcesses`` (kill, pause, request, metadata,
controller_id, logs, wait_until all work) whose processes run under ``ip netns exec``: etcd on
``<subnet>.2:2379``, broker N on ``<subnet>.<N+2>:9092``, each advertising its address.
``running_netns_cluster(tmp_path, overrides)`` starts one for a test (skipped, with the reason, where
namespaces cannot be made), waits until its brokers see each other and closes it afterwards.
``isolate(node_id)`` cuts a broker off from the other brokers and from etcd (silent blackhole routes
both ways), ``heal(node_id)`` undoes it; ``cut_off_etcd()`` cuts etcd off from every broker (the
brokers still reach each other) and ``heal_etcd()`` undoes it; ``close()`` stops the processes and
removes the namespaces.

Needs root and ``ip`` (``namespaces_skip_reason()``), and an etcd binary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import BrokerNode, EtcdProcess, LocalCluster
from odradek.testing.cluster import TEST_OVERRIDES, ClusterProcesses
from tests.support.netns import NamespaceNetwork, namespaces_skip_reason

__all__ = ["NetnsCluster", "namespaces_skip_reason", "running_netns_cluster"]

ETCD_HOST = "etcd"


def broker_host(node_id: int) -> str:
    return f"broker{node_id}"


class NamespacedEtcd(EtcdProcess):
    """etcd run in a namespace (the same command, behind ``ip netns exec``)."""

    def __init__(self, prefix: list[str], binary: str, data_dir: Path, host: str) -> None:
        super().__init__(binary, data_dir, client_port=2379, peer_port=2380, host=host, fast=True)
        self.prefix = prefix

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


class NamespacedBroker(BrokerNode):
    """A broker run in a namespace, listening on (and advertising) its namespace's address."""

    def __init__(self, prefix: list[str], node_id: int, data_dir: Path, host: str,
                 overrides: Mapping[str, str], log_level: str) -> None:
        super().__init__(node_id, data_dir, 9092, host, overrides, log_level)
        self.prefix = prefix

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


class NamespacedLocalCluster(LocalCluster):
    """LocalCluster's start/stop/wait_members over namespaced processes."""

    def __init__(self, network: NamespaceNetwork, data_dir: Path, brokers: int, etcd_binary: str,
                 overrides: Mapping[str, str], log_level: str) -> None:
        # Not LocalCluster.__init__: that one picks free ports on one shared host.
        self.data_dir = Path(data_dir).absolute()
        self.host = network.address(ETCD_HOST)
        self.etcd = NamespacedEtcd(network.exec_prefix(ETCD_HOST), etcd_binary, self.data_dir / "etcd",
                                   network.address(ETCD_HOST))
        common = {"metadata.store": f"etcd://{self.etcd.endpoint}"}
        common.update(overrides)
        self.brokers: dict[int, BrokerNode] = {}
        for node_id in range(1, brokers + 1):
            host = broker_host(node_id)
            self.brokers[node_id] = NamespacedBroker(network.exec_prefix(host), node_id,
                                                     self.data_dir / f"broker-{node_id}", network.address(host),
                                                     common, log_level)


class NetnsCluster(ClusterProcesses):
    """etcd and ``brokers`` brokers, each in its own network namespace (see the module doc)."""

    def __init__(self, data_dir: Path, brokers: int = 3, overrides: Mapping[str, str] | None = None,
                 etcd: str | None = None, log_level: str = "INFO") -> None:
        # Not ClusterProcesses.__init__: the processes differ, every method after it is the same.
        from odradek.testing.cluster import etcd_binary

        self._own_dir = False
        self.data_dir = Path(data_dir)
        tag = os.urandom(2).hex()
        self.network = NamespaceNetwork([ETCD_HOST, *(broker_host(n) for n in range(1, brokers + 1))],
                                        prefix=f"odr{tag}-")
        merged = dict(TEST_OVERRIDES)
        merged.update(overrides or {})
        self.cluster = NamespacedLocalCluster(self.network, self.data_dir, brokers, etcd or etcd_binary(), merged,
                                              log_level)

    def start_all(self, timeout: float = 60.0) -> NetnsCluster:
        self.network.up()
        try:
            super().start_all(timeout)
        except BaseException:
            self.network.down()
            raise
        return self

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.network.down()

    def __enter__(self) -> NetnsCluster:
        return self.start_all()

    def isolate(self, node_id: int) -> None:
        """Cut broker ``node_id`` off from every other broker and from etcd (not from the root namespace)."""
        host = broker_host(node_id)
        self.network.isolate(host, [h for h in self.network.hosts if h != host])

    def heal(self, node_id: int) -> None:
        self.network.heal(broker_host(node_id))

    def cut_off_etcd(self) -> None:
        """Cut etcd off from every broker (a metadata-store outage seen from the whole cluster)."""
        self.network.isolate(ETCD_HOST, [h for h in self.network.hosts if h != ETCD_HOST])

    def heal_etcd(self) -> None:
        self.network.heal(ETCD_HOST)


@contextmanager
def running_netns_cluster(tmp_path: Path, overrides: Mapping[str, str], brokers: int = 3) -> Iterator[NetnsCluster]:
    """A started ``NetnsCluster`` whose brokers all see each other; closed (namespaces removed) after.
    Skipped with the reason where this machine cannot make network namespaces or has no etcd."""
    from tests.support.etcd import etcd_binary_or_skip

    why = namespaces_skip_reason()
    if why is not None:
        pytest.skip(why)
    c = NetnsCluster(tmp_path, brokers, overrides, etcd=etcd_binary_or_skip())
    try:
        c.start_all()
    except RuntimeError as exc:  # root, but namespaces or veths refused (a restricted container)
        if "not permitted" in str(exc) or "Permission denied" in str(exc):
            pytest.skip(f"cannot make network namespaces here: {exc}")
        raise
    try:
        assert c.wait_members(30), c.logs()
        yield c
    finally:
        c.close()
