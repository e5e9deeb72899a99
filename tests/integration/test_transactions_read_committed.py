"""read_committed over the wire: a broker serves a partition holding committed, aborted and open
transactions, with real clients (confluent-kafka, kafka-python, the Java console consumer) and raw
Fetch/ListOffsets; and Kafka's DumpLogSegments reads the files the log wrote.

No transactional producer exists yet (the coordinator comes later), so the partition's log is
written in-process between two runs of a real broker, with the storage API the coordinator's
WriteTxnMarkers path uses (Log.append_end_txn_marker); then the broker is started over that data
dir. The second run also crashes the log's indexes away: the ``.txnindex`` and producer snapshots
are deleted and the clean-shutdown marker removed, so the broker's recovery must rebuild them."""

from __future__ import annotations

import time
from pathlib import Path

from odradek.protocol.records import Record, encode_batch
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE
from odradek.storage.producer_state import ProducerStateManager
from tests.support.java_tools import run_tool
from tests.support.wire import WireClient, create_topic

NOW = int(time.time() * 1000)
TOPIC = "txn-read"
COMMITTED_PID, ABORTED_PID, OPEN_PID = 1000, 2000, 3000


def records(*values: bytes, **kw) -> bytes:
    return encode_batch([Record(timestamp=NOW, key=None, value=v) for v in values], **kw)


def txn(pid: int, *values: bytes) -> bytes:
    return records(*values, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)


def open_log(data_dir: Path) -> Log:
    dir = data_dir / "logs" / f"{TOPIC}-0"
    return Log.open(dir, LogConfig(), producer_state=ProducerStateManager(dir), recovery_point=0)


def fetch(c: WireClient, isolation: int) -> dict:
    resp = c.request(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                             "topics": [{"topic": TOPIC, "partitions": [
                                 {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                  "partition_max_bytes": 1 << 20, "log_start_offset": -1}]}],
                             "forgotten_topics_data": [], "rack_id": ""})
    return resp["responses"][0]["partitions"][0]


def latest(c: WireClient, isolation: int) -> int:
    resp = c.request(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def consume_confluent(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{isolation}-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    quiet_until = None
    # Read until the expected count, then a while longer: nothing beyond the LSO may arrive.
    while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
        for m in c.consume(100, timeout=0.3):
            assert m.error() is None, m.error()
            got.append(m.value())
        if len(got) >= expected and quiet_until is None:
            quiet_until = time.monotonic() + 1.5
    c.close()
    return got


def consume_kafka_python(bootstrap: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=1500)
    c.assign([TopicPartition(TOPIC, 0)])
    c.seek(TopicPartition(TOPIC, 0), 0)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(m.value for m in c)
    got.extend(m.value for m in c)  # one more quiet period: nothing beyond the LSO
    c.close()
    return got


def test_read_committed_sees_committed_records_only(broker_factory, tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    broker = broker_factory(data_dir=data_dir)
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, TOPIC, 1)
    broker.stop()

    log = open_log(data_dir)
    log.append(records(b"plain-0", b"plain-1"), leader_epoch=0)  # 0-1
    log.append(txn(COMMITTED_PID, b"committed-0", b"committed-1"), leader_epoch=0)  # 2-3
    log.append(txn(ABORTED_PID, b"aborted-0", b"aborted-1"), leader_epoch=0)  # 4-5
    log.append_end_txn_marker(COMMITTED_PID, 0, 0, True, leader_epoch=0)  # 6
    log.append_end_txn_marker(ABORTED_PID, 0, 0, False, leader_epoch=0)  # 7
    log.append(txn(OPEN_PID, b"open-0", b"open-1"), leader_epoch=0)  # 8-9, left open
    log.append(records(b"plain-2"), leader_epoch=0)  # 10
    log.close()

    broker.start()
    committed = [b"plain-0", b"plain-1", b"committed-0", b"committed-1"]
    with WireClient(broker.host, broker.port) as c:
        assert (latest(c, 0), latest(c, 1)) == (11, 8)
        read = fetch(c, 1)
        assert read["error_code"] == 0
        assert (read["high_watermark"], read["last_stable_offset"]) == (11, 8)
        assert read["aborted_transactions"] == [{"producer_id": ABORTED_PID, "first_offset": 4}]
        uncommitted = fetch(c, 0)
        assert uncommitted["last_stable_offset"] == 8 and uncommitted["aborted_transactions"] is None
    # librdkafka drops the aborted batches and the control records; it stops at the LSO.
    assert consume_confluent(broker.bootstrap, "read_committed", len(committed)) == committed
    # The Java client (Kafka's console consumer) likewise. Assigned to the partition (no group join, so
    # the first records come quickly on a busy machine); it ends after 8 s without a new record.
    java = run_tool("kafka-console-consumer", ["--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
                                               "--partition", "0", "--offset", "earliest",
                                               "--isolation-level", "read_committed",
                                               "--timeout-ms", "8000"], check=False)
    assert java.stdout.split() == [v.decode() for v in committed], java.stderr[-2000:]
    assert consume_confluent(broker.bootstrap, "read_uncommitted", 9) == [
        b"plain-0", b"plain-1", b"committed-0", b"committed-1", b"aborted-0", b"aborted-1", b"open-0", b"open-1",
        b"plain-2"]
    broker.stop()

    # The open transaction is aborted; then a crash takes the indexes and snapshots with it.
    log = open_log(data_dir)
    log.append_end_txn_marker(OPEN_PID, 0, 0, False, leader_epoch=0)  # 11
    log.close()
    partition_dir = data_dir / "logs" / f"{TOPIC}-0"
    expected_index = b"".join(p.read_bytes() for p in sorted(partition_dir.glob("*.txnindex")))
    assert len(expected_index) == 2 * 34
    for path in [*partition_dir.glob("*.txnindex"), *partition_dir.glob("*.snapshot")]:
        path.unlink()
    (data_dir / "logs" / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)

    broker.start()
    with WireClient(broker.host, broker.port) as c:
        assert (latest(c, 0), latest(c, 1)) == (12, 12)
        read = fetch(c, 1)
        assert read["last_stable_offset"] == 12
        assert read["aborted_transactions"] == [{"producer_id": ABORTED_PID, "first_offset": 4},
                                                {"producer_id": OPEN_PID, "first_offset": 8}]
    assert consume_kafka_python(broker.bootstrap, 5) == [*committed, b"plain-2"]
    assert b"".join(p.read_bytes() for p in sorted(partition_dir.glob("*.txnindex"))) == expected_index


def test_kafkas_dump_log_segments_reads_our_markers_txnindex_and_snapshot(tmp_path: Path) -> None:
    """Kafka's own DumpLogSegments decodes what the log wrote: the marker batches, the .txnindex
    entries (AbortedTxn v0) and the producer snapshot with the coordinator epoch."""
    dir = tmp_path / f"{TOPIC}-0"
    log = Log.open(dir, LogConfig(), producer_state=ProducerStateManager(dir))
    log.append(txn(COMMITTED_PID, b"c"), leader_epoch=3)  # 0
    log.append(txn(ABORTED_PID, b"a0", b"a1"), leader_epoch=3)  # 1-2
    log.append(txn(OPEN_PID, b"o"), leader_epoch=3)  # 3
    log.append_end_txn_marker(ABORTED_PID, 0, 7, False, leader_epoch=3)  # 4: LSO then 0 (1000 open)
    log.append_end_txn_marker(COMMITTED_PID, 0, 7, True, leader_epoch=3)  # 5
    log.append_end_txn_marker(OPEN_PID, 0, 7, False, leader_epoch=3)  # 6
    log.close()
    files = [dir / f"{0:020d}{suffix}" for suffix in (".txnindex", ".log")] + [dir / f"{7:020d}.snapshot"]
    out = run_tool("kafka-dump-log",
                   ["--files", ",".join(map(str, files)), "--print-data-log"]).stdout
    assert ("version: 0 producerId: 2000 firstOffset: 1 lastOffset: 4 lastStableOffset: 0\n"
            "version: 0 producerId: 3000 firstOffset: 3 lastOffset: 6 lastStableOffset: 7\n") in out
    markers = [line.split("endTxnMarker: ")[1] for line in out.splitlines() if "endTxnMarker" in line]
    assert markers == ["ABORT coordinatorEpoch: 7", "COMMIT coordinatorEpoch: 7", "ABORT coordinatorEpoch: 7"]
    assert out.count("isTransactional: true isControl: true") == 3
    producers = [line for line in out.splitlines() if line.startswith("producerId: ")]
    assert len(producers) == 3
    assert all("coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong.empty" in line for line in producers)
