"""A replica manager on real temp-dir logs, fed by a real in-process controller; no broker process.

``node`` gives a started ReplicaManager with its collaborators (config, a Timer on a fake clock so
purgatory timeouts are driven by the test, an IO pool, the broker's metadata view fed by the controller).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.replica.fetch_session import FetchSessionCache
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.timing_wheel import Timer
from odradek.controller import Controller, CreatableTopic, LocalLeaseStore
from odradek.protocol.records import Record, encode_batch


def batch(n: int = 1, *, ts: int | list[int] = 1000, value_size: int = 10) -> bytes:
    """One producer batch of ``n`` records (base offset 0)."""
    stamps = ts if isinstance(ts, list) else [ts] * n
    return encode_batch([Record(timestamp=stamps[i], key=b"k%d" % i, value=b"v" * value_size) for i in range(n)])


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Node:
    def __init__(self, tmp_path: Path, controller: Controller, overrides: list[str]) -> None:
        self.config = load_config(None, [f"log.dirs={tmp_path / 'logs'}", "node.id=1", *overrides], environ={})
        self.controller = controller
        self.clock = FakeClock()
        self.timer = Timer(tick_ms=1, wheel_size=20, start_ms=0, clock=self.clock)
        self.io_pool = ThreadPoolExecutor(max_workers=2)
        self.failures: list[str] = []
        # The broker's real metadata view, fed by the controller as the broker's is.
        self.metadata = BrokerMetadata(tmp_path / "meta")
        controller.add_publisher(self.metadata)
        self.rm = ReplicaManager(self.config, self.metadata, self.timer, self.io_pool, self.failures.append,
                                 lambda: False)
        self.fetch_sessions = FetchSessionCache(self.config["max.incremental.fetch.session.cache.slots"])
        self.metrics: Any = None  # what a handler reads for BytesOut; no metrics server here
        self.authorizer: Any = None  # no authorizer.class.name: every request allowed

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.rm

    async def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        (result,) = await self.controller.create_topics(
            [CreatableTopic(name, partitions, configs=dict(configs))], False)
        assert result.error_code == 0, result
        assert await self.rm.wait_for_logs([name]) == {}
        await asyncio.sleep(0)

    def advance(self, ms: int) -> None:
        """Move the purgatories' clock on and expire what is due."""
        self.clock.now += ms
        self.timer.advance_clock()


@pytest.fixture
async def node_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Node] = []

    async def make(*overrides: str) -> Node:
        meta = tmp_path / "meta"
        controller = Controller(1, meta, LocalLeaseStore(meta / "controller.lease"), default_num_partitions=1)
        await controller.start(host="localhost", port=9092)
        node = Node(tmp_path, controller, list(overrides))
        await node.rm.start()
        made.append(node)
        return node

    yield make
    for node in made:
        await node.rm.shutdown()
        await node.controller.stop()
        node.io_pool.shutdown(wait=True)


@pytest.fixture
async def node(node_factory: Callable[..., Any]) -> Node:
    n = await node_factory()
    await n.create_topic("t")
    return n
