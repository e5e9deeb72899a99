"""bench/report.py's summary: every measured case (produce, consume, end-to-end) gets a broker
CPU-seconds-per-GB row for both brokers, as issue 11 asks of ``make bench``."""

from __future__ import annotations

from bench import report


def _run(target: str, kind: str, case: str, cpu_per_gb: float) -> dict:
    return {"target": target, "kind": kind, "case": case, "load1": 1.0, "broker_cpu_cores": 0.5,
            "broker_cpu_s_per_gb": cpu_per_gb, "mb_per_sec": 10.0, "fetch_mb_per_sec": 20.0,
            "p50_ms": 1.0, "p99_ms": 2.0, "avg_ms": 1.5}


def test_every_case_kind_reports_broker_cpu_per_gb_for_both_brokers() -> None:
    cases = [("produce", "produce 1024B acks=1 1p"), ("consume", "consume 1024B 1p"),
             ("e2e", "e2e 1024B acks=all")]
    runs = [_run(t, kind, case, cpu) for kind, case in cases for t, cpu in (("kafka", 8.0), ("odradek", 2.0))]
    rows = report.summarise({"runs": runs, "startup_s": {}, "idle_rss_mb": {}})
    cpu_rows = {r.case: r for r in rows if r.metric == "broker_cpu_s_per_gb"}
    assert set(cpu_rows) == {case for _, case in cases}
    for row in cpu_rows.values():
        assert (row.kafka, row.odradek, row.ratio) == (8.0, 2.0, 0.25)


def test_the_transactional_produce_case_is_planned_summarised_and_printed() -> None:
    from bench.compare import TXN_MS, make_plan

    plan = make_plan(quick=True, runs=1, only={"txn"})
    assert [(c.kind, c.size, c.acks, c.transaction_ms) for c in plan.cases] == [("txn", 1024, "all", TXN_MS)]
    case = plan.cases[0].key
    assert case == f"txn produce 1024B {TXN_MS}ms txns 1p"
    assert "txn" in make_plan(quick=False, runs=None, only=None).kinds
    runs = [_run(t, "txn", case, cpu) | {"records": 30_000, "records_per_transaction": per_txn, "rss_peak_mb": 100.0}
            for t, cpu, per_txn in (("kafka", 8.0, 1000.0), ("odradek", 4.0, 500.0))]
    rows = {r.metric: r for r in report.summarise({"runs": runs, "startup_s": {}, "idle_rss_mb": {}})}
    assert set(rows) == {"mb_per_sec", "p99_ms", "broker_cpu_s_per_gb", "records_per_transaction"}
    assert (rows["records_per_transaction"].kafka, rows["records_per_transaction"].odradek) == (1000.0, 500.0)
    assert rows["broker_cpu_s_per_gb"].ratio == 0.5
    assert report.one_line(runs[1]).startswith("10.0 MB/s, p99 2 ms, 500 records/transaction (cpu 0.50 cores")
