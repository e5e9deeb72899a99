"""The suite's API coverage check (tests/support/api_coverage.py) as `make test` and `make api-coverage` run it:
a pytest run under pytest-xdist, in a directory of its own, whose two test files each start a real Odradek
broker (a subprocess) and send it requests. Under ODRADEK_API_COVERAGE=record the run writes the record of
which test sent each (api key, version), from both workers, and fails naming the versions ApiVersions
advertises that no test sent; a part of the suite (one file named) checks nothing and, under record, is
refused with the record left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import api_conformance

REPO = Path(__file__).resolve().parents[2]

TEST_FILE = '''
import socket
import struct

from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient


def test_{name}(tmp_path):
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        # Headers alone of requests the broker has no handler or version for (it closes or refuses them):
        # they are no versions served, and are not recorded.
        for api_key, version in {unserved!r}:
            with socket.create_connection((broker.host, broker.port)) as s:
                s.sendall(struct.pack(">ihhi", 8, api_key, version, 1))
                s.settimeout(10)
                s.recv(64)
        with WireClient(broker.host, broker.port) as c:
            for api_key, version, body in {requests!r}:
                c.request(api_key, version, body)
    finally:
        broker.kill()
'''


def _suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    (root / "tests").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (root / "tests" / "test_a.py").write_text(TEST_FILE.format(
        name="api_versions", unserved=[(1000, 0), (18, 99)],
        requests=[(18, 3, {"client_software_name": "t", "client_software_version": "1"})]))
    (root / "tests" / "test_b.py").write_text(TEST_FILE.format(name="metadata", unserved=[], requests=[
        (3, 12, {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})]))
    return root


def _pytest(root: Path, mode: str, record: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ODRADEK_API_COVERAGE": mode, "ODRADEK_API_COVERAGE_RECORD": str(record),
           "ODRADEK_API_COVERAGE_SUITE": str(root / "tests"), "PYTHONPATH": str(REPO)}
    env.pop("ODRADEK_REQUEST_VERSION_RECORD", None)  # this suite's own recorder, not ours
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.api_coverage", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadfile", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=180)


def test_a_whole_run_records_every_worker_and_fails_naming_what_no_test_sent(tmp_path) -> None:
    root, record = _suite(tmp_path), tmp_path / "record.json"
    run = _pytest(root, "record", record)
    out = run.stdout + run.stderr
    assert "2 passed" in out, out[-4000:]
    sent = api_conformance.load_record(record)
    assert sent == {(18, 3): {"tests/test_a.py::test_api_versions"}, (3, 12): {"tests/test_b.py::test_metadata"}}
    missing = sorted(api_conformance.advertised_pairs() - set(sent))
    names = api_conformance.api_names()
    assert run.returncode == 1, out[-4000:]
    assert f"ApiVersions advertises {len(missing)} version(s) no test sent: " in out
    line = next(line for line in out.splitlines() if "no test sent:" in line)
    assert line.split("no test sent: ", 1)[1].split(", ") == [f"{names.get(k, k)} v{v}" for k, v in missing]


def test_a_part_of_the_suite_checks_nothing_and_is_not_recorded(tmp_path) -> None:
    root, record = _suite(tmp_path), tmp_path / "record.json"
    record.write_text("{}")
    check = _pytest(root, "check", record, "tests/test_a.py")
    assert check.returncode == 0, (check.stdout + check.stderr)[-4000:]
    assert "no test sent" not in check.stdout
    refused = _pytest(root, "record", record, "tests/test_a.py")
    assert refused.returncode == 4, (refused.stdout + refused.stderr)[-4000:]  # pytest's usage error
    assert "needs the whole suite (ran tests/test_a.py)" in refused.stdout
    assert record.read_text() == "{}"
