"""The group coordinator answers, and changes its state, only once its writes are durable.

The writer appends to the node's real logs at once but holds the durability of every append
until the test releases it (as acks=all replication will).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from group_harness import Clock, Node, started

from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
from odradek.broker.group.classic_group import GroupState
from odradek.protocol.errors import ErrorCode, KafkaApiError

pytestmark = pytest.mark.timeout(10)


class HeldWriter(ReplicaManagerWriter):
    """Appends at once; each append is durable only when ``release`` says so (if ``hold``)."""

    hold = False

    def __init__(self, node: Node) -> None:
        super().__init__(node.replica_manager)
        self.pending: list[asyncio.Future[int]] = []

    def append(self, topic: str, partition: int, records: bytes) -> asyncio.Future[int]:
        future = super().append(topic, partition, records)
        if not self.hold or future.exception() is not None:
            return future
        held: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        held.last = future.result()  # type: ignore[attr-defined]
        self.pending.append(held)
        return held

    def release(self, error: ErrorCode | None = None) -> None:
        pending, self.pending = self.pending, []
        for f in pending:
            if error is None:
                f.set_result(f.last)  # type: ignore[attr-defined]
            else:
                f.set_exception(KafkaApiError(error))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_offset_commit_is_answered_and_visible_only_once_durable(node: Node) -> None:
    writer = HeldWriter(node)
    c = await started(node, writer)
    writer.hold = True
    commit = asyncio.ensure_future(c.commit_offsets("s", "", None, -1, 8, -1, [("u", 0, 7, -1, "m", -1)]))
    await settle()
    assert not commit.done() and len(writer.pending) == 1
    assert c.fetch_offsets("s", [("u", [0])]) == [("u", [(0, None)])]  # reads see applied state only
    writer.release()
    assert await commit == [ErrorCode.NONE]
    [(_, [(_, om)])] = c.fetch_offsets("s", [("u", [0])])
    assert om is not None and om.committed_offset == 7


async def test_a_commit_whose_durability_fails_changes_nothing(node: Node) -> None:
    writer = HeldWriter(node)
    c = await started(node, writer)
    writer.hold = True
    commit = asyncio.ensure_future(c.commit_offsets("s", "", None, -1, 8, -1, [("u", 0, 7, -1, "m", -1)]))
    await settle()
    writer.release(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert await commit == [ErrorCode.COORDINATOR_NOT_AVAILABLE]  # Kafka's mapping of the write error
    assert "s" not in c.groups and c.fetch_offsets("s", [("u", [0])]) == [("u", [(0, None)])]


async def test_consumer_group_heartbeat_waits_for_durability(node: Node) -> None:
    writer = HeldWriter(node)
    c = await started(node, writer)
    writer.hold = True
    req = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
           "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
           "server_assignor": None, "topic_partitions": []}
    hb = asyncio.ensure_future(c.consumer.heartbeat(0, req, "cli", "/127.0.0.1"))
    await settle()
    assert not hb.done() and "g" not in c.consumer.groups
    # A second heartbeat for the same partition is not even computed before the first is applied.
    second = asyncio.ensure_future(c.consumer.heartbeat(0, dict(req), "cli", "/127.0.0.1"))
    await settle()
    assert len(writer.pending) == 1
    writer.release()
    await settle()
    first = await hb
    assert first["error_code"] == ErrorCode.NONE and first["member_epoch"] == 1
    assert set(c.consumer.groups["g"].members) == {first["member_id"]}
    writer.release()
    assert (await second)["member_epoch"] == 2 and len(c.consumer.groups["g"].members) == 2


async def test_join_creates_the_group_only_once_its_record_is_durable(node: Node) -> None:
    writer = HeldWriter(node)
    c = await started(node, writer)
    writer.hold = True
    join = asyncio.ensure_future(c.join_group("g", "", None, "cli", "/127.0.0.1", 2000, 1000, "consumer",
                                              [("range", b"")], 9))
    await settle()
    assert not join.done() and "g" not in c.groups
    writer.release()
    resp = await join
    assert resp["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and "g" in c.groups


async def test_the_leaders_assignment_reaches_the_group_only_once_durable(node: Node) -> None:
    writer = HeldWriter(node)
    c = await started(node, writer)
    args = ("cli", "/127.0.0.1", 2000, 1000, "consumer", [("range", b"")], 9)
    member = (await c.join_group("g", "", None, *args))["member_id"]
    join = asyncio.ensure_future(c.join_group("g", member, None, *args))
    for _ in range(10):  # the (0 ms) initial rebalance delay runs on the timer
        await asyncio.sleep(0)
        c.timer.timer.advance_clock()
    generation = (await join)["generation_id"]
    writer.hold = True
    sync = asyncio.ensure_future(c.sync_group("g", generation, member, None, "consumer", "range", {member: b"A"}))
    await settle()
    assert not sync.done() and c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert c.groups["g"].members[member].assignment == b""
    writer.release()
    assert (await sync)["assignment"] == b"A" and c.groups["g"].state is GroupState.STABLE


async def test_a_join_whose_write_times_out_is_answered_and_its_group_still_follows_the_log(
        tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    node = Node(tmp_path, clock, **{"offsets.commit.timeout.ms": "100"})
    try:
        writer = HeldWriter(node)
        c = await started(node, writer)
        writer.hold = True
        args = ("cli", "/127.0.0.1", 2000, 1000, "consumer", [("range", b"")], 9)
        resp = await asyncio.wait_for(c.join_group("g", "", None, *args), 5)
        # Kafka maps the write's REQUEST_TIMED_OUT to COORDINATOR_NOT_AVAILABLE: the member retries.
        assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and "g" not in c.groups
        writer.release()  # durable after all: the group's record is in the log, so the group exists
        await settle()
        assert c.groups["g"].state is GroupState.EMPTY and not c.groups["g"].members
        assert "failed" not in caplog.text  # the late apply did not try to answer the join again
        writer.hold = False
        assert (await c.join_group("g", "", None, *args))["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    finally:
        node.replica_manager.close()
