"""The PySpark pipeline end to end, against a real Apache Kafka and against Odradek.

Generate events (valid, duplicated and deliberately bad), run the pipeline with trigger availableNow,
then check — against results computed here independently in plain Python — every aggregate row in
the output topic and in Parquet, and every dead letter. Then produce a second slice of the stream
and run again from the same checkpoints: exactly the newly closed windows appear, nothing twice.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from tests.support.java_tools import shared_spark
from tests.support.real_kafka import FETCH, PRODUCE, TARGETS, create_topic, open_target, unique

WINDOW = timedelta(minutes=1)
WATERMARK = timedelta(seconds=30)


@pytest.fixture(scope="module")
def spark():
    return shared_spark()


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory, spark):
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


def parse_time(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def expected_windows(records) -> dict[tuple[str, str], dict]:
    """Closed windows for the valid records sent so far: dedupe by event_id, tumbling 1-minute
    windows per user, closed when window end <= max(event_time) - watermark."""
    seen: set[str] = set()
    rows: dict[tuple[str, datetime], dict] = {}
    max_time = None
    for r in records:
        e = r.event
        if e is None or e["event_id"] in seen:
            continue
        seen.add(e["event_id"])
        t = parse_time(e["event_time"])
        max_time = t if max_time is None else max(max_time, t)
        start = t.replace(second=0, microsecond=0)
        row = rows.setdefault((e["user_id"], start), {
            "event_count": 0, "view_count": 0, "click_count": 0, "purchase_count": 0, "refund_count": 0,
            "purchase_amount": Decimal("0.00"), "refund_amount": Decimal("0.00")})
        row["event_count"] += 1
        row[f"{e['event_type']}_count"] += 1
        if e["event_type"] in ("purchase", "refund"):
            row[f"{e['event_type']}_amount"] += e["amount"]
    watermark = max_time - WATERMARK
    return {(u, s.strftime("%Y-%m-%dT%H:%M:%S.000Z")): v for (u, s), v in rows.items() if s + WINDOW <= watermark}


def read_topic(spark, target, topic: str) -> list:
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", target.bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load()
            .selectExpr("cast(key as string) as key", "cast(value as string) as value", "headers").collect())


def kafka_rows(spark, target, topic: str) -> list[tuple[tuple[str, str], dict]]:
    out = []
    for r in read_topic(spark, target, topic):
        v = json.loads(r.value, parse_float=Decimal)
        assert r.key == v["user_id"]
        assert parse_time(v["window_end"]) - parse_time(v["window_start"]) == WINDOW
        out.append(((v.pop("user_id"), v.pop("window_start")), {k: x for k, x in v.items() if k != "window_end"}))
    return out


def parquet_rows(spark, path: str) -> list[tuple[tuple[str, str], dict]]:
    out = []
    for r in spark.read.parquet(path).collect():
        d = r.asDict()
        start = d.pop("window_start").replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        d.pop("window_end")
        out.append(((d.pop("user_id"), start), d))
    return out


def as_map(rows):
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys)), "an aggregate row was written twice"
    return dict(rows)


def test_pipeline_end_to_end_with_restart(spark, target, tmp_path) -> None:
    from pipeline import generate
    from pipeline.job import PipelineConfig, run

    target.require(*PRODUCE, *FETCH)
    events, output, dlq = unique("events"), unique("activity"), unique("dlq")
    create_topic(target, events, partitions=3)
    create_topic(target, output)
    create_topic(target, dlq)
    cfg = PipelineConfig(bootstrap=target.bootstrap, input_topic=events, output_topic=output, dlq_topic=dlq,
                         parquet_dir=str(tmp_path / "parquet"), checkpoint_dir=str(tmp_path / "checkpoints"))

    # Phase 1: 4 minutes of event time at 2 events/s.
    first = generate.generate(480, seed=7, users=6, bad_ratio=0.05, duplicate_ratio=0.03, rate=2.0)
    assert {r.error for r in first if r.error} == set(generate.BAD_KINDS.values())
    generate.produce(target.bootstrap, events, first)
    rows = run(spark, cfg, timeout_s=240)
    assert rows["dead-letters"] == len(first)

    want = expected_windows(first)
    assert len(want) >= 6 * 3  # sanity: several closed windows per user
    assert as_map(kafka_rows(spark, target, output)) == want
    assert as_map(parquet_rows(spark, cfg.parquet_dir)) == want

    bad = [r for r in first if r.error]
    letters = read_topic(spark, target, dlq)
    assert Counter(json.loads(r.value)["error"] for r in letters) == Counter(r.error for r in bad)
    assert sorted(json.loads(r.value)["raw"] for r in letters) == sorted(r.value.decode() for r in bad)
    assert all([(h.key, bytes(h.value).decode()) for h in r.headers] == [("error", json.loads(r.value)["error"])]
               for r in letters)

    # Phase 2: the stream continues; rerun from the same checkpoints.
    second = generate.generate(240, seed=8, users=6, bad_ratio=0.05, duplicate_ratio=0.03, rate=2.0,
                               first_index=480)
    generate.produce(target.bootstrap, events, second)
    rows = run(spark, cfg, timeout_s=240)
    assert rows["dead-letters"] == len(second)  # resumed at the committed offsets, not from earliest

    want = expected_windows(first + second)
    assert as_map(kafka_rows(spark, target, output)) == want
    assert as_map(parquet_rows(spark, cfg.parquet_dir)) == want
    assert len(read_topic(spark, target, dlq)) == sum(1 for r in first + second if r.error)
