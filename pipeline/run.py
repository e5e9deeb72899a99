"""Run the pipeline: ``python -m pipeline.run --bootstrap localhost:9092`` (or ``make pipeline``).

By default it processes everything in the events topic (trigger availableNow), writes the aggregates
and dead letters, and exits; ``--trigger processing:10s`` keeps it running. ``--master`` (or
$SPARK_MASTER) selects a cluster instead of local[2]; the Kafka connector jars come from the Maven
cache (.cache/jars/spark, built on first use). Exit status 0 when every query finished cleanly; the
last lines say what was read and where each result went (topics, the Parquet directory, checkpoints).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.generate import create_topic
from pipeline.job import PipelineConfig, RunReport, run_report
from pipeline.spark_session import build_session


def parse_args(argv: list[str] | None) -> tuple[PipelineConfig, str | None]:
    d = PipelineConfig(bootstrap="localhost:9092")
    ap = argparse.ArgumentParser(prog="python -m pipeline.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=d.bootstrap)
    ap.add_argument("--input-topic", default=d.input_topic)
    ap.add_argument("--output-topic", default=d.output_topic)
    ap.add_argument("--dlq-topic", default=d.dlq_topic)
    ap.add_argument("--parquet-dir", default=d.parquet_dir)
    ap.add_argument("--checkpoint-dir", default=d.checkpoint_dir)
    ap.add_argument("--window", default=d.window, help="tumbling event-time window, e.g. '1 minute'")
    ap.add_argument("--watermark", default=d.watermark, help="allowed lateness, e.g. '30 seconds'")
    ap.add_argument("--starting-offsets", default=d.starting_offsets)
    ap.add_argument("--trigger", default=d.trigger, help="available-now | processing:<interval>")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--master", default=None, help="Spark master (default $SPARK_MASTER or local[2])")
    a = ap.parse_args(argv)
    cfg = PipelineConfig(bootstrap=a.bootstrap, input_topic=a.input_topic, output_topic=a.output_topic,
                         dlq_topic=a.dlq_topic, parquet_dir=a.parquet_dir, checkpoint_dir=a.checkpoint_dir,
                         window=a.window, watermark=a.watermark, starting_offsets=a.starting_offsets,
                         trigger=a.trigger, max_offsets_per_trigger=a.max_offsets_per_trigger)
    return cfg, a.master


def main(argv: list[str] | None = None) -> int:
    cfg, master = parse_args(argv)
    # The sinks need their topics; brokers with auto-creation off (Odradek's default) would refuse them.
    for topic in (cfg.output_topic, cfg.dlq_topic):
        create_topic(cfg.bootstrap, topic, partitions=1)
    spark = build_session("odradek-pipeline", master=master)
    try:
        report = run_report(spark, cfg)
    finally:
        spark.stop()
    print(summary(cfg, report))
    return 0


def summary(cfg: PipelineConfig, report: RunReport) -> str:
    """Where this run's results went, for the person who ran it."""

    def rows(name: str) -> str:
        n = report.output_rows.get(name)
        return "" if n is None else f"{n} "

    return "\n".join([
        f"pipeline: read {report.input_rows.get('dead-letters', 0)} new records from topic {cfg.input_topic} "
        f"at {cfg.bootstrap}",
        f"  invalid records:    {rows('dead-letters')}dead letters in topic {cfg.dlq_topic}",
        f"  window aggregates:  {rows('aggregates-kafka')}rows in topic {cfg.output_topic}, "
        f"and Parquet files in {Path(cfg.parquet_dir).resolve()}",
        f"  checkpoints:        {Path(cfg.checkpoint_dir).resolve()} (the next run continues after these records)",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
