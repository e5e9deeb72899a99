"""Issue 27: a broker answers a fault with Kafka's specific, retriable error, never UNKNOWN_SERVER_ERROR
and never one Kafka would not send for it. Real brokers (etcd-coordinated, odradek.testing.cluster),
real etcd, raw requests; each test names the Kafka code that defines its expectation.

- Producer ids come in blocks from etcd in a cluster (Kafka: from the controller). While no block can
  be had, InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS, idempotent and transactional alike
  (Kafka's RPCProducerIdManager: "Producer ID block is full. Waiting for next block", chosen because
  older clients take REQUEST_TIMED_OUT as fatal); the client retries and gets an id once etcd is back.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    # A lease longer than the etcd pause: no broker is fenced meanwhile, only producer ids stop.
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "30000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def init_producer_id(c: ClusterProcesses, node: int, transactional_id: str | None) -> tuple[int, int]:
    """InitProducerId v4 to broker ``node``: (error code, producer id)."""
    reply = c.request(node, "InitProducerId", 4, {"transactional_id": transactional_id,
                                                  "transaction_timeout_ms": 60000, "producer_id": -1,
                                                  "producer_epoch": -1}, timeout=30.0)
    return int(reply["error_code"]), int(reply["producer_id"])


def test_init_producer_id_while_etcd_is_away_answers_coordinator_load_in_progress(cluster: ClusterProcesses) -> None:
    c = cluster
    # The transactional id's coordinator exists (FindCoordinator creates __transaction_state).
    def found() -> int:
        reply = c.request(1, "FindCoordinator", 4, {"key_type": 1, "coordinator_keys": ["t27"]})
        (coordinator,) = reply["coordinators"]
        return int(coordinator["node_id"]) if coordinator["error_code"] == 0 else -1
    assert c.wait_until(lambda: found() > 0, 30), c.logs()
    coordinator = found()
    other = next(n for n in c.node_ids if n != coordinator)
    # No broker has taken a block of producer ids yet: the first InitProducerId must ask etcd.
    c.etcd.send_signal(signal.SIGSTOP)
    try:
        assert init_producer_id(c, other, None) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
        assert init_producer_id(c, coordinator, "t27") == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    finally:
        c.etcd.send_signal(signal.SIGCONT)
    # What the clients do with it: retry, and get an id once etcd answers again.
    assert c.wait_until(lambda: init_producer_id(c, other, None)[0] == ErrorCode.NONE, 30), c.logs()
    code, pid = init_producer_id(c, coordinator, "t27")
    assert code == ErrorCode.NONE and pid >= 0
