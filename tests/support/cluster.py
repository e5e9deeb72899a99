"""The project's 3-broker cluster for tests: odradek.testing.cluster.ClusterProcesses, skipped without etcd.

``cluster_or_skip(tmp_path)`` builds (not starts) one; use it as a context manager, or take the
``odradek_cluster`` fixture (odradek.testing.pytest_plugin) which starts one per test. A test that needs etcd
and finds none is SKIPPED with the reason, never passed silently. ``wait_through_faults`` waits on a condition
read from brokers that may be down or moving (killed, electing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from odradek.testing.cluster import ClusterProcesses
from tests.support.etcd import etcd_binary_or_skip

__all__ = ["ClusterProcesses", "cluster_or_skip", "replicas_in_step", "wait_through_faults"]


def cluster_or_skip(data_dir: Path, brokers: int = 3, overrides: Mapping[str, str] | None = None,
                    node_overrides: Mapping[int, Mapping[str, str]] | None = None) -> ClusterProcesses:
    return ClusterProcesses(data_dir, brokers, overrides, etcd=etcd_binary_or_skip(), node_overrides=node_overrides)


def replica_sizes(cluster: ClusterProcesses, topic: str, partitions: Iterable[int]) -> dict[int, dict[int, int]]:
    """partition -> {node id: bytes of that node's replica}, from each live broker's DescribeLogDirs."""
    wanted = list(partitions)
    sizes: dict[int, dict[int, int]] = {p: {} for p in wanted}
    for node in cluster.live_ids():
        reply = cluster.request(node, "DescribeLogDirs", 1, {"topics": [{"topic": topic, "partitions": wanted}]})
        for log_dir in reply["results"]:
            for t in log_dir["topics"]:
                for p in t["partitions"]:
                    sizes[p["partition_index"]][node] = p["partition_size"]
    return sizes


def replicas_in_step(cluster: ClusterProcesses, topic: str, partitions: Iterable[int], replicas: int,
                     require_data: bool = True) -> bool:
    """Whether each partition has ``replicas`` live replicas of the same size (non-empty unless
    ``require_data`` is false): every follower holds the leader's log (followers copy the leader's
    batches byte for byte)."""
    return all(len(by_node) == replicas and len(set(by_node.values())) == 1
               and (min(by_node.values()) > 0 or not require_data)
               for by_node in replica_sizes(cluster, topic, partitions).values())


def wait_through_faults(predicate: Callable[[], object], timeout: float, what: str,
                        interval: float = 0.2) -> None:
    """Poll ``predicate`` until it is truthy; AssertionError naming ``what`` after ``timeout`` s. An OSError
    (a killed broker's socket) or KeyError (a partition or node not in the answer yet) counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, KeyError):
            pass
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
