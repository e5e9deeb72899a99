"""The streaming job: three Structured Streaming queries over one events topic.

    events topic ──► parse + validate (events.py)
                      ├─ invalid ─► dead-letter topic: key = original key, value = JSON
                      │             {error, raw, topic, partition, offset}, header "error" = reason
                      └─ valid ───► watermark on event_time ─► drop duplicate event_ids within the
                                    watermark ─► per user_id, tumbling event-time windows:
                                    event_count, view/click/purchase/refund counts,
                                    purchase_amount, refund_amount (decimal, exact)
                                    ├─► output topic: key = user_id, value = JSON row
                                    └─► Parquet files (one row per user and window)

Aggregates use append mode: a window's row is written once, when the watermark (max event_time seen
minus ``watermark``) passes the window's end, and is final. Events older than the watermark when they
arrive are dropped by Spark, as append mode requires.

Each query has its own checkpoint under ``checkpoint_dir`` (dead-letters, aggregates-kafka,
aggregates-parquet): after a crash or a stop, rerunning with the same directories resumes from the
committed Kafka offsets and state, so the Parquet sink is exactly-once and the Kafka sinks are
at-least-once (Spark's Kafka sink has no transactions).

Who may call it: the Spark driver's main thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pipeline import events


@dataclass
class PipelineConfig:
    bootstrap: str
    input_topic: str = "events"
    output_topic: str = "user-activity"
    dlq_topic: str = "events-dlq"
    parquet_dir: str = "pipeline-out/parquet"
    checkpoint_dir: str = "pipeline-out/checkpoints"
    window: str = "1 minute"
    watermark: str = "30 seconds"
    starting_offsets: str = "earliest"
    # "available-now": process what is in the topic, emit, stop. "processing:<interval>": run forever.
    trigger: str = "available-now"
    max_offsets_per_trigger: int | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)


def read_events(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", cfg.bootstrap)
              .option("subscribe", cfg.input_topic)
              .option("startingOffsets", cfg.starting_offsets))
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for k, v in cfg.kafka_options.items():
        reader = reader.option(k, v)
    return reader.load()


def validate(raw: DataFrame) -> DataFrame:
    """Kafka rows → (key, raw, topic, partition, offset, e: parsed event, error)."""
    with_text = raw.select("key", F.col("value").cast("string").alias("raw"), "topic", "partition", "offset")
    with_event = (with_text.withColumn("e", events.parsed(F.col("raw")))
                  .withColumn("loose", events.loosely_parsed(F.col("raw"))))
    return with_event.withColumn("error", events.error(F.col("e"), F.col("loose"))).drop("loose")


def dead_letters(validated: DataFrame) -> DataFrame:
    bad = validated.where(F.col("error").isNotNull())
    return bad.select(
        F.col("key"),
        F.to_json(F.struct("error", "raw", "topic", "partition", "offset")).alias("value"),
        F.array(F.struct(F.lit("error").alias("key"), F.encode(F.col("error"), "UTF-8").alias("value"))).alias("headers"),
    )


def _amount_if(kind: str) -> F.Column:
    return F.coalesce(F.sum(F.when(F.col("event_type") == kind, F.col("amount"))), F.lit(0).cast("decimal(22,2)"))


def aggregates(validated: DataFrame, cfg: PipelineConfig) -> DataFrame:
    good = validated.where(F.col("error").isNull()).select(
        F.col("e.event_id").alias("event_id"), F.col("e.user_id").alias("user_id"),
        F.col("e.event_type").alias("event_type"), F.col("e.amount").alias("amount"),
        events.event_time(F.col("e")).alias("event_time"))
    deduped = good.withWatermark("event_time", cfg.watermark).dropDuplicatesWithinWatermark(["event_id"])
    counts = [F.count(F.when(F.col("event_type") == t, True)).alias(f"{t}_count") for t in events.EVENT_TYPES]
    agg = deduped.groupBy(F.window("event_time", cfg.window).alias("w"), "user_id").agg(
        F.count(F.lit(1)).alias("event_count"), *counts,
        _amount_if("purchase").alias("purchase_amount"), _amount_if("refund").alias("refund_amount"))
    return agg.select("user_id", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                      "event_count", *[f"{t}_count" for t in events.EVENT_TYPES], "purchase_amount", "refund_amount")


def as_kafka_rows(agg: DataFrame) -> DataFrame:
    return agg.select(F.col("user_id").alias("key"),
                      F.to_json(F.struct(*[F.col(c) for c in agg.columns]), {"timestampFormat": events.EVENT_TIME_FORMAT})
                      .alias("value"))


def _trigger(writer, cfg: PipelineConfig):
    if cfg.trigger == "available-now":
        return writer.trigger(availableNow=True)
    if cfg.trigger.startswith("processing:"):
        return writer.trigger(processingTime=cfg.trigger.split(":", 1)[1])
    raise ValueError(f"unknown trigger {cfg.trigger!r}")


def start(spark: SparkSession, cfg: PipelineConfig) -> list[StreamingQuery]:
    """Start the three queries (not waiting for them)."""
    checkpoints = Path(cfg.checkpoint_dir)
    kafka_out = {f"kafka.{k}" if not k.startswith("kafka.") else k: v
                 for k, v in cfg.kafka_options.items() if k.startswith("kafka.")}
    validated = validate(read_events(spark, cfg))
    queries = []

    dlq = (dead_letters(validated).writeStream.format("kafka").queryName("dead-letters")
           .option("kafka.bootstrap.servers", cfg.bootstrap).option("topic", cfg.dlq_topic)
           .option("checkpointLocation", str(checkpoints / "dead-letters")).options(**kafka_out))
    queries.append(_trigger(dlq, cfg).start())

    agg = aggregates(validated, cfg)
    to_kafka = (as_kafka_rows(agg).writeStream.format("kafka").queryName("aggregates-kafka").outputMode("append")
                .option("kafka.bootstrap.servers", cfg.bootstrap).option("topic", cfg.output_topic)
                .option("checkpointLocation", str(checkpoints / "aggregates-kafka")).options(**kafka_out))
    queries.append(_trigger(to_kafka, cfg).start())

    to_parquet = (agg.writeStream.format("parquet").queryName("aggregates-parquet").outputMode("append")
                  .option("path", cfg.parquet_dir)
                  .option("checkpointLocation", str(checkpoints / "aggregates-parquet")))
    queries.append(_trigger(to_parquet, cfg).start())
    return queries


@dataclass
class RunReport:
    """What each query (by name) did in one run: the records it read, and the rows its sink wrote
    (None where the sink does not count them: Spark's file sink, the Parquet query's)."""

    input_rows: dict[str, int]
    output_rows: dict[str, int | None]


def run_report(spark: SparkSession, cfg: PipelineConfig, timeout_s: float | None = None) -> RunReport:
    """Start the queries and wait: until all finish (available-now) or until one fails/stops.
    A failed query raises its exception."""
    queries = start(spark, cfg)
    try:
        for q in queries:
            q.awaitTermination(timeout_s)
            if q.exception() is not None:
                raise RuntimeError(f"query {q.name} failed: {q.exception()}")
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    inputs = {q.name: sum(int(p["numInputRows"]) for p in q.recentProgress) for q in queries}
    outputs: dict[str, int | None] = {}
    for q in queries:
        counts = [int(p["sink"].get("numOutputRows", -1)) for p in q.recentProgress]
        outputs[q.name] = None if any(c < 0 for c in counts) else sum(counts)
    return RunReport(inputs, outputs)


def run(spark: SparkSession, cfg: PipelineConfig, timeout_s: float | None = None) -> dict[str, int]:
    """``run_report``'s input rows: the number of records each query read."""
    return run_report(spark, cfg, timeout_s).input_rows
