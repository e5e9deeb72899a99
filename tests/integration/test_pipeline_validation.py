"""The pipeline's validation (pipeline/job.validate over pipeline/events), on a batch of raw values in
a local Spark: each bad shape gets the one error pipeline/events.py documents for it, in its order."""

from __future__ import annotations

import json

import pytest

from tests.support.java_tools import shared_spark

VALID = {"event_id": "e-0000001", "user_id": "u-001", "event_type": "purchase", "amount": 12.34,
         "event_time": "2024-05-01T12:00:03.123Z"}


def event(**changes: object) -> str:
    fields = {**VALID, **changes}
    return json.dumps({k: v for k, v in fields.items() if v is not ...})


CASES = [
    (event(), None),
    ("this is not json", "malformed_json"),
    (event()[:25], "malformed_json"),
    ("[1, 2, 3]", "malformed_json"),  # JSON, but not an object
    ('"a string"', "malformed_json"),
    # Valid JSON objects whose amount is of another type: not malformed JSON.
    (event(amount="lots"), "invalid_amount"),
    (event(amount=True), "invalid_amount"),
    (event(amount={"value": 12.34}), "invalid_amount"),
    (event(amount=[12.34]), "invalid_amount"),
    # A missing field is named before a wrong type, in REQUIRED order.
    (event(user_id=..., amount="lots"), "missing_user_id"),
    (event(amount=None), "missing_amount"),
    (event(event_type="teleport"), "unknown_event_type"),
    (event(amount=-1.5), "negative_amount"),
    (event(event_time="yesterday at noon"), "invalid_event_time"),
    # String fields take any JSON value as its text (Spark's reader): a numeric user id is an id.
    (event(user_id=7), None),
]


def test_each_bad_shape_gets_its_documented_error() -> None:
    spark = shared_spark()
    pytest.importorskip("pyspark")
    from pyspark.sql import functions as F

    from pipeline.job import validate

    raw = spark.createDataFrame([(f"k{i}", value, i) for i, (value, _) in enumerate(CASES)], ["key", "value", "offset"])
    rows = validate(raw.select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
                               F.lit("events").alias("topic"), F.lit(0).alias("partition"), "offset")
                    ).orderBy("offset").collect()
    assert [(r.raw, r.error) for r in rows] == CASES
