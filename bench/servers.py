"""The two brokers under comparison, started with equivalent settings, plus the probes the
comparison needs: start-up time to the first answered request, resident memory, CPU time.

- ``KafkaTarget``: a real Apache Kafka 4.4.0 (tools/kafka_dist.KafkaServer: KRaft, one node acting as
  broker and controller, 1 GiB heap with G1 as kafka-server-start.sh sets it). Its log dir is
  formatted *before* the clock starts: formatting is a one-time install step, like Odradek's
  ``mkdir``, not part of starting.
- ``OdradekTarget``: ``python -m odradek.broker.main --override ...`` with the same listener, partitions,
  offsets-topic and rebalance-delay settings; everything else (network/IO threads, flush policy,
  segment size) is Kafka's default in both.

Start-up is measured identically for both: the clock starts just before the process is spawned and
stops when an ApiVersions v0 request on a fresh TCP connection gets a well-formed answer with error
code 0 (an accepted connection alone is not enough: Kafka binds its port before it serves).

Memory is the resident set (VmRSS from /proc/<pid>/status) of the server process; CPU time is
utime+stime from /proc/<pid>/stat. Both are Linux-only, as is the whole harness.

Who may call it: the harness's main thread; ``RssSampler`` runs its own daemon thread that only
reads /proc.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.kafka_dist import KafkaServer, free_port  # noqa: E402

# Settings both brokers get (the rest are Kafka's defaults, which Odradek shares).
COMMON_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    # A deleted topic's files go 1 s after the delete, not Kafka's default 60 s, so the 1.2 GB of a
    # saturate case are gone before the next case starts (compare.delete_topic waits for that)
    # instead of being unlinked in the middle of another broker's latency run.
    "file.delete.delay.ms": "1000",
}

# ApiVersions v0: request header v1 (api key 18, version 0, correlation id 7, client id "probe"), empty body.
_PROBE_BODY = struct.pack(">hhih", 18, 0, 7, 5) + b"probe"
_API_VERSIONS_V0 = struct.pack(">i", len(_PROBE_BODY)) + _PROBE_BODY


def answers_api_versions(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when the broker answers ApiVersions v0 with correlation id 7 and error code 0."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(_API_VERSIONS_V0)
            head = b""
            while len(head) < 10:
                chunk = s.recv(10 - len(head))
                if not chunk:
                    return False
                head += chunk
            _size, correlation_id, error_code = struct.unpack(">iih", head)
            return correlation_id == 7 and error_code == 0
    except OSError:
        return False


def wait_until_serving(host: str, port: int, proc: subprocess.Popen | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} while starting")
        if answers_api_versions(host, port, timeout=0.25):
            return
        time.sleep(0.005)
    raise RuntimeError(f"server on {host}:{port} did not answer ApiVersions within {timeout}s")


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of the process (all threads), in seconds; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all threads), in seconds."""
    return sum(cpu_times(pid))


class Target:
    """Common interface: ``start()`` returns start-up seconds; ``stop()``; ``pid``; ``bootstrap``."""

    name = "?"
    host = "127.0.0.1"
    port = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def start(self) -> float:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def kernel_cpu(self) -> float:
        """The kernel's share of ``cpu()`` (stime): socket and page-cache work done for the broker."""
        return cpu_times(self.pid)[1]


class KafkaTarget(Target):
    name = "kafka"

    def __init__(self, data_dir: Path, heap: str = "1g") -> None:
        self.data_dir = Path(data_dir)
        self.heap = heap
        self.server: KafkaServer | None = None

    @property
    def pid(self) -> int:
        assert self.server is not None and self.server.proc is not None
        return self.server.proc.pid

    def command_line(self) -> str:
        return "python -m tools.kafka_dist start (kafka.Kafka server.properties, -Xmx1g -Xms1g -XX:+UseG1GC)"

    def start(self) -> float:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.server = KafkaServer(self.data_dir, overrides=dict(COMMON_SETTINGS), heap=self.heap)
        self.port = self.server.port
        from tools.kafka_dist import classpath

        cp = classpath("kafka")
        # Writing the config and formatting are install steps; the clock starts at the launch.
        self.server._write_config()
        self.server.format(cp)
        errors: list[BaseException] = []

        def launch() -> None:
            try:
                assert self.server is not None
                self.server.start(timeout=180)
            except BaseException as exc:  # reported by the waiting thread
                errors.append(exc)

        t0 = time.monotonic()
        thread = threading.Thread(target=launch, daemon=True)
        thread.start()
        deadline = time.monotonic() + 180
        while not answers_api_versions(self.host, self.port, timeout=0.25):
            if errors:
                raise RuntimeError(f"kafka failed to start: {errors[0]}")
            if time.monotonic() > deadline:
                raise RuntimeError("kafka did not answer ApiVersions within 180 s")
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        thread.join(180)
        if errors:
            raise RuntimeError(f"kafka failed to start: {errors[0]}")
        return elapsed

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class OdradekTarget(Target):
    name = "odradek"

    def __init__(self, data_dir: Path, extra: dict[str, str] | None = None, repo: Path = REPO,
                 name: str = "odradek") -> None:
        self.name = name  # "baseline" for the checkout a change is measured against
        self.data_dir = Path(data_dir)
        self.extra = dict(extra or {})
        self.repo = Path(repo)  # another checkout (e.g. from `git archive`) for before/after comparisons
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def overrides(self) -> dict[str, str]:
        return {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir / "logs"),
            "node.id": "1",
            **COMMON_SETTINGS,
            **self.extra,
        }

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "odradek.broker.main", "--log-level", "WARNING"]
        for k, v in self.overrides().items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def command_line(self) -> str:
        return " ".join(["python", *self.command()[1:]]).replace(str(self.data_dir), "<data>")

    def start(self) -> float:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.port = free_port(self.host)
        env = dict(os.environ)
        env.pop("KAFKA_LOG_DIRS", None)
        env["PYTHONPATH"] = str(self.repo) + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(self.data_dir / "broker.log", "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command(), cwd=self.repo, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        try:
            wait_until_serving(self.host, self.port, self.proc, timeout=60)
        except RuntimeError:
            self.stop()
            raise RuntimeError("odradek did not start:\n" + self.log_tail()) from None
        return time.monotonic() - t0

    def log_tail(self) -> str:
        try:
            return (self.data_dir / "broker.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class RssSampler:
    """Samples the resident set of some pids every ``interval`` seconds; ``peak(pid)`` since ``reset``."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.pids: set[int] = set()
        self._peak: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._thread.start()

    def watch(self, pid: int) -> None:
        with self._lock:
            self.pids.add(pid)
            self._peak[pid] = 0

    def reset(self) -> None:
        with self._lock:
            self._peak = {pid: 0 for pid in self.pids}

    def peak(self, pid: int) -> int:
        with self._lock:
            return self._peak.get(pid, 0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                pids = list(self.pids)
            for pid in pids:
                value = rss_bytes(pid)
                with self._lock:
                    if value > self._peak.get(pid, 0):
                        self._peak[pid] = value

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
