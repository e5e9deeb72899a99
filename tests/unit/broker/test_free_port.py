"""free_port hands out ports outside the kernel's ephemeral range (the CI port race of the last
submission: a port read from bind(0) was taken by an etcd client's outgoing connection)."""

from __future__ import annotations

import socket

import pytest

from odradek.broker.launcher.cluster_launcher import _ephemeral_range_start, free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    start = _ephemeral_range_start()
    if start <= 21000:
        pytest.skip(f"the ephemeral range starts at {start}: no room below it on this machine")
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(20000 <= p < start for p in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_parallel_test_workers_draw_from_disjoint_stripes(monkeypatch: pytest.MonkeyPatch) -> None:
    start = _ephemeral_range_start()
    if start <= 23000:
        pytest.skip(f"the ephemeral range starts at {start}: no room below it on this machine")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    drawn: dict[int, set[int]] = {}
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        drawn[index] = {free_port() for _ in range(30)}
    for index, ports in drawn.items():
        width = (start - 20000) // 3
        assert all(20000 + index * width <= p < 20000 + (index + 1) * width for p in ports), index
