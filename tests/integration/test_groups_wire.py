"""Classic group error cases over a raw socket (tests/support/wire.py), against the real daemon.

Each case sends the bad request, checks Kafka's error code, and checks that the group (state,
generation, members) and its committed offsets are unchanged. One broker serves the module; every
test uses its own group ids.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(60)

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, DELETE_GROUPS, OFFSET_DELETE, CREATE_TOPICS = 8, 9, 15, 42, 47, 19
TOPIC, OTHER = "wt", "wother"


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics a member subscribes to (what OffsetDelete reads)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)  # no user data


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("wire-groups")),
                      overrides={"group.min.session.timeout.ms": "500"}).start()
    try:
        with WireClient(b.host, b.port) as w:
            topics = [{"name": t, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
                      for t in (TOPIC, OTHER)]
            created = w.request(CREATE_TOPICS, 4, {"topics": topics, "timeout_ms": 5000, "validate_only": False})
            assert [t["error_code"] for t in created["topics"]] == [0, 0]
        yield b
    finally:
        b.kill()


@pytest.fixture
def w(broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(broker.host, broker.port) as client:
        yield client


def find_coordinator(w: WireClient, group: str) -> None:
    for _ in range(100):
        if w.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})["error_code"] == ErrorCode.NONE:
            return
        time.sleep(0.05)
    raise AssertionError("no coordinator")


def join_body(group: str, member_id: str = "", instance: str | None = None, session: int = 5000,
              topics: tuple[str, ...] = (TOPIC,)) -> dict:
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 3000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(*topics)}]}


def join(w: WireClient, group: str, **kw) -> dict:
    return w.request(JOIN, 5, join_body(group, **kw))


def sync(w: WireClient, group: str, generation: int, member: str, instance: str | None = None,
         assignments: dict[str, bytes] | None = None) -> dict:
    return w.request(SYNC, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                               "group_instance_id": instance, "assignments": [
                                   {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]})


def heartbeat(w: WireClient, group: str, generation: int, member: str, instance: str | None = None) -> int:
    return w.request(HEARTBEAT, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": instance})["error_code"]


def commit(w: WireClient, group: str, generation: int, member: str, offsets: dict[tuple[str, int], int],
           instance: str | None = None) -> list[int]:
    by_topic: dict[str, list[dict]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                           "committed_leader_epoch": -1, "committed_metadata": f"m{o}"})
    resp = w.request(COMMIT, 7, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                                 "group_instance_id": instance,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return [p["error_code"] for t in resp["topics"] for p in t["partitions"]]


def fetch(w: WireClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    resp = w.request(FETCH, 5, {"group_id": group, "topics": None, "require_stable": False})
    assert resp["error_code"] == ErrorCode.NONE
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"])
            for t in resp["topics"] for p in t["partitions"]}


def describe(w: WireClient, group: str) -> tuple[str, list[tuple[str, str | None]]]:
    (g,) = w.request(DESCRIBE, 4, {"groups": [group], "include_authorized_operations": False})["groups"]
    assert g["error_code"] == ErrorCode.NONE
    return g["group_state"], sorted((m["member_id"], m["group_instance_id"]) for m in g["members"])


def stable_member(w: WireClient, group: str, instance: str | None = None,
                  topics: tuple[str, ...] = (TOPIC,)) -> tuple[str, int]:
    """One member joined and synced: (member id, generation)."""
    find_coordinator(w, group)
    first = join(w, group, instance=instance, topics=topics)
    if instance is None:  # KIP-394: a dynamic member first gets its id
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        first = join(w, group, member_id=first["member_id"], topics=topics)
    assert first["error_code"] == ErrorCode.NONE, first
    member, generation = first["member_id"], first["generation_id"]
    synced = sync(w, group, generation, member, instance, {member: b"assignment"})
    assert (synced["error_code"], synced["assignment"]) == (ErrorCode.NONE, b"assignment")
    return member, generation


def test_member_id_required_then_join(w: WireClient) -> None:
    find_coordinator(w, "w-mir")
    first = join(w, "w-mir")
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"].startswith("wire-test-")
    assert first["generation_id"] == -1
    # The pending member is not a member yet: the group stays Empty.
    assert describe(w, "w-mir") == ("Empty", [])
    joined = join(w, "w-mir", member_id=first["member_id"])
    assert (joined["error_code"], joined["generation_id"], joined["leader"]) == \
        (ErrorCode.NONE, 1, first["member_id"])
    assert describe(w, "w-mir") == ("CompletingRebalance", [(first["member_id"], None)])


def test_a_protocol_named_twice_still_completes_the_join(w: WireClient) -> None:
    """Found by the fuzzer: a member naming one protocol twice was counted twice, no protocol was
    then supported by every member, and the join never completed (an ERROR traceback instead)."""
    find_coordinator(w, "w-dup")
    body = join_body("w-dup")
    body["protocols"] = [{"name": "range", "metadata": subscription(TOPIC)}] * 2
    first = w.request(JOIN, 5, body)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    body["member_id"] = first["member_id"]
    joined = w.request(JOIN, 5, body)
    assert (joined["error_code"], joined["protocol_name"], joined["leader"]) == \
        (ErrorCode.NONE, "range", first["member_id"]), joined
    # A second member naming the protocol once is consistent with the first.
    other = join(w, "w-dup")
    assert other["error_code"] == ErrorCode.MEMBER_ID_REQUIRED


def test_invalid_session_timeout_creates_nothing(w: WireClient) -> None:
    find_coordinator(w, "w-ist")
    for session in (499, 1_800_001):  # group.min.session.timeout.ms=500, group.max default 30 min
        resp = join(w, "w-ist", session=session)
        assert (resp["error_code"], resp["member_id"]) == (ErrorCode.INVALID_SESSION_TIMEOUT, "")
    assert describe(w, "w-ist") == ("Dead", [])
    member, generation = stable_member(w, "w-ist")
    assert join(w, "w-ist", member_id=member, session=100)["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    assert describe(w, "w-ist") == ("Stable", [(member, None)])
    assert heartbeat(w, "w-ist", generation, member) == ErrorCode.NONE


def test_unknown_member_and_illegal_generation_change_nothing(w: WireClient) -> None:
    member, generation = stable_member(w, "w-um")
    assert commit(w, "w-um", generation, member, {(TOPIC, 0): 3}) == [ErrorCode.NONE]
    before = fetch(w, "w-um")
    assert before == {(TOPIC, 0): (3, "m3")}
    assert join(w, "w-um", member_id="nobody")["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert heartbeat(w, "w-um", generation, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert sync(w, "w-um", generation, "nobody")["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(w, "w-um", generation, "nobody", {(TOPIC, 0): 9}) == [ErrorCode.UNKNOWN_MEMBER_ID]
    # An admin-style commit (no member, no generation) is refused while the group has members.
    assert commit(w, "w-um", -1, "", {(TOPIC, 0): 9}) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert heartbeat(w, "w-um", generation + 5, member) == ErrorCode.ILLEGAL_GENERATION
    assert sync(w, "w-um", generation + 5, member)["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert commit(w, "w-um", generation + 5, member, {(TOPIC, 0): 9}) == [ErrorCode.ILLEGAL_GENERATION]
    # A generation for a group that does not exist.
    find_coordinator(w, "w-um-none")
    assert commit(w, "w-um-none", 1, "x", {(TOPIC, 0): 9}) == [ErrorCode.ILLEGAL_GENERATION]
    assert fetch(w, "w-um-none") == {}
    assert fetch(w, "w-um") == before
    assert describe(w, "w-um") == ("Stable", [(member, None)])
    assert heartbeat(w, "w-um", generation, member) == ErrorCode.NONE


def test_fenced_instance_id(w: WireClient) -> None:
    old, generation = stable_member(w, "w-fence", instance="inst")
    assert commit(w, "w-fence", generation, old, {(TOPIC, 1): 4}, instance="inst") == [ErrorCode.NONE]
    # The same instance id joins again without a member id (a restarted static member): the old id is
    # fenced, the new one takes its place and its assignment without a new generation.
    again = join(w, "w-fence", instance="inst")
    assert again["error_code"] == ErrorCode.NONE and again["member_id"] != old
    assert again["generation_id"] == generation
    new = again["member_id"]
    assert heartbeat(w, "w-fence", generation, old, "inst") == ErrorCode.FENCED_INSTANCE_ID
    assert commit(w, "w-fence", generation, old, {(TOPIC, 1): 9}, instance="inst") == [ErrorCode.FENCED_INSTANCE_ID]
    assert sync(w, "w-fence", generation, old, "inst")["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    assert join(w, "w-fence", member_id=old, instance="inst")["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    left = w.request(LEAVE, 3, {"group_id": "w-fence", "members": [{"member_id": old, "group_instance_id": "inst"}]})
    assert left["error_code"] == ErrorCode.NONE
    assert [m["error_code"] for m in left["members"]] == [ErrorCode.FENCED_INSTANCE_ID]
    assert fetch(w, "w-fence") == {(TOPIC, 1): (4, "m4")}
    assert describe(w, "w-fence") == ("Stable", [(new, "inst")])
    kept = sync(w, "w-fence", generation, new, "inst")
    assert (kept["error_code"], kept["assignment"]) == (ErrorCode.NONE, b"assignment")
    assert heartbeat(w, "w-fence", generation, new, "inst") == ErrorCode.NONE


def test_rebalance_in_progress_on_heartbeat(broker: BrokerProcess, w: WireClient) -> None:
    a, generation = stable_member(w, "w-rip")
    with WireClient(broker.host, broker.port, client_id="second") as w2:
        find_coordinator(w2, "w-rip")
        pending = w2.request(JOIN, 5, join_body("w-rip"))
        assert pending["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        # b's join waits for a to rejoin: send it, read the answer later.
        corr, frame = w2.encode_request(JOIN, 5, join_body("w-rip", member_id=pending["member_id"]))
        w2.send_raw(frame)
        deadline = time.monotonic() + 5
        while describe(w, "w-rip")[0] != "PreparingRebalance":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert heartbeat(w, "w-rip", generation, a) == ErrorCode.REBALANCE_IN_PROGRESS
        # Commits of the current generation are still accepted while members rejoin (as Kafka).
        assert commit(w, "w-rip", generation, a, {(TOPIC, 0): 2}) == [ErrorCode.NONE]
        assert sync(w, "w-rip", generation, a)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = join(w, "w-rip", member_id=a)
        b = w2.read_response(JOIN, 5, corr)
        assert rejoined["error_code"] == b["error_code"] == ErrorCode.NONE
        assert rejoined["generation_id"] == b["generation_id"] == generation + 1
        assert rejoined["leader"] == a and len(rejoined["members"]) == 2 and b["members"] == []
        # CompletingRebalance: the old generation is gone, commits wait for the assignment.
        assert heartbeat(w, "w-rip", generation, a) == ErrorCode.ILLEGAL_GENERATION
        assert commit(w, "w-rip", generation + 1, a, {(TOPIC, 0): 7}) == [ErrorCode.REBALANCE_IN_PROGRESS]
        assert fetch(w, "w-rip") == {(TOPIC, 0): (2, "m2")}
        assert heartbeat(w, "w-rip", generation + 1, a) == ErrorCode.NONE


def test_delete_groups_errors(w: WireClient) -> None:
    member, generation = stable_member(w, "w-del")
    assert commit(w, "w-del", generation, member, {(TOPIC, 0): 5}) == [ErrorCode.NONE]
    find_coordinator(w, "w-del-none")
    resp = w.request(DELETE_GROUPS, 1, {"groups_names": ["w-del", "w-del-none"]})
    assert {r["group_id"]: r["error_code"] for r in resp["results"]} == {
        "w-del": ErrorCode.NON_EMPTY_GROUP, "w-del-none": ErrorCode.GROUP_ID_NOT_FOUND}
    assert describe(w, "w-del") == ("Stable", [(member, None)])
    assert fetch(w, "w-del") == {(TOPIC, 0): (5, "m5")}
    left = w.request(LEAVE, 3, {"group_id": "w-del", "members": [{"member_id": member, "group_instance_id": None}]})
    assert [m["error_code"] for m in left["members"]] == [ErrorCode.NONE]
    assert describe(w, "w-del") == ("Empty", [])
    resp = w.request(DELETE_GROUPS, 1, {"groups_names": ["w-del"]})
    assert [(r["group_id"], r["error_code"]) for r in resp["results"]] == [("w-del", ErrorCode.NONE)]
    assert describe(w, "w-del") == ("Dead", [])
    assert fetch(w, "w-del") == {}


def test_offset_delete_subscribed_topic(w: WireClient) -> None:
    member, generation = stable_member(w, "w-od")  # subscribes to TOPIC only
    assert commit(w, "w-od", generation, member, {(TOPIC, 0): 1, (TOPIC, 1): 2, (OTHER, 0): 3}) == [0, 0, 0]

    def offset_delete(group: str, topics: dict[str, list[int]]) -> dict:
        return w.request(OFFSET_DELETE, 0, {"group_id": group, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()]})

    resp = offset_delete("w-od", {TOPIC: [0], OTHER: [0], "no-such-topic": [0]})
    assert resp["error_code"] == ErrorCode.NONE
    assert {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]} == {
        (TOPIC, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, (OTHER, 0): ErrorCode.NONE,
        ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch(w, "w-od") == {(TOPIC, 0): (1, "m1"), (TOPIC, 1): (2, "m2")}
    find_coordinator(w, "w-od-none")
    assert offset_delete("w-od-none", {TOPIC: [0]})["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert describe(w, "w-od") == ("Stable", [(member, None)])


def test_versions_before_static_membership(w: WireClient) -> None:
    """Requests that lack group_instance_id (JoinGroup <5, SyncGroup/Heartbeat <3, OffsetCommit <7)
    and SyncGroup's protocol fields (<5) must read as Kafka's null: not as static member "", not as a
    protocol to compare."""
    find_coordinator(w, "w-old")
    body = join_body("w-old")
    del body["group_instance_id"]
    joined = w.request(JOIN, 1, body)  # before v4 a member gets its id at once
    assert joined["error_code"] == ErrorCode.NONE and joined["generation_id"] == 1
    member = joined["member_id"]
    synced = w.request(SYNC, 0, {"group_id": "w-old", "generation_id": 1, "member_id": member,
                                 "assignments": [{"member_id": member, "assignment": b"old"}]})
    assert (synced["error_code"], synced["assignment"]) == (ErrorCode.NONE, b"old")
    hb = w.request(HEARTBEAT, 0, {"group_id": "w-old", "generation_id": 1, "member_id": member})
    assert hb["error_code"] == ErrorCode.NONE
    resp = w.request(COMMIT, 2, {"group_id": "w-old", "generation_id_or_member_epoch": 1, "member_id": member,
                                 "retention_time_ms": -1, "topics": [{"name": TOPIC, "partitions": [
                                     {"partition_index": 0, "committed_offset": 6, "committed_metadata": "v2"}]}]})
    assert resp["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    assert fetch(w, "w-old") == {(TOPIC, 0): (6, "v2")}
    assert w.request(LEAVE, 0, {"group_id": "w-old", "member_id": member})["error_code"] == ErrorCode.NONE
    assert describe(w, "w-old") == ("Empty", [])
