"""Kafka 4.4's own ``KafkaShareConsumer`` in a JVM, driven from a test: tests/support/java/ShareConsumerRun.java
run with Java's single-file launcher and Kafka's jars on the classpath (a second or two to start).

``ShareConsumer(bootstrap, group, topic, mode, action)`` starts it; ``records`` are the
(partition, offset, delivery count, value) it received so far, in order; ``stop()`` asks it to
commit and close (releasing what it holds), ``kill()`` SIGKILLs it (nothing released by the client:
the broker must see the connection go). Raises tools.kafka_dist.ToolchainUnavailable without Java or
Kafka's jars (callers skip, saying so).
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from tools.kafka_dist import classpath, java_command

SOURCE = Path(__file__).resolve().parent / "java" / "ShareConsumerRun.java"


class Delivery(NamedTuple):
    partition: int
    offset: int
    delivery_count: int
    value: str


class ShareConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str, mode: str = "explicit", action: str = "accept",
                 client_id: str = "share-test") -> None:
        cmd = java_command(str(SOURCE), [bootstrap, group, topic, mode, action, client_id], classpath("kafka"),
                           ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        self.records: list[Delivery] = []
        # action "count": records counted by the client (no line each), the partitions that
        # delivered, and the wall-clock ms of the first and last poll that returned records.
        self.count = 0
        self.partitions: set[int] = set()
        self.first_ms = self.last_ms = 0
        self.errors: list[str] = []
        self.subscribed = threading.Event()
        self.exited = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "R":
                partition, offset, count, value = rest.split(" ", 3)
                self.records.append(Delivery(int(partition), int(offset), int(count), value))
            elif kind == "C":
                total, first, last = (int(f) for f in rest.split())
                self.count, self.first_ms, self.last_ms = total, first, last
            elif kind == "P":
                self.partitions.add(int(rest))
            elif kind == "S":
                self.subscribed.set()
            elif kind == "E":
                self.errors.append(rest)
            elif kind == "X":
                self.exited.set()
        self.exited.set()

    def wait_subscribed(self, timeout: float = 60) -> None:
        if not self.subscribed.wait(timeout):
            raise AssertionError(f"the share consumer did not start: {self.stderr()}")

    def wait_for(self, count: int, timeout: float = 60) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline and not self.exited.is_set():
            time.sleep(0.05)
        return list(self.records)

    def stop(self, timeout: float = 60) -> None:
        """Commit, close (the client releases what it still holds), exit."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        assert not self.errors, self.errors

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.kill()
        self._stderr.close()
