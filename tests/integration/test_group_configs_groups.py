"""A consumer, share or streams group's own configs (GROUP resources) take effect on its heartbeats, against
Kafka 4.4 and Odradek alike (the A/B harness), both at their defaults (heartbeat intervals 5 s, no
standby replicas, a 3 s initial rebalance delay for streams groups):

- consumer.heartbeat.interval.ms / share.heartbeat.interval.ms / streams.heartbeat.interval.ms: the
  interval a member is told in each heartbeat answer (a group without the config keeps the broker's);
- streams.initial.rebalance.delay.ms=0: the first member is assigned at once (no ASSIGNMENT_DELAYED);
- streams.num.standby.replicas=1: with two instances, each stateful task gets a standby on the other.

The session timeouts go through the same per-group lookup (odradek.broker.group.group_overrides) but
cannot be shown shorter here: Kafka's lowest allowed by default (group.*.min.session.timeout.ms) is 45 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.config_requests import set_group_configs
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.streams_wire import (
    StreamsMember,
    converge,
    ready_coordinator,
    word_count_app,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(180)

ASSIGNMENT_DELAYED = 5  # Kafka's StreamsGroupHeartbeatResponse.Status
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def find_coordinator(c: WireClient, group: str) -> None:
    """FindCoordinator until it answers (the first one creates __consumer_offsets, as a client's would)."""
    deadline = time.monotonic() + 30
    while c.request(10, 1, {"key": group, "key_type": 0})["error_code"] != 0:
        assert time.monotonic() < deadline, "the group coordinator never became available"
        time.sleep(0.2)


def until_served(send: Any) -> dict[str, Any]:
    """A group's first request, repeated while its coordinator is still loading."""
    deadline = time.monotonic() + 30
    while True:
        r = send()
        if r["error_code"] not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def consumer_join(c: WireClient, group: str, topic: str) -> dict[str, Any]:
    return until_served(lambda: c.request(68, 1, {
        "group_id": group, "member_id": unique("m"), "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []}))


def share_join(c: WireClient, group: str, topic: str) -> dict[str, Any]:
    return until_served(lambda: c.request(76, 1, {"group_id": group, "member_id": unique("m"), "member_epoch": 0,
                                                  "rack_id": None, "subscribed_topic_names": [topic]}))


@pytest.mark.parametrize("name", TARGETS)
def test_consumer_and_share_groups_get_their_heartbeat_interval(targets, name: str) -> None:
    target = targets[name]
    topic = unique("gh")
    create_topic(target, topic, 1)
    with WireClient(target.host, target.port) as c:
        tuned, plain, queue = unique("cg"), unique("cg"), unique("sg")
        for group in (tuned, plain, queue):
            find_coordinator(c, group)
        set_group_configs(c, tuned, {"consumer.heartbeat.interval.ms": "6000"})
        set_group_configs(c, queue, {"share.heartbeat.interval.ms": "7000"})
        answers = [consumer_join(c, tuned, topic), consumer_join(c, plain, topic), share_join(c, queue, topic)]
    assert [(r["error_code"], r["heartbeat_interval_ms"]) for r in answers] == [(0, 6000), (0, 5000), (0, 7000)]


@pytest.mark.parametrize("name", TARGETS)
def test_streams_group_interval_delay_and_standby_replicas(targets, name: str) -> None:
    target = targets[name]
    app = unique("gs")
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.heartbeat.interval.ms": "6000", "streams.initial.rebalance.delay.ms": "0",
                                   "streams.num.standby.replicas": "1"})
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology)
        first = a.join()
        assert first["heartbeat_interval_ms"] == 6000
        assert ASSIGNMENT_DELAYED not in {s["status_code"] for s in first["status"] or ()}, first["status"]
        converge([a], 4)
        b = StreamsMember(c, app, topology)
        b.join()
        converge([a, b], 4)
        for m in (a, b):
            m.beat()
    # Subtopology 1 keeps state (its changelog): each of its tasks has a standby on the other instance.
    assert sorted(a.active.get("1", set()) | b.active.get("1", set())) == [0, 1]
    assert a.standby.get("1", set()) == b.active.get("1", set())
    assert b.standby.get("1", set()) == a.active.get("1", set())
    assert "0" not in a.standby and "0" not in b.standby  # stateless: no standby
