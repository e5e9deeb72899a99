"""KIP-848 consumer groups over raw sockets against the real daemon: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, OffsetCommit/OffsetFetch v9, ListGroups v5, DescribeGroups, restart."""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(90)

HEARTBEAT, DESCRIBE = 68, 69


def heartbeat(c: WireClient, version: int = 0, **fields) -> dict:
    body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}
    body.update(fields)
    return c.request(HEARTBEAT, version, body)


def wait_for_coordinator(c: WireClient, group: str) -> None:
    """FindCoordinator creates __consumer_offsets on first use; then wait for it to load."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = c.request(10, 1, {"key": group, "key_type": 0})
        if r["error_code"] == 0:
            d = c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})
            if d["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
                return
        time.sleep(0.1)
    raise AssertionError("coordinator never became available")


class Member:
    """A well-behaved client: owns exactly the assignment it was last given."""

    def __init__(self, c: WireClient, topic_id: uuid.UUID, topic: str) -> None:
        self.c, self.topic_id, self.topic = c, topic_id, topic
        self.member_id = ""
        self.epoch = 0
        self.owned: set[int] = set()

    def join(self, **extra) -> dict:
        r = heartbeat(self.c, member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=[self.topic],
                      topic_partitions=[], **extra)
        assert r["error_code"] == 0, r
        self.member_id = r["member_id"]
        self._take(r)
        return r

    def beat(self) -> dict:
        r = heartbeat(self.c, member_id=self.member_id, member_epoch=self.epoch,
                      topic_partitions=[{"topic_id": self.topic_id, "partitions": sorted(self.owned)}])
        assert r["error_code"] == 0, r
        self._take(r)
        return r

    def _take(self, r: dict) -> None:
        self.epoch = r["member_epoch"]
        if r["assignment"] is not None:
            self.owned = {p for tp in r["assignment"]["topic_partitions"] if tp["topic_id"] == self.topic_id
                          for p in tp["partitions"]}


def converge(members: list[Member], partitions: int, rounds: int = 20) -> None:
    """Heartbeat round-robin until every partition is owned by one member and all are balanced,
    checking after every heartbeat that no partition ever has two owners (revoke before assign)."""
    for _ in range(rounds):
        for m in members:
            m.beat()
            all_owned = [p for x in members for p in x.owned]
            assert len(all_owned) == len(set(all_owned)), f"partition with two owners: {all_owned}"
        sizes = sorted(len(m.owned) for m in members)
        if sum(sizes) == partitions and sizes[-1] - sizes[0] <= 1 and len({m.epoch for m in members}) == 1:
            return
    raise AssertionError([(m.member_id, m.epoch, m.owned) for m in members])


def describe(c: WireClient, group: str = "g") -> dict:
    return c.request(DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": True})["groups"][0]


def test_members_converge_leave_and_survive_restart(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "kt", 6)
        wait_for_coordinator(c, "g")
        members = [Member(c, topic_id, "kt") for _ in range(3)]
        for m in members:
            m.join()
        converge(members, 6)
        assert sorted(len(m.owned) for m in members) == [2, 2, 2]

        d = describe(c)
        assert d["error_code"] == 0 and d["group_state"] == "Stable" and d["assignor_name"] == "uniform"
        assert d["group_epoch"] == d["assignment_epoch"] == members[0].epoch == 3
        # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: what DescribeGroups reports too.
        assert d["authorized_operations"] == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        by_id = {m["member_id"]: m for m in d["members"]}
        for m in members:
            tps = by_id[m.member_id]["assignment"]["topic_partitions"]
            assert tps == [{"topic_id": topic_id, "topic_name": "kt", "partitions": sorted(m.owned)}]
            assert by_id[m.member_id]["subscribed_topic_names"] == ["kt"]

        # One member leaves: its partitions go to the others, still never to two owners at once.
        gone = members.pop()
        r = heartbeat(c, member_id=gone.member_id, member_epoch=-1)
        assert (r["error_code"], r["member_epoch"]) == (0, -1)
        converge(members, 6)
        assert sorted(len(m.owned) for m in members) == [3, 3] and members[0].epoch == 4

        # OffsetCommit v9 carries the member epoch.
        m0 = members[0]
        p0 = min(m0.owned)

        def commit(epoch: int, member_id: str = m0.member_id) -> int:
            body = {"group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": member_id,
                    "group_instance_id": None,
                    "topics": [{"name": "kt", "partitions": [{"partition_index": p0, "committed_offset": 11,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": ""}]}]}
            return c.request(8, 9, body)["topics"][0]["partitions"][0]["error_code"]

        assert commit(m0.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit(m0.epoch, "stranger") == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit(m0.epoch) == 0

        def fetch(member_id: str | None, epoch: int) -> dict:
            return c.request(9, 9, {"groups": [{"group_id": "g", "member_id": member_id, "member_epoch": epoch,
                                                "topics": [{"name": "kt", "partition_indexes": [p0]}]}],
                                    "require_stable": False})["groups"][0]

        assert fetch(m0.member_id, 99)["error_code"] == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch(m0.member_id, m0.epoch)["topics"][0]["partitions"][0]["committed_offset"] == 11

        listed = c.request(16, 5, {"states_filter": [], "types_filter": ["consumer"]})["groups"]
        assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                           "group_type": "consumer"}]
        assert c.request(16, 5, {"states_filter": [], "types_filter": ["classic"]})["groups"] == []
        dg = c.request(15, 5, {"groups": ["g"], "include_authorized_operations": False})["groups"][0]
        assert (dg["error_code"], dg["group_state"]) == (0, "Dead")  # not a classic group
        # Classic heartbeats and joins cannot touch the consumer group.
        hb = c.request(12, 4, {"group_id": "g", "generation_id": 4, "member_id": m0.member_id,
                               "group_instance_id": None})
        assert hb["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        dg_del = c.request(42, 2, {"groups_names": ["g"]})["results"][0]
        assert dg_del["error_code"] == ErrorCode.NON_EMPTY_GROUP
        before = describe(c)

    broker.restart()
    with WireClient(broker.host, broker.port) as c:
        wait = time.monotonic() + 20
        while describe(c)["error_code"] != 0 and time.monotonic() < wait:
            time.sleep(0.1)
        assert describe(c) == before
        for m in members:
            m.c = c
            assert m.beat()["member_epoch"] == 4  # carries on without rejoining
        assert fetch(None, -1)["topics"][0]["partitions"][0]["committed_offset"] == 11


def test_error_answers_leave_the_broker_serving(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "et", 2)
        wait_for_coordinator(c, "g")
        join = {"member_epoch": 0, "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["et"],
                "topic_partitions": []}
        r = heartbeat(c, **{**join, "server_assignor": "nope"})
        assert r["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR and r["member_id"] is None
        assert heartbeat(c, **{**join, "rebalance_timeout_ms": -1})["error_code"] == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, **{**join, "topic_partitions": None})["error_code"] == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, **{**join, "group_id": ""})["error_code"] == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, member_id="m", member_epoch=-7)["error_code"] == ErrorCode.INVALID_REQUEST
        assert heartbeat(c, member_id="m", member_epoch=3)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert heartbeat(c, 1, **join)["error_code"] == ErrorCode.INVALID_REQUEST  # v1 needs a member id
        bad = heartbeat(c, 1, **{**join, "member_id": "x", "subscribed_topic_names": [],
                                 "subscribed_topic_regex": "(et"})
        assert bad["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert describe(c)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND  # none of that created a group

        r = heartbeat(c, 1, **{**join, "member_id": "client-chosen", "server_assignor": "range"})
        assert (r["error_code"], r["member_id"], r["member_epoch"]) == (0, "client-chosen", 1)
        assert r["assignment"]["topic_partitions"] == [{"topic_id": topic_id, "partitions": [0, 1]}]
        assert heartbeat(c, 1, member_id="client-chosen", member_epoch=9)["error_code"] == \
            ErrorCode.FENCED_MEMBER_EPOCH
        assert heartbeat(c, 1, member_id="other", member_epoch=1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        assert describe(c)["assignor_name"] == "range"
        # A classic join on the live consumer group.
        j = c.request(11, 5, {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                              "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]})
        assert j["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert c.request(18, 0, {})["error_code"] == 0


def test_session_timeout_removes_a_silent_member(broker_factory) -> None:
    broker = broker_factory({"group.consumer.session.timeout.ms": "1500",
                             "group.consumer.min.session.timeout.ms": "1000",
                             "group.consumer.heartbeat.interval.ms": "500",
                             "group.consumer.min.heartbeat.interval.ms": "500"})
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "st", 4)
        wait_for_coordinator(c, "g")
        a, b = Member(c, topic_id, "st"), Member(c, topic_id, "st")
        r = a.join()
        assert r["heartbeat_interval_ms"] == 500
        b.join()
        converge([a, b], 4)
        deadline = time.monotonic() + 10
        while len(describe(c)["members"]) == 2 and time.monotonic() < deadline:
            a.beat()  # b stays silent
            time.sleep(0.3)
        assert [m["member_id"] for m in describe(c)["members"]] == [a.member_id]
        converge([a], 4)
        assert a.owned == {0, 1, 2, 3}


def test_subscribed_topic_regexes_match_as_kafkas_re2j_does(broker) -> None:
    """Kafka matches SubscribedTopicRegex with RE2/J: linear time, no backreferences. A pattern that
    makes a backtracking engine take exponential time on an existing topic's name ((a+)+ against
    a...ab) is answered at once and matches nothing; a backreference is INVALID_REGULAR_EXPRESSION;
    the broker keeps serving the others meanwhile."""
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    with WireClient(broker.host, broker.port, timeout=10.0) as c:
        create_topic(c, f"{prefix}-{'a' * 40}b", 1)
        create_topic(c, f"{prefix}-orders", 1)
        wait_for_coordinator(c, prefix)
        join = {"group_id": prefix, "member_epoch": 0, "rebalance_timeout_ms": 1000, "topic_partitions": [],
                "subscribed_topic_names": []}
        slow = heartbeat(c, 1, **{**join, "member_id": "m1", "subscribed_topic_regex": f"{prefix}-(a+)+"})
        assert slow["error_code"] == 0, slow
        assert slow["assignment"]["topic_partitions"] == []
        backref = heartbeat(c, 1, **{**join, "member_id": "m2", "subscribed_topic_regex": f"{prefix}-(orders)\\1"})
        assert backref["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert c.request(18, 0, {})["error_code"] == 0
