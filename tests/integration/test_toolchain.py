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


FAKE_MVN = """#!/bin/sh
# Stands in for Maven: records its arguments, prints what a first fetch prints, fills the jar dirs.
echo "$@" > "$ODRADEK_CACHE/mvn-args"
i=0
while [ $i -lt 300 ]; do echo "Downloading from central: https://repo.maven.apache.org/x/$i.jar"; i=$((i+1)); done
for d in kafka spark driver; do mkdir -p "$ODRADEK_CACHE/jars/$d" && touch "$ODRADEK_CACHE/jars/$d/x.jar"; done
"""


def test_fetching_the_jars_prints_progress_not_mavens_download_log(tmp_path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("mvn", FAKE_MVN), ("java", "#!/bin/sh\nexit 0\n")):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{fake}{os.pathsep}{os.environ['PATH']}",
               ODRADEK_CACHE=str(cache))
    cmd = [sys.executable, "-m", "tools.kafka_dist", "jars"]
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert len((first.stdout + first.stderr).strip().splitlines()) <= 2, first.stdout
    assert "Downloading" not in first.stdout + first.stderr
    assert {"-q", "-ntp"} <= set((cache / "mvn-args").read_text().split())
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == again.stderr == ""  # current cache: silent
