"""`make pipeline`'s two commands as it runs them (pipeline.generate, then pipeline.run, each a process)
against an Odradek broker, from a scratch working directory: the summary says where every result went
and how many, and Spark says nothing about the host's name. Spark's own `artifacts/` directory, which
it makes in the working directory, is one git ignores."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.real_kafka import require_toolchain


def test_make_pipeline_says_where_the_results_went(tmp_path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (it is in the test extra)")
    require_toolchain()
    broker = BrokerProcess(tmp_path / "broker").start()
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SPARK_LOCAL_IP", None)
    try:
        sent = subprocess.run([sys.executable, "-m", "pipeline.generate", "--bootstrap", broker.bootstrap,
                               "--events", "400", "--rate", "2", "--bad-ratio", "0.1", "--create-topic"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert sent.returncode == 0, sent.stderr
        counted = re.search(r"^sent (\d+) records to events .*, (\d+) invalid,", sent.stdout)
        assert counted is not None, sent.stdout
        done = subprocess.run([sys.executable, "-m", "pipeline.run", "--bootstrap", broker.bootstrap],
                              cwd=work, env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    finally:
        broker.stop()
    parquet, checkpoints = work / "pipeline-out" / "parquet", work / "pipeline-out" / "checkpoints"
    lines = done.stdout.splitlines()[-4:]
    assert lines[0] == f"pipeline: read {counted.group(1)} new records from topic events at {broker.bootstrap}", lines
    assert lines[1] == f"  invalid records:    {counted.group(2)} dead letters in topic events-dlq", lines
    windows = re.fullmatch(r"  window aggregates:  (\d+) rows in topic user-activity, and Parquet files in (.+)",
                           lines[2])
    assert windows is not None and int(windows.group(1)) > 0 and windows.group(2) == str(parquet), lines
    assert any(parquet.glob("*.parquet"))
    assert lines[3] == f"  checkpoints:        {checkpoints} (the next run continues after these records)", lines
    assert "resolves to a loopback address" not in done.stderr, done.stderr


def test_sparks_artifacts_directory_is_ignored_by_git() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "artifacts/spark-1234/x.jar"],
                             capture_output=True, text=True, timeout=30)
    assert ignored.returncode == 0, "artifacts/ (Spark's, in the working directory) is not in .gitignore"

