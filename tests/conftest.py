"""Shared fixtures: real brokers in subprocesses, started and cleaned up by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess


def _odradek_plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "odradek.testing.pytest_plugin" for ep in entry_points(group="pytest11"))


# The project's own tests use the fixtures it ships (odradek_broker, odradek_topic): an install that
# registers the pytest11 entry point loads them already, an older editable install does not.
pytest_plugins = [] if _odradek_plugin_installed() else ["odradek.testing.pytest_plugin"]
# librdkafka's log lines through Python logging instead of fd 2 (the module says why).
pytest_plugins.append("tests.support.rdkafka_logging")
# Which tests send each (api key, version) Odradek advertises; off unless ODRADEK_API_COVERAGE is set.
pytest_plugins.append("tests.support.api_coverage")


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, data_dir: Path | None = None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"broker{len(started)}", overrides=overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
