"""A topic's compression.type through real clients: what each producer sends in each codec is stored in
the topic's codec (read from the .log segment files), and every client reads the same records back.

Kafka's rules (LogValidator, BrokerCompressionType): ``producer`` keeps the producer's codec; any other
value stores that codec (``uncompressed`` = 0, gzip 1, snappy 2, lz4 3, zstd 4 in the attributes' low
bits); the batch keeps its producer id, epoch and sequence numbers, so idempotence and transactions work
as on any topic; transaction markers are never compressed; the cleaner keeps a batch's codec. The
comparison test runs the same table against a real Kafka broker and Odradek.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.records import Record, RecordBatch, encode_batch, iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import JavaDriver
from tests.support.real_kafka import TARGETS, open_target, unique
from tests.support.real_kafka import create_topic as create_target_topic
from tests.support.wire import WireClient

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TOPIC_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CLIENTS = ["confluent", "kafka-python", "aiokafka", "java"]
PER_RUN = 20


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Any:
    b = BrokerProcess(tmp_path_factory.mktemp("recompression"), overrides={"log.cleaner.backoff.ms": "200"})
    b.start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def java(shared) -> Any:
    with JavaDriver(shared.bootstrap) as d:
        yield d


def create(broker: Any, name: str, partitions: int = 1, **configs: str) -> None:
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                              "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                 "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp


def stored(data_dir: Path, topic: str, partition: int = 0) -> list[RecordBatch]:
    """The batches of the partition's .log segment files, CRCs checked, nothing left over."""
    d = data_dir / "logs" / f"{topic}-{partition}"
    raw = b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
    return list(iter_batches(raw, allow_partial=False))


def run_records(run: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(key, value, headers) of one producer run; compressible values, so every codec shrinks them
    (librdkafka sends a batch uncompressed when compressing does not)."""
    return [(f"{run}|k{i % 5}", f"{run}|{i} " + "the same words again, " * 12, [("run", run), ("i", str(i))])
            for i in range(PER_RUN)]


# --- producing with each client ------------------------------------------------------------------------


def produce_confluent(broker: Any, topics: list[str], codec: str, run: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50,
                  "enable.idempotence": True, "acks": "all"})
    errors: list = []
    for topic in topics:
        for key, value, headers in run_records(run):
            p.produce(topic, key=key.encode(), value=value.encode(), headers=[(k, v.encode()) for k, v in headers],
                      on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def produce_kafka_python(broker: Any, topics: list[str], codec: str, run: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=50, acks="all")
    futures = [p.send(topic, key=key.encode(), value=value.encode(), headers=[(k, v.encode()) for k, v in headers])
               for topic in topics for key, value, headers in run_records(run)]
    p.flush()
    for f in futures:
        f.get(timeout=30)
    p.close()


def produce_aiokafka(broker: Any, topics: list[str], codec: str, run: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=50, acks="all")
        await p.start()
        try:
            sent = [await p.send(topic, key=key.encode(), value=value.encode(),
                                 headers=[(k, v.encode()) for k, v in headers])
                    for topic in topics for key, value, headers in run_records(run)]
            await asyncio.gather(*sent)
        finally:
            await p.stop()

    asyncio.run(go())


def produce_java(java: JavaDriver, topics: list[str], codec: str, run: str) -> None:
    records = [{"key": k, "value": v, "headers": dict(h)} for k, v, h in run_records(run)]
    for topic in topics:
        assert java.call("produce", topic=topic, records=records, compression=codec, linger_ms=50)["sent"] == PER_RUN


# --- reading with each client --------------------------------------------------------------------------

Row = tuple[str | None, str, list[tuple[str, str]]]


def text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def read_confluent(broker: Any, topic: str, n: int, isolation: str = "read_uncommitted") -> list[Row]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rd-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[Row] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(500, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((text(m.key()), m.value().decode(), [(k, v.decode()) for k, v in m.headers() or []]))
    c.close()
    return got


def read_kafka_python(broker: Any, topic: str, n: int) -> list[Row]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    got: list[Row] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=500).values():
            got.extend((text(m.key), m.value.decode(), [(k, v.decode()) for k, v in m.headers]) for m in msgs)
    c.close()
    return got


def read_aiokafka(broker: Any, topic: str, n: int) -> list[Row]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> list[Row]:
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0)])
            got: list[Row] = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got.extend((text(m.key), m.value.decode(), [(k, v.decode()) for k, v in m.headers])
                               for m in msgs)
            return got
        finally:
            await c.stop()

    return asyncio.run(go())


def read_java(java: JavaDriver, topic: str, n: int, isolation: str = "read_uncommitted") -> list[Row]:
    result = java.call("consume_assign", topic=topic, max_records=n, timeout_ms=30000,
                       config={"isolation.level": isolation})
    return [(r["key"], r["value"], [tuple(h) for h in r["headers"]]) for r in result["records"]]


# --- the tests -------------------------------------------------------------------------------------------


def test_every_client_and_codec_is_stored_in_the_topics_codec_and_read_back_by_every_client(shared, java) -> None:
    tag = uuid.uuid4().hex[:6]
    topics = {target: f"rc-{target}-{tag}" for target in TOPIC_CODECS}
    for target, topic in topics.items():
        create(shared, topic, **({} if target == "producer" else {"compression.type": target}))
    runs = []
    for client in CLIENTS:
        for codec in CODEC_IDS:
            run = f"{client.replace('-', '_')}.{codec}"
            runs.append(run)
            if client == "java":
                produce_java(java, list(topics.values()), codec, run)
            else:
                {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
                 "aiokafka": produce_aiokafka}[client](shared, list(topics.values()), codec, run)
    expected = [row for run in runs for row in run_records(run)]
    for target, topic in topics.items():
        batches = stored(shared.data_dir, topic)
        assert sum(len(b.records) for b in batches) == len(expected)
        for b in batches:
            run = b.records[0].value.decode().split("|", 1)[0]
            codec = TOPIC_CODECS[target]
            want = CODEC_IDS[run.split(".")[1]] if codec is None else codec
            assert (target, run, b.compression) == (target, run, want)
            assert b.producer_id >= 0 or run.startswith(("kafka_python", "aiokafka"))  # idempotent: ids kept
        assert read_confluent(shared, topic, len(expected)) == expected, target
        assert read_kafka_python(shared, topic, len(expected)) == expected, target
        assert read_aiokafka(shared, topic, len(expected)) == expected, target
        assert read_java(java, topic, len(expected)) == expected, target


def test_pipelined_idempotent_batches_keep_their_order_and_sequences(shared) -> None:
    """librdkafka with 5 requests in flight per connection and small batches, lz4 to a zstd topic: every
    append rebuilt off the handler loop lands in order, no sequence error, sequences contiguous."""
    from confluent_kafka import Producer

    topic = f"rc-idem-{uuid.uuid4().hex[:6]}"
    create(shared, topic, **{"compression.type": "zstd"})
    p = Producer({"bootstrap.servers": shared.bootstrap, "compression.type": "lz4", "enable.idempotence": True,
                  "acks": "all", "linger.ms": 0, "batch.num.messages": 20, "max.in.flight.requests.per.connection": 5})
    errors: list = []
    n = 20_000
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%08d " % i + b"pipelined " * 10, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0 and not errors, errors[:3]
    batches = stored(shared.data_dir, topic)
    assert len(batches) > 100  # many small batches, so many requests were in flight at once
    assert {b.compression for b in batches} == {4}
    assert len({b.producer_id for b in batches}) == 1
    assert [b.base_sequence for b in batches] == [0] + [b.last_sequence + 1 for b in batches[:-1]]
    assert [int(r.value[:8]) for b in batches for r in b.records] == list(range(n))


def test_a_retried_idempotent_batch_is_a_duplicate_and_stored_once(shared) -> None:
    topic = f"rc-dup-{uuid.uuid4().hex[:6]}"
    create(shared, topic, **{"compression.type": "gzip"})
    with WireClient(shared.host, shared.port) as c:
        init = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def produce(batch: bytes) -> dict:
            return c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})["responses"][0][
                "partition_responses"][0]

        def batch(seq: int, codec: int) -> bytes:
            return encode_batch([Record(timestamp=1, value=b"v%d" % (seq + i) * 30) for i in range(3)],
                                compression=codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        first = produce(batch(0, 3))
        retry = produce(batch(0, 3))  # the same batch again, as a producer retries one it got no answer for
        assert (first["error_code"], first["base_offset"]) == (retry["error_code"], retry["base_offset"]) == (0, 0)
        assert produce(batch(5, 3))["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(batch(3, 4))["base_offset"] == 3
    batches = stored(shared.data_dir, topic)
    assert [(b.base_offset, b.compression, b.producer_id, b.base_sequence) for b in batches] == [
        (0, 1, pid, 0), (3, 1, pid, 3)]


def test_requests_pipelined_on_one_connection_land_in_order_whichever_need_a_rebuild(shared) -> None:
    """A batch already in the topic's codec needs no rebuild yet waits behind one that does."""
    topic = f"rc-order-{uuid.uuid4().hex[:6]}"
    create(shared, topic, **{"compression.type": "zstd"})
    codecs = [3, 4, 0, 4, 1, 2, 4, 4, 3, 0] * 5
    with WireClient(shared.host, shared.port) as c:
        sent = []
        for i, codec in enumerate(codecs):
            batch = encode_batch([Record(timestamp=1, value=b"r%03d-%d" % (i, j) * 200) for j in range(4)],
                                 compression=codec)
            corr, frame = c.encode_request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                                   "topic_data": [{"name": topic, "partition_data": [
                                                       {"index": 0, "records": batch}]}]})
            c.send_raw(frame)
            sent.append(corr)
        answers = [c.read_response(0, 9, corr)["responses"][0]["partition_responses"][0] for corr in sent]
    assert [(a["error_code"], a["base_offset"]) for a in answers] == [(0, 4 * i) for i in range(len(codecs))]
    batches = stored(shared.data_dir, topic)
    assert {b.compression for b in batches} == {4}
    assert [b.records[0].value[:4] for b in batches] == [b"r%03d" % i for i in range(len(codecs))]


def test_transactions_commit_and_abort_across_recompression(shared, java) -> None:
    """librdkafka's and the Java client's transactions (lz4) on a gzip topic: data batches stored gzip and
    transactional, markers uncompressed control batches, read_committed sees exactly the committed."""
    from confluent_kafka import Producer

    topic = f"rc-txn-{uuid.uuid4().hex[:6]}"
    create(shared, topic, **{"compression.type": "gzip"})
    p = Producer({"bootstrap.servers": shared.bootstrap, "transactional.id": f"rc-{topic}", "linger.ms": 5,
                  "compression.type": "lz4"})
    p.init_transactions(30)
    for outcome, prefix in (("commit", "c1"), ("abort", "a1"), ("commit", "c2")):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, key=b"k", value=f"{prefix}-{i} ".encode() * 20)
        p.flush(30)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(30)
    java.call("txn_produce", transactional_id=f"rc-java-{topic}", topic=topic, count=10, value_prefix="j-abort-",
              commit=False, config={"compression.type": "lz4"})
    java.call("txn_produce", transactional_id=f"rc-java-{topic}", topic=topic, count=10, value_prefix="j-commit-",
              commit=True, config={"compression.type": "lz4"})
    committed = [f"{prefix}-{i} " * 20 for prefix in ("c1", "c2") for i in range(10)] + \
        [f"j-commit-{i}" for i in range(10)]
    # EndTxn is answered once the outcome is prepared; the markers are written after it, as Kafka's
    # transaction coordinator writes them (the fresh-clone run at 87936c8 read the log before the fifth).
    deadline = time.monotonic() + 10
    while len([b for b in stored(shared.data_dir, topic) if b.is_control]) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    batches = stored(shared.data_dir, topic)
    data = [b for b in batches if not b.is_control]
    markers = [b for b in batches if b.is_control]
    assert data and {(b.compression, b.is_transactional) for b in data} == {(1, True)}
    assert len(markers) == 5 and {(b.compression, b.is_transactional) for b in markers} == {(0, True)}
    assert [v for _, v, _ in read_confluent(shared, topic, 30, "read_committed")] == committed
    assert [v for _, v, _ in read_java(java, topic, 30, "read_committed")] == committed
    assert len(read_confluent(shared, topic, 50)) == 50  # read_uncommitted: the aborted records too


def test_compaction_of_recompressed_batches(shared) -> None:
    topic = f"rc-compact-{uuid.uuid4().hex[:6]}"
    create(shared, topic, **{"compression.type": "zstd", "cleanup.policy": "compact", "segment.bytes": "2048",
                             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    latest: dict[bytes, bytes] = {}
    with WireClient(shared.host, shared.port) as c:
        for round_ in range(40):
            records = [Record(timestamp=1, key=b"key-%d" % k, value=b"round %d of key %d " % (round_, k) * 8)
                       for k in range(5)]
            latest.update((r.key, r.value) for r in records)
            resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": encode_batch(records, compression=3)}]}]})
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0

    def cleaned() -> list[RecordBatch] | None:
        batches = stored(shared.data_dir, topic)
        keys = [r.key for b in batches for r in b.records]
        return batches if len(keys) < 200 and sorted(set(keys)) == sorted(latest) else None

    deadline = time.monotonic() + 30
    while (batches := cleaned()) is None:
        assert time.monotonic() < deadline, "the cleaner did not compact the topic within 30 s"
        time.sleep(0.1)
    # The cleaner keeps a batch's codec; an empty batch it keeps is a bare header (codec none), as Kafka's.
    assert {b.compression for b in batches if b.records} == {4}
    assert {(b.compression, b.size) for b in batches if not b.records} <= {(0, 61)}
    values: dict[bytes, bytes] = {}
    for r in (r for b in batches for r in b.records):
        values[r.key] = r.value
    assert values == latest
    read_back: dict[bytes, bytes] = {}
    for k, v, _ in read_confluent(shared, topic, sum(len(b.records) for b in batches)):
        read_back[k.encode()] = v.encode()
    assert read_back == latest


# --- the same table against a real Kafka broker ----------------------------------------------------------


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory) -> Any:
    with open_target(request.param, tmp_path_factory.mktemp(f"rc-{request.param}")) as t:
        yield t


# (topic compression.type, producer codec, stored codec): Kafka's rules.
KAFKA_TABLE = [
    ("producer", "lz4", 3), ("producer", "none", 0), ("zstd", "lz4", 4), ("zstd", "none", 4), ("zstd", "zstd", 4),
    ("gzip", "snappy", 1), ("snappy", "gzip", 2), ("lz4", "zstd", 3), ("uncompressed", "gzip", 0),
    ("uncompressed", "none", 0),
]


def test_the_stored_codec_is_what_kafka_stores(target) -> None:
    target.require("Produce", "Fetch", "CreateTopics", "Metadata", "InitProducerId")
    data_dir = Path(target.broker.data_dir)
    with JavaDriver(target.bootstrap) as driver:
        for topic_codec, producer_codec, want in KAFKA_TABLE:
            topic = unique(f"rc-{topic_codec}-{producer_codec}")
            create_target_topic(target, topic, 1, {} if topic_codec == "producer" else {"compression.type": topic_codec})
            records = [{"key": f"k{i}", "value": f"value {i} " * 30, "headers": {"h": str(i)}} for i in range(50)]
            driver.call("produce", topic=topic, records=records, compression=producer_codec, linger_ms=50)
            batches = stored(data_dir, topic)
            assert [b.compression for b in batches] == [want] * len(batches), (target.name, topic_codec, producer_codec)
            assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)
            assert [(r.key, r.value, r.headers) for b in batches for r in b.records] == [
                (r["key"].encode(), r["value"].encode(), [("h", r["headers"]["h"].encode())]) for r in records]
            back = driver.call("consume_assign", topic=topic, max_records=50, timeout_ms=30000)["records"]
            assert [(r["key"], r["value"]) for r in back] == [(r["key"], r["value"]) for r in records]
