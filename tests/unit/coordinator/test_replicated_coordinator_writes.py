"""Group coordinator writes complete only once replicated: two brokers in one process, real logs.

Node 1 is a full ``Broker`` (its embedded controller, its group coordinator) leading
__consumer_offsets with node 2 in the ISR; node 2 is a ``ReplicaManager`` on its own log dir that
the test starts only when it lets the follower fetch (before that the registered endpoint of node 2
has nobody behind it, as a stalled follower). OffsetCommit and OffsetFetch go over the wire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.group.context import OFFSETS_TOPIC
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.network.inter_broker_client import NodeClient
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.timing_wheel import Timer
from odradek.broker.server import Broker
from odradek.controller import CreatableTopic
from odradek.controller.records import PartitionChangeRecord
from odradek.controller.requests import ReplicaAssignment
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(30)

GROUP = "g"
TP = (OFFSETS_TOPIC, 0)
FAST = ["replica.fetch.backoff.ms=50", "replica.fetch.wait.max.ms=200", "odradek.metrics.port=-1",
        "offsets.topic.num.partitions=1"]
OFFSET_COMMIT, OFFSET_FETCH = 8, 9


class Pair:
    """Node 1 (a broker) and, once ``start_follower`` ran, node 2 (a replica manager)."""

    def __init__(self, tmp_path: Path, broker1: Broker) -> None:
        self.tmp_path = tmp_path
        self.broker1 = broker1
        port = broker1.socket_server.bound_ports["PLAINTEXT"]  # type: ignore[union-attr]
        self.clients = [NodeClient("127.0.0.1", port, f"test-{i}", timeout_s=20) for i in range(2)]
        self.rm2: ReplicaManager | None = None
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.timer2 = Timer()
        self._remove_publisher: Callable[[], None] | None = None

    @property
    def controller(self) -> Any:
        return self.broker1.embedded_controller.controller  # type: ignore[union-attr]

    @property
    def leader_log_end(self) -> int:
        return self.broker1.replica_manager.partitions[TP].log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.broker1.replica_manager.partitions[TP].high_watermark

    async def start_follower(self) -> ReplicaManager:
        config2 = load_config(None, [f"log.dirs={self.tmp_path / 'logs2'}", "node.id=2", *FAST], environ={})
        metadata2 = BrokerMetadata(self.tmp_path / "meta2")
        self._remove_publisher = self.controller.add_publisher(metadata2)
        self.rm2 = ReplicaManager(config2, metadata2, self.timer2, self.pool, lambda reason: None, lambda: False)
        await self.rm2.start()
        return self.rm2

    async def commit(self, offset: int, client: int = 0) -> int:
        body = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "data", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]}
        response = await self.clients[client].request(OFFSET_COMMIT, 7, body)
        return int(response["topics"][0]["partitions"][0]["error_code"])

    async def fetch(self, client: int = 1) -> tuple[int, int]:
        """(error code, committed offset of data-0)."""
        response = await self.clients[client].request(
            OFFSET_FETCH, 5, {"group_id": GROUP, "topics": None, "require_stable": False})
        if response["error_code"] != ErrorCode.NONE:
            return int(response["error_code"]), -1
        offsets = [p["committed_offset"] for t in response["topics"] for p in t["partitions"]]
        return ErrorCode.NONE, offsets[0] if offsets else -1

    async def move_leader(self, leader: int) -> None:
        topic_id = self.controller.image.topics[OFFSETS_TOPIC].topic_id
        await self.controller._commit([PartitionChangeRecord(0, topic_id, leader=leader)])
        await asyncio.sleep(0)

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        if self._remove_publisher is not None:
            self._remove_publisher()
        if self.rm2 is not None:
            await self.rm2.shutdown()
        self.timer2.shutdown()
        self.pool.shutdown(wait=True)
        await self.broker1.shutdown()


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.fixture
async def pair(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    """__consumer_offsets-0 on (1, 2), led by node 1, ISR (1, 2); node 2 not fetching yet. Extra
    overrides of node 1 come from an indirect parametrization ("topic:key=value": a config of
    __consumer_offsets)."""
    params = list(getattr(request, "param", []))
    extra = [p for p in params if not p.startswith("topic:")]
    topic_configs = dict(p[len("topic:"):].split("=", 1) for p in params if p.startswith("topic:"))
    config1 = load_config(None, [f"log.dirs={tmp_path / 'logs1'}", "node.id=1",
                                 "listeners=PLAINTEXT://127.0.0.1:0", *FAST, *extra], environ={})
    broker1 = Broker(config1)
    await broker1.start()
    p = Pair(tmp_path, broker1)
    try:
        await p.controller.register_broker(2, "127.0.0.1", 9)
        (data,) = await p.controller.create_topics([CreatableTopic("data", assignments=[ReplicaAssignment(0, (1,))])])
        assert data.error_code == 0, data
        (result,) = await p.controller._create_topics(
            [CreatableTopic(OFFSETS_TOPIC, assignments=[ReplicaAssignment(0, (1, 2))],
                            configs={"cleanup.policy": "compact", **topic_configs})], False, internal=True)
        assert result.error_code == 0, result
        assert await broker1.replica_manager.wait_for_logs([OFFSETS_TOPIC]) == {}
        coordinator = broker1.group_coordinator
        assert coordinator is not None
        await eventually(lambda: coordinator.partitions == {0: "active"})
        assert broker1.replica_manager.partitions[TP].isr == (1, 2)
        yield p
    finally:
        await p.close()


async def test_a_commit_is_answered_and_visible_only_once_the_follower_has_it(pair: Pair) -> None:
    commit = asyncio.ensure_future(pair.commit(42))
    await eventually(lambda: pair.leader_log_end == 1)  # appended on the leader...
    await asyncio.sleep(0.3)
    assert not commit.done() and pair.high_watermark == 0  # ...but not replicated: no answer
    assert await pair.fetch() == (ErrorCode.NONE, -1)  # and not applied: nobody reads it
    rm2 = await pair.start_follower()
    assert await commit == ErrorCode.NONE
    # Answered because the follower fetched past the commit: it has the record.
    assert rm2.partitions[TP].log_end_offset == 1 and pair.high_watermark == 1
    assert await pair.fetch() == (ErrorCode.NONE, 42)


@pytest.mark.parametrize("pair", [["offsets.commit.timeout.ms=400"]], indirect=True)
async def test_a_commit_not_replicated_in_time_answers_coordinator_not_available_and_applies_later(
        pair: Pair) -> None:
    # Kafka's GroupCoordinatorService maps the write's REQUEST_TIMED_OUT to COORDINATOR_NOT_AVAILABLE
    # (the client retries); the record is in the log, so once replicated the state follows it.
    assert await pair.commit(7) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await pair.fetch() == (ErrorCode.NONE, -1)
    await pair.start_follower()
    await eventually(lambda: pair.high_watermark == 1)
    await eventually(lambda: pair.broker1.group_coordinator.offsets.fetch_offsets(GROUP, None)  # type: ignore[union-attr]
                     != [])
    assert await pair.fetch() == (ErrorCode.NONE, 7)


async def test_a_new_leader_serves_only_once_its_high_watermark_covers_its_log(pair: Pair) -> None:
    commit = asyncio.ensure_future(pair.commit(5))
    await eventually(lambda: pair.leader_log_end == 1)
    # Leadership goes to node 2 and comes back: the unreplicated commit is answered NOT_COORDINATOR
    # (it was never acknowledged), and node 1 leads again with a record above its HW.
    await pair.move_leader(2)
    assert await commit == ErrorCode.NOT_COORDINATOR
    await pair.move_leader(1)
    await asyncio.sleep(0.3)
    assert pair.broker1.group_coordinator.partitions == {0: "loading"}  # type: ignore[union-attr]
    assert (await pair.fetch())[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await pair.start_follower()  # the follower fetches the record: the HW reaches the log end
    await eventually(lambda: pair.broker1.group_coordinator.partitions == {0: "active"})  # type: ignore[union-attr]
    assert await pair.fetch() == (ErrorCode.NONE, 5)


@pytest.mark.parametrize("pair", [["topic:min.insync.replicas=3"]], indirect=True)
async def test_a_commit_below_min_insync_replicas_is_refused_before_anything_is_written(pair: Pair) -> None:
    # acks=-1's check: NOT_ENOUGH_REPLICAS, which Kafka's coordinator answers COORDINATOR_NOT_AVAILABLE.
    assert await pair.commit(3) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert pair.leader_log_end == 0 and await pair.fetch() == (ErrorCode.NONE, -1)


@pytest.mark.parametrize("pair", [["offsets.commit.timeout.ms=400"]], indirect=True)
async def test_a_commit_that_times_out_queued_behind_an_unreplicated_one_answers_coordinator_not_available(
        pair: Pair) -> None:
    # The first commit is appended and waits for the follower; the second waits in the partition's
    # queue behind it and times out there, before its operation ever ran. Kafka's runtime fails both
    # with a TimeoutException, which GroupCoordinatorService answers COORDINATOR_NOT_AVAILABLE for
    # every partition of the request (issue 27: the queued one got UNKNOWN_SERVER_ERROR).
    first = asyncio.ensure_future(pair.commit(11, client=0))
    await eventually(lambda: pair.leader_log_end == 1)
    second = asyncio.ensure_future(pair.commit(12, client=1))
    assert await first == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await second == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # The queued commit was never computed, so it is never written; the first one is in the log
    # and is applied once the follower has it.
    await pair.start_follower()
    await eventually(lambda: pair.high_watermark == 1)
    await asyncio.sleep(0.2)
    assert pair.leader_log_end == 1
    assert await pair.fetch() == (ErrorCode.NONE, 11)
