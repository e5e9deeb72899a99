"""``odradek --processes N``: N broker processes on one host as one command (issue 31, item 1), run
as an operator runs it (a subprocess, its stderr read), with real clients.

- clients bootstrapped on the first port see N brokers, each racked by the host's name, and reach
  every partition; produce (acks=all) and consume across the processes;
- a child killed with SIGKILL is restarted by the supervisor, and the producer and consumer go on
  with nothing lost (the topic at the replication factor the default gives);
- SIGTERM stops every child cleanly (each leaves Kafka's clean-shutdown marker) and the supervisor
  exits 0; a second ``odradek --processes`` on the same log dirs is refused (the dir's ``.lock``) and
  changes nothing for the first.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, kafka_request, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _free_run(count: int) -> int:
    """A base port with ``count`` free consecutive ports from it (the children take base + i)."""
    for _ in range(200):
        base = random.randrange(20000, 30000 - count)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


class Deployment:
    """One ``python -m odradek.broker.main --processes N`` subprocess; its output in ``log_path``."""

    def __init__(self, data: Path, processes: int, base_port: int, log_path: Path) -> None:
        self.data, self.processes, self.base_port, self.log_path = data, processes, base_port, log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.broker.main", "--processes", str(processes),
             "--override", f"log.dirs={data}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{base_port}",
             "--override", "controller.lease.ttl.ms=3000"],
            cwd=PACKAGE_ROOT, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self, timeout: float = 90.0) -> None:
        assert wait_until(lambda: self.proc.poll() is not None or "bootstrap servers:" in self.output(), timeout), \
            self.output()[-5000:]
        assert self.proc.poll() is None, self.output()[-5000:]

    def child_pids(self) -> dict[int, int]:
        """node id -> pid of its newest start, from the supervisor's lines."""
        return {int(n): int(p) for n, p in re.findall(r"node (\d+) starting \(pid (\d+)\)", self.output())}

    def stop(self, timeout: float = 90.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    d = Deployment(tmp_path / "data", 3, _free_run(3), tmp_path / "odradek.log")
    try:
        d.wait_serving()
        yield d
    finally:
        d.stop()
        for pid in d.child_pids().values():  # nothing of ours left behind, whatever the test did
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _produce(producer: Producer, topic: str, first: int, count: int, errors: list[str]) -> None:
    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(first, first + count):
        producer.produce(topic, key=str(i % 12).encode(), value=str(i).encode(), on_delivery=report)
        producer.poll(0)


def test_three_processes_serve_as_one_cluster_and_a_killed_child_comes_back(deployment: Deployment) -> None:
    metadata = kafka_request("127.0.0.1", deployment.base_port, "Metadata", 12, {"topics": None})
    brokers = {b["node_id"]: (b["port"], b["rack"]) for b in metadata["brokers"]}
    host = socket.gethostname()
    base = deployment.base_port
    assert brokers == {1: (base, host), 2: (base + 1, host), 3: (base + 2, host)}
    for node_id in (1, 2, 3):
        assert (deployment.data / f"node-{node_id}" / "meta.properties").exists()

    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    admin.create_topics([NewTopic("spread", num_partitions=6)])["spread"].result(30)
    assert wait_until(lambda: len({p.leader for p in admin.list_topics("spread", timeout=5).topics["spread"]
                                   .partitions.values() if p.leader >= 0}) == 3, 30)
    leaders = {pid: p.leader for pid, p in admin.list_topics("spread", timeout=5).topics["spread"].partitions.items()}

    producer = Producer({"bootstrap.servers": deployment.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "delivery.timeout.ms": 120000, "message.timeout.ms": 120000})
    errors: list[str] = []
    _produce(producer, "spread", 0, 600, errors)
    assert producer.flush(60) == 0 and not errors

    victim = leaders[0]
    old_pid = deployment.child_pids()[victim]
    os.kill(old_pid, signal.SIGKILL)
    _produce(producer, "spread", 600, 600, errors)  # partitions the victim led wait for its return
    assert producer.flush(120) == 0, deployment.output()[-5000:]
    assert not errors
    assert wait_until(lambda: deployment.child_pids()[victim] != old_pid, 10)
    assert re.search(rf"node {victim} \(pid {old_pid}\) exited with code -9", deployment.output())
    assert wait_until(lambda: f"node {victim} serving again" in deployment.output(), 60), deployment.output()[-3000:]

    consumer = Consumer({"bootstrap.servers": deployment.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("spread", p, 0) for p in range(6)])
        seen: dict[int, list[int]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 1200 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                partition, value = message.partition(), message.value()
                assert partition is not None and value is not None
                seen.setdefault(partition, []).append(int(value))
    finally:
        consumer.close()
    everything = sorted(v for values in seen.values() for v in values)
    assert everything == list(range(1200))  # nothing lost, nothing twice
    for values in seen.values():
        assert values == sorted(values)  # one key's records in order (one producer, idempotent)

    pids = deployment.child_pids()
    assert deployment.stop() == 0, deployment.output()[-3000:]
    assert not any(_alive(pid) for pid in pids.values())
    for node_id in (1, 2, 3):
        assert (deployment.data / f"node-{node_id}" / ".kafka_cleanshutdown").exists()
    assert "every broker process stopped (exit codes {1: 0, 2: 0, 3: 0})" in deployment.output()


def test_a_second_deployment_on_the_same_log_dirs_is_refused(deployment: Deployment, tmp_path: Path) -> None:
    second = Deployment(deployment.data, 3, _free_run(3), tmp_path / "second.log")
    try:
        assert second.proc.wait(30) == 1
    finally:
        second.stop()
    out = second.output()
    assert f"Failed to acquire lock on file .lock in {deployment.data}: process {deployment.proc.pid}" in out, out
    assert "starting (pid" not in out  # refused before any child or store was started
    # The first deployment goes on serving every node.
    metadata = kafka_request("127.0.0.1", deployment.base_port, "Metadata", 12, {"topics": None})
    assert sorted(b["node_id"] for b in metadata["brokers"]) == [1, 2, 3]
    assert deployment.proc.poll() is None


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def test_a_single_brokers_log_dir_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    # Each child opens only <log dir>/node-<id>: a single broker's topics in the dir itself would not be served.
    from odradek.testing.single_broker import RunningBroker

    single = RunningBroker(tmp_path / "single").start()
    try:
        single.create_topic("kept", partitions=2)
        producer = Producer({"bootstrap.servers": single.bootstrap})
        for i in range(20):
            producer.produce("kept", value=str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0
    finally:
        assert single.stop() == 0
    data = tmp_path / "single" / "logs"
    assert (data / "kept-0").is_dir() and (data / "kept-1").is_dir()
    before = _tree(data)

    refused = Deployment(data, 2, _free_run(2), tmp_path / "refused.log")
    try:
        assert refused.proc.wait(30) == 1
    finally:
        refused.stop()
    out = refused.output()
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1, out
    assert f"log dir {data} holds 2 partition directories of a single broker (kept-0, kept-1)" in errors[0]
    assert "run it without --processes" in errors[0]
    assert "starting (pid" not in out and "metadata store" not in out
    assert _tree(data) == before  # nothing created, moved or written (no node-<id>, no store, no .lock)
