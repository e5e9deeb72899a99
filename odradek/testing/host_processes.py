"""A cluster that is one ``odradek --processes N`` deployment, for tests (issue 31, item 1).

``HostProcesses`` runs ``python -m odradek.broker.main --processes N`` as an operator runs it: one
subprocess, the supervisor (odradek.broker.launcher.host_supervisor), which starts N brokers on
consecutive loopback ports and serves their metadata store itself, so no etcd is needed. What the
``odradek_host_cluster`` pytest fixture (odradek.testing.pytest_plugin) gives: ``bootstrap`` (every
node's host:port), ``node_ids``, ``child_pids()`` (node id -> pid of its newest start, from the
supervisor's lines), ``kill(node_id)`` (SIGKILL one broker: the supervisor restarts it),
``wait_serving_again(node_id)``, ``stop()`` (SIGTERM to the supervisor: every broker's controlled
shutdown; returns its exit code), ``logs()`` (the supervisor's output, each broker's lines prefixed
``[node <id>]``).

Unlike ``ClusterProcesses`` (etcd plus brokers the test starts and stops one by one), the brokers here
share one supervisor's life: a test that kills one sees it restarted, not gone.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, wait_until
from odradek.testing.cluster import TEST_OVERRIDES

# A killed broker's registration lapses after one lease: 3 s keeps a test's restart short (the
# default is Kafka's 18 s session).
HOST_TEST_OVERRIDES: Mapping[str, str] = {**TEST_OVERRIDES, "controller.lease.ttl.ms": "3000"}
SERVING_LINE = "bootstrap servers:"


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A base port with ``count`` free consecutive ports from it (the supervisor gives node i base + i)."""
    for _ in range(200):
        base = random.randrange(20000, 30000 - count)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no run of {count} free ports on {host}")


class HostProcesses:
    """``odradek --processes processes`` on 127.0.0.1 ports from a free base, data in ``data_dir/logs``."""

    def __init__(self, data_dir: Path, processes: int = 3, overrides: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.processes = processes
        self.host = host
        self.base_port = free_port_run(processes, host)
        self.log_path = self.data_dir / "odradek.log"
        settings = {**HOST_TEST_OVERRIDES, **(overrides or {}),
                    "log.dirs": str(self.data_dir / "logs"), "listeners": f"PLAINTEXT://{host}:{self.base_port}"}
        self.argv = [sys.executable, "-m", "odradek.broker.main", "--processes", str(processes)]
        for key, value in settings.items():
            self.argv += ["--override", f"{key}={value}"]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def node_ids(self) -> list[int]:
        """1..N: the supervisor numbers its brokers from ``node.id`` (unset: 1)."""
        return list(range(1, self.processes + 1))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.base_port + i}" for i in range(self.processes))

    def start(self, timeout: float = 90.0) -> HostProcesses:
        """The supervisor; returns once it logs that every broker answers (RuntimeError with its output if not)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as out:
            # KAFKA_* variables would configure the brokers (as in the Docker image): not the caller's.
            self.proc = subprocess.Popen(self.argv, cwd=PACKAGE_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")})
        proc = self.proc
        wait_until(lambda: proc.poll() is not None or SERVING_LINE in self.logs(), timeout)
        if proc.poll() is not None or SERVING_LINE not in self.logs():
            self.stop()
            raise RuntimeError(f"odradek --processes {self.processes} did not start within {timeout} s "
                               f"(exit code {proc.returncode}):\n{self.logs()[-6000:]}")
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def child_pids(self) -> dict[int, int]:
        return {int(n): int(p) for n, p in re.findall(r"node (\d+) starting \(pid (\d+)\)", self.logs())}

    def kill(self, node_id: int) -> int:
        """SIGKILL broker ``node_id``; returns the killed pid (the supervisor starts a new one)."""
        pid = self.child_pids()[node_id]
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_serving_again(self, node_id: int, timeout: float = 60.0) -> bool:
        return wait_until(lambda: f"node {node_id} serving again" in self.logs(), timeout)

    def stop(self, timeout: float = 90.0) -> int | None:
        """SIGTERM to the supervisor (every broker stops cleanly, then the store); SIGKILL after ``timeout``,
        and any broker left behind is killed. Returns the supervisor's exit code (0: every broker exited 0)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.child_pids().values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        return self.proc.returncode

    def __enter__(self) -> HostProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<HostProcesses {self.bootstrap} data_dir={self.data_dir}>"


def _alive(pid: int) -> bool:
    """Running, not a zombie (a killed broker the supervisor has not reaped yet is not alive)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

