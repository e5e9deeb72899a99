"""Start a real odradek daemon in a subprocess for tests, and stop it afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import free_port, main_module

REPO = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """One broker: ``start()``, ``stop()`` (SIGTERM, graceful), ``kill()`` (SIGKILL), ``restart()``."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict[str, str] | None = None,
                 host: str = "127.0.0.1", package_root: Path = REPO, args: list[str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        # The source tree the daemon runs from: this checkout, or an older release's
        # (tests/support/old_release.py) for the upgrade tests.
        self.package_root = Path(package_root)
        self.host = host
        self.port = port or free_port(host)
        self.overrides = {
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": str(self.data_dir / "logs"),
            "node.id": "1",
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "5",
        }
        self.overrides.update(overrides or {})
        self.args = list(args or [])  # more command-line arguments (e.g. --log-config)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", main_module(self.package_root), *self.args]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def spawn(self) -> subprocess.Popen:
        """Launch the daemon without waiting for it to accept connections."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.pop("KAFKA_LOG_DIRS", None)
        env["PYTHONPATH"] = str(self.package_root) + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=self.package_root, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        return self.proc

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"broker did not accept connections within {timeout}s:\n{self.log_text()}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"broker did not stop on SIGTERM:\n{self.log_text()}") from None
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
