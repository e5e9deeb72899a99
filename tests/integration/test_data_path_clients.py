"""Produce and consume with real clients: kafka-python, confluent-kafka (librdkafka), aiokafka, kcat.

Every codec, keys, null values, headers, CreateTime and LogAppendTime; what comes back is exact
and in order per partition; a broker crash loses nothing that was acknowledged.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

from tests.support.wire import WireClient

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(broker, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                              "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                 "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp


def record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    key = None if i % 10 == 0 else f"key-{i % 97}".encode()
    # Null values (tombstone-like) but never a null key and a null value together (clients refuse it).
    value = None if i % 13 == 0 and key is not None else f"value-{i}-{'x' * (i % 50)}".encode()
    headers = [("h1", str(i).encode()), ("h2", b"")] if i % 3 == 0 else []
    return key, value, headers


def expected_by_partition(n: int, partitions: int, start: int = 0) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for i in range(start, start + n):
        out[i % partitions].append(i)
    return out


def consume_all_confluent(broker, topic: str, expected_total: int, timeout: float = 60.0) -> list:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"verify-{topic}-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    md = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected_total and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=1.0):
            assert m.error() is None, m.error()
            got.append(m)
    c.close()
    return got


def check_messages(messages, n: int, partitions: int, value_of=lambda m: m.value(), key_of=lambda m: m.key(),
                   headers_of=lambda m: m.headers() or [], partition_of=lambda m: m.partition(),
                   offset_of=lambda m: m.offset()) -> None:
    assert len(messages) == n
    by_partition: dict[int, list] = {}
    for m in messages:
        by_partition.setdefault(partition_of(m), []).append(m)
    expected = expected_by_partition(n, partitions)
    for p, msgs in by_partition.items():
        assert [offset_of(m) for m in msgs] == list(range(len(msgs))), "offsets dense and in order"
        for m, i in zip(msgs, expected[p], strict=True):
            key, value, headers = record(i)
            assert key_of(m) == key
            assert value_of(m) == value
            assert [(k, bytes(v) if v is not None else None) for k, v in headers_of(m)] == headers


def test_confluent_kafka_every_codec_100k_records(broker) -> None:
    from confluent_kafka import Producer

    topic, partitions, n = "ck-codecs", 4, 100_000
    create_topic(broker, topic, partitions)
    per_codec = n // len(CODECS)
    errors: list = []
    for ci, codec in enumerate(CODECS):
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5,
                      "enable.idempotence": True, "acks": "all"})
        for i in range(ci * per_codec, (ci + 1) * per_codec):
            key, value, headers = record(i)
            while True:
                try:
                    p.produce(topic, value=value, key=key, headers=headers or None, partition=i % partitions,
                              on_delivery=lambda err, _m: err and errors.append(err))
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(60) == 0
        assert not errors
    check_messages(consume_all_confluent(broker, topic, n), n, partitions)


def test_kafka_python_every_codec_and_cross_client_read(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic, partitions, per_codec = "kp-codecs", 3, 4000
    create_topic(broker, topic, partitions)
    total = 0
    for ci, codec in enumerate(CODECS):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                                 linger_ms=5, acks="all")
        futures = []
        for i in range(ci * per_codec, (ci + 1) * per_codec):
            key, value, headers = record(i)
            futures.append(producer.send(topic, key=key, value=value, headers=headers, partition=i % partitions))
        producer.flush()
        for f in futures:
            f.get(timeout=30)
        producer.close()
        total += per_codec
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    msgs = list(consumer)
    consumer.close()
    check_messages(msgs, total, partitions, value_of=lambda m: m.value, key_of=lambda m: m.key,
                   headers_of=lambda m: m.headers, partition_of=lambda m: m.partition, offset_of=lambda m: m.offset)
    # The same bytes read by librdkafka.
    check_messages(consume_all_confluent(broker, topic, total), total, partitions)


def test_kafka_python_100k_records_over_partitions(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic, partitions, n = "kp-100k", 4, 100_000
    create_topic(broker, topic, partitions)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4", linger_ms=10,
                             batch_size=65536)
    for i in range(n):
        key, value, headers = record(i)
        producer.send(topic, key=key, value=value, headers=headers, partition=i % partitions)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000,
                             auto_offset_reset="earliest", max_poll_records=5000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    msgs = list(consumer)
    consumer.close()
    check_messages(msgs, n, partitions, value_of=lambda m: m.value, key_of=lambda m: m.key,
                   headers_of=lambda m: m.headers, partition_of=lambda m: m.partition, offset_of=lambda m: m.offset)


def test_aiokafka_produce_consume_every_codec(broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic, partitions, per_codec = "aio-codecs", 2, 3000
    create_topic(broker, topic, partitions)

    async def scenario() -> list:
        for ci, codec in enumerate(CODECS):
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                        compression_type=None if codec == "none" else codec, linger_ms=5)
            await producer.start()
            try:
                batch = []
                for i in range(ci * per_codec, (ci + 1) * per_codec):
                    key, value, headers = record(i)
                    batch.append(await producer.send(topic, key=key, value=value, headers=headers,
                                                     partition=i % partitions))
                await asyncio.gather(*batch)
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            got = []
            deadline = time.monotonic() + 60
            while len(got) < per_codec * len(CODECS) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                for msgs in batches.values():
                    got.extend(msgs)
            return got
        finally:
            await consumer.stop()

    msgs = asyncio.run(scenario())
    check_messages(msgs, per_codec * len(CODECS), partitions, value_of=lambda m: m.value, key_of=lambda m: m.key,
                   headers_of=lambda m: list(m.headers), partition_of=lambda m: m.partition,
                   offset_of=lambda m: m.offset)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (Debian package kcat)")
def test_kcat_produce_and_consume_100k(broker, tmp_path) -> None:
    topic, n = "kcat-topic", 100_000
    create_topic(broker, topic, 3)
    lines = "".join(f"k{i % 50}:v{i}\n" for i in range(n))
    produce = subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", "snappy",
                              "-X", "linger.ms=20"], input=lines.encode(), capture_output=True, timeout=120)
    assert produce.returncode == 0, produce.stderr.decode()
    consume = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning",
                              "-f", "%p %o %k %s\n"], capture_output=True, timeout=120)
    assert consume.returncode == 0, consume.stderr.decode()
    rows = [line.split(" ") for line in consume.stdout.decode().splitlines()]
    assert len(rows) == n
    values = sorted(int(r[3][1:]) for r in rows)
    assert values == list(range(n))
    by_partition: dict[str, list[int]] = {}
    for p, o, k, v in rows:
        by_partition.setdefault(p, []).append(int(o))
        assert k == f"k{int(v[1:]) % 50}"
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))


def test_log_append_time_topic_stamps_broker_time(broker) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

    topic = "lat-topic"
    create_topic(broker, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        p.produce(topic, value=b"v%d" % i, timestamp=1000 + i)  # an ancient CreateTime
    assert p.flush(30) == 0
    after = int(time.time() * 1000)
    msgs = consume_all_confluent(broker, topic, 100)
    assert len(msgs) == 100
    for m in msgs:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000


def test_create_time_is_preserved(broker) -> None:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

    topic = "ct-topic"
    create_topic(broker, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(50):
        p.produce(topic, value=b"v", timestamp=1_600_000_000_000 + i)
    assert p.flush(30) == 0
    msgs = consume_all_confluent(broker, topic, 50)
    assert [m.timestamp() for m in msgs] == [(TIMESTAMP_CREATE_TIME, 1_600_000_000_000 + i) for i in range(50)]


def test_crash_loses_nothing_acknowledged(broker) -> None:
    from confluent_kafka import Producer

    topic, n = "durable-data", 20_000
    create_topic(broker, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2})
    acked = []
    for i in range(n):
        key, value, headers = record(i)
        p.produce(topic, key=key, value=value, headers=headers or None, partition=i % 2,
                  on_delivery=lambda err, m: acked.append((m.partition(), m.offset())) if err is None else None)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == n
    broker.kill()  # SIGKILL: no clean shutdown, recovery must run
    broker.start()
    check_messages(consume_all_confluent(broker, topic, n), n, 2)
    # And the log continues densely after recovery.
    p = Producer({"bootstrap.servers": broker.bootstrap})
    delivered = []
    p.produce(topic, value=b"after", partition=0, on_delivery=lambda err, m: delivered.append(m.offset()))
    assert p.flush(30) == 0
    assert delivered == [n // 2]


def test_graceful_restart_loses_nothing(broker) -> None:
    from confluent_kafka import Producer

    topic, n = "restart-data", 5000
    create_topic(broker, topic, 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(n):
        key, value, headers = record(i)
        p.produce(topic, key=key, value=value, headers=headers or None, partition=i % 3)
    assert p.flush(60) == 0
    broker.restart()
    check_messages(consume_all_confluent(broker, topic, n), n, 3)
