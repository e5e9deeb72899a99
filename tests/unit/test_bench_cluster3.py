"""The 3-node bench case's arithmetic and report rows (bench/cluster_bench.py, bench/report.py),
without a cluster: per-phase broker cost, the summary rows with the issue's targets and goals, the
plan's ``--only cluster3``."""

from __future__ import annotations

import math

from bench import cluster_bench, compare, report


def test_phase_figures_are_cores_and_cpu_seconds_per_gb_with_etcd_apart() -> None:
    figures = cluster_bench.phase_figures("produce", moved_bytes=2e9, wall_s=4.0, cpu_s=6.0, etcd_s=0.5)
    assert figures == {"produce_broker_cores": 1.5, "produce_cpu_s_per_gb": 3.0, "produce_etcd_cpu_s_per_gb": 0.25}


def test_phase_figures_of_an_empty_phase_are_nan_not_a_division_error() -> None:
    figures = cluster_bench.phase_figures("consume", moved_bytes=0, wall_s=0.0, cpu_s=1.0, etcd_s=0.0)
    assert all(math.isnan(v) for v in figures.values())


class FakeCluster:
    """Counts CPU like a cluster would: each call of ``cpu`` sees two more broker seconds."""

    name = "odradek"

    def __init__(self) -> None:
        self.broker_s, self.etcd_s = 0.0, 0.0

    def cpu(self) -> float:
        self.broker_s += 2.0
        return self.broker_s

    def etcd_cpu(self) -> float:
        self.etcd_s += 0.1
        return self.etcd_s


def test_measured_takes_the_cpu_difference_over_the_work() -> None:
    result, wall, cpu_s, etcd_s = cluster_bench.measured(FakeCluster(), lambda: {"done": True})  # type: ignore[arg-type]
    assert result == {"done": True} and wall >= 0
    assert (cpu_s, round(etcd_s, 6)) == (2.0, 0.1)


def _row(target: str, produce: float, consume: float, p99: float) -> dict:
    return {"target": target, "kind": "cluster3", "case": cluster_bench.CASE_KEY, "load1": 1.0, "rss_peak_mb": 1.0,
            "idle_broker_cores": 0.3 if target == "kafka" else 0.05, "idle_etcd_cores": 0.0 if target == "kafka" else 0.01,
            "broker_cpu_cores": 1.0, "produce_mb_per_sec": produce, "produce_p99_ms": 50.0,
            "produce_broker_cores": 1.2, "produce_cpu_s_per_gb": 10.0, "produce_etcd_cpu_s_per_gb": 0.0,
            "consume_mb_per_sec": consume, "consume_broker_cores": 0.4, "consume_cpu_s_per_gb": 2.0,
            "e2e_p50_ms": 2.0, "e2e_p99_ms": p99, "e2e_avg_ms": 2.5, "e2e_broker_cores": 0.2}


def test_cluster3_rows_carry_the_issue_targets_and_goals() -> None:
    runs = [_row("kafka", 40.0, 100.0, 10.0), _row("odradek", 32.0, 110.0, 12.0),
            _row("kafka", 40.0, 100.0, 10.0), _row("odradek", 28.0, 70.0, 20.0),
            _row("kafka", 40.0, 100.0, 10.0), _row("odradek", 30.0, 90.0, 14.0)]
    rows = {r.metric: r for r in report.summarise({"runs": runs, "startup_s": {}, "idle_rss_mb": {}})}
    produce, consume, p99 = rows["produce_mb_per_sec"], rows["consume_mb_per_sec"], rows["e2e_p99_ms"]
    assert (produce.odradek, produce.ratio, produce.met, produce.goal_met) == (30.0, 0.75, True, False)
    assert (consume.odradek, consume.ratio, consume.met, consume.goal_met) == (90.0, 0.9, True, False)
    assert (p99.odradek, p99.ratio, p99.met, p99.goal_met) == (14.0, 1.4, True, False)
    # Each phase's cores stand beside its figures, not the produce phase's.
    assert (consume.kafka_cpu, p99.kafka_cpu, produce.kafka_cpu) == (0.4, 0.2, 1.2)
    assert rows["idle_broker_cores"].ratio == 0.05 / 0.3
    # Kafka has no etcd: that ratio is n/a rather than a division by zero.
    assert rows["produce_etcd_cpu_s_per_gb"].ratio is None
    table = report.markdown_table(list(rows.values()))
    assert ">= 0.7x (goal 1.0x)" in table and "<= 1.5x (goal 1.0x)" in table and "yes (goal: no)" in table


def test_only_cluster3_plans_no_single_node_case() -> None:
    plan = compare.make_plan(quick=True, runs=None, only={"cluster3"})
    assert [c.kind for c in plan.cases] == ["cluster3"] and not plan.single_node
    assert plan.cases[0].key == cluster_bench.CASE_KEY and plan.cases[0].records == 30_000
    assert "cluster3" in compare.make_plan(quick=False, runs=None, only=None).kinds


def test_one_line_of_a_cluster3_row() -> None:
    line = report.one_line({**_row("odradek", 30.0, 90.0, 14.0), "produce_etcd_cpu_s_per_gb": 0.3})
    assert line.startswith("idle 0.05 cores; produce 30.0 MB/s") and "etcd 0.30" in line and "p99 14 ms" in line


def test_the_kafka_cluster_is_three_combined_nodes_of_one_quorum_and_one_cluster_id(tmp_path) -> None:
    from bench.clusters import KafkaClusterTarget

    servers = KafkaClusterTarget(tmp_path).make_servers()
    assert [s.properties["node.id"] for s in servers] == ["1", "2", "3"]
    assert len({s.port for s in servers} | {s.controller_port for s in servers}) == 6
    assert len({s.data_dir for s in servers}) == 3
    voters = {s.properties["controller.quorum.voters"] for s in servers}
    assert voters == {",".join(f"{i}@127.0.0.1:{s.controller_port}" for i, s in enumerate(servers, 1))}
    assert len({s.cluster_id for s in servers}) == 1 and servers[0].cluster_id
    for s in servers:
        assert s.properties["process.roles"] == "broker,controller"
        assert (s.properties["default.replication.factor"], s.properties["min.insync.replicas"],
                s.properties["offsets.topic.replication.factor"]) == ("3", "2", "3")
