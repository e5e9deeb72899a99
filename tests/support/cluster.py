"""The project's 3-broker cluster for tests: broker.testing_cluster.ClusterProcesses, skipped without etcd.

``cluster_or_skip(tmp_path)`` builds (not starts) one; use it as a context manager, or take the
``odradek_cluster`` fixture (broker.pytest_plugin) which starts one per test. A test that needs etcd
and finds none is SKIPPED with the reason, never passed silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from broker.testing_cluster import ClusterProcesses
from tests.support.etcd import etcd_binary_or_skip

__all__ = ["ClusterProcesses", "cluster_or_skip"]


def cluster_or_skip(data_dir: Path, brokers: int = 3, overrides: Mapping[str, str] | None = None) -> ClusterProcesses:
    return ClusterProcesses(data_dir, brokers, overrides, etcd=etcd_binary_or_skip())
