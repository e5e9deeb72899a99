"""Static membership of streams groups (Kafka 4.4, KIP-1071) beside a dynamic member, against Kafka 4.4
and Odradek alike (the A/B harness): a static member's temporary leave (epoch -2) is no rebalance - the
other member's tasks stay as they are and nobody gets the leaver's; the instance id rejoining under a
new member id gets the same tasks at the same group epoch; a -2 member whose session then expires
(45 s, Kafka's lowest allowed by default) is removed and its tasks move to the other member at a new
group epoch. The single-member steps and the fencing errors are in test_streams_groups.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.config_requests import set_group_configs
from tests.support.real_kafka import TARGETS, Target, kafka_and_odradek, unique
from tests.support.streams_wire import (
    StreamsMember,
    converge,
    describe,
    ready_coordinator,
    word_count_app,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(300)

SESSION_TIMEOUT_S = 45  # group.streams.session.timeout.ms's default on both brokers


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def members(c: WireClient, group: str) -> list[tuple[str, int]]:
    return sorted((m["instance_id"] or "", m["member_epoch"]) for m in describe(c, group)["members"])


@pytest.mark.parametrize("name", TARGETS)
def test_a_static_members_temporary_leave_moves_no_task_until_its_session_expires(targets, name: str) -> None:
    target = targets[name]
    app = unique("st")
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.initial.rebalance.delay.ms": "0"})
        ready_coordinator(c, app)
        static = StreamsMember(c, app, topology, instance_id="instance-s")
        dynamic = StreamsMember(c, app, topology)
        static.join()
        converge([static], 4)
        dynamic.join()
        converge([static, dynamic], 4)
        kept, theirs = static.active, dynamic.active
        assert kept and theirs
        epoch = describe(c, app)["group_epoch"]

        assert static.leave(-2)["member_epoch"] == -2
        for _ in range(10):  # the other member heartbeats on: no new target, nothing moves to it
            dynamic.beat()
            time.sleep(0.3)
        assert (dynamic.active, dynamic.epoch) == (theirs, describe(c, app)["assignment_epoch"])
        assert describe(c, app)["group_epoch"] == epoch
        assert members(c, app) == [("", dynamic.epoch), ("instance-s", -2)]

        back = StreamsMember(c, app, topology, process_id=static.process_id, instance_id="instance-s")
        back.join()
        assert back.active == kept
        converge([back, dynamic], 4)
        assert (back.active, dynamic.active, describe(c, app)["group_epoch"]) == (kept, theirs, epoch)

        # Gone for good: once its session expires, its tasks go to the member left.
        assert back.leave(-2)["member_epoch"] == -2
        left_at = time.monotonic()
        deadline = left_at + SESSION_TIMEOUT_S + 30
        while describe(c, app)["group_epoch"] == epoch:
            assert time.monotonic() < deadline, "the static member's session never expired"
            dynamic.beat()
            time.sleep(1)
        assert time.monotonic() - left_at > SESSION_TIMEOUT_S - 5  # not before its session timeout
        converge([dynamic], 4)
        assert dynamic.active == {"0": {0, 1}, "1": {0, 1}}
        assert members(c, app) == [("", dynamic.epoch)]
