"""Compacted topics through the real daemon: null keys refused with record_errors, and the
cleaner keeps the latest value per key while offsets stay put."""

from __future__ import annotations

import time

from odradek.protocol.records import Record, decode_records, encode_batch
from tests.support.wire import WireClient


def create_compacted(c: WireClient, name: str) -> None:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "configs": [
        {"name": "cleanup.policy", "value": "compact"},
        {"name": "segment.bytes", "value": "2048"},
        {"name": "min.cleanable.dirty.ratio", "value": "0.01"},
        {"name": "delete.retention.ms", "value": "0"},
    ]}], "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp


def produce(c: WireClient, topic: str, records: list[Record]) -> dict:
    resp = c.request(0, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": encode_batch(records)}]}]})
    return resp["responses"][0]["partition_responses"][0]


def read_all(c: WireClient, topic: str) -> list[Record]:
    out: list[Record] = []
    offset = 0
    while True:
        resp = c.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                 "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                                 "topics": [{"topic": topic, "partitions": [
                                     {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]})
        part = resp["responses"][0]["partitions"][0]
        batches = decode_records(part["records"] or b"")
        if not batches:
            return out
        out.extend(r for b in batches for r in b.records if r.offset >= offset)
        # Continue after the last batch, not the last record: compaction may leave empty batches.
        offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1


def test_null_key_on_compacted_topic_is_invalid_record(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_compacted(c, "cmp-null")
        resp = produce(c, "cmp-null", [Record(timestamp=1, key=b"k", value=b"v"), Record(timestamp=1, key=None,
                                                                                       value=b"v")])
        assert resp["error_code"] == 87  # INVALID_RECORD
        assert [e["batch_index"] for e in resp["record_errors"]] == [1]
        assert resp["error_message"]
        assert read_all(c, "cmp-null") == []


def test_cleaner_keeps_latest_value_per_key(broker_factory) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": "200"})
    with WireClient(broker.host, broker.port) as c:
        create_compacted(c, "cmp")
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        offset = 0
        for round_ in range(30):
            records = []
            for k in range(5):
                key = b"key-%d" % k
                value = None if (round_ == 20 and k == 0) else b"value-%d-%d" % (k, round_)
                records.append(Record(timestamp=int(time.time() * 1000), key=key, value=value))
                latest[key] = (offset, value)
                offset += 1
            assert produce(c, "cmp", records)["error_code"] == 0
        # Give the cleaner a few rounds; then only the newest record per key may remain below the
        # active segment, with its original offset.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            records = read_all(c, "cmp")
            if len(records) < 40:
                break
            time.sleep(0.3)
        assert len(records) < 40, "the cleaner never compacted the topic"
        by_key: dict[bytes, list[Record]] = {}
        for r in records:
            by_key.setdefault(r.key, []).append(r)
        offsets = [r.offset for r in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        for key, (last_offset, value) in latest.items():
            newest = by_key[key][-1]
            assert (newest.offset, newest.value) == (last_offset, value)
        # The log end offset did not move.
        resp = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "cmp", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert resp["topics"][0]["partitions"][0]["offset"] == offset
