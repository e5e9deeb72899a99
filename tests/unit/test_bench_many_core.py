"""bench/many_core.py, ``make bench``'s many-core mode: how it splits the cores, what it reports, and
one tiny real run against Odradek with pinned brokers and clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.many_core import CLIENT_BOUND_BELOW_CORES, markdown, precise_cpu_seconds, split_cores

REPO = Path(__file__).resolve().parents[2]


def test_brokers_get_the_first_half_of_the_cores_and_clients_the_rest() -> None:
    assert split_cores(list(range(16)), None) == (list(range(8)), list(range(8, 16)))
    assert split_cores(list(range(16)), 6) == (list(range(6)), list(range(6, 16)))
    assert split_cores([0, 1], None) == ([0], [1])
    assert split_cores([0, 1], 5) == ([0], [1])  # the clients keep at least one core
    assert split_cores([3], None) == ([3], [3])


def test_the_report_says_figures_are_client_bound_below_eight_cores() -> None:
    report = {"started": "now", "records": 10, "partitions": 16, "clients": 1, "client_bound": True,
              "machine": {"cores": 2, "cpu": "x", "broker_cores": [0], "client_cores": [1], "python": "3.12",
                          "kafka": "4.4.0"},
              "results": [{"case": "odradek-1", "produce_mb_s": 1.0}, {"case": "kafka-1", "error": "boom"}]}
    text = markdown(report)
    assert "**Client-bound**" in text and "| odradek-1 | 1.0 |" in text and "| kafka-1 | failed: boom |" in text
    assert "Client-bound" not in markdown({**report, "client_bound": False})


def test_broker_cpu_is_counted_below_a_clock_tick() -> None:
    """A tiny run's broker spends a few ms: /proc/PID/stat's 10 ms ticks read that as 0 (CI did once)."""
    before = precise_cpu_seconds(os.getpid())
    spin_from = time.thread_time()
    while time.thread_time() - spin_from < 0.003:
        pass
    assert precise_cpu_seconds(os.getpid()) - before >= 0.003


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores: one for the broker, one for clients")
def test_a_tiny_run_against_odradek_pins_and_reports(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    run = subprocess.run([sys.executable, "-m", "bench.compare", "--many-core", "--cases", "odradek-1,odradek-3-rf3",
                          "--gb", "0.004", "--warmup-gb", "0", "--halfrate-s", "1", "--partitions", "4",
                          "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "data")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "many-core.json").read_text())
    assert all("error" not in r for r in report["results"]), report["results"]
    cores = len(os.sched_getaffinity(0))
    assert report["client_bound"] is (cores < CLIENT_BOUND_BELOW_CORES)
    assert set(report["machine"]["broker_cores"]).isdisjoint(report["machine"]["client_cores"])
    by_case = {r["case"]: r for r in report["results"]}
    assert by_case["odradek-3-rf3"]["replication_factor"] == 3 and by_case["odradek-3-rf3"]["acks"] == "all"
    for result in by_case.values():
        # every broker thread held there
        assert result["broker_affinity"] == report["machine"]["broker_cores"], (result, report["machine"])
        assert result["produce_mb_s"] > 0 and result["consume_mb_s"] > 0 and not result["produce_errors"], result
        assert result["produce_broker_cpu_s_per_gb"] > 0 and result["produce_client_cpu_s_per_gb"] > 0, result
        assert result["halfrate_p99_ms"] > 0, result
    assert (tmp_path / "out" / "many-core.md").read_text().count("| odradek-") == 2
