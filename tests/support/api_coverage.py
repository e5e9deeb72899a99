"""Which tests sent each (api key, version) to an Odradek broker, and whether every version Odradek
advertises was sent: a pytest plugin (tests/conftest.py loads it), off unless ``ODRADEK_API_COVERAGE`` is set.

How it records: each pytest process (the xdist controller alone, or each worker) points
``ODRADEK_REQUEST_VERSION_RECORD`` at a file of its own in one temp dir. Every broker the process's tests
start, in-process or as a subprocess (which inherits the variable), appends each pair it receives there,
once per broker (broker/api/request_version_record.py). After each test (setup, call and teardown, so module
fixtures' brokers count for the test that started or stopped them) the process reads the lines added
since and appends them, with the test's node id, to ``<its id>.jsonl`` beside the file. The process that
ends the session (the controller, after xdist's workers are gone) merges every ``.jsonl``.

Tests under tests/fuzz are not credited: their requests are mutated, so sending a version there shows
nothing about serving it.

``ODRADEK_API_COVERAGE``:

- ``check`` (``make test``): at the end of a whole-suite run (``tests/`` or nothing named, no ``-k``,
  ``-m``, ``--deselect``, ``--lf``, not stopped early), the session fails, naming them, if a version
  Odradek advertises (tools/api_conformance.advertised_pairs) was sent by no test. A partial run checks
  nothing: it cannot say what the rest of the suite sends.
- ``record`` (``make api-coverage``): the same check, then the run's record replaces
  tests/data/api-coverage.json (a partial run is refused: it would drop what the rest sends);
- ``merge``: a part's record is added to tests/data/api-coverage.json (after adding a test for a new
  version: ``ODRADEK_API_COVERAGE=merge pytest tests/.../test_new.py``). tests/unit/test_api_conformance.py
  fails when a recorded test no longer exists, so merged entries cannot outlive their tests.

The variables are read once and taken out of the environment (xdist's workers get the mode from the
controller), so a pytest that a test starts runs without them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.broker.api.request_version_record import ENV as BROKER_ENV
from tools import api_conformance

ENV = "ODRADEK_API_COVERAGE"
MODES = ("check", "record", "merge")
# For the plugin's own test (tests/integration/test_api_coverage_check.py), which runs a suite of its own:
# the record file to write instead of tests/data/api-coverage.json, and the suite's directory instead of tests/.
RECORD_ENV = "ODRADEK_API_COVERAGE_RECORD"
SUITE_ENV = "ODRADEK_API_COVERAGE_SUITE"
_DIR_KEY = "odradek_api_record_dir"
_MODE_KEY = "odradek_api_coverage_mode"
_NOT_CREDITED = ("tests/fuzz/",)


@dataclass(frozen=True)
class _Settings:
    mode: str
    record: Path  # the record ``record`` and ``merge`` write
    suite: Path  # the directory a whole run runs


class _Recorder:
    def __init__(self, directory: Path, name: str) -> None:
        self.pairs_path = directory / f"{name}.pairs"
        self.jsonl_path = directory / f"{name}.jsonl"
        self.pairs_path.touch()
        self._offset = 0
        os.environ[BROKER_ENV] = str(self.pairs_path)

    def credit(self, nodeid: str) -> None:
        """The pairs brokers noted since the last call, appended with ``nodeid``."""
        with open(self.pairs_path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        # A line still being written (never: each is one write) would end without a newline; keep it.
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        pairs = sorted({tuple(int(x) for x in line.split()) for line in complete.decode().splitlines() if line})
        if pairs and not nodeid.startswith(_NOT_CREDITED):
            with open(self.jsonl_path, "a") as out:
                out.write(json.dumps({"test": nodeid, "pairs": pairs}) + "\n")


_dir_key = pytest.StashKey[Path]()
_settings_key = pytest.StashKey[_Settings]()
_recorder_key = pytest.StashKey[_Recorder]()


def _settings_from_environment() -> _Settings | None:
    """The run's settings, taken out of the environment: a pytest that a test starts (tests of the
    suite's own output, of packaging) must not inherit them, or it would check, refuse or merge a
    run of its own. Brokers still inherit ODRADEK_REQUEST_VERSION_RECORD: what a test starts is its own."""
    mode = os.environ.pop(ENV, None) or None
    record = os.environ.pop(RECORD_ENV, None) or api_conformance.COVERAGE_RECORD
    suite = os.environ.pop(SUITE_ENV, None) or api_conformance.REPO / "tests"
    if mode is None:
        return None
    if mode not in MODES:
        raise pytest.UsageError(f"{ENV}={mode}: expected one of {', '.join(MODES)}")
    return _Settings(mode, Path(record), Path(suite).resolve())


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the controller made the dir and passed the mode
        if _MODE_KEY not in workerinput:
            return
        directory, name = Path(workerinput[_DIR_KEY]), workerinput["workerid"]
    else:
        settings = _settings_from_environment()
        if settings is None:
            return
        config.stash[_settings_key] = settings
        directory, name = Path(tempfile.mkdtemp(prefix="odradek-api-coverage-")), "main"
        config.stash[_dir_key] = directory
    config.stash[_recorder_key] = _Recorder(directory, name)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # xdist: before a worker starts
    settings = node.config.stash.get(_settings_key, None)
    if settings is not None:
        node.workerinput[_DIR_KEY] = str(node.config.stash[_dir_key])
        node.workerinput[_MODE_KEY] = settings.mode


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        recorder = item.config.stash.get(_recorder_key, None)
        if recorder is not None:
            recorder.credit(item.nodeid)


def _whole_suite(session: pytest.Session, suite: Path) -> str | None:
    """None when this run is the whole suite; else what made it a part."""
    config = session.config
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = path if path.is_absolute() else Path(str(config.invocation_params.dir)) / path
        if path.resolve() not in (suite, suite.parent) or "::" in arg:
            return f"ran {arg}"
    option = config.option
    for name, what in (("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"), ("lf", "--lf"),
                       ("stepwise", "--sw")):
        if getattr(option, name, None):
            return f"{what} given"
    if session.shouldstop or session.shouldfail:
        return "stopped early"
    return None


def _merged(directory: Path) -> api_conformance.Attributions:
    out: api_conformance.Attributions = {}
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            for key, version in entry["pairs"]:
                out.setdefault((key, version), set()).add(entry["test"])
    return out


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    # After every other sessionfinish, xdist's included: its workers have ended and written all.
    yield
    config = session.config
    settings = config.stash.get(_settings_key, None)
    if settings is None:  # off, or an xdist worker
        return
    directory = config.stash[_dir_key]
    try:
        _finish(session, settings, _merged(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _finish(session: pytest.Session, settings: _Settings, attributions: api_conformance.Attributions) -> None:
    tr = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str, **markup: bool) -> None:
        if tr is not None:
            tr.write_line(line, **markup)

    path, mode = settings.record, settings.mode
    record = path.relative_to(api_conformance.REPO) if path.is_relative_to(api_conformance.REPO) else path
    if mode == "merge":
        api_conformance.write_record(api_conformance.merge(api_conformance.load_record(path), attributions), path)
        say(f"{ENV}=merge: added this run's {len(attributions)} (api key, version) pairs to {record}")
        return
    partial = _whole_suite(session, settings.suite)
    if partial is not None:
        if mode == "record":
            say(f"{ENV}=record needs the whole suite ({partial}): {record} left as it was; "
                f"{ENV}=merge adds a part's record to it", red=True)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    names = api_conformance.api_names()
    missing = api_conformance.unexercised(attributions)
    if mode == "record":
        api_conformance.write_record(attributions, path)
        say(f"{ENV}=record: wrote {record}")
    if missing:
        say(f"ApiVersions advertises {len(missing)} version(s) no test sent: "
            + ", ".join(f"{names.get(k, k)} v{v}" for k, v in missing), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        say("ApiVersions: every advertised (api key, version) was sent by a test", green=True)
