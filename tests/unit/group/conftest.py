"""Fixtures shared by the coordinator unit tests: a hand-driven clock and a node with real logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from group_harness import Clock, Node


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def node(tmp_path: Path, clock: Clock) -> Iterator[Node]:
    n = Node(tmp_path, clock)
    yield n
    n.replica_manager.close()
