"""DeleteGroups on a share group (issue 30 step 3), as Kafka 4.4's GroupCoordinatorService does it:
NON_EMPTY_GROUP while a member is in it, else the share state of its share-partitions is deleted
(a tombstone in ``__share_group_state``) and then the group. Before this Odradek answered
GROUP_ID_NOT_FOUND for a share group in both cases (it looked for a classic group) and kept the
state. Nothing is lost by the refusal: the start offset stays."""

from __future__ import annotations

import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.integration.test_share_fetch_wire import ACCEPT, fetch_topics, produce, share_fetch
from tests.integration.test_share_groups_wire import describe, heartbeat
from tests.integration.test_share_state_durable import (
    OVERRIDES,
    fetch_until_acquired,
    share_partition_started,
    start_offset,
    ten_records_acquired,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(120)

DELETE_GROUPS, SUMMARY = 42, 87


def delete_groups(c: WireClient, *groups: str) -> list[tuple[str, int, str | None]]:
    r = c.request(DELETE_GROUPS, 3, {"groups_names": list(groups)})
    return [(g["group_id"], g["error_code"], g["error_message"]) for g in r["results"]]


def stored_start_offset(c: WireClient, topic_id) -> int:  # type: ignore[no-untyped-def]
    """The share coordinator's start offset for sg's share-partition sq-0 (-1: no state)."""
    deadline = time.monotonic() + 30
    while True:
        r = c.request(SUMMARY, 1, {"group_id": "sg", "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]})["results"][0]["partitions"][0]
        if r["error_code"] == 0:
            return int(r["start_offset"])
        assert r["error_code"] in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR), r
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_delete_share_group_deletes_its_state(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = share_partition_started(c)
        ten_records_acquired(c, topic_id)
        share_fetch(c, share_session_epoch=2, topics=fetch_topics(topic_id, [0], {0: [(0, 4, [ACCEPT])]}))
        # The write of 0-4's acceptance carried the start offset before it (Kafka 4.4's rule).
        assert start_offset(c) == 0
        assert stored_start_offset(c, topic_id) == 0

        # A member is in the group: refused, with Kafka's message; nothing changes.
        assert delete_groups(c, "sg") == [("sg", ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")]
        assert describe(c)["error_code"] == 0 and start_offset(c) == 0
        assert stored_start_offset(c, topic_id) == 0

        # The member leaves: the group and its share state go (an unknown id beside it: not found).
        assert heartbeat(c, member_epoch=-1)["member_epoch"] == -1
        share_fetch(c, share_session_epoch=-1)
        assert delete_groups(c, "sg", "nobody") == [("sg", 0, None), ("nobody", ErrorCode.GROUP_ID_NOT_FOUND, None)]
        assert describe(c)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert stored_start_offset(c, topic_id) == -1
        assert delete_groups(c, "sg") == [("sg", ErrorCode.GROUP_ID_NOT_FOUND, None)]

        # A group of the same id starts again at share.auto.offset.reset (latest: 10), not at 5.
        assert heartbeat(c, member_id="m2", subscribed_topic_names=["sq"])["error_code"] == 0
        deadline = time.monotonic() + 30
        while start_offset(c) == -1:
            assert time.monotonic() < deadline
            share_fetch(c, member_id="m2", max_wait_ms=200, topics=fetch_topics(topic_id, [0]))
        assert start_offset(c) == 10
        produce(c, "sq", 0, 3)
        assert fetch_until_acquired(c, topic_id, "m2") == {0: [(10, 12, 1)]}
