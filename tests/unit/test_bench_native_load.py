"""bench/native_load.py's arithmetic and bench/report.py's rows for the broker-bound case, without
a broker: how the workers' figures add up, the rate limiter's schedule, and the summary rows."""

from __future__ import annotations

import math

from bench import compare, native_load, report
from bench.native_load import WorkerResult


def test_a_phase_spans_first_start_to_last_end_and_adds_up_the_bytes() -> None:
    results = [WorkerResult(100, 100 * 1024, start=10.0, end=12.0, latencies=[0.001]),
               WorkerResult(50, 50 * 1024, start=10.5, end=14.0, latencies=[0.002, 0.003])]
    phase = native_load.aggregate(results)
    assert (phase.records, phase.bytes, phase.wall_s) == (150, 150 * 1024, 4.0)
    assert sorted(phase.latencies) == [0.001, 0.002, 0.003]
    assert phase.mb_per_sec == 150 * 1024 / native_load.MB / 4.0
    assert phase.errors == []


def test_the_workers_cpu_times_add_up_for_the_phase() -> None:
    phase = native_load.aggregate([WorkerResult(10, 10, 1.0, 2.0, cpu_s=0.75),
                                   WorkerResult(10, 10, 1.0, 3.0, cpu_s=1.5)])
    assert phase.clients_cpu_s == 2.25


def test_worker_errors_are_kept_and_no_worker_is_an_error() -> None:
    phase = native_load.aggregate([WorkerResult(0, 0, 1.0, 1.0, error="broker down"),
                                   WorkerResult(5, 5, 1.0, 2.0)])
    assert phase.errors == ["broker down"]
    assert native_load.aggregate([]).errors == ["no worker reported"]


def test_nearest_rank_percentiles() -> None:
    values = [float(x) for x in range(1, 101)]  # 1..100
    assert native_load.percentile(values, 50) == 50.0
    assert native_load.percentile(values, 99) == 99.0
    assert native_load.percentile([7.0], 99) == 7.0
    assert math.isnan(native_load.percentile([], 99))


def test_the_rate_limiter_follows_its_schedule_and_never_exceeds_the_total() -> None:
    rate = 1000.0  # records per second
    assert native_load.records_due(rate, 0.0, sent=0, total=10_000) == 1  # the first goes at once
    assert native_load.records_due(rate, 0.0, sent=1, total=10_000) == 0
    assert native_load.records_due(rate, 0.5, sent=1, total=10_000) == 500  # catching up to 501
    assert native_load.records_due(rate, 0.5, sent=501, total=10_000) == 0
    assert native_load.records_due(rate, 60.0, sent=9_990, total=10_000) == 10
    assert native_load.records_due(rate, 60.0, sent=10_000, total=10_000) == 0


def test_a_rate_limited_producer_waits_for_its_next_record_in_whole_milliseconds() -> None:
    # librdkafka's poll takes whole milliseconds: a shorter wait would be poll(0), a busy loop.
    rate = 1000.0  # records per second
    assert native_load.seconds_until_due(rate, elapsed_s=0.0, sent=5) == 0.005
    assert native_load.seconds_until_due(rate, elapsed_s=0.0049, sent=5) == native_load.MIN_POLL_S
    assert native_load.seconds_until_due(rate, elapsed_s=1.0, sent=5) == native_load.MIN_POLL_S  # behind
    assert native_load.seconds_until_due(rate, elapsed_s=0.0, sent=500) == 0.01  # capped
    assert native_load.MIN_POLL_S * 1000 >= 1


def test_records_split_evenly_over_the_workers() -> None:
    assert native_load.split(10, 3) == [4, 3, 3]
    assert sum(native_load.split(1_200_000, 3)) == 1_200_000


def test_half_rate_is_half_the_slower_brokers_saturation_in_the_same_run() -> None:
    runs = [{"kind": "saturate", "run": 0, "produce_mb_per_sec": 120.0},
            {"kind": "saturate", "run": 0, "produce_mb_per_sec": 90.0},
            {"kind": "saturate", "run": 1, "produce_mb_per_sec": 10.0},
            {"kind": "produce", "run": 0, "mb_per_sec": 5.0}]
    assert compare.halfrate_mb(runs, 0) == 45.0
    assert math.isnan(compare.halfrate_mb(runs, 2))


def test_only_saturate_runs_the_saturation_and_the_half_rate_cases() -> None:
    plan = compare.make_plan(quick=True, runs=None, only={"saturate"})
    assert [c.kind for c in plan.cases] == ["saturate", "halfrate"]
    assert plan.cases[0].key in {case for case, _ in report.TARGETS}
    assert plan.cases[1].key in {case for case, _ in report.TARGETS}


def _saturate(target: str, produce_mb: float, cpu_per_gb: float) -> dict:
    return {"target": target, "kind": "saturate", "case": "saturate 1024B 3+3 procs 6p", "load1": 1.0,
            "broker_cpu_cores": 0.9, "produce_mb_per_sec": produce_mb, "produce_broker_cores": 0.9,
            "produce_cpu_s_per_gb": cpu_per_gb, "consume_mb_per_sec": 300.0, "consume_broker_cores": 0.3,
            "consume_cpu_s_per_gb": 1.0, "rss_peak_mb": 50.0}


def _halfrate(target: str, p99: float) -> dict:
    return {"target": target, "kind": "halfrate", "case": "half-rate 1024B 3 procs 6p", "load1": 1.0,
            "broker_cpu_cores": 0.4, "rate_mb_per_sec": 50.0, "target_mb_per_sec": 50.0, "p50_ms": 2.0,
            "p99_ms": p99, "rate_cpu_s_per_gb": 5.0, "rss_peak_mb": 50.0}


def test_the_broker_bound_rows_carry_throughput_cores_cpu_per_gb_and_half_rate_p99() -> None:
    runs = [_saturate("kafka", 100.0, 15.0), _saturate("odradek", 250.0, 4.0),
            _halfrate("kafka", 10.0), _halfrate("odradek", 8.0)]
    rows = {(r.case, r.metric): r for r in report.summarise({"runs": runs, "startup_s": {}, "idle_rss_mb": {}})}
    produce = rows[("saturate 1024B 3+3 procs 6p", "produce_mb_per_sec")]
    assert (produce.ratio, produce.met) == (2.5, True)
    assert rows[("saturate 1024B 3+3 procs 6p", "produce_cpu_s_per_gb")].met is True  # 4/15 <= 0.3
    assert rows[("saturate 1024B 3+3 procs 6p", "produce_broker_cores")].target is None  # shown, not judged
    consume = rows[("saturate 1024B 3+3 procs 6p", "consume_cpu_s_per_gb")]
    assert (consume.kafka_cpu, consume.odradek_cpu) == (0.3, 0.3)  # the consume phase's cores
    assert produce.odradek_cpu == 0.9
    assert rows[("half-rate 1024B 3 procs 6p", "p99_ms")].met is True
    table = report.markdown_table(list(rows.values()))
    assert "p99 delivery latency at half saturation" in table
    assert "produce 250.0 MB/s" in report.one_line(runs[1])
    assert "p99 8.0 ms" in report.one_line(runs[3])
