"""File descriptors of the daemon (issue 17, defect 2): about one per partition, and the limit raised.

Before the fix each segment held five descriptors, and the broker kept the soft RLIMIT_NOFILE it
inherited: a few hundred partitions under a 1024 soft limit, or 4,000 under a 20,000 one, ran the
process out, took the log dir offline, and the next start failed with "Too many open files".
The JVM raises the soft limit to the hard one for Kafka; the broker now does the same at start-up.

The brokers here keep their logs on /dev/shm when there is one: creating a partition costs a few
fsyncs, which take milliseconds each on this project's VM disk, and these tests count
descriptors, not durability.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_data_path_wire import batch, create, fetch, produce
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

# Descriptors an idle broker holds besides its partitions' logs (about 30 here: listeners,
# epoll, the metadata log, pipes), with room for connections and transient opens.
OVERHEAD = 100


class LimitedBroker(BrokerProcess):
    """A broker started with RLIMIT_NOFILE = ``nofile`` (soft, hard), set before it execs."""

    def __init__(self, data_dir: Path, nofile: tuple[int, int] | None = None, **kwargs) -> None:
        super().__init__(data_dir, **kwargs)
        self.nofile = nofile

    def command(self) -> list[str]:
        cmd = super().command()
        if self.nofile is None:
            return cmd
        soft, hard = self.nofile
        shim = ("import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
                "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
        return [sys.executable, "-c", shim, *cmd[1:]]

    def open_fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def nofile_limits(self) -> tuple[int, int]:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/limits") as limits:
            for line in limits:
                if line.startswith("Max open files"):
                    soft, hard = line.split()[3:5]
                    return int(soft), int(hard)
        raise AssertionError("no open files limit in /proc/<pid>/limits")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="odradek-fds-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def wait_for_logs(data_dir: Path, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Until every partition of ``topic`` has its first segment (logs are created after CreateTopics answers)."""
    deadline = time.monotonic() + timeout
    logs = data_dir / "logs"
    while True:
        count = sum(1 for p in logs.iterdir()
                    if p.name.startswith(topic + "-") and (p / "00000000000000000000.log").exists())
        if count >= partitions:
            return
        assert time.monotonic() < deadline, f"only {count} of {partitions} logs of {topic} created"
        time.sleep(0.1)


def metadata_partitions(c: WireClient, topic: str) -> int:
    resp = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    assert resp["topics"][0]["error_code"] == 0, resp
    return len(resp["topics"][0]["partitions"])


def test_many_partitions_and_rolled_segments_hold_about_one_descriptor_each(data_dir):
    partitions, rolls = 2000, 200
    broker = LimitedBroker(data_dir).start()
    try:
        idle = broker.open_fds()
        with WireClient(broker.host, broker.port, timeout=60) as c:
            create(c, "many", partitions)
            # segment.ms = 1 and record timestamps 10 ms apart: every batch rolls a segment.
            create(c, "rolling", 1, {"segment.ms": "1"})
            for i in range(rolls):
                resp = produce(c, "rolling", batch([b"v%d" % i], [1_700_000_000_000 + 10 * i]))
                assert resp["error_code"] == 0, resp
            wait_for_logs(data_dir, "many", partitions)
            segments = partitions + rolls
            held = broker.open_fds() - idle
            assert held <= segments + OVERHEAD, f"{held} descriptors for {segments} segments"
            assert produce(c, "many", batch([b"last"]), partition=partitions - 1)["error_code"] == 0

        broker.stop()
        broker.start(timeout=60)
        with WireClient(broker.host, broker.port, timeout=60) as c:
            assert metadata_partitions(c, "many") == partitions
            held = broker.open_fds() - idle
            assert held <= segments + OVERHEAD, f"{held} descriptors after restart for {segments} segments"
            # Old segments' indexes open lazily: reading the first rolled segment still works.
            part = fetch(c, "rolling", 0)["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["records"], part
            part = fetch(c, "many", 0, partition=partitions - 1)["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["high_watermark"] == 1, part
    finally:
        broker.kill()


def test_broker_raises_the_soft_open_files_limit_to_the_hard_one_and_logs_both(data_dir):
    broker = LimitedBroker(data_dir, nofile=(256, 4096)).start()
    try:
        assert broker.nofile_limits() == (4096, 4096)
        assert "Open files limit (RLIMIT_NOFILE): soft 4096 (raised from 256), hard 4096" in broker.log_text()
        # 400 partitions need more descriptors than the inherited soft limit allowed.
        with WireClient(broker.host, broker.port, timeout=60) as c:
            create(c, "beyond-soft", 400)
            wait_for_logs(data_dir, "beyond-soft", 400)
            assert produce(c, "beyond-soft", batch([b"x"]), partition=399)["error_code"] == 0
    finally:
        broker.kill()


def test_partitions_beyond_a_low_hard_limit_fail_without_wedging_and_a_higher_limit_restarts(data_dir):
    broker = LimitedBroker(data_dir, nofile=(300, 300)).start()
    try:
        with WireClient(broker.host, broker.port, timeout=30) as c:
            create(c, "small", 1)
            assert produce(c, "small", batch([b"kept"]))["error_code"] == 0
            # 600 logs cannot fit in 300 descriptors: the broker stays up and says so.
            resp = c.request(19, 7, {"topics": [{"name": "many", "num_partitions": 600, "replication_factor": 1}],
                                     "timeout_ms": 10000})
            # Logs that cannot be created fail the request (never a success for work not done).
            assert resp["topics"][0]["error_code"] == 56, resp  # KAFKA_STORAGE_ERROR
            assert "Too many open files" in resp["topics"][0]["error_message"], resp
            deadline = time.monotonic() + 30
            while "Too many open files" not in broker.log_text():
                assert time.monotonic() < deadline, broker.log_text()
                time.sleep(0.1)
            assert broker.alive()
            assert metadata_partitions(c, "many") == 600  # still answering
        broker.stop()  # raises if SIGTERM does not stop it

        # The same data under a higher hard limit (the soft one still 300): the broker raises the
        # soft limit and opens every partition with about one descriptor each.
        broker.nofile = (300, 4096)
        broker.start(timeout=60)
        assert broker.nofile_limits() == (4096, 4096)
        wait_for_logs(data_dir, "many", 600)
        with WireClient(broker.host, broker.port, timeout=30) as c:
            assert produce(c, "small", batch([b"after"]))["base_offset"] == 1  # nothing lost
            assert produce(c, "many", batch([b"x"]), partition=599)["error_code"] == 0
        assert broker.open_fds() <= 601 + OVERHEAD
    finally:
        broker.kill()


def test_ten_thousand_topics_are_served_with_about_one_descriptor_each_and_survive_a_restart(data_dir):
    topics, per_request = 10_000, 1_000
    broker = LimitedBroker(data_dir).start()
    try:
        idle = broker.open_fds()
        with WireClient(broker.host, broker.port, timeout=120) as c:
            for first in range(0, topics, per_request):
                resp = c.request(19, 7, {"topics": [{"name": f"t{i:05d}", "num_partitions": 1,
                                                     "replication_factor": 1}
                                                    for i in range(first, first + per_request)],
                                         "timeout_ms": 60000})
                assert all(t["error_code"] == 0 for t in resp["topics"]), resp["topics"][:3]
            held = broker.open_fds() - idle
            assert held <= topics + OVERHEAD, f"{held} descriptors for {topics} single-partition topics"
            # Another client is still served promptly with every topic in place.
            t0 = time.monotonic()
            assert produce(c, "t09999", batch([b"last"]))["error_code"] == 0
            part = fetch(c, "t09999", 0)["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["high_watermark"] == 1, part
            assert time.monotonic() - t0 < 5.0
            everything = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
            assert len([t for t in everything["topics"] if t["name"].startswith("t")]) == topics
        broker.stop()
        broker.start(timeout=120)
        with WireClient(broker.host, broker.port, timeout=120) as c:
            part = fetch(c, "t09999", 0)["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["high_watermark"] == 1, part  # nothing lost
            assert broker.open_fds() - idle <= topics + OVERHEAD
    finally:
        broker.kill()
