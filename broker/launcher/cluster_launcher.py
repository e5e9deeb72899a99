"""``odradek cluster``: etcd plus N brokers on 127.0.0.1, one command, for trying a cluster locally.

It owns the processes of a local cluster: one etcd member (the metadata store and controller lease,
``metadata.store=etcd://...``) and N ``python -m odradek.broker.main`` processes, each with its own
``node.id``, port and data directory under ``--data-dir`` (``<data>/etcd``, ``<data>/broker-<id>``,
their logs beside them as ``*.log``). It prints the bootstrap string once every broker answers, reports
a child that dies, and on SIGINT/SIGTERM stops the brokers (SIGTERM: their controlled shutdown still
has etcd) and then etcd. The same classes run the test clusters (tests/support/cluster.py).

Children run in their own process group, so a Ctrl-C in the terminal reaches only the launcher, which
then stops them in order; on Linux they also get SIGTERM if the launcher itself is killed.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import odradek
from odradek.broker.launcher.etcd_binary import describe_etcd_binary, find_etcd_binary

# The directory holding the odradek package: the children import the same code as this process. Not
# resolved: in a checkout odradek/broker is a link to ../broker, and the root is odradek/'s parent.
PACKAGE_ROOT = str(Path(odradek.__file__).parent.parent)


def main_module(package_root: str | Path) -> str:
    """The broker's entry module under ``package_root``: ``odradek.broker.main``, or ``broker.main`` in a
    release from before the odradek namespace (0.2.0 and older; the upgrade tests run them)."""
    return "odradek.broker.main" if (Path(package_root) / "odradek" / "broker").exists() else "broker.main"


# Ports handed out by this process: a caller may ask for several before binding any of them.
_handed_out: set[int] = set()
# Below the kernel's ephemeral range, so another process's outgoing connection (an etcd client's
# gRPC channel, a Kafka client) cannot take a port between our check and the broker's bind.
_LOWEST_PORT = 20000


def _worker_stripe(low: int, top: int) -> tuple[int, int]:
    """The share of [low, top) for this pytest-xdist worker (PYTEST_XDIST_WORKER=gwN of
    PYTEST_XDIST_WORKER_COUNT), inherited by the processes it starts: parallel test workers check
    and hand out ports independently, so each draws from its own stripe and none takes another's."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return low, top
    index, n = int(worker[2:]), int(count)
    width = (top - low) // n
    return low + index * width, low + (index + 1) * width


def _ephemeral_range_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, from below the ephemeral range where the kernel allows it.

    Binding port 0 would hand out an ephemeral port, which the kernel may give to any process's
    next outgoing connection before the caller binds it (seen in CI: "Address already in use" when
    a broker started next to etcd clients). Below the range only a listener can take it.
    """
    low, top = _LOWEST_PORT, _ephemeral_range_start()
    if top > low + 1000:
        low, top = _worker_stripe(low, top)
    rng = random.SystemRandom()
    for _ in range(200 if top > low + 100 else 0):
        port = rng.randrange(low, top)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # no room below the range (or no /proc): the kernel's choice
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _die_with_parent() -> None:
    """In the child before exec: its own process group, and SIGTERM when the launcher dies (Linux)."""
    os.setpgid(0, 0)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process group alone
        pass


class ManagedProcess:
    """One child process with its output in a log file: spawn, signals, stop (TERM then KILL), log tail."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None
        self.exit_reported = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def spawn(self, cwd: str | Path | None = None) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=cwd, env=self.environment(), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        self.exit_reported = False
        return self.proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def send_signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a paused process is resumed first, or it could not act on it), SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def log_text(self, limit: int = 20000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class EtcdProcess(ManagedProcess):
    """One etcd member on ``host``: its client URL ``endpoint`` and its own peer port; data in ``data_dir``.

    ``fast=True`` (tests) sets a 10 ms heartbeat and 50 ms election timeout: a single member elects
    itself at once and etcd's minimum lease TTL drops from 2 s to 1 s.
    """

    def __init__(self, binary: str, data_dir: Path, client_port: int | None = None, peer_port: int | None = None,
                 host: str = "127.0.0.1", fast: bool = False, name: str = "odradek-etcd") -> None:
        super().__init__("etcd", Path(data_dir).with_name(Path(data_dir).name + ".log"))
        self.binary = binary
        self.data_dir = Path(data_dir)
        self.host = host
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self.fast = fast
        self.member_name = name

    @property
    def endpoint(self) -> str:
        """host:port of the client API (what ``metadata.store=etcd://...`` names)."""
        return f"{self.host}:{self.client_port}"

    def command(self) -> list[str]:
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        cmd = [
            self.binary,
            "--name", self.member_name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.member_name}={peer}",
            "--log-level", "warn",
        ]
        if self.fast:
            cmd += ["--heartbeat-interval", "10", "--election-timeout", "50"]
        return cmd

    def start(self, timeout: float = 15.0) -> EtcdProcess:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self.log_text(2000)}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy within {timeout} s: {self.log_text(2000)}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as response:
                return b'"health":"true"' in response.read()
        except (OSError, urllib.error.URLError):
            return False

    def restart(self) -> EtcdProcess:
        self.stop(10)
        return self.start()


class BrokerNode(ManagedProcess):
    """One broker process (``python -m odradek.broker.main --override ...``) listening on ``host:port``."""

    def __init__(self, node_id: int, data_dir: Path, port: int, host: str = "127.0.0.1",
                 overrides: Mapping[str, str] | None = None, log_level: str = "INFO") -> None:
        super().__init__(f"broker {node_id}", Path(data_dir).with_name(Path(data_dir).name + ".log"))
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.log_level = log_level
        # The source tree the process runs from (its broker/ package): this one, or another release's
        # (the upgrade tests start a node from the previous release, then from this one).
        self.package_root = PACKAGE_ROOT
        self.overrides: dict[str, str] = {
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://{host}:{port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "log.dirs": str(self.data_dir),
            "odradek.metrics.port": "-1",
        }
        self.overrides.update(overrides or {})

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", main_module(self.package_root), "--log-level", self.log_level]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def environment(self) -> dict[str, str]:
        # KAFKA_* variables would override the per-node settings (odradek.broker.config.broker_config reads them like
        # Kafka's image does); the child imports the broker package under package_root.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        env["PYTHONPATH"] = self.package_root + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def start(self, timeout: float = 30.0) -> BrokerNode:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spawn(cwd=self.package_root)
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Until the broker answers ApiVersions; raises with its log tail if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.returncode()}:\n{self.log_text(4000)}")
            try:
                kafka_request(self.host, self.port, "ApiVersions", 0, {}, timeout=1.0)
                return
            except (OSError, ValueError):
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer on {self.bootstrap} within {timeout} s:\n"
                           f"{self.log_text(4000)}")

    def metadata(self, timeout: float = 5.0) -> dict[str, Any]:
        """A Metadata v12 response (all topics) from this broker."""
        return kafka_request(self.host, self.port, "Metadata", 12, {"topics": None}, timeout)


def kafka_request(host: str, port: int, api: str, version: int, body: Mapping[str, Any],
                  timeout: float = 5.0) -> dict[str, Any]:
    """One request/response on a fresh connection, framed with the project's codecs."""
    from odradek.protocol.codec import codec, is_flexible
    from odradek.protocol.headers import encode_request_header
    from odradek.protocol.schema_data import MESSAGES

    api_key = MESSAGES[api + "Request"]["api_key"]
    flexible = is_flexible(api + "Request", version)

    frame = bytearray()
    encode_request_header(frame, api_key, version, 1, "odradek-cluster", flexible)
    codec(api + "Request", version).encode_into(dict(body), frame)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(frame)) + bytes(frame))
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    # Response header: correlation id, plus empty tagged fields when flexible (ApiVersions: never).
    offset = 5 if flexible and api != "ApiVersions" else 4
    response, _ = codec(api + "Response", version).decode(data, offset)
    return dict(response)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def cluster_mode_available() -> bool:
    """Whether this Odradek knows ``metadata.store`` (cluster mode); without it each broker is a single node."""
    from odradek.broker.config.broker_config import CONFIG_DEFS

    return "metadata.store" in CONFIG_DEFS


class LocalCluster:
    """etcd plus ``brokers`` broker processes on ``host``, data under ``data_dir``."""

    def __init__(self, data_dir: Path, brokers: int = 3, base_port: int | None = 9092,
                 etcd_port: int | None = 2379, host: str = "127.0.0.1", etcd_binary: str | None = None,
                 overrides: Mapping[str, str] | None = None, fast_etcd: bool = False,
                 log_level: str = "INFO", node_overrides: Mapping[int, Mapping[str, str]] | None = None) -> None:
        """``base_port=None`` / ``etcd_port=None``: free ports (tests). ``node_overrides``: node id ->
        settings of that broker alone (``broker.rack``, say), over ``overrides``."""
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        if etcd_binary is None:
            etcd_binary, why = find_etcd_binary()
            if etcd_binary is None:
                raise RuntimeError(why)
        self.etcd = EtcdProcess(etcd_binary, self.data_dir / "etcd", client_port=etcd_port,
                                peer_port=etcd_port + 1 if etcd_port else None, host=host, fast=fast_etcd)
        common = {"metadata.store": f"etcd://{self.etcd.endpoint}"}
        if brokers < 3:
            # A cluster waits for offsets.topic.replication.factor (default 3) live brokers before
            # it makes __consumer_offsets, as Kafka: a smaller one would never serve groups. The same
            # for __transaction_state and transactional producers.
            common["offsets.topic.replication.factor"] = str(brokers)
            common["transaction.state.log.replication.factor"] = str(brokers)
        common.update(overrides or {})
        self.brokers: dict[int, BrokerNode] = {}
        for node_id in range(1, brokers + 1):
            port = base_port + node_id - 1 if base_port else free_port(host)
            own = {**common, **(node_overrides or {}).get(node_id, {})}
            self.brokers[node_id] = BrokerNode(node_id, self.data_dir / f"broker-{node_id}", port, host,
                                               own, log_level)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def processes(self) -> list[ManagedProcess]:
        return [self.etcd, *self.brokers.values()]

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """etcd, then every broker at once; returns when all answer (raises, all stopped, if one fails)."""
        try:
            self.etcd.start()
            for node in self.brokers.values():
                node.data_dir.mkdir(parents=True, exist_ok=True)
                node.spawn(cwd=node.package_root)
            for node in self.brokers.values():
                node.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_members(self, timeout: float = 30.0) -> bool:
        """Until Metadata from every live broker lists them all; False when ``timeout`` passes first."""
        expected = {n for n, b in self.brokers.items() if b.alive()}
        return wait_until(lambda: all(
            {b["node_id"] for b in self.brokers[n].metadata()["brokers"]} >= expected for n in expected
        ), timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Brokers first, all at once (SIGTERM; SIGKILL after ``timeout``), then etcd."""
        for node in self.brokers.values():
            if node.alive():
                node.send_signal(signal.SIGCONT)
                node.send_signal(signal.SIGTERM)
        for node in self.brokers.values():
            node.stop(timeout)
        self.etcd.stop(10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` (an OSError/ValueError/KeyError counts as False) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="odradek cluster",
        description="Run etcd plus N Odradek brokers on 127.0.0.1 until Ctrl-C / SIGTERM (a local cluster).")
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--base-port", type=int, default=9092,
                        help="broker N listens on base-port + N - 1 (default 9092: 9092, 9093, 9094)")
    parser.add_argument("--etcd-port", type=int, default=2379,
                        help="etcd's client port; its peer port is the next one (default 2379)")
    parser.add_argument("--data-dir", default="./data/cluster",
                        help="broker N's data in DATA_DIR/broker-N, etcd's in DATA_DIR/etcd, logs beside "
                             "them as *.log (default ./data/cluster)")
    parser.add_argument("--override", action="append", default=[], metavar="key=value",
                        help="a broker property for every broker (repeatable)")
    parser.add_argument("--log-level", default=os.environ.get("ODRADEK_LOG_LEVEL", "INFO"),
                        help="the brokers' log level")
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    for item in args.override:
        if "=" not in item:
            parser.error(f"--override {item!r}: expected key=value")
    return args


def _say(message: str) -> None:
    print(f"[odradek cluster] {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.override)
    try:
        cluster = LocalCluster(Path(args.data_dir), args.brokers, args.base_port, args.etcd_port,
                               overrides=overrides, log_level=args.log_level)
    except RuntimeError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1

    stop_signal: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop_signal.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # Which etcd, since a data dir written by one etcd release may be refused by an older one.
    _say(f"etcd server: {describe_etcd_binary(cluster.etcd.binary)}")
    _say(f"etcd on {cluster.etcd.endpoint} (data {cluster.etcd.data_dir}, log {cluster.etcd.log_path})")
    for node in cluster.brokers.values():
        _say(f"broker {node.node_id} on {node.bootstrap} (data {node.data_dir}, log {node.log_path})")
    try:
        cluster.start()
    except RuntimeError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1
    if cluster_mode_available():
        if not cluster.wait_members(30.0):
            _say("WARNING: the brokers do not all see each other yet (Metadata); see their logs")
    else:
        _say("WARNING: this Odradek has no cluster mode (metadata.store): each broker runs as a single node")
    _say(f"bootstrap servers: {cluster.bootstrap}")
    _say("Ctrl-C (or SIGTERM) stops the brokers, then etcd")

    code = 0
    while not stop_signal:
        for proc in cluster.processes():
            if proc.proc is not None and not proc.alive() and not proc.exit_reported:
                proc.exit_reported = True
                _say(f"{proc.name} (pid {proc.pid}) exited with code {proc.returncode()}; log {proc.log_path}")
                code = 1
        if not cluster.etcd.alive():
            _say("etcd is gone: stopping the brokers")
            break
        if all(not node.alive() for node in cluster.brokers.values()):
            _say("every broker has exited")
            break
        time.sleep(0.2)
    if stop_signal:
        _say(f"{signal.Signals(stop_signal[0]).name}: stopping the brokers, then etcd")
    cluster.stop()
    _say("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
