"""A real Odradek broker for other projects' tests: ``with running_broker() as b: ... b.bootstrap``.

The broker is a subprocess (``python -m odradek.broker.main``, the same interpreter and the same broker
package as the caller) with its data in a temporary directory. A subprocess rather than the asyncio
server on a background thread: it starts in about 0.4 s (measured; in-process saves ~0.07 s of
that), and it shares nothing with the test process -- no raised RLIMIT_NOFILE, no logging set-up,
no Prometheus registry, no accept task left pending at shutdown (an in-process prototype did) --
and ``stop()`` is the same graceful SIGTERM shutdown a deployment gets.

Topics are created with one raw CreateTopics request framed by the project's own codecs, so this
module needs no Kafka client library (the runtime package depends on none).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import BrokerNode, free_port, kafka_request
from odradek.testing.faults import Faults, Journal

CREATE_TOPICS_VERSION = 7  # flexible; Kafka 3.x+ brokers and clients all speak it


class BrokerStartError(RuntimeError):
    """The broker exited or did not accept connections in time; the message ends with its log."""


class RunningBroker(BrokerNode):
    """One broker process: ``bootstrap``, ``host``, ``port``, ``data_dir``, ``create_topic()``, ``stop()``.

    Process handling (spawn, SIGTERM then SIGKILL, log tail) is the launcher's ``BrokerNode``; this
    class adds the test defaults, the start-up timing and the topic helper."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int | None = None,
                 overrides: Mapping[str, str] | None = None, faults: bool = False) -> None:
        data_dir = Path(data_dir)
        port = port or free_port(host)
        overrides = dict(overrides or {})
        # Fault injection (broker/faults/injection.py) is reached through its loopback endpoint on a port
        # chosen here, so ``faults`` and ``journal`` know where it is.
        if faults or overrides.get("odradek.testing.faults.enable", "").lower() == "true":
            overrides["odradek.testing.faults.enable"] = "true"
            overrides.setdefault("odradek.testing.faults.port", str(free_port("127.0.0.1")))
        faults_port = int(overrides.get("odradek.testing.faults.port", "-1"))
        enabled = overrides.get("odradek.testing.faults.enable") == "true" and faults_port >= 0
        faults_host = overrides.get("odradek.testing.faults.host", "127.0.0.1")
        faults_url = f"http://{faults_host}:{faults_port}" if enabled else None
        # ``faults.fail_next(...)``, ``faults.delay(...)``, ``journal.entries(...)``: they raise
        # FaultsDisabledError unless the broker was started with ``faults=True``.
        self.faults = Faults(faults_url)
        self.journal = Journal(faults_url)
        # Test-friendly defaults (like tests/support/broker_process.py): one partition per
        # auto-created topic, no initial rebalance delay, a small __consumer_offsets.
        defaults = {
            "log.dirs": str(data_dir / "logs"),
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "1",
        }
        super().__init__(1, data_dir, port, host, {**defaults, **(overrides or {})},
                         log_level=os.environ.get("ODRADEK_LOG_LEVEL", "INFO"))
        self.log_path = self.data_dir / "broker.log"
        self.start_seconds: float | None = None

    def start(self, timeout: float = 20.0) -> RunningBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        proc = self.spawn(cwd=self.data_dir)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._close_log()
                raise BrokerStartError(f"Odradek exited with {proc.returncode}:\n{self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    self.start_seconds = time.monotonic() - t0
                    return self
            except OSError:
                time.sleep(0.01)
        self.kill()
        raise BrokerStartError(f"Odradek did not accept connections within {timeout}s:\n{self.log_text()}")

    def stop(self, timeout: float = 20.0) -> int:
        """Graceful shutdown (SIGTERM, like a deployment); returns the exit code (0 = clean)."""
        code = super().stop(timeout)
        return 0 if code is None else code

    def create_topic(self, name: str | None = None, partitions: int = 1,
                     configs: Mapping[str, str] | None = None, timeout: float = 10.0) -> str:
        """Create a topic (a fresh unique name unless given) and return its name; raises on any error."""
        name = name or f"test-{uuid.uuid4().hex[:12]}"
        body = {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout_ms": int(timeout * 1000),
            "validate_only": False,
        }
        response = kafka_request(self.host, self.port, "CreateTopics", CREATE_TOPICS_VERSION, body, timeout)
        result = response["topics"][0]
        if result["error_code"] != 0:
            raise RuntimeError(f"CreateTopics {name!r} failed: error {result['error_code']} "
                               f"{result.get('error_message') or ''}".rstrip())
        return name

    def __enter__(self) -> RunningBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<RunningBroker {self.bootstrap} data_dir={self.data_dir}>"


@contextmanager
def running_broker(data_dir: str | Path | None = None, overrides: Mapping[str, str] | None = None,
                   host: str = "127.0.0.1", port: int | None = None, timeout: float = 20.0,
                   faults: bool = False) -> Iterator[RunningBroker]:
    """Start a broker (data in a new temp dir unless ``data_dir``), yield it, stop it, remove the temp dir.

    ``overrides`` are server.properties keys, e.g. ``{"auto.create.topics.enable": "false"}``.
    ``faults=True`` turns on fault injection and the request journal: ``b.faults``, ``b.journal``.
    """
    own_dir = data_dir is None
    path = Path(tempfile.mkdtemp(prefix="odradek-")) if data_dir is None else Path(data_dir)
    b = RunningBroker(path, host=host, port=port, overrides=overrides, faults=faults)
    try:
        b.start(timeout)
        yield b
    finally:
        b.stop()
        if own_dir:
            shutil.rmtree(path, ignore_errors=True)


def unique_topic_name(hint: str = "test") -> str:
    """A topic name from ``hint`` (e.g. a test's name) that is legal in Kafka and unique."""
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-.")[:200] or "test"
    return f"{stem}-{uuid.uuid4().hex[:8]}"
