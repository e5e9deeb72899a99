"""An old librdkafka (Debian's kcat 1.7.1 on librdkafka 2.0.2) compresses what it produces to Odradek.

librdkafka before 2.10 decides whether a broker takes gzip, snappy or lz4 batches from Produce
v0-2 being advertised in ApiVersions (librdkafka issue 4956); when they are not, it logs "Broker
does not support compression type gzip: not compressing batch" (at debug level) and sends the
batch uncompressed. Kafka 4.x serves Produce from v3 only but advertises it from v0 for exactly
this reason (KAFKA-18659). With a topic's compression.type=producer (Kafka's default) the broker
stores each batch as the producer sent it, so the codec bits of every stored batch header show
what kcat sent: read straight from the partition's segment file here, in Kafka's format
(record batch v2: attributes int16 at byte 21, codec in bits 0-2). The records then read back
exactly with kcat and with kafka-python (its own decompressors). The same test runs against a
real Apache Kafka 4.4 (tests/support/real_kafka.py), which stores the same codecs.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.real_kafka import TARGETS, Target, open_target, require_toolchain, unique, wait_until_led
from tests.support.wire import WireClient

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None,
                                reason="kcat is not installed (Debian package kcat, librdkafka 2.0.2)")

# Kafka's CompressionType ids (the codec bits of a batch's attributes).
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = 300
BATCH_LENGTH_AT, MAGIC_AT, ATTRIBUTES_AT, RECORDS_COUNT_AT, HEADER_SIZE = 8, 16, 21, 57, 61


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "kafka":
        require_toolchain()
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


def _create_topic(target: Target, name: str) -> None:
    with WireClient(target.host, target.port) as c:
        resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                              "configs": [{"name": "compression.type", "value": "producer"}]}],
                                 "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp
    # Kafka answers CreateTopics once the controller committed it; its broker leads the partition a
    # moment later, and kcat -p 0 gives up on a partition its first metadata does not show.
    with WireClient(target.host, target.port) as c:
        wait_until_led(c, name, 1)


def _lines(codec: str) -> list[str]:
    # Repetitive values: librdkafka sends a batch uncompressed when compressing does not shrink it.
    return [f"k{i % 7}:{codec}-value-{i:05d}-" + "abcdefgh" * 8 for i in range(RECORDS)]


def _stored_batches(log_dir: Path) -> list[tuple[int, int]]:
    """(codec, record count) of every batch in the partition's segment files, in offset order."""
    out = []
    for segment in sorted(log_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while len(data) - pos >= HEADER_SIZE:
            size = struct.unpack_from(">i", data, pos + BATCH_LENGTH_AT)[0] + 12
            assert data[pos + MAGIC_AT] == 2, f"magic {data[pos + MAGIC_AT]} at {segment}:{pos}"
            attributes = struct.unpack_from(">h", data, pos + ATTRIBUTES_AT)[0]
            out.append((attributes & 0x07, struct.unpack_from(">i", data, pos + RECORDS_COUNT_AT)[0]))
            pos += size
    return out


def _read_back_with_kafka_python(target: Target, topic: str) -> list[str]:
    from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]  # no type hints

    consumer = KafkaConsumer(bootstrap_servers=target.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [f"{m.key.decode()}:{m.value.decode()}" for m in consumer]
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_kcat_on_librdkafka_2_0_stores_compressed_batches(target: Target, codec: str) -> None:
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    assert "librdkafka 2.0." in version, version  # the librdkafka this test is about
    topic = unique(f"kcat-{codec}")
    _create_topic(target, topic)
    lines = _lines(codec)
    produce = subprocess.run(
        ["kcat", "-b", target.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec, "-X", "linger.ms=100",
         "-d", "msg"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert produce.returncode == 0, produce.stderr[-3000:]
    assert "not compressing batch" not in produce.stderr, (version, produce.stderr[-3000:])

    log_dir = Path(target.broker.data_dir) / "logs" / f"{topic}-0"  # log.dirs of both targets
    deadline = time.monotonic() + 10
    while sum(n for _, n in _stored_batches(log_dir)) < RECORDS and time.monotonic() < deadline:
        time.sleep(0.05)
    batches = _stored_batches(log_dir)
    assert sum(n for _, n in batches) == RECORDS
    assert {c for c, _ in batches} == {CODECS[codec]}, f"stored codecs {batches} ({version.strip()})"

    consume = subprocess.run(["kcat", "-b", target.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                              "-f", "%k:%s\n"], capture_output=True, text=True, timeout=60)
    assert consume.returncode == 0, consume.stderr[-3000:]
    assert consume.stdout.splitlines() == lines
    assert _read_back_with_kafka_python(target, topic) == lines
