"""docs/clients.md's API conformance table (tools/api_conformance.py) is current, and its inputs are sound:
the committed table is what the handler registry, Kafka 4.4's stored ApiVersions answer and the coverage
record give (so a version added to a handler without a new record and table fails here), and the record
names only tests that exist."""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from tools import api_conformance as ac

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_what_the_registry_the_kafka_answer_and_the_record_give() -> None:
    committed = ac.committed_table(ac.CLIENTS_DOC.read_text())
    current = ac.current_table()
    diff = "\n".join(difflib.unified_diff(committed.splitlines(), current.splitlines(), "docs/clients.md",
                                          "generated", lineterm="", n=0))
    assert committed == current, f"run `python -m tools.api_conformance table` (or `make api-coverage`):\n{diff}"


def test_the_check_command_fails_on_a_stale_table(tmp_path, monkeypatch, capsys) -> None:
    stale = ac.CLIENTS_DOC.read_text().replace("| 18 | ApiVersions |", "| 18 | ApiVersion |")
    doc = tmp_path / "clients.md"
    doc.write_text(stale)
    monkeypatch.setattr(ac, "CLIENTS_DOC", doc)
    assert ac.main(["table", "--check"]) == 1
    assert "not current" in capsys.readouterr().err
    assert ac.main(["table"]) == 0 and ac.main(["table", "--check"]) == 0


def test_the_record_names_only_tests_that_exist() -> None:
    gone = ac.missing_tests(ac.load_record())
    assert not gone, f"tests/data/api-coverage.json names tests that no longer exist: {gone}"


def test_a_test_that_is_gone_is_found(tmp_path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_here():\n    pass\n")
    record = {(0, 9): {"tests/test_x.py::test_here[odradek]", "tests/test_x.py::test_gone",
                       "tests/test_y.py::test_here"}}
    assert ac.missing_tests(record, tmp_path) == ["tests/test_x.py::test_gone", "tests/test_y.py::test_here"]


def test_the_record_round_trips_and_merges(tmp_path) -> None:
    a = {(0, 9): {"tests/a.py::t1"}, (3, 12): {"tests/a.py::t2"}}
    b = {(0, 9): {"tests/b.py::t3"}, (18, 4): {"tests/b.py::t3"}}
    path = tmp_path / "record.json"
    ac.write_record(ac.merge(a, b), path)
    assert ac.load_record(path) == {(0, 9): {"tests/a.py::t1", "tests/b.py::t3"}, (3, 12): {"tests/a.py::t2"},
                                    (18, 4): {"tests/b.py::t3"}}
    assert json.loads(path.read_text())["apis"][0] == {"api_key": 0, "name": "Produce", "versions": {"9": [0, 2]}}


def test_unexercised_lists_every_advertised_version_no_test_sent() -> None:
    advertised = ac.advertised_pairs()
    sent = {pair: {"tests/x.py::t"} for pair in advertised if pair != (18, 3)}
    assert ac.unexercised(sent) == [(18, 3)]
    assert ac.unexercised({}) == sorted(advertised)


def test_version_ranges() -> None:
    assert ac.version_ranges([0, 1, 2, 5]) == "0-2, 5"
    assert ac.version_ranges([7]) == "7"
    assert ac.version_ranges([]) == ""


def test_the_stored_kafka_answer_names_each_api_as_kafka_4_4_does() -> None:
    """The fixture's API names are the message definitions' in Kafka 4.4's client jar, and its ranges lie
    within the versions those definitions describe (Produce's advertised v0-2 aside: Kafka 4.x advertises
    them for old librdkafka, KAFKA-18659, though its definition starts at v3)."""
    from tools.kafka_dist import JARS, KAFKA_VERSION

    jar = JARS / "kafka" / f"kafka-clients-{KAFKA_VERSION}.jar"
    if not jar.exists():
        pytest.skip(f"{jar} is not there (`make jars` fetches it)")
    names = ac.kafka_api_names(jar)
    with zipfile.ZipFile(jar) as z:
        valid = {}
        for entry in z.namelist():
            if entry.startswith("common/message/") and entry.endswith("Request.json"):
                spec = json.loads(re.sub(r"//.*", "", z.read(entry).decode()))
                if "apiKey" in spec and spec["validVersions"] != "none":  # "none": an API Kafka retired
                    lo, _, hi = spec["validVersions"].partition("-")
                    valid[spec["apiKey"]] = (int(lo), int(hi or lo))
    for key, (name, lo, hi) in ac.load_kafka_fixture().items():
        assert name == names[key]
        assert (lo if key != 0 else 3) >= valid[key][0] and hi <= valid[key][1], (name, lo, hi, valid[key])


def test_make_test_checks_the_coverage_and_make_api_coverage_records_it() -> None:
    def dry_run(target: str) -> str:
        return subprocess.run(["make", "--no-print-directory", "-n", "-f", str(REPO / "Makefile"), "-C", str(REPO),
                               target], capture_output=True, text=True, timeout=60, check=True).stdout

    pytest_line = next(line for line in dry_run("test").splitlines() if " -m pytest" in line)
    assert pytest_line.startswith("env ODRADEK_API_COVERAGE=check ") and " -n " in pytest_line
    record = dry_run("api-coverage")
    assert "ODRADEK_API_COVERAGE=record" in record and "-m tools.api_conformance table" in record


def test_the_table_names_scenario_tests_first_and_the_sweep_for_the_rest() -> None:
    sweep = ac.SWEEP + "test_every[0-Produce]"
    sent = {(0, 0): {sweep, "tests/a.py::t"}, (0, 1): {sweep}, (0, 2): {sweep, "tests/b.py::u"}, (0, 3): set()}
    assert ac.covering_tests([0, 1, 2, 3], 0, sent) == [("tests/a.py::t", [0]), ("tests/b.py::u", [2]), (sweep, [1])]
