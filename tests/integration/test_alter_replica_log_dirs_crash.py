"""A broker SIGKILLed while one of its partitions moves between its log dirs (AlterReplicaLogDirs): in the
middle of the copy, and right after the swap. Each restart leaves one replica of the partition, in one
dir, holding every acknowledged record: mid-copy, the future log is loaded and its copy resumed (Kafka's
maybeAddLogDirFetchers); after the swap, the old dir (renamed ``-delete``) is removed at start-up. The
crash between the swap's two renames is storage/test_future_logs.py's (the future log is promoted)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from odradek.protocol.records import Record, encode_batch
from tests.support.broker_process import BrokerProcess
from tests.support.log_dirs import THROTTLE, alter, entries_on_disk, moved, replicas, wait_for
from tests.support.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import read_back  # noqa: E402 (needs confluent_kafka)

TOPIC = "crash"


def produce_acked(c: WireClient, acked: dict[int, bytes], batches: int, tag: str, size: int = 1000) -> None:
    """``batches`` acks=all batches of 100 records; offset -> value of each acknowledged record."""
    for b in range(batches):
        values = [f"{tag}-{b:04d}-{i:03d}-".encode() + b"r" * size for i in range(100)]
        records = encode_batch([Record(timestamp=int(time.time() * 1000), value=v) for v in values])
        resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]})
        part = resp["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0, part
        for i, v in enumerate(values):
            acked[part["base_offset"] + i] = v


def start(tmp_path: Path, throttle: int, delete_delay_ms: int = 60_000) -> tuple[BrokerProcess, Path, Path]:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = BrokerProcess(tmp_path / "b", overrides={"log.dirs": f"{d1},{d2}", THROTTLE: str(throttle),
                                                 "odradek.metrics.port": "-1"}).start()
    with WireClient(b.host, b.port) as c:
        resp = c.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                             "configs": [{"name": "segment.bytes", "value": "1048576"},
                                                         {"name": "file.delete.delay.ms",
                                                          "value": str(delete_delay_ms)}]}],
                                 "timeout_ms": 5000})
        assert resp["topics"][0]["error_code"] == 0, resp
    return b, d1, d2


def assert_one_replica_with_every_record(b: BrokerProcess, c: WireClient, dst: Path, src: Path,
                                         acked: dict[int, bytes]) -> None:
    wait_for("the move to finish", lambda: moved(c, TOPIC, 0, dst), timeout=60)
    assert entries_on_disk(dst, TOPIC, 0) == [f"{TOPIC}-0"]
    # The old copy goes (at start-up when it was already renamed -delete, else after file.delete.delay.ms).
    read = dict(read_back(b.bootstrap, TOPIC, 1)[0])
    assert sorted(read) == list(range(len(acked)))
    lost = [o for o, v in sorted(acked.items()) if read.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. offsets {lost[:5]}"
    produce_acked(c, acked, 1, "after-restart")  # and it takes writes


def test_sigkill_mid_copy_then_the_restart_resumes_the_copy(tmp_path: Path) -> None:
    b, d1, d2 = start(tmp_path, throttle=1_000_000, delete_delay_ms=500)
    acked: dict[int, bytes] = {}
    try:
        with WireClient(b.host, b.port) as c:
            produce_acked(c, acked, 40, "before")  # ~4 MB: 4 s of copying at 1 MB/s
            src = Path(replicas(c, TOPIC)[0][0][0])
            dst = d2 if src == d1 else d1
            assert alter(c, [(str(dst), TOPIC, [0])]) == [(TOPIC, 0, 0)]
            wait_for("a part of the copy", lambda: any(
                r[1] and r[2] > 300_000 for r in replicas(c, TOPIC)[0]), timeout=30)
            produce_acked(c, acked, 3, "during")
            (future,) = [r for r in replicas(c, TOPIC)[0] if r[1]]
            assert future[0] == str(dst) and future[3] > 0  # behind the current log
        b.kill()
        assert any(n.endswith("-future") for n in entries_on_disk(dst, TOPIC, 0))
        assert entries_on_disk(src, TOPIC, 0) == [f"{TOPIC}-0"]

        del b.overrides[THROTTLE]
        b.start()
        with WireClient(b.host, b.port) as c:
            assert_one_replica_with_every_record(b, c, dst, src, acked)
            wait_for("the old dir's removal", lambda: entries_on_disk(src, TOPIC, 0) == [], timeout=10)
        assert "Resuming the move of crash-0" in b.log_text()
    finally:
        b.kill()


def test_sigkill_right_after_the_swap_leaves_the_moved_replica_only(tmp_path: Path) -> None:
    b, d1, d2 = start(tmp_path, throttle=4_000_000)
    acked: dict[int, bytes] = {}
    try:
        with WireClient(b.host, b.port) as c:
            produce_acked(c, acked, 20, "before")
            src = Path(replicas(c, TOPIC)[0][0][0])
            dst = d2 if src == d1 else d1
            assert alter(c, [(str(dst), TOPIC, [0])]) == [(TOPIC, 0, 0)]
            wait_for("the swap", lambda: moved(c, TOPIC, 0, dst), timeout=30, interval=0.01)
            produce_acked(c, acked, 2, "after-swap")  # written to the new dir only
        b.kill()  # file.delete.delay.ms (60 s) had not passed: the old dir was still there, renamed
        (doomed,) = entries_on_disk(src, TOPIC, 0)
        assert doomed.endswith("-delete")

        b.start()
        with WireClient(b.host, b.port) as c:
            assert entries_on_disk(src, TOPIC, 0) == []  # removed at start-up
            assert replicas(c, TOPIC)[0] == [(str(dst), False, replicas(c, TOPIC)[0][0][2], 0)]
            assert_one_replica_with_every_record(b, c, dst, src, acked)
    finally:
        b.kill()
