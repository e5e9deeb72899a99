"""A group's own session timeout (consumer.session.timeout.ms, share.session.timeout.ms) removes a silent
member after the group's timeout, not the broker's, on Kafka 4.4 and Odradek alike.

Both brokers run with the group.consumer/share.min.session.timeout.ms and min.heartbeat.interval.ms
lowered so that a 2 s group timeout is allowed; their own session timeouts stay at the 45 s default. A
member joins a group with consumer.session.timeout.ms (or share.session.timeout.ms) 2000 (and a 1 s
heartbeat interval, which must stay below it) and one joins
a group without the config; neither heartbeats again. After 6 s the first group has no member left
(ConsumerGroupDescribe / ShareGroupDescribe), the second still has its member.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.test_group_configs_groups import until_served
from tests.support.real_kafka import TARGETS, fresh_kafka_and_odradek, unique
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(240)

LOWERED = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500",
           "group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, tuple[str, int]]]:
    with fresh_kafka_and_odradek("odradek-groupsession", LOWERED,
                                 {**LOWERED, "group.initial.rebalance.delay.ms": "0"}) as both:
        yield both


def members(c: WireClient, api: int, group: str) -> list[str]:
    g = c.request(api, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    return [m["member_id"] for m in g["members"]] if g["error_code"] == 0 else []


@pytest.mark.parametrize("name", TARGETS)
def test_the_groups_session_timeout_removes_a_silent_member(targets, name: str) -> None:
    with WireClient(*targets[name]) as c:
        topic = unique("gst")
        create_topic(c, topic, 1)
        short_consumer, plain_consumer, short_share, plain_share = (unique("g") for _ in range(4))
        for group, kind in ((short_consumer, "consumer"), (short_share, "share")):
            configs = [{"name": f"{kind}.session.timeout.ms", "config_operation": 0, "value": "2000"},
                       {"name": f"{kind}.heartbeat.interval.ms", "config_operation": 0, "value": "1000"}]
            r = c.request(44, 1, {"validate_only": False, "resources": [
                {"resource_type": 32, "resource_name": group, "configs": configs}]})
            assert r["responses"][0]["error_code"] == 0, r
        for group in (short_consumer, plain_consumer, short_share, plain_share):
            deadline = time.monotonic() + 30
            while c.request(10, 1, {"key": group, "key_type": 0})["error_code"] != 0:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        for group in (short_consumer, plain_consumer):
            r = until_served(lambda group=group: c.request(68, 1, {
                "group_id": group, "member_id": unique("m"), "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": []}))
            assert r["error_code"] == 0, r
        for group in (short_share, plain_share):
            r = until_served(lambda group=group: c.request(76, 1, {
                "group_id": group, "member_id": unique("m"), "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": [topic]}))
            assert r["error_code"] == 0, r
        time.sleep(6)
        left = {group: len(members(c, api, group)) for group, api in (
            (short_consumer, 69), (plain_consumer, 69), (short_share, 77), (plain_share, 77))}
    assert left == {short_consumer: 0, plain_consumer: 1, short_share: 0, plain_share: 1}
