"""Share groups (KIP-932) over raw sockets against the real daemon: ShareGroupHeartbeat v1 and
ShareGroupDescribe v1, ListGroups' share type.

Expected values are Kafka 4.4's: the simple assignor's spread (every partition to
ceil(members / partitions) members, counts differing by at most one), the heartbeat's errors and
messages (GroupMetadataManager.throwIfShareGroupHeartbeatRequestIsInvalid)."""

from __future__ import annotations

import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(120)

HEARTBEAT, DESCRIBE = 76, 77


def heartbeat(c: WireClient, **fields) -> dict:
    body = {"group_id": "sg", "member_id": "m", "member_epoch": 0, "rack_id": None, "subscribed_topic_names": None}
    body.update(fields)
    return c.request(HEARTBEAT, 1, body)


def describe(c: WireClient, group: str = "sg") -> dict:
    return c.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]


def wait_for_coordinator(c: WireClient, group: str = "sg") -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.request(10, 1, {"key": group, "key_type": 0})["error_code"] == 0 and \
                describe(c, group)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
            return
        time.sleep(0.1)
    raise AssertionError("coordinator never became available")


def sizes(group: dict) -> list[int]:
    return sorted(sum(len(tp["partitions"]) for tp in m["assignment"]["topic_partitions"]) for m in group["members"])


def test_heartbeat_joins_spreads_and_leaves(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "st", 2)
        wait_for_coordinator(c)
        # Kafka's validation, each INVALID_REQUEST with its message; none of them makes a group.
        for fields, message in [({"member_id": ""}, "MemberId can't be empty."),
                                ({"group_id": ""}, "GroupId can't be empty."),
                                ({"subscribed_topic_names": None}, "SubscribedTopicNames must be set in first request."),
                                ({"subscribed_topic_names": ["st"], "rack_id": ""}, "RackId can't be empty."),
                                ({"member_epoch": -2, "subscribed_topic_names": ["st"]},
                                 "MemberEpoch is -2, but must be greater than or equal to -1.")]:
            r = heartbeat(c, **fields)
            assert (r["error_code"], r["error_message"], r["member_id"], r["member_epoch"]) == \
                (ErrorCode.INVALID_REQUEST, message, None, 0), r
        assert heartbeat(c, member_epoch=3)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert describe(c)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        # One member: both partitions.
        r = heartbeat(c, member_id="a", subscribed_topic_names=["st"])
        assert (r["error_code"], r["member_id"], r["member_epoch"], r["heartbeat_interval_ms"]) == (0, "a", 1, 5000)
        assert r["assignment"] == {"topic_partitions": [{"topic_id": topic_id, "partitions": [0, 1]}]}
        # Three members on two partitions: sharing 2, so 4 assignments over 3 members: 2, 1, 1.
        heartbeat(c, member_id="b", subscribed_topic_names=["st"])
        r = heartbeat(c, member_id="c", subscribed_topic_names=["st"])
        assert r["member_epoch"] == 3
        d = describe(c)
        assert (d["error_code"], d["group_state"], d["group_epoch"], d["assignment_epoch"], d["assignor_name"]) == \
            (0, "Stable", 3, 3, "simple")
        assert sizes(d) == [1, 1, 2]
        holders = {p: sum(p in tp["partitions"] for m in d["members"] for tp in m["assignment"]["topic_partitions"])
                   for p in (0, 1)}
        assert holders == {0: 2, 1: 2}
        assert {m["member_id"]: m["client_host"] for m in d["members"]} == {x: "/127.0.0.1" for x in "abc"}
        # A stale epoch is fenced, an unknown member is unknown, a consumer group's id is not a share group's.
        assert heartbeat(c, member_id="a", member_epoch=9)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
        assert heartbeat(c, member_id="zz", member_epoch=3)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        # Leaving: epoch -1 answered, the other two get one partition each.
        r = heartbeat(c, member_id="c", member_epoch=-1)
        assert (r["error_code"], r["member_epoch"]) == (0, -1)
        d = describe(c)
        assert (d["group_epoch"], sizes(d)) == (4, [1, 1])
        r = heartbeat(c, member_id="a", member_epoch=1)
        assert r["member_epoch"] == 4 and r["assignment"] is not None  # the epoch moved: the new assignment
        # ListGroups v5 names it a share group.
        listed = c.request(16, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g["group_id"], g["group_type"], g["group_state"]) for g in listed["groups"]] == [("sg", "share", "Stable")]
