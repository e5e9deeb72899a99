"""KIP-848 groups in the real coordinator over real log files: join, reconcile with revocation before
assignment, fencing, leaving, timeouts, restart, offsets and the boundary with classic groups."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from group_harness import Clock, Node, started, tick

from odradek.broker.group import consumer_group_records as CR
from odradek.broker.group.consumer_group import (
    ConsumerGroupMember,
    MemberState,
    reconcile,
)
from odradek.broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(10)


async def hb(c: GroupCoordinator, member: str = "", epoch: int = 0, group: str = "g", topics=("t",), owned=None,
       rebalance: int | None = None, instance: str | None = None, assignor: str | None = None, version: int = 0,
       regex: str | None = None, full: bool | None = None) -> dict:
    joining = epoch == 0
    req = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
           "rack_id": None, "rebalance_timeout_ms": rebalance if rebalance is not None else (5000 if joining else -1),
           "subscribed_topic_names": list(topics) if (joining or full) and topics is not None else None,
           "subscribed_topic_regex": regex, "server_assignor": assignor,
           "topic_partitions": [] if joining else owned}
    return await c.consumer.heartbeat(version, req, "cli", "/127.0.0.1")


def tid(node: Node, topic: str = "t") -> uuid.UUID:
    return node.metadata.image.topics[topic].topic_id


def parts(resp: dict, node: Node, topic: str = "t") -> set[int] | None:
    if resp["assignment"] is None:
        return None
    out: set[int] = set()
    for tp in resp["assignment"]["topic_partitions"]:
        if tp["topic_id"] == tid(node, topic):
            out |= set(tp["partitions"])
    return out


def owned(node: Node, ps, topic: str = "t") -> list[dict]:
    return [{"topic_id": tid(node, topic), "partitions": sorted(ps)}]


async def test_join_converges_with_revocation_before_assignment(node: Node) -> None:
    c = await started(node)
    r1 = await hb(c)
    assert r1["error_code"] == ErrorCode.NONE and r1["member_epoch"] == 1
    m1 = r1["member_id"]
    assert len(m1) == 22 and parts(r1, node) == {0, 1, 2, 3}
    assert r1["heartbeat_interval_ms"] == 5000

    r2 = await hb(c)
    m2 = r2["member_id"]
    # m2 is at the new epoch but gets nothing yet: m1 still owns every partition.
    assert r2["member_epoch"] == 2 and parts(r2, node) == set()
    group = c.consumer.groups["g"]
    assert group.group_epoch == 2 and group.assignment_epoch == 2
    assert group.members[m2].state == MemberState.UNRELEASED_PARTITIONS

    # m1 is asked to revoke two partitions: it stays at epoch 1 until it acknowledges.
    r1 = await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))
    keep = parts(r1, node)
    assert r1["member_epoch"] == 1 and len(keep) == 2
    assert group.members[m1].state == MemberState.UNREVOKED_PARTITIONS
    r2 = await hb(c, m2, 2, owned=owned(node, set()))
    assert r2["member_epoch"] == 2 and r2["assignment"] is None  # nothing released yet
    assert c.consumer.describe("g")["group_state"] == "Reconciling"

    # m1 acknowledges: it moves to epoch 2, and only then m2 receives the revoked partitions.
    r1 = await hb(c, m1, 1, owned=owned(node, keep))
    assert r1["member_epoch"] == 2
    r2 = await hb(c, m2, 2, owned=owned(node, set()))
    assert parts(r2, node) == {0, 1, 2, 3} - keep
    assert group.members[m2].state == MemberState.STABLE
    d = c.consumer.describe("g")
    assert d["group_state"] == "Stable" and d["group_epoch"] == 2 and d["assignor_name"] == "uniform"
    assert {m["member_id"]: m["member_epoch"] for m in d["members"]} == {m1: 2, m2: 2}
    for m in d["members"]:
        assert m["assignment"] == m["target_assignment"]
        assert m["assignment"]["topic_partitions"][0]["topic_name"] == "t"


async def test_fencing_and_lost_response(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    assert (await hb(c, m1, 5))["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    m2 = (await hb(c))["member_id"]
    r = await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))
    keep = parts(r, node)
    r = await hb(c, m1, 1, owned=owned(node, keep))
    assert r["member_epoch"] == 2
    # The epoch-2 answer was lost: the previous epoch with a subset of the assignment is accepted.
    assert (await hb(c, m1, 1, owned=owned(node, keep)))["error_code"] == ErrorCode.NONE
    # ... but not with partitions it does not have.
    assert (await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3})))["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert (await hb(c, "nobody", 1))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await hb(c, m2, 2))["error_code"] == ErrorCode.NONE


async def test_leave_bumps_epoch_and_frees_partitions(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    m2 = (await hb(c))["member_id"]
    keep = parts((await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))), node)
    await hb(c, m1, 1, owned=owned(node, keep))
    r = await hb(c, m2, -1)
    assert r["error_code"] == ErrorCode.NONE and r["member_epoch"] == -1 and r["member_id"] == m2
    group = c.consumer.groups["g"]
    assert group.group_epoch == 3 and m2 not in group.members
    r = await hb(c, m1, 2, owned=owned(node, keep))
    assert r["member_epoch"] == 3 and parts(r, node) == {0, 1, 2, 3}
    assert (await hb(c, m2, -1))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await hb(c, "x", -1, group="nope"))["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


async def test_session_timeout_fences(node: Node, clock: Clock) -> None:
    c = await started(node)
    m1 = (await hb(c, rebalance=120_000))["member_id"]  # revoking slowly, but within its rebalance timeout
    m2 = (await hb(c))["member_id"]
    for _ in range(3):
        tick(node, clock, 20_000)
        await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))
    group = c.consumer.groups["g"]
    assert m2 not in group.members and m1 in group.members  # m2 never heartbeat again
    assert group.group_epoch == 3


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke(node: Node, clock: Clock) -> None:
    c = await started(node)
    m1 = (await hb(c, rebalance=3000))["member_id"]
    m2 = (await hb(c))["member_id"]
    await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))
    assert c.consumer.groups["g"].members[m1].state == MemberState.UNREVOKED_PARTITIONS
    tick(node, clock, 3500)
    assert m1 not in c.consumer.groups["g"].members
    r = await hb(c, m2, 2, owned=owned(node, set()))
    assert r["member_epoch"] == 3 and parts(r, node) == {0, 1, 2, 3}


async def test_restart_keeps_epochs_and_assignments(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    m2 = (await hb(c, assignor="range"))["member_id"]
    keep = parts((await hb(c, m1, 1, owned=owned(node, {0, 1, 2, 3}))), node)
    await hb(c, m1, 1, owned=owned(node, keep))
    r2 = await hb(c, m2, 2, owned=owned(node, set()))
    before = c.consumer.describe("g")
    assert await c.commit_offsets("g", m2, None, 2, 9, -1, [("t", 2, 42, -1, "m", -1)]) == [ErrorCode.NONE]
    await c.shutdown()

    c2 = await started(node)
    after = c2.consumer.describe("g")
    assert after == before
    group = c2.consumer.groups["g"]
    assert group.members[m1].member_epoch == 2 and group.partition_epochs
    assert c2.fetch_offsets("g", [("t", [2])], m2, 2)[0][1][0][1].committed_offset == 42
    # Members carry on with their epochs, without rejoining.
    assert (await hb(c2, m2, 2, owned=owned(node, parts(r2, node))))["error_code"] == ErrorCode.NONE
    assert "g" not in c2.groups  # not mistaken for a classic group


async def test_static_member_leaves_and_returns_with_its_assignment(node: Node) -> None:
    c = await started(node)
    r = await hb(c, instance="i1")
    m1 = r["member_id"]
    assert (await hb(c, instance="i1"))["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
    assert (await hb(c, m1, -2, instance="i1"))["member_epoch"] == -2
    r = await hb(c, instance="i1")
    assert r["error_code"] == ErrorCode.NONE and r["member_id"] != m1
    assert parts(r, node) == {0, 1, 2, 3} and r["member_epoch"] == 1  # no rebalance
    assert set(c.consumer.groups["g"].members) == {r["member_id"]}
    assert (await hb(c, m1, 1, instance="i1"))["error_code"] == ErrorCode.FENCED_INSTANCE_ID


async def test_invalid_requests(node: Node) -> None:
    c = await started(node)
    assert (await hb(c, group=""))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, rebalance=-1))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, topics=()))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, epoch=-3, member="m"))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, epoch=3, member=""))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, instance=""))["error_code"] == ErrorCode.INVALID_REQUEST
    assert (await hb(c, version=1))["error_code"] == ErrorCode.INVALID_REQUEST  # v1: client-generated id
    r = await hb(c, assignor="sticky")
    assert r["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR and "uniform" in r["error_message"]
    assert (await hb(c, version=1, member="m", topics=(), regex="t["))["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert (await hb(c, epoch=1, member="m", owned=[]))["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert c.consumer.groups == {}  # nothing was created by any of them


async def test_regex_subscription(node: Node) -> None:
    c = await started(node)
    r = await hb(c, version=1, member="mine", topics=(), regex="[tu]")
    assert r["member_id"] == "mine"
    assert parts(r, node, "t") == {0, 1, 2, 3} and parts(r, node, "u") == {0}


async def test_group_max_size(tmp_path: Path, clock: Clock) -> None:
    node = Node(tmp_path, clock, **{"group.consumer.max.size": "1"})
    try:
        c = await started(node)
        m1 = (await hb(c))["member_id"]
        assert (await hb(c))["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert (await hb(c, m1, 1))["error_code"] == ErrorCode.NONE
    finally:
        node.replica_manager.close()


async def test_offset_commit_and_fetch_validate_member_epoch(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    tp = [("t", 0, 5, -1, "", -1)]
    assert await c.commit_offsets("g", m1, None, 1, 9, -1, tp) == [ErrorCode.NONE]
    assert await c.commit_offsets("g", m1, None, 0, 9, -1, tp) == [ErrorCode.STALE_MEMBER_EPOCH]
    assert await c.commit_offsets("g", "zz", None, 1, 9, -1, tp) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert await c.commit_offsets("g", m1, None, 1, 8, -1, tp) == [ErrorCode.UNSUPPORTED_VERSION]
    assert await c.commit_offsets("g", "", None, -1, 9, -1, tp) == [ErrorCode.UNKNOWN_MEMBER_ID]  # not empty
    from odradek.protocol.errors import KafkaApiError

    with pytest.raises(KafkaApiError) as e:
        c.fetch_offsets("g", None, m1, 7)
    assert e.value.code == ErrorCode.STALE_MEMBER_EPOCH
    assert c.fetch_offsets("g", None)[0][1][0][1].committed_offset == 5  # admin: no member


async def test_classic_and_consumer_groups_do_not_corrupt_each_other(node: Node) -> None:
    from test_coordinator import join

    c = await started(node)
    m1 = (await hb(c, group="cg"))["member_id"]
    # A classic JoinGroup on a live consumer group.
    assert (await join(c, group="cg"))["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # A heartbeat on a live classic group.
    j = await join(c, group="classic", version=3)
    assert j["error_code"] == ErrorCode.NONE
    assert (await hb(c, group="classic"))["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert c.consumer.describe("classic")["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert c.describe_group("cg")["group_state"] == "Dead"  # DescribeGroups v0-5: not a classic group
    err, listed = c.list_groups(None, None)
    assert {(g["group_id"], g["group_type"], g["protocol_type"]) for g in listed} == {
        ("cg", "consumer", "consumer"), ("classic", "classic", "consumer")}
    assert [g["group_id"] for g in c.list_groups(None, {"Consumer"})[1]] == ["cg"]
    assert [g["group_id"] for g in c.list_groups({"stable"}, {"consumer"})[1]] == ["cg"]
    assert await c.delete_groups(["cg"]) == {"cg": ErrorCode.NON_EMPTY_GROUP}

    # An Empty consumer group gives way to a classic join, keeping its offsets.
    assert await c.commit_offsets("cg", m1, None, 1, 9, -1, [("t", 1, 9, -1, "", -1)]) == [ErrorCode.NONE]
    await hb(c, m1, -1, group="cg")
    assert (await join(c, group="cg", version=3))["error_code"] == ErrorCode.NONE
    assert "cg" not in c.consumer.groups and c.groups["cg"].offsets[("t", 1)].committed_offset == 9


async def test_empty_classic_group_becomes_a_consumer_group_and_survives_restart(node: Node) -> None:
    c = await started(node)
    assert await c.commit_offsets("g", "", None, -1, 9, -1, [("t", 3, 77, -1, "", -1)]) == [ErrorCode.NONE]
    assert "g" in c.groups  # a simple classic group
    r = await hb(c)
    assert r["error_code"] == ErrorCode.NONE
    assert "g" not in c.groups and c.consumer.groups["g"].offsets[("t", 3)].committed_offset == 77
    await c.shutdown()
    c2 = await started(node)
    assert "g" not in c2.groups
    assert c2.consumer.groups["g"].members[r["member_id"]].member_epoch == 1
    assert c2.fetch_offsets("g", [("t", [3])])[0][1][0][1].committed_offset == 77


async def test_delete_empty_group_writes_tombstones(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    await c.commit_offsets("g", m1, None, 1, 9, -1, [("t", 0, 1, -1, "", -1)])
    await hb(c, m1, -1)
    assert c.consumer.describe("g")["group_state"] == "Empty"
    assert await c.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    assert "g" not in c.consumer.groups
    await c.shutdown()
    c2 = await started(node)
    assert "g" not in c2.consumer.groups and "g" not in c2.groups


async def test_failed_append_changes_nothing(node: Node) -> None:
    c = await started(node)
    m1 = (await hb(c))["member_id"]
    before = c.consumer.describe("g")
    node.replica_manager.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (await hb(c))["error_code"] == ErrorCode.NOT_COORDINATOR
    assert (await hb(c, m1, -1))["error_code"] == ErrorCode.NOT_COORDINATOR
    assert c.consumer.describe("g") == before
    node.replica_manager.fail_with = None
    assert (await hb(c, m1, 1))["error_code"] == ErrorCode.NONE


async def test_unload_drops_groups(node: Node) -> None:
    c = await started(node)
    await hb(c)
    p = c.partition_for("g")
    c.runtime.on_resign(OFFSETS_TOPIC, p)
    assert c.consumer.groups == {}
    assert (await hb(c))["error_code"] == ErrorCode.NOT_COORDINATOR
    assert c.consumer.describe("g")["error_code"] == ErrorCode.NOT_COORDINATOR


def test_reconcile_unknown_state_requires_empty_owned() -> None:
    m = ConsumerGroupMember("m", member_epoch=3, state=MemberState.UNKNOWN)
    t = uuid.uuid4()
    from odradek.protocol.errors import KafkaApiError

    with pytest.raises(KafkaApiError) as e:
        reconcile(m, 4, {t: frozenset({0})}, lambda *_: -1, [(t, [0])])
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    r = reconcile(m, 4, {t: frozenset({0})}, lambda *_: -1, [])
    assert r.member_epoch == 4 and r.state == MemberState.STABLE and r.assigned_partitions == {t: frozenset({0})}


def test_records_round_trip() -> None:
    t = uuid.uuid4()
    m = ConsumerGroupMember("m", instance_id="i", rack_id=None, client_id="c", client_host="/h",
                            subscribed_topic_names=frozenset({"b", "a"}), subscribed_topic_regex=None,
                            rebalance_timeout_ms=300, server_assignor="range", member_epoch=5, previous_member_epoch=4,
                            state=MemberState.UNREVOKED_PARTITIONS, assigned_partitions={t: frozenset({1, 0})},
                            partitions_pending_revocation={t: frozenset({2})})
    for rec in (CR.group_epoch_record("g", 7), CR.subscription_metadata_record("g", {"x": (t, 3)}),
                CR.member_metadata_record("g", m), CR.target_assignment_record("g", "m", {t: frozenset({4})}),
                CR.target_assignment_epoch_record("g", 7), CR.current_assignment_record("g", m),
                CR.current_assignment_tombstone("g", "m"), CR.group_epoch_record("g", None)):
        key, value = rec.encode()
        assert CR.is_consumer_group_key(key)
        back = CR.decode(key, value)
        assert (back.kind, back.group_id, back.member_id) == (rec.kind, rec.group_id, rec.member_id)
        if rec.value is None:
            assert back.value is None
        else:
            assert back.encode() == (key, value)
    assert not CR.is_consumer_group_key(b"\x00\x02") and not CR.is_consumer_group_key(b"\x00")
    with pytest.raises(CR.CorruptConsumerGroupRecord):
        CR.decode(b"\x00\x05\x00", b"\x00\x00")
    with pytest.raises(CR.CorruptConsumerGroupRecord):
        CR.decode(CR.group_epoch_record("g", 1).key_bytes(), b"\x00")
