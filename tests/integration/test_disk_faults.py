"""Disk faults on real file systems: a full disk (a small tmpfs) and a disk gone read-only (ext4 on
a loop device with errors=remount-ro, failed through its sysfs trigger — what a real disk error
does, even with files open for writing, where ``mount -o remount,ro`` would be refused as busy).

The behaviour under test is Kafka's (odradek.storage.log_manager, ReplicaManager._on_dir_offline): a log
dir with an I/O error goes offline, its partitions answer KAFKA_STORAGE_ERROR, DescribeLogDirs and
the metrics report it, log creation there fails with KAFKA_STORAGE_ERROR, the broker shuts itself
down with one line when no log dir is left, and a SIGTERM on a read-only disk ends with one ERROR
line, not a traceback. Acknowledged data survives a restart once the disk is healthy again.

Needs root (mount); each test skips with the reason when mounting is not permitted.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, decode_records, encode_batch
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.disks import Disks
from tests.support.wire import WireClient, create_topic

STORAGE_ERROR = ErrorCode.KAFKA_STORAGE_ERROR


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[Disks]:
    d = Disks(tmp_path / "disks")
    try:
        yield d
    finally:
        d.cleanup()


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        b.kill()


def start(brokers: list[BrokerProcess], data_dir: Path, overrides: dict[str, str]) -> BrokerProcess:
    b = BrokerProcess(data_dir, overrides=overrides)
    brokers.append(b)
    return b.start()


def produce(c: WireClient, topic: str, partition: int, value: bytes) -> dict:
    records = encode_batch([Record(timestamp=1, value=value)])
    resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]


def fetch(c: WireClient, topic: str, partition: int) -> dict:
    resp = c.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                             "topics": [{"topic": topic, "partitions": [
                                 {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                  "log_start_offset": -1}]}],
                             "forgotten_topics_data": [], "rack_id": ""})
    return resp["responses"][0]["partitions"][0]


def values(c: WireClient, topic: str, partition: int) -> list[bytes]:
    part = fetch(c, topic, partition)
    assert part["error_code"] == 0, part
    return [r.value for batch in decode_records(part["records"] or b"") for r in batch.records]


def acked(c: WireClient, topic: str, partition: int, n: int) -> list[bytes]:
    sent = [f"{topic}-{partition}-{i}".encode() * 20 for i in range(n)]
    for v in sent:
        assert produce(c, topic, partition, v)["error_code"] == 0
    return sent


def describe_log_dirs(c: WireClient) -> dict[str, dict]:
    return {r["log_dir"]: r for r in c.request(35, 4, {"topics": None})["results"]}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def metric(text: str, pattern: str) -> float:
    m = re.search("^" + pattern + r" ([0-9.e+-]+)$", text, re.M)
    assert m, f"{pattern} not in metrics:\n{text}"
    return float(m.group(1))


def wait_exit(b: BrokerProcess, timeout: float = 20.0) -> int:
    assert b.proc is not None
    try:
        return b.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"broker still running:\n{b.log_text()}") from None


def error_lines(b: BrokerProcess) -> list[str]:
    return [line for line in b.log_text().splitlines() if " ERROR " in line]


def test_full_disk_takes_its_dir_offline_and_the_other_dir_keeps_serving(disks: Disks, brokers, tmp_path) -> None:
    full = disks.tmpfs("small")
    healthy = tmp_path / "healthy"
    metrics_port = free_port()
    overrides = {"log.dirs": f"{full / 'logs'},{healthy / 'logs'}", "metadata.log.dir": str(healthy / "meta"),
                 "odradek.metrics.port": str(metrics_port), "odradek.metrics.host": "127.0.0.1"}
    b = start(brokers, tmp_path / "b", overrides)
    with WireClient(b.host, b.port) as c:
        create_topic(c, "a", 2)
        placed = {p["partition_index"]: d for d, r in describe_log_dirs(c).items()
                  for t in r["topics"] for p in t["partitions"]}
        on_full = next(p for p, d in placed.items() if d == str(full / "logs"))
        on_healthy = 1 - on_full
        before = acked(c, "a", on_full, 5)
        acked(c, "a", on_healthy, 2)
        # A consumer long-polling the partition at its end (10 s) ...
        poller = WireClient(b.host, b.port)
        poll_corr, poll = poller.encode_request(1, 12, {
            "replica_id": -1, "max_wait_ms": 10_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": "a", "partitions": [
                {"partition": on_full, "fetch_offset": 5, "partition_max_bytes": 1 << 20, "log_start_offset": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        poller.send_raw(poll)
        filler = disks.fill(full)

        # The write that finds the disk full fails, and so does every later one: never success.
        part = produce(c, "a", on_full, b"y" * 65536)
        assert part["error_code"] == STORAGE_ERROR, part
        assert "No space left on device" in part["error_message"]
        # ... hears of it at once, not when its wait runs out.
        t0 = time.monotonic()
        polled = poller.read_response(1, 12, poll_corr)["responses"][0]["partitions"][0]
        poller.close()
        assert polled["error_code"] == STORAGE_ERROR and time.monotonic() - t0 < 5, polled
        part = produce(c, "a", on_full, b"small")
        assert part["error_code"] == STORAGE_ERROR, part
        assert "offline log directory" in part["error_message"]
        assert fetch(c, "a", on_full)["error_code"] == STORAGE_ERROR

        # The broker says so: DescribeLogDirs and the metrics (Kafka's OfflineLogDirectoryCount).
        dirs = describe_log_dirs(c)
        assert dirs[str(full / "logs")]["error_code"] == STORAGE_ERROR
        assert dirs[str(full / "logs")]["topics"] == []
        assert dirs[str(healthy / "logs")]["error_code"] == 0
        text = scrape(metrics_port)
        assert metric(text, "odradek_offline_log_directory_count") == 1
        assert metric(text, f'odradek_log_directory_offline{{log_directory="{full / "logs"}"}}') == 1
        assert metric(text, f'odradek_log_directory_offline{{log_directory="{healthy / "logs"}"}}') == 0
        # The same under Kafka's names (kafka.log:type=LogManager, as the JMX exporter names them).
        assert metric(text, "kafka_log_logmanager_offlinelogdirectorycount") == 1
        assert metric(text, f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{full / "logs"}"}}') == 1
        assert metric(text, f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{healthy / "logs"}"}}') == 0

        # The healthy dir serves on: its partition takes writes, a new topic is placed there.
        assert produce(c, "a", on_healthy, b"still here")["error_code"] == 0
        create_topic(c, "b", 1)
        assert produce(c, "b", 0, b"new topic")["error_code"] == 0
        assert str(healthy / "logs") in [d for d, r in describe_log_dirs(c).items()
                                         if any(t["name"] == "b" for t in r["topics"])]
    assert b.alive()
    offline_lines = [line for line in error_lines(b) if "is offline" in line]
    assert len(offline_lines) == 1 and "No space left on device" in offline_lines[0], b.log_text()

    # A SIGTERM now: the offline dir could not be closed cleanly, said in one line.
    assert b.stop() == 1
    last = error_lines(b)[-1]
    assert "shut down with errors" in last and str(full / "logs") in last
    assert "Traceback" not in b.log_text()

    # Space again, restart: the dir is back, the acknowledged records are all there.
    filler.unlink()
    b.start()
    with WireClient(b.host, b.port) as c:
        assert values(c, "a", on_full) == before
        assert produce(c, "a", on_full, b"after")["error_code"] == 0
        assert all(r["error_code"] == 0 for r in describe_log_dirs(c).values())
    assert metric(scrape(metrics_port), "odradek_offline_log_directory_count") == 0


def test_full_disk_fails_topic_creation_and_stops_a_broker_with_no_dir_left(disks: Disks, brokers, tmp_path) -> None:
    full = disks.tmpfs("small")
    overrides = {"log.dirs": str(full / "logs"), "metadata.log.dir": str(tmp_path / "meta")}
    b = start(brokers, tmp_path / "b", overrides)
    with WireClient(b.host, b.port) as c:
        create_topic(c, "a", 1)
        before = acked(c, "a", 0, 5)
        filler = disks.fill(full)
        resp = c.request(19, 7, {"topics": [{"name": "b", "num_partitions": 1, "replication_factor": 1}],
                                 "timeout_ms": 5000})
        topic = resp["topics"][0]
        assert topic["error_code"] == STORAGE_ERROR, topic
        assert "No space left on device" in topic["error_message"]
    # Its only log dir is offline: like Kafka, the broker stops rather than look alive.
    assert wait_exit(b) == 1
    text = b.log_text()
    assert f"Shutdown broker because all log dirs in {full / 'logs'} have failed" in text
    assert "Traceback" not in text

    filler.unlink()
    b.start()
    with WireClient(b.host, b.port) as c:
        assert values(c, "a", 0) == before
        # The topic the controller recorded gets its log at start-up, now that there is space.
        assert produce(c, "b", 0, b"b works")["error_code"] == 0
        assert values(c, "b", 0) == [b"b works"]


def test_log_creation_hitting_emfile_fails_the_request_but_keeps_the_dir(brokers, tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("lowering another process's open-file limit (prlimit) needs root here")
    import resource

    b = start(brokers, tmp_path / "b", {"num.partitions": "20"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "a", 1)
        before = acked(c, "a", 0, 3)
        assert b.proc is not None
        pid = b.proc.pid
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 4, old[1]))
        try:
            resp = c.request(19, 7, {"topics": [{"name": "many", "num_partitions": 20, "replication_factor": 1}],
                                     "timeout_ms": 5000})
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        topic = resp["topics"][0]
        assert topic["error_code"] == STORAGE_ERROR, topic
        assert "Too many open files" in topic["error_message"]
        # A process limit is not a disk fault: the dir stays online and serves on.
        assert all(r["error_code"] == 0 for r in describe_log_dirs(c).values())
        assert produce(c, "a", 0, b"after")["error_code"] == 0
        assert values(c, "a", 0) == [*before, b"after"]
        create_topic(c, "c", 2)
        assert produce(c, "c", 1, b"c works")["error_code"] == 0
        # CreatePartitions likewise.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + 4, old[1]))
        try:
            resp = c.request(37, 3, {"topics": [{"name": "c", "count": 22, "assignments": None}],
                                     "timeout_ms": 5000, "validate_only": False})
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        result = resp["results"][0]
        assert result["error_code"] == STORAGE_ERROR and "Too many open files" in result["error_message"], result
        assert produce(c, "c", 0, b"old partitions serve on")["error_code"] == 0
        # And auto-creation through Metadata.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + 4, old[1]))
        try:
            resp = c.request(3, 9, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True,
                                    "include_topic_authorized_operations": False})
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("auto", STORAGE_ERROR)], resp
        # The topic the controller recorded: its missing logs answer KAFKA_STORAGE_ERROR (not
        # NOT_LEADER_OR_FOLLOWER, retried forever), and their creation is retried, now with fds.
        missing = [p for p in range(20) if produce(c, "many", p, b"x")["error_code"] != 0]
        assert missing, "some partitions of 'many' had no log"
        first = produce(c, "many", missing[0], b"x")
        assert first["error_code"] == STORAGE_ERROR and "Too many open files" in first["error_message"], first
        deadline = time.monotonic() + 10
        while produce(c, "many", missing[0], b"retried")["error_code"] != 0:
            assert time.monotonic() < deadline, b.log_text()
            time.sleep(0.2)
        assert all(produce(c, "many", p, b"y")["error_code"] == 0 for p in range(20))
    assert b.alive()


def test_sigterm_on_a_read_only_disk_exits_with_one_error_line(disks: Disks, brokers, tmp_path) -> None:
    disk = disks.ext4("disk")
    b = start(brokers, tmp_path / "b", {"log.dirs": str(disk / "logs")})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "a", 1)
        before = acked(c, "a", 0, 5)
    disks.make_read_only(disk)
    assert b.stop() == 1
    lines = error_lines(b)
    assert len(lines) == 1, b.log_text()
    assert "Read-only file system" in lines[0] and "shut down with errors" in lines[0]
    assert "Traceback" not in b.log_text()

    # Started again on the still read-only disk: it refuses, in one line.
    b.log_path.write_bytes(b"")
    b.spawn()
    assert wait_exit(b) == 1
    b.kill()
    lines = error_lines(b)
    assert len(lines) == 1 and "failed to start" in lines[0] and "Read-only file system" in lines[0], b.log_text()
    assert "Traceback" not in b.log_text()

    # The disk replaced by a healthy one (the same image, mounted read-write again).
    disks.unmount(disk)
    disks.ext4("disk")
    b.start()
    with WireClient(b.host, b.port) as c:
        assert values(c, "a", 0) == before
        assert produce(c, "a", 0, b"after")["error_code"] == 0
    assert b.stop() == 0
