"""Shared fixtures: a started single-node controller in a temporary metadata directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.controller import Controller, LocalLeaseStore


def make_controller(metadata_dir: Path, node_id: int = 1, **kwargs) -> Controller:
    return Controller(node_id, metadata_dir, LocalLeaseStore(metadata_dir / "controller.lease"), **kwargs)


@pytest.fixture
def new_controller():
    """Factory for controllers on a given directory (for restart and multi-instance tests)."""
    return make_controller


@pytest.fixture
async def controller(tmp_path: Path):
    c = make_controller(tmp_path, default_num_partitions=3)
    await c.start(host="localhost", port=9092)
    yield c
    await c.stop()
