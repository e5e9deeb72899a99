"""The classic group state machine and offset persistence, on real log files and a hand-driven clock."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from group_harness import Clock, Node, started, tick

from odradek.broker.group.classic_group import GroupState
from odradek.broker.group.coordinator import GroupCoordinator
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(10)

PROTOCOLS = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out


async def join(c: GroupCoordinator, group: str = "g", member: str = "", protocols=PROTOCOLS, session: int = 1000,
               rebalance: int = 2000, instance: str | None = None, version: int = 9, client: str = "cli"):
    """JoinGroup, running due timeouts (the 0 ms initial rebalance delay) until it answers."""
    task = asyncio.ensure_future(c.join_group(group, member, instance, client, "/127.0.0.1", rebalance, session,
                                              "consumer", protocols, version))
    for _ in range(10):
        await asyncio.sleep(0)
        c.timer.timer.advance_clock()
        if task.done():
            return task.result()
    return await task


def start_join(c: GroupCoordinator, **kw) -> asyncio.Task:
    return asyncio.ensure_future(c.join_group(
        kw.get("group", "g"), kw.get("member", ""), kw.get("instance"), kw.get("client", "cli"), "/127.0.0.1",
        2000, 1000, "consumer", kw.get("protocols", PROTOCOLS), kw.get("version", 9)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def one_member_group(c: GroupCoordinator, group: str = "g", **kw) -> tuple[str, int]:
    first = await join(c, group=group, **kw)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first["member_id"]
    assert member_id.startswith("cli-")
    resp = await join(c, group=group, member=member_id, **kw)
    assert resp["error_code"] == ErrorCode.NONE
    assert resp["leader"] == member_id and resp["generation_id"] == 1 and resp["protocol_name"] == "range"
    assert [m["member_id"] for m in resp["members"]] == [member_id]
    sync = await c.sync_group(group, 1, member_id, None, "consumer", "range", {member_id: b"assign-1"})
    assert sync["error_code"] == ErrorCode.NONE and sync["assignment"] == b"assign-1"
    assert c.groups[group].state is GroupState.STABLE
    return member_id, 1


async def test_join_sync_heartbeat_and_second_member_rebalance(node: Node, clock: Clock) -> None:
    c = await started(node)
    m1, gen = await one_member_group(c)
    assert await c.heartbeat("g", gen, m1, None) == ErrorCode.NONE
    # A second member joins: the group rebalances; the first learns it from its heartbeat.
    first = await join(c, client="other")
    m2 = first["member_id"]
    t2 = start_join(c, member=m2, client="other")
    await settle()
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert await c.heartbeat("g", gen, m1, None) == ErrorCode.REBALANCE_IN_PROGRESS
    assert not t2.done()
    r1 = await join(c, member=m1)
    r2 = await t2
    assert r1["generation_id"] == r2["generation_id"] == 2
    assert r1["leader"] == m1 and len(r1["members"]) == 2 and r2["members"] == []
    # The follower's SyncGroup waits for the leader's.
    s2 = asyncio.ensure_future(c.sync_group("g", 2, m2, None, None, None, {}))
    await settle()
    assert not s2.done()
    s1 = await c.sync_group("g", 2, m1, None, None, None, {m1: b"a1", m2: b"a2"})
    assert s1["assignment"] == b"a1" and (await s2)["assignment"] == b"a2"
    assert c.groups["g"].state is GroupState.STABLE


async def test_protocol_selection_by_votes(node: Node, clock: Clock) -> None:
    c = await started(node)
    a = (await join(c, version=3, protocols=[("roundrobin", b""), ("range", b"")]))
    assert a["error_code"] == ErrorCode.NONE  # v3: no MEMBER_ID_REQUIRED
    assert a["protocol_name"] == "roundrobin"
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    # A member supporting nothing in common is refused.
    bad = await join(c, version=3, protocols=[("sticky", b"")])
    assert bad["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


async def test_error_cases(node: Node, clock: Clock) -> None:
    c = await started(node)
    assert (await join(c, session=10))["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(c, group=""))["error_code"] == ErrorCode.INVALID_GROUP_ID
    assert (await join(c, member="nobody"))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    m1, gen = await one_member_group(c)
    assert await c.heartbeat("g", gen, "nobody", None) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await c.heartbeat("g", gen + 5, m1, None) == ErrorCode.ILLEGAL_GENERATION
    assert await c.heartbeat("missing", 1, m1, None) == ErrorCode.UNKNOWN_MEMBER_ID
    sync = await c.sync_group("g", gen + 1, m1, None, None, None, {})
    assert sync["error_code"] == ErrorCode.ILLEGAL_GENERATION
    sync = await c.sync_group("g", gen, m1, None, "consumer", "roundrobin", {})
    assert sync["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    codes = await c.commit_offsets("g", m1, None, gen + 1, 8, -1, [("t", 0, 5, -1, "", -1)])
    assert codes == [ErrorCode.ILLEGAL_GENERATION]
    assert await c.commit_offsets("g", "x", None, gen, 8, -1, [("t", 0, 5, -1, "", -1)]) == [ErrorCode.UNKNOWN_MEMBER_ID]
    # Nothing was stored by the refused commits.
    assert c.fetch_offsets("g", [("t", [0])]) == [("t", [(0, None)])]
    # Group 'g' is not empty: it can't be deleted.
    assert await c.delete_groups(["g", "missing"]) == {"g": ErrorCode.NON_EMPTY_GROUP,
                                                 "missing": ErrorCode.GROUP_ID_NOT_FOUND}


async def test_static_member_fencing_and_rejoin_without_rebalance(node: Node, clock: Clock) -> None:
    c = await started(node)
    r = await join(c, instance="inst-1")  # static members get an id at once, even on v9
    m1 = r["member_id"]
    assert r["error_code"] == ErrorCode.NONE and m1.startswith("inst-1-")
    await c.sync_group("g", 1, m1, "inst-1", None, None, {m1: b"mine"})
    # The same instance restarts: new member id, same generation, no rebalance; the old id is fenced.
    r2 = await join(c, instance="inst-1")
    m1b = r2["member_id"]
    assert m1b != m1 and r2["generation_id"] == 1 and c.groups["g"].state is GroupState.STABLE
    assert r2["skip_assignment"] is True  # it is the leader (KIP-814)
    assert await c.heartbeat("g", 1, m1, "inst-1") == ErrorCode.FENCED_INSTANCE_ID
    s = await c.sync_group("g", 1, m1b, "inst-1", None, None, {})
    assert s["error_code"] == ErrorCode.NONE and s["assignment"] == b"mine"
    assert (await join(c, member=m1, instance="inst-1"))["error_code"] == ErrorCode.FENCED_INSTANCE_ID


async def test_session_timeout_removes_member_and_rebalances(node: Node, clock: Clock) -> None:
    c = await started(node)
    m1, _ = await one_member_group(c)
    m2 = (await join(c, client="b"))["member_id"]
    t2 = start_join(c, member=m2, client="b")
    await settle()
    r1 = await join(c, member=m1)
    await t2
    await c.sync_group("g", 2, m1, None, None, None, {m1: b"x", m2: b"y"})
    await c.sync_group("g", 2, m2, None, None, None, {})
    # m2 keeps heartbeating, m1 goes silent past its session timeout.
    for _ in range(3):
        tick(node, clock, 400)
        assert await c.heartbeat("g", 2, m2, None) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    assert m1 not in c.groups["g"].members
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    r = await join(c, member=m2, client="b")
    assert r["generation_id"] == 3 and r["leader"] == m2 and r1["generation_id"] == 2


async def test_leave_group_and_empty_group(node: Node, clock: Clock) -> None:
    c = await started(node)
    m1, _ = await one_member_group(c)
    err, per_member = await c.leave_group("g", [(m1, None), ("ghost", None)])
    assert err == ErrorCode.NONE and per_member == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert c.groups["g"].state is GroupState.EMPTY and c.groups["g"].generation_id == 2
    assert await c.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    assert "g" not in c.groups


async def test_offsets_and_groups_survive_reload(node: Node, clock: Clock, tmp_path: Path) -> None:
    c = await started(node)
    m1, gen = await one_member_group(c, protocols=[("range", subscription("t"))])
    assert await c.commit_offsets("g", m1, None, gen, 8, -1,
                            [("t", 0, 10, 3, "meta ✓", -1), ("t", 1, 20, -1, None, -1),
                             ("nope", 0, 1, -1, "", -1), ("t", 2, 1, -1, "x" * 5000, -1)]) == [
        ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.OFFSET_METADATA_TOO_LARGE]
    # a simple (offsets-only) group, and a group that is then deleted
    assert await c.commit_offsets("simple", "", None, -1, 8, -1, [("u", 0, 7, -1, "s", -1)]) == [ErrorCode.NONE]
    assert await c.commit_offsets("gone", "", None, -1, 8, -1, [("u", 0, 1, -1, "", -1)]) == [ErrorCode.NONE]
    assert await c.delete_groups(["gone"]) == {"gone": ErrorCode.NONE}
    await c.shutdown()
    # A new coordinator over the same files (a restart).
    node.replica_manager.close()
    for p in range(3):
        node.replica_manager.open("__consumer_offsets", p)
    c2 = await started(node)
    g = c2.groups["g"]
    assert g.state is GroupState.STABLE and g.generation_id == 1 and g.leader_id == m1
    assert g.members[m1].assignment == b"assign-1" and g.subscribed_topics == {"t"}
    fetched = dict(c2.fetch_offsets("g", None))["t"]
    assert [(p, om.committed_offset, om.leader_epoch, om.metadata) for p, om in fetched] == [
        (0, 10, 3, "meta ✓"), (1, 20, -1, "")]
    assert c2.fetch_offsets("simple", [("u", [0])])[0][1][0][1].committed_offset == 7
    assert "gone" not in c2.groups and c2.fetch_offsets("gone", None) == []
    # The reloaded member is alive until its session timeout, then removed.
    assert await c2.heartbeat("g", 1, m1, None) == ErrorCode.NONE
    tick(node, clock, 1500)
    assert m1 not in c2.groups["g"].members


async def test_failed_append_changes_nothing(node: Node, clock: Clock) -> None:
    c = await started(node)
    assert await c.commit_offsets("s", "", None, -1, 8, -1, [("u", 0, 1, -1, "", -1)]) == [ErrorCode.NONE]
    node.replica_manager.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert await c.commit_offsets("s", "", None, -1, 8, -1, [("u", 0, 99, -1, "", -1)]) == [ErrorCode.NOT_COORDINATOR]
    assert c.fetch_offsets("s", [("u", [0])])[0][1][0][1].committed_offset == 1
    assert await c.commit_offsets("new", "", None, -1, 8, -1, [("u", 0, 5, -1, "", -1)]) == [ErrorCode.NOT_COORDINATOR]
    assert "new" not in c.groups
    resp = await join(c, group="fresh", version=3)
    assert resp["error_code"] == ErrorCode.NOT_COORDINATOR and "fresh" not in c.groups


async def test_offset_expiry_writes_tombstones(node: Node, clock: Clock) -> None:
    node2 = node
    c = await started(node2)
    c.offsets.offsets_retention_ms = 1000
    assert await c.commit_offsets("s", "", None, -1, 8, -1, [("u", 0, 1, -1, "", -1)]) == [ErrorCode.NONE]
    assert await c.cleanup_expired_offsets() == 0
    import time
    assert await c.cleanup_expired_offsets(int(time.time() * 1000) + 2000) == 1
    assert "s" not in c.groups  # empty and without offsets: deleted too


async def test_not_coordinator_and_loading(node: Node, clock: Clock) -> None:
    c = await started(node)
    c.runtime.on_resign("__consumer_offsets", c.partition_for("g"))
    assert (await join(c))["error_code"] == ErrorCode.NOT_COORDINATOR
    c.runtime.on_become_leader("__consumer_offsets", c.partition_for("g"), 1)
    # Loading: Kafka's GroupCoordinatorService answers a Heartbeat NONE (and other APIs the error).
    assert await c.heartbeat("g", 1, "m", None) == ErrorCode.NONE
    assert (await c.sync_group("g", 1, "m", None, None, None, {}))["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await settle()
    assert await c.heartbeat("g", 1, "m", None) == ErrorCode.UNKNOWN_MEMBER_ID
    await c.shutdown()
    assert await c.heartbeat("g", 1, "m", None) == ErrorCode.COORDINATOR_NOT_AVAILABLE
