"""Produce requests whose records do not add up, over a real socket to the real daemon: each gets
Kafka's error code, error_message and record_errors, nothing is appended, and stock clients
(librdkafka, kafka-python) still read the partition afterwards. A gzip bomb on a compacted topic
is refused without the broker's memory following the bomb."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from odradek.protocol.records import Record, encode_batch
from tests.integration.test_data_path_wire import create, leo, produce
from tests.support.bad_batches import MESSAGE_TOO_LARGE, catalogue, gzip_bomb, record, wrap
from tests.support.wire import WireClient


def _good(codec: int, values: list[bytes]) -> bytes:
    return encode_batch([Record(timestamp=1_700_000_000_000, key=b"k", value=v) for v in values], compression=codec)


def _consume_confluent(broker, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rv-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        for m in c.consume(100, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    return got


def _consume_kafka_python(broker, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = [m.value for m in consumer]
    consumer.close()
    return got


@pytest.mark.parametrize("codec", [0, 3, 4])  # none, lz4, zstd
def test_every_malformation_gets_kafkas_answer_and_the_partition_still_serves(broker, codec) -> None:
    topic = f"rv-{codec}"
    with WireClient(broker.host, broker.port) as c:
        create(c, topic)
        assert produce(c, topic, _good(codec, [b"before-1", b"before-2"]))["error_code"] == 0
        for bad in catalogue(codec):
            resp = produce(c, topic, bad.batch)
            assert (bad.name, resp["error_code"]) == (bad.name, bad.code)
            assert bad.message in (resp["error_message"] or ""), (bad.name, resp["error_message"])
            assert [e["batch_index"] for e in resp["record_errors"]] == list(bad.record_errors), bad.name
            assert all(e["batch_index_error_message"] for e in resp["record_errors"])
            assert resp["base_offset"] == -1
            assert leo(c, topic) == 2, bad.name
        assert produce(c, topic, _good(codec, [b"after"]))["error_code"] == 0
        assert leo(c, topic) == 3
    assert _consume_confluent(broker, topic, 3) == [b"before-1", b"before-2", b"after"]


def test_record_errors_on_produce_v8_and_compacted_null_keys(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create(c, "rv-cmp", configs={"cleanup.policy": "compact"})
        raw = wrap([record(0, key=None), record(1), record(1)], 3)
        resp = produce(c, "rv-cmp", raw, version=8)
        assert resp["error_code"] == 87
        assert [e["batch_index"] for e in resp["record_errors"]] == [0, 2]
        assert "Compacted topic cannot accept message without key" in resp["record_errors"][0]["batch_index_error_message"]
        assert "has offset delta 1" in resp["record_errors"][1]["batch_index_error_message"]
        assert resp["error_message"].startswith("One or more records have been rejected due to 2 record errors")
        assert leo(c, "rv-cmp") == 0
        assert produce(c, "rv-cmp", _good(0, [b"ok"]), version=8)["error_code"] == 0
    assert _consume_kafka_python(broker, "rv-cmp") == [b"ok"]


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_gzip_bomb_on_a_compacted_topic_is_refused_with_bounded_memory(broker) -> None:
    bomb = gzip_bomb()  # ~400 KiB on the wire, one record of 400 MiB of zeros
    with WireClient(broker.host, broker.port) as c:
        create(c, "rv-bomb", configs={"cleanup.policy": "compact"})
        assert produce(c, "rv-bomb", _good(1, [b"first"]))["error_code"] == 0
        before = _peak_rss_kib(broker.proc.pid)
        resp = produce(c, "rv-bomb", bomb)
        assert resp["error_code"] == MESSAGE_TOO_LARGE
        assert "decompress to more than" in resp["error_message"]
        grown = _peak_rss_kib(broker.proc.pid) - before
        assert grown < 160 * 1024, f"peak RSS grew by {grown} KiB"  # the cap is 64 MiB; unbounded 400+ MiB
        assert leo(c, "rv-bomb") == 1
        assert produce(c, "rv-bomb", _good(1, [b"second"]))["error_code"] == 0
    assert broker.alive()
    assert _consume_kafka_python(broker, "rv-bomb") == [b"first", b"second"]
