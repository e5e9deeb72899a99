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
# Stands in for Maven: records its arguments, prints what a first fetch prints, fills the jar dirs
# under the -Dodradek.cache it is given (a staging dir), then exits with $FAKE_MVN_EXIT (0 unset).
echo "$@" > "$ODRADEK_CACHE/mvn-args"
for a in "$@"; do case "$a" in -Dodradek.cache=*) out="${a#-Dodradek.cache=}";; esac; done
i=0
while [ $i -lt 300 ]; do echo "Downloading from central: https://repo.maven.apache.org/x/$i.jar"; i=$((i+1)); done
for d in kafka spark driver old-java-client connect-plugins/connect-file; do mkdir -p "$out/jars/$d" && touch "$out/jars/$d/new.jar"; done
exit "${FAKE_MVN_EXIT:-0}"
"""


def _fake_toolchain(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("mvn", FAKE_MVN), ("java", "#!/bin/sh\nexit 0\n")):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{fake}{os.pathsep}{os.environ['PATH']}",
               ODRADEK_CACHE=str(cache))
    return cache, env


def test_fetching_the_jars_prints_progress_not_mavens_download_log(tmp_path) -> None:
    cache, env = _fake_toolchain(tmp_path)
    cmd = [sys.executable, "-m", "tools.kafka_dist", "jars"]
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert len((first.stdout + first.stderr).strip().splitlines()) <= 2, first.stdout
    assert "Downloading" not in first.stdout + first.stderr
    assert {"-q", "-ntp"} <= set((cache / "mvn-args").read_text().split())
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == again.stderr == ""  # current cache: silent


def test_a_rebuild_replaces_the_jar_sets_whole_and_a_failed_one_changes_nothing(tmp_path) -> None:
    # A version change rebuilds the cache while other processes may be launching JVMs from it: the
    # old set stays in place until the new one is complete, and a failed build leaves it as it was.
    cache, env = _fake_toolchain(tmp_path)
    for name in ("kafka", "spark", "driver", "old-java-client", "connect-plugins/connect-file"):
        (cache / "jars" / name).mkdir(parents=True)
        (cache / "jars" / name / "old.jar").touch()
    (cache / "jars" / ".stamp").write_text("a stamp of other inputs\n")
    cmd = [sys.executable, "-m", "tools.kafka_dist", "jars"]
    failed = subprocess.run(cmd, cwd=REPO, env=dict(env, FAKE_MVN_EXIT="1"), capture_output=True, text=True,
                            timeout=60)
    assert failed.returncode != 0 and "Maven could not build" in failed.stderr
    assert sorted(p.name for p in (cache / "jars").iterdir()) == [".stamp", "connect-plugins", "driver", "kafka",
                                                                  "old-java-client", "spark"]
    assert [p.name for p in (cache / "jars" / "kafka").iterdir()] == ["old.jar"]
    built = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    for name in ("kafka", "spark", "driver", "old-java-client", "connect-plugins/connect-file"):
        assert [p.name for p in (cache / "jars" / name).iterdir()] == ["new.jar"]
    assert sorted(p.name for p in (cache / "jars").iterdir()) == [".stamp", "connect-plugins", "driver", "kafka",
                                                                  "old-java-client", "spark"]
