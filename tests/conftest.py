"""Shared fixtures: real brokers in subprocesses, started and cleaned up by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess


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
