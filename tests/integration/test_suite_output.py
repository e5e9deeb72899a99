"""What `make test` prints, seen by running pytest the way it does on small throwaway test files: the
third-party deprecation warnings filtered (ours still shown), pytest-xdist's status said once, and
librdkafka's log lines kept out of the progress output (a failed test still shows its client's)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_pytest(args: list[str], tests: Path, timeout: float = 180) -> str:
    """pytest on ``tests`` with this repository's configuration and plugins, its output as a terminal shows it."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
           "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tests), *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return proc.stdout + proc.stderr


def test_third_party_deprecation_warnings_are_filtered_and_ours_still_show(tmp_path) -> None:
    pytest.importorskip("kafka", reason="kafka-python is not installed (it is in the test extra)")
    (tmp_path / "test_warnings.py").write_text(
        "import warnings\n\n"
        "def test_loads_kafka_python_schemas():\n"
        "    from kafka.protocol.metadata import MetadataRequest\n"
        "    assert MetadataRequest[0] is not None\n\n"
        "def test_our_own_deprecation():\n"
        "    warnings.warn('our own deprecation', DeprecationWarning)\n")
    out = run_pytest([str(tmp_path)], tmp_path)
    assert "2 passed, 1 warning" in out, out
    assert "our own deprecation" in out and "is deprecated. Use files() instead" not in out, out


def test_make_test_says_its_worker_status_once(tmp_path) -> None:
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (it is in the test extra)")
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_three():\n    pass\n")
    dry = subprocess.run(["make", "-n", "-C", str(REPO), "test", f"PY={sys.executable}", "TEST_WORKERS=2",
                          f"PYTEST_ARGS=-p no:cacheprovider --rootdir {tmp_path} {tmp_path}"],
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    (command,) = [line for line in dry.stdout.splitlines() if " -m pytest " in line]
    proc = subprocess.run(shlex.split(command), cwd=REPO, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("bringing up nodes") <= 1 and "2 workers [3 items]" in out, out


def test_librdkafka_log_lines_stay_out_of_the_progress_output(tmp_path) -> None:
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (it is in the test extra)")
    # A client left alive after its test keeps failing to connect, from librdkafka's threads; the
    # next test's own client fails to connect while the test polls it, and the test then fails.
    (tmp_path / "test_clients.py").write_text(
        "import socket, time\n"
        "from confluent_kafka import Producer\n\n"
        "def dead_address():\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0))\n"
        "        return f'127.0.0.1:{s.getsockname()[1]}'\n\n"
        "LEFT_BEHIND = []\n\n"
        "def test_leaves_a_client_behind():\n"
        "    p = Producer({'bootstrap.servers': dead_address(), 'reconnect.backoff.max.ms': 100})\n"
        "    p.produce('t', b'never delivered')\n"
        "    LEFT_BEHIND.append(p)\n\n"
        "def test_while_it_logs():\n"
        "    time.sleep(1.5)\n\n"
        "def test_fails_after_polling_its_own_client():\n"
        "    p = Producer({'bootstrap.servers': dead_address(), 'client.id': 'the-failing-one'})\n"
        "    p.poll(1.5)\n"
        "    assert False\n")
    out = run_pytest([str(tmp_path)], tmp_path)
    assert "1 failed, 2 passed" in out, out
    # librdkafka's own stderr format: %<level>|<seconds>|<facility>|<client>| ...
    assert re.findall(r"^.*%\d\|\d+\.\d+\|.*$", out, re.M) == [], out
    captured = out.split("Captured log call", 1)[1].split("short test summary", 1)[0]
    assert "librdkafka" in captured and "Connection refused" in captured, out
    assert "producer-1" not in captured, captured  # only the failing test's own client
