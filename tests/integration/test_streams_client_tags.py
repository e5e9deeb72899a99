"""Client tags in streams groups (KIP-1071) against Kafka 4.4 and Odradek alike (the A/B harness): the
group config ``streams.rack.aware.assignment.tags`` and the members' ClientTags.

- MISSING_CLIENT_TAGS (status 6): Kafka 4.4's streamsGroupHeartbeat adds it last to the answer of a
  member that has not sent every configured tag key, naming the missing keys in the configured order
  ("[zone, cluster]", Java's List.toString); a heartbeat that sends no tags keeps the member's earlier
  ones; only to StreamsGroupHeartbeat v1 clients (KAFKA-20744: v0 ones throw on an unknown status).
- Standby placement: Kafka 4.4.0's broker-side StickyTaskAssignor (the only one it ships) reads
  num.standby.replicas alone, never the tags; a standby stays sticky on a member in its active's zone
  although a member of another zone is free. The test pins that, so Odradek follows Kafka rather than the
  client-side ClientTagAwareStandbyTaskAssignor of the classic protocol.
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
    describe,
    heartbeat,
    ready_coordinator,
    rows,
    word_count_app,
    word_count_topology,
)
from tests.support.wire import WireClient
from tests.support.wire import create_topic as wire_create_topic

pytestmark = pytest.mark.timeout(180)

MISSING_CLIENT_TAGS = 6


def missing(keys: str) -> tuple[int, str]:
    return (MISSING_CLIENT_TAGS, f"Missing required client tags for rack-aware standby assignment: [{keys}]. "
                                 "Configure them via 'client.tag.<tagKey>' in your Streams config.")


def tags(**kv: str) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in kv.items()]


def statuses(r: dict[str, Any]) -> list[tuple[int, str]]:
    """The answer's MISSING_CLIENT_TAGS status, checked to be the last one (others, ASSIGNMENT_DELAYED by the
    assignment interval, come and go with timing)."""
    assert r["error_code"] == 0, r
    all_ = [(s["status_code"], s["status_detail"]) for s in r["status"] or ()]
    tagged = [s for s in all_ if s[0] == MISSING_CLIENT_TAGS]
    assert all_[len(all_) - len(tagged):] == tagged, all_
    return tagged


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def stateful_topology(app: str, source: str) -> dict[str, Any]:
    """One subtopology reading ``source`` with a store (its changelog): every task is stateful."""
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "repartition_sink_topics": [],
         "state_changelog_topics": [{"name": f"{app}-store-changelog", "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_source_topics": [], "copartition_groups": []}]}


class TaggedMember(StreamsMember):
    """A StreamsMember that sends its client tags when it joins (Kafka Streams sends them then)."""

    def __init__(self, c: WireClient, group: str, topology: dict[str, Any], client_tags: list[dict[str, str]],
                 version: int = 1) -> None:
        super().__init__(c, group, topology, version=version)
        self.client_tags = client_tags

    def join(self, **extra: Any) -> dict[str, Any]:
        return super().join(client_tags=self.client_tags, **extra)


@pytest.mark.parametrize("name", TARGETS)
def test_missing_client_tags_status_appears_and_clears_as_kafkas(targets, name: str) -> None:
    target = targets[name]
    app, plain = unique("ct"), unique("ct")
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.initial.rebalance.delay.ms": "0",
                                   "streams.rack.aware.assignment.tags": "zone, cluster"})
        set_group_configs(c, plain, {"streams.initial.rebalance.delay.ms": "0"})
        ready_coordinator(c, app)
        ready_coordinator(c, plain)
        a = StreamsMember(c, app, topology)
        joined = a.join(client_tags=tags(zone="z1"))
        assert statuses(joined) == [missing("cluster")]
        # A heartbeat without ClientTags keeps the member's: still only "cluster" missing.
        assert statuses(a.beat()) == [missing("cluster")]
        # Both keys sent (with one the config does not name): the status is gone.
        fixed = heartbeat(c, 1, group_id=app, member_id=a.member_id, member_epoch=a.epoch,
                          client_tags=tags(cluster="c1", zone="z1", rack="r9"), active_tasks=rows(a.active),
                          standby_tasks=rows(a.standby), warmup_tasks=rows(a.warmup))
        assert statuses(fixed) == []
        a._take(fixed)
        assert statuses(a.beat()) == []
        # Tags dropped again (an empty list is a change, unlike none): both keys missing, in the config's order.
        emptied = heartbeat(c, 1, group_id=app, member_id=a.member_id, member_epoch=fixed["member_epoch"],
                            client_tags=[], active_tasks=rows(a.active), standby_tasks=rows(a.standby),
                            warmup_tasks=rows(a.warmup))
        assert statuses(emptied) == [missing("zone, cluster")]
        a._take(emptied)
        # A v0 client (Kafka Streams < 4.4) is never told: it would throw on status 6.
        old = StreamsMember(c, app, topology, version=0)
        assert statuses(old.join()) == []
        assert statuses(old.beat()) == []
        # A group without the config asks for no tags.
        other = StreamsMember(c, plain, word_count_topology(plain, source))
        assert statuses(other.join()) == []
        # Leaving answers no status.
        assert statuses(a.leave()) == []
        assert statuses(old.leave()) == []
        assert statuses(other.leave()) == []


@pytest.mark.parametrize("name", TARGETS)
def test_standbys_stay_sticky_whatever_the_zones_as_kafkas_assignor(targets, name: str) -> None:
    """Two stateful tasks, one standby each, the tag key ``zone``: a and b (zone z1) share the tasks,
    then c (zone z2) joins. Kafka 4.4's sticky assignor keeps the previous standby where it was within
    the quota, so one task keeps its standby in its active's zone; the other's goes to c."""
    target = targets[name]
    app = unique("cz")
    source = f"{app}-in"
    create_topic(target, source, 2)
    topology = stateful_topology(app, source)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.initial.rebalance.delay.ms": "0", "streams.num.standby.replicas": "1",
                                   "streams.rack.aware.assignment.tags": "zone"})
        ready_coordinator(c, app)
        a = TaggedMember(c, app, topology, tags(zone="z1"))
        b = TaggedMember(c, app, topology, tags(zone="z1"))
        z2 = TaggedMember(c, app, topology, tags(zone="z2"))
        a.join()
        converge([a], 2)
        assert (a.active, a.standby) == ({"0": {0, 1}}, {})  # one process: no place for a standby
        b.join()
        converge([a, b], 2)
        assert [(m.active, m.standby) for m in (a, b)] == [({"0": {0}}, {"0": {1}}), ({"0": {1}}, {"0": {0}})]
        z2.join()
        converge([a, b, z2], 2)
        for m in (a, b, z2):
            m.beat()
        placed = [(m.active, m.standby) for m in (a, b, z2)]
        zones = {m.member_id: zone for m, zone in ((a, "z1"), (b, "z1"), (z2, "z2"))}
        shown = {m["member_id"]: [t["value"] for t in m["client_tags"]] for m in describe(c, app)["members"]}
    assert shown == {mid: [zone] for mid, zone in zones.items()}
    # Task 0_1's standby stays on a, in the zone of its active b, though c (z2) is there to take it.
    assert placed == [({"0": {0}}, {"0": {1}}), ({"0": {1}}, {}), ({}, {"0": {0}})]


@pytest.mark.parametrize("name", TARGETS)
def test_tags_configured_on_a_live_group_take_effect_on_its_next_heartbeat(targets, name: str) -> None:
    """Kafka reads the group's assignment configs at each heartbeat: setting the tag keys is a new
    group epoch (they are part of the configs the target assignment was computed with) and the
    member is told what it lacks at once; deleting them clears the status."""
    target = targets[name]
    app = unique("cl")
    source = f"{app}-words"
    create_topic(target, source, 2)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.initial.rebalance.delay.ms": "0"})
        ready_coordinator(c, app)
        a = StreamsMember(c, app, word_count_topology(app, source))
        assert statuses(a.join()) == []
        converge([a], 4)
        epoch = describe(c, app)["group_epoch"]
        set_group_configs(c, app, {"streams.rack.aware.assignment.tags": "zone"})
        beat_until(a, [missing("zone")])
        assert describe(c, app)["group_epoch"] == epoch + 1
        r = c.request(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 32, "resource_name": app,
            "configs": [{"name": "streams.rack.aware.assignment.tags", "config_operation": 1, "value": None}]}]})
        assert r["responses"][0]["error_code"] == 0
        beat_until(a, [])
        assert describe(c, app)["group_epoch"] == epoch + 2


def beat_until(m: StreamsMember, want: list[tuple[int, str]]) -> None:
    """Heartbeats until the answer's tag status is ``want``: a group config reaches the coordinator
    through the metadata log, on Kafka a moment after IncrementalAlterConfigs answers."""
    deadline = time.monotonic() + 15
    while (got := statuses(m.beat())) != want:
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def test_the_brokers_tag_keys_apply_to_groups_without_their_own(broker_factory) -> None:
    """Odradek alone (the shared Kafka broker runs with Kafka's defaults): the broker's
    group.streams.rack.aware.assignment.tags stands for a group without streams.rack.aware.assignment.tags,
    and a group's own value replaces it."""
    broker = broker_factory({"group.streams.initial.rebalance.delay.ms": "0",
                             "group.streams.rack.aware.assignment.tags": "zone,rack"})
    with WireClient(broker.host, broker.port) as c:
        wire_create_topic(c, "words", 1)
        ready_coordinator(c, "app")
        set_group_configs(c, "own", {"streams.rack.aware.assignment.tags": "cluster"})
        a = StreamsMember(c, "app", word_count_topology("app", "words"))
        assert statuses(a.join(client_tags=tags(rack="r1"))) == [missing("zone")]
        b = StreamsMember(c, "own", word_count_topology("own", "words"))
        assert statuses(b.join(client_tags=tags(zone="z1", rack="r1"))) == [missing("cluster")]
