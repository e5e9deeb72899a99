"""Spark's stock Kafka connector (spark-sql-kafka-0-10 4.0.0, PySpark local[2]) against a real Apache
Kafka and against Odradek: batch reads (earliest/latest, per-partition JSON offsets, timestamps,
headers), streaming reads (maxOffsetsPerTrigger + availableNow, restart from the checkpoint,
failOnDataLoss after DeleteRecords), read_committed over transactions (batch and stream) and the
sink. One SparkSession for all of it (tests/support).

Test data is produced with librdkafka (fast, no JVM) at explicit partitions and timestamps, so every
expected row set is known exactly.
"""

from __future__ import annotations

import json

import pytest

from tests.support.java_tools import shared_spark
from tests.support.real_kafka import FETCH, PRODUCE, TARGETS, create_topic, open_target, unique

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark():
    return shared_spark()


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory, spark):
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


def produce(target, topic: str, partitions: int, per_partition: int, first: int = 0) -> None:
    """Record i of partition p: key k<p>-<i>, value v<p>-<i>, timestamp BASE_TS + i*1000, header seq=i."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for part in range(partitions):
        for i in range(first, first + per_partition):
            p.produce(topic, key=f"k{part}-{i}", value=f"v{part}-{i}", partition=part, timestamp=BASE_TS + i * 1000,
                      headers=[("seq", str(i).encode())], on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors


def batch(spark, target, topic: str, **options: str):
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", target.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def values(df) -> list[str]:
    return sorted(r.v for r in df.selectExpr("cast(value as string) as v").collect())


def stream_values(spark, path: str) -> list[str]:
    return sorted(r.v for r in spark.read.parquet(path).collect())


def prepared(target, partitions: int = 3, per_partition: int = 10) -> str:
    target.require(*PRODUCE, *FETCH)
    topic = unique("spark")
    create_topic(target, topic, partitions=partitions)
    produce(target, topic, partitions, per_partition)
    return topic


def test_batch_earliest_latest_and_partition_offsets(spark, target) -> None:
    topic = prepared(target)
    rows = batch(spark, target, topic).collect()  # defaults: earliest → latest
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in range(10)]
    assert all(r.key.decode() == f"k{r.partition}-{r.offset}" and r.timestamp.timestamp() * 1000 ==
               BASE_TS + r.offset * 1000 for r in rows)
    with pytest.raises(Exception, match="starting offset can't be latest"):
        batch(spark, target, topic, startingOffsets="latest").count()
    start = json.dumps({topic: {"0": 5, "1": -2, "2": 9}})  # -2 = earliest
    end = json.dumps({topic: {"0": 8, "1": 2, "2": -1}})  # -1 = latest
    got = values(batch(spark, target, topic, startingOffsets=start, endingOffsets=end))
    assert got == sorted(["v0-5", "v0-6", "v0-7", "v1-0", "v1-1", "v2-9"])


def test_batch_by_timestamp_and_headers(spark, target) -> None:
    topic = prepared(target, partitions=2)
    df = batch(spark, target, topic, startingTimestamp=str(BASE_TS + 7000), endingTimestamp=str(BASE_TS + 9000))
    assert values(df) == ["v0-7", "v0-8", "v1-7", "v1-8"]
    by_partition = json.dumps({topic: {"0": BASE_TS + 8000, "1": BASE_TS + 1500}})
    assert len(values(batch(spark, target, topic, startingOffsetsByTimestamp=by_partition))) == 2 + 8
    rows = batch(spark, target, topic, includeHeaders="true").collect()
    assert all([(h.key, bytes(h.value).decode()) for h in r.headers] == [("seq", str(r.offset))] for r in rows)


def run_stream(spark, target, topic: str, out: str, checkpoint: str, **options: str):
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", target.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().selectExpr("cast(value as string) as v", "partition", "offset").writeStream
         .format("parquet").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    except Exception:  # a failed query raises here; callers inspect q.exception()
        pass
    return q


def test_stream_max_offsets_per_trigger_and_restart_from_checkpoint(spark, target, tmp_path) -> None:
    topic = prepared(target, partitions=2, per_partition=25)
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")
    q = run_stream(spark, target, topic, out, cp, maxOffsetsPerTrigger="10")
    assert q.exception() is None
    data_batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in data_batches] == [10, 10, 10, 10, 10]
    assert stream_values(spark, out) == sorted(f"v{p}-{i}" for p in range(2) for i in range(25))

    produce(target, topic, 2, 7, first=25)
    q = run_stream(spark, target, topic, out, cp, maxOffsetsPerTrigger="10")
    assert q.exception() is None
    assert sum(p["numInputRows"] for p in q.recentProgress) == 14  # exactly the new records
    assert stream_values(spark, out) == sorted(f"v{p}-{i}" for p in range(2) for i in range(32))


def delete_records(target, topic: str, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, before)]).values():
        assert f.result(30).low_watermark == before


def test_fail_on_data_loss_after_delete_records(spark, target, tmp_path) -> None:
    topic = prepared(target, partitions=1, per_partition=10)
    target.require("DeleteRecords")
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")
    assert run_stream(spark, target, topic, out, cp).exception() is None
    produce(target, topic, 1, 10, first=10)
    delete_records(target, topic, 15)  # records 10..14 are gone before the stream saw them

    q = run_stream(spark, target, topic, str(tmp_path / "out-strict"), str(tmp_path / "cp-strict-unused"),
                   startingOffsets=json.dumps({topic: {"0": 10}}))
    assert q.exception() is not None and "data" in str(q.exception()).lower()

    q = run_stream(spark, target, topic, out, cp, failOnDataLoss="false")
    assert q.exception() is None
    assert stream_values(spark, out) == sorted([f"v0-{i}" for i in range(10)] + [f"v0-{i}" for i in range(15, 20)])


def test_sink_keys_headers_explicit_partition(spark, target) -> None:
    target.require(*PRODUCE, *FETCH)
    topic = unique("sink")
    create_topic(target, topic, partitions=3)
    rows = [(f"key{i}", f"value{i}", i % 3, [("h", f"x{i}".encode())]) for i in range(12)]
    df = spark.createDataFrame(rows, "key string, value string, partition int, headers array<struct<key:string,value:binary>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", target.bootstrap).option("topic", topic)
     .option("includeHeaders", "true").save())
    back = batch(spark, target, topic, includeHeaders="true").collect()
    got = sorted((r.key.decode(), r.value.decode(), r.partition, [(h.key, bytes(h.value)) for h in r.headers])
                 for r in back)
    assert got == sorted((k, v, p, h) for k, v, p, h in rows)
    # per partition, offsets are dense from 0
    for p in range(3):
        assert sorted(r.offset for r in back if r.partition == p) == list(range(4))


def produce_transactions(target, topic: str, txn_id: str) -> None:
    """Three confluent-kafka transactions over both partitions: c0 committed, a1 aborted, c2
    committed; transaction t's record i of partition p has value <t>-p<p>-<i>."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    for name, commit in (("c0", True), ("a1", False), ("c2", True)):
        p.begin_transaction()
        for part in range(2):
            for i in range(4):
                p.produce(topic, value=f"{name}-p{part}-{i}", partition=part)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # the aborted records are in the log, under an ABORT marker
            p.abort_transaction(30)


def test_read_committed_sees_only_committed_transactions(spark, target, tmp_path) -> None:
    """kafka.isolation.level=read_committed: the committed transactions' rows, none of the aborted
    one's (and no markers), in a batch read and a stream over the offset gaps the markers and the
    aborted records leave; read_uncommitted (Spark's default) shows the aborted rows too."""
    target.require(*PRODUCE, *FETCH, "FindCoordinator", "AddPartitionsToTxn", "EndTxn")
    topic = unique("spark-txn")
    create_topic(target, topic, partitions=2)
    produce_transactions(target, topic, unique("spark-tx"))
    every = {t: [f"{t}-p{p}-{i}" for p in range(2) for i in range(4)] for t in ("c0", "a1", "c2")}
    committed = batch(spark, target, topic, **{"kafka.isolation.level": "read_committed"})
    assert values(committed) == sorted(every["c0"] + every["c2"])
    assert values(batch(spark, target, topic)) == sorted(every["c0"] + every["a1"] + every["c2"])
    out = str(tmp_path / "out")
    q = run_stream(spark, target, topic, out, str(tmp_path / "cp"), **{"kafka.isolation.level": "read_committed"})
    assert q.exception() is None
    assert stream_values(spark, out) == sorted(every["c0"] + every["c2"])
