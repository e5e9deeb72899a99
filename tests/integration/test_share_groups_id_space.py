"""One group id space with share groups, as Kafka 4.4 (GroupMetadataManager keeps one map): the same
raw requests to Kafka 4.4 and to Odradek get the same answers - a classic JoinGroup and a KIP-848
ConsumerGroupHeartbeat for a share group's id, and a ShareGroupHeartbeat for a classic group's id."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def share_join(c: WireClient, group: str, topic: str) -> dict:
    return c.request(76, 1, {"group_id": group, "member_id": unique("m"), "member_epoch": 0, "rack_id": None,
                             "subscribed_topic_names": [topic]})


def classic_join(c: WireClient, group: str) -> dict:
    return c.request(11, 9, {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                             "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": b""}], "reason": None})


def consumer_join(c: WireClient, group: str, topic: str) -> dict:
    return c.request(68, 1, {"group_id": group, "member_id": unique("m"), "member_epoch": 0, "instance_id": None,
                             "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                             "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})


def answers(target: Target) -> dict[str, tuple]:
    topic = unique("ids")
    create_topic(target, topic, 1)
    share, classic = unique("share"), unique("classic")
    with WireClient(target.host, target.port) as c:
        deadline = time.monotonic() + 30
        while (r := share_join(c, share, topic))["error_code"] != 0:  # the coordinator may be loading
            assert time.monotonic() < deadline, r
            for g in (share, classic):
                c.request(10, 1, {"key": g, "key_type": 0})  # the first creates __consumer_offsets
            time.sleep(0.2)
        while classic_join(c, classic)["error_code"] in (14, 15, 16):  # loading, not available, not coordinator
            assert time.monotonic() < deadline
            time.sleep(0.2)
        j = classic_join(c, classic)  # MEMBER_ID_REQUIRED: the classic group exists, empty
        out = {"classic join, classic id": (j["error_code"],)}
        j = classic_join(c, share)
        out["classic join, share id"] = (j["error_code"],)
        h = consumer_join(c, share, topic)
        out["consumer heartbeat, share id"] = (h["error_code"], h["error_message"])
        s = share_join(c, classic, topic)
        out["share heartbeat, classic id"] = (s["error_code"], s["error_message"])
        d = c.request(77, 1, {"group_ids": [classic], "include_authorized_operations": False})["groups"][0]
        out["share describe, classic id"] = (d["error_code"], d["error_message"])
    return {k: tuple(x.replace(share, "<share>").replace(classic, "<classic>") if isinstance(x, str) else x
                     for x in v) for k, v in out.items()}


def test_share_group_ids_are_kept_apart_as_kafka_keeps_them(targets) -> None:
    for t in TARGETS:
        targets[t].require("ShareGroupHeartbeat", "ShareGroupDescribe", "ConsumerGroupHeartbeat", "JoinGroup")
    kafka, odradek = answers(targets["kafka"]), answers(targets["odradek"])
    assert odradek == kafka
