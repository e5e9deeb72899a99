"""The Java tool chain's entry point on a machine without it: one sentence and a non-zero exit, never a
Python traceback (a newcomer running `make test` without Maven saw `ToolchainUnavailable` raised)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.broker_process import REPO


def test_jars_without_java_or_maven_says_what_is_needed_in_one_line(tmp_path) -> None:
    # An empty cache forces a build; a PATH with neither java nor mvn makes it impossible.
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=str(tmp_path), ODRADEK_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "tools.kafka_dist", "jars"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "JDK 17" in lines[0] and "Maven" in lines[0]
