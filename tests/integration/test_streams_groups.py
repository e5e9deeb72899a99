"""KIP-1071 streams groups over raw sockets (StreamsGroupHeartbeat, StreamsGroupDescribe), the same
steps against Kafka 4.4 and Odradek with the same outcomes required (the A/B harness), and
Odradek's own restart and feature-level behaviour.

The members are well-behaved Kafka Streams threads (tests/support/streams_wire.py) running a word
count: subtopology 0 reads the input and writes a repartition topic, subtopology 1 reads it and
keeps a store's changelog. Both topics are internal: the broker creates them with the partition
count the topology implies (the input's 4) and the configs the topology names.
"""

from __future__ import annotations

import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.real_kafka import Target, comparison_fixtures
from tests.support.streams_wire import (
    StreamsMember,
    converge,
    describe,
    heartbeat,
    ready_coordinator,
    tasks_of,
    topology_description_update,
    word_count_app,
    word_count_description,
    word_count_topology,
)
from tests.support.wire import WireClient
from tests.support.wire import create_topic as wire_create_topic

pytestmark = pytest.mark.timeout(180)

MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, ASSIGNMENT_DELAYED, STALE_TOPOLOGY = 1, 3, 5, 0
ALL = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
NO_TASKS: dict = {"active_tasks": [], "standby_tasks": [], "warmup_tasks": []}


targets, target = comparison_fixtures("StreamsGroupHeartbeat", "StreamsGroupDescribe")


def topic_partitions(c: WireClient, topic: str) -> int | None:
    r = c.request(3, 12, {"topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
                          "include_cluster_authorized_operations": False,
                          "include_topic_authorized_operations": False})
    t = r["topics"][0]
    return None if t["error_code"] != 0 else len(t["partitions"])


def topic_config(c: WireClient, topic: str, key: str) -> str | None:
    r = c.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": [key]}],
                          "include_synonyms": False, "include_documentation": False})
    entries = r["results"][0]["configs"]
    return entries[0]["value"] if entries else None


def test_word_count_group_creates_its_topics_and_rebalances(target: Target) -> None:
    app = "wordcount"  # fixed: Kafka lists the missing topics in its HashMap's order, which the names decide
    source, topology = word_count_app(target, app, 4)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology)
        r = a.join()
        # The first member: the broker answers the intervals, the initial rebalance delay and the
        # internal topics it is creating (Kafka's order of statuses and of the topic names).
        assert (r["member_epoch"], r["heartbeat_interval_ms"], r["task_offset_interval_ms"],
                r["acceptable_recovery_lag"]) == (1, 5000, 60000, 10000)
        assert r["active_tasks"] == [] and r["standby_tasks"] == [] and r["warmup_tasks"] == []
        assert [(s["status_code"], s["status_detail"]) for s in r["status"]] == [
            (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."),
            (MISSING_INTERNAL_TOPICS,
             f"Internal topics are missing: {app}-counts-repartition, {app}-counts-changelog")]
        d = describe(c, app)
        assert (d["error_code"], d["group_state"], d["assignor_name"]) == (0, "NotReady", "sticky")
        # Both internal topics appear with the input's partition count and the topology's configs.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (topic_partitions(c, f"{app}-counts-repartition") is None
                                               or topic_partitions(c, f"{app}-counts-changelog") is None):
            time.sleep(0.2)
        assert topic_partitions(c, f"{app}-counts-repartition") == 4
        assert topic_partitions(c, f"{app}-counts-changelog") == 4
        assert topic_config(c, f"{app}-counts-changelog", "cleanup.policy") == "compact"
        assert topic_config(c, f"{app}-counts-repartition", "retention.ms") == "-1"
        # Once the delay is over and the topics exist, the one member gets every task.
        converge([a], 8)
        assert a.active == ALL and a.standby == {} and a.warmup == {}
        # A second instance: Kafka's sticky assignor keeps partitions 0-1 of both subtopologies where
        # they were and moves 2-3, revoked first (converge checks no task ever has two owners).
        b = StreamsMember(c, app, topology)
        b.join()
        converge([a, b], 8)
        assert a.active == {"0": {0, 1}, "1": {0, 1}} and b.active == {"0": {2, 3}, "1": {2, 3}}
        d = describe(c, app)
        assert (d["group_state"], d["group_epoch"], d["assignment_epoch"]) == ("Stable", a.epoch, a.epoch)
        assert [s["subtopology_id"] for s in d["topology"]["subtopologies"]] == ["0", "1"]
        changelog = d["topology"]["subtopologies"][1]["state_changelog_topics"][0]
        assert (changelog["name"], changelog["partitions"]) == (f"{app}-counts-changelog", 4)
        members = {m["member_id"]: m for m in d["members"]}
        for m in (a, b):
            described = members[m.member_id]
            assert tasks_of(described["assignment"]["active_tasks"]) == m.active
            assert tasks_of(described["target_assignment"]["active_tasks"]) == m.active
            assert (described["process_id"], described["topology_epoch"], described["is_classic"]) == \
                (m.process_id, 0, False)
        # One leaves: the other takes every task back.
        r = b.leave()
        assert (r["error_code"], r["member_id"], r["member_epoch"]) == (0, b.member_id, -1)
        converge([a], 8)
        assert a.active == ALL
        assert [m["member_id"] for m in describe(c, app)["members"]] == [a.member_id]
        # The older describe version answers the same group.
        assert describe(c, app, version=0)["group_state"] == "Stable"


def test_bad_heartbeats_answer_kafkas_errors_and_change_nothing(target: Target) -> None:
    app = "badbeats"
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology, version=0)
        a.join()
        converge([a], 4)
        before = describe(c, app)
        bad_changelog = word_count_topology(app, source)
        bad_changelog["subtopologies"][1]["state_changelog_topics"][0]["partitions"] = 3
        internal = word_count_topology(app, "__consumer_offsets")
        other = word_count_topology(app, source)
        other["subtopologies"][0]["source_topics"] = [source, f"{app}-other"]
        cases = [
            (dict(member_id=""), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
            (dict(group_id="", member_id="m"), ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
            (dict(group_id=app, member_id="m", member_epoch=0), ErrorCode.INVALID_REQUEST,
             "RebalanceTimeoutMs must be provided in first request."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000), ErrorCode.INVALID_REQUEST,
             "ActiveTasks must be empty when (re-)joining."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, active_tasks=[],
                  standby_tasks=[], warmup_tasks=None), ErrorCode.INVALID_REQUEST,
             "WarmupTasks must be empty when (re-)joining."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, active_tasks=[],
                  standby_tasks=[], warmup_tasks=[]), ErrorCode.INVALID_REQUEST,
             "Topology must be non-null when (re-)joining."),
            (dict(group_id=app, member_id="m", member_epoch=-3), ErrorCode.INVALID_REQUEST,
             "MemberEpoch is -3, but must be greater than or equal to -2."),
            (dict(group_id=app, member_id="m", member_epoch=1, active_tasks=[]), ErrorCode.INVALID_REQUEST,
             "If one task-type is non-null, all must be non-null."),
            (dict(group_id=app, member_id="m", member_epoch=1, topology=topology), ErrorCode.INVALID_REQUEST,
             "Topology can only be provided when (re-)joining."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=bad_changelog,
                  **NO_TASKS),
             ErrorCode.STREAMS_INVALID_TOPOLOGY,
             f"Changelog topic {app}-counts-changelog must have an undefined partition count, but it is set to 3."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=internal,
                  **NO_TASKS),
             ErrorCode.STREAMS_INVALID_TOPOLOGY,
             "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited."),
            (dict(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=other,
                  **NO_TASKS),
             ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet."),
            (dict(group_id=app, member_id="nobody", member_epoch=3), ErrorCode.UNKNOWN_MEMBER_ID,
             f"Member nobody is not a member of group {app}."),
            (dict(group_id=app, member_id=a.member_id, member_epoch=a.epoch + 1), ErrorCode.FENCED_MEMBER_EPOCH,
             f"The streams group member has a greater member epoch ({a.epoch + 1}) than the one known by the "
             f"group coordinator ({a.epoch}). The member must abandon all its partitions and rejoin."),
            (dict(group_id=f"{app}-none", member_id="m", member_epoch=1), ErrorCode.GROUP_ID_NOT_FOUND,
             f"Streams group {app}-none not found."),
        ]
        for fields, code, message in cases:
            for version in (0, 1):
                r = heartbeat(c, version, **fields)
                assert (r["error_code"], r["error_message"]) == (code, message), (fields, r)
        # A task the topology does not have.
        r = heartbeat(c, 1, group_id=app, member_id=a.member_id, member_epoch=a.epoch,
                      active_tasks=[{"subtopology_id": "1", "partitions": [7]}], standby_tasks=[], warmup_tasks=[])
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.INVALID_REQUEST, "Task 7 for subtopology 1 is invalid. Number of tasks for this subtopology: 2")
        # The id is a streams group's: a classic member is refused (Kafka's classicGroupJoin), and so is a
        # KIP-848 consumer (getOrMaybeCreateConsumerGroup).
        j = c.request(11, 5, {"group_id": app, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                              "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]})
        assert j["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL, j
        r = c.request(68, 1, {"group_id": app, "member_id": "m", "member_epoch": 0, "instance_id": None,
                              "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [source],
                              "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
        assert (r["error_code"], r["error_message"]) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                         f"Group {app} is not a consumer group."), r
        # Nothing changed: same epochs, same member, same tasks.
        after = describe(c, app)
        assert (after["group_epoch"], after["assignment_epoch"], after["group_state"]) == \
            (before["group_epoch"], before["assignment_epoch"], before["group_state"])
        assert [m["member_id"] for m in after["members"]] == [a.member_id]
        a.beat()
        assert a.active == {"0": {0, 1}, "1": {0, 1}}
        # A topology whose source topic does not exist: the group is not ready and says why.
        app2 = f"{app}-missing"
        ready_coordinator(c, app2)
        m = StreamsMember(c, app2, word_count_topology(app2, f"{app2}-nowhere"))
        r = m.join()
        assert (MISSING_SOURCE_TOPICS, f"Source topics {app2}-nowhere are missing.") in \
            [(s["status_code"], s["status_detail"]) for s in r["status"]]
        assert describe(c, app2)["group_state"] == "NotReady"
        # Describe of an unknown group.
        d = describe(c, f"{app}-unknown")
        assert (d["error_code"], d["error_message"]) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                         f"Group {app}-unknown not found.")


def test_a_static_member_leaves_and_its_instance_id_takes_its_tasks_back(target: Target) -> None:
    """KIP-1071's static membership (Kafka 4.4): epoch -2 keeps the member and its tasks; a new member
    id joining with the instance id replaces it and gets its tasks at once; the old id is fenced."""
    app = "staticapp"
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        first = StreamsMember(c, app, topology, instance_id="instance-1")
        first.join()
        converge([first], 4)
        # The instance id is taken while its member is in the group.
        second = StreamsMember(c, app, topology, process_id=first.process_id, instance_id="instance-1")
        r = heartbeat(c, 1, group_id=app, member_id=second.member_id, member_epoch=0, rebalance_timeout_ms=30000,
                      topology=topology, process_id=second.process_id, instance_id="instance-1", **NO_TASKS)
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {second.member_id} with instance id instance-1 cannot "
            f"join the group because the instance id is owned by {first.member_id} member.")
        epoch_before = describe(c, app)["group_epoch"]
        r = first.leave(-2)
        assert (r["error_code"], r["member_id"], r["member_epoch"]) == (0, first.member_id, -2)
        d = describe(c, app)
        assert [(m["member_id"], m["member_epoch"], m["instance_id"]) for m in d["members"]] == \
            [(first.member_id, -2, "instance-1")]
        assert tasks_of(d["members"][0]["assignment"]["active_tasks"]) == {"0": {0, 1}, "1": {0, 1}}
        assert d["group_epoch"] == epoch_before  # a temporary leave is no rebalance
        # The same instance id with a new member id: it takes the place, and the tasks, at once.
        r = second.join()
        assert tasks_of(r["active_tasks"]) == {"0": {0, 1}, "1": {0, 1}}, r
        d = describe(c, app)
        assert [(m["member_id"], m["instance_id"]) for m in d["members"]] == [(second.member_id, "instance-1")]
        assert d["group_epoch"] == epoch_before
        r = heartbeat(c, 1, group_id=app, member_id=first.member_id, member_epoch=first.epoch,
                      instance_id="instance-1", **NO_TASKS)
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {first.member_id} with instance id instance-1 was fenced by member {second.member_id}.")
        converge([second], 4)


# -- Odradek alone: the state is in __consumer_offsets; the feature level switches the protocol ------

FAST = {"group.streams.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}


def test_group_survives_a_broker_restart(broker_factory, tmp_path) -> None:
    """Kill -9 and restart on the same data: the group, its topology, epochs, members and tasks are
    replayed from __consumer_offsets (Kafka's StreamsGroup* records), and the members go on at their
    epochs."""
    broker = broker_factory(FAST, tmp_path / "b")
    with WireClient(broker.host, broker.port) as c:
        wire_create_topic(c, "words", 4)
        ready_coordinator(c, "app")
        topology = word_count_topology("app", "words")
        a, b = StreamsMember(c, "app", topology), StreamsMember(c, "app", topology)
        a.join()
        converge([a], 8)
        b.join()
        converge([a, b], 8)
        before = describe(c, "app")
    broker.kill()
    broker = broker_factory(FAST, tmp_path / "b")
    with WireClient(broker.host, broker.port) as c:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and describe(c, "app")["error_code"] != 0:
            time.sleep(0.2)
        loaded = describe(c, "app")
        for key in ("group_state", "group_epoch", "assignment_epoch"):
            assert loaded[key] == before[key], key
        assert sorted(loaded["members"], key=lambda m: m["member_id"]) == \
            sorted(before["members"], key=lambda m: m["member_id"])
        # As in Kafka, the topology is configured against the metadata again at the next heartbeat
        # (until then describe shows it as the member sent it: internal topics at 0 partitions).
        assert loaded["topology"]["subtopologies"][1]["state_changelog_topics"][0]["partitions"] == 0
        a.c = b.c = c
        a.beat()
        b.beat()
        assert (a.last["error_code"], b.last["error_code"]) == (0, 0)
        assert (a.epoch, b.epoch) == (before["group_epoch"], before["group_epoch"])
        assert a.active == {"0": {0, 1}, "1": {0, 1}} and b.active == {"0": {2, 3}, "1": {2, 3}}
        after = describe(c, "app")
        for key in ("group_state", "group_epoch", "assignment_epoch", "topology"):
            assert after[key] == before[key], key


def test_standby_replicas_go_to_the_other_process(broker_factory) -> None:
    """group.streams.num.standby.replicas=1: each task of the stateful subtopology (1) has a standby on
    the process that does not run it; the stateless one (0) has none (Kafka's StickyTaskAssignor)."""
    broker = broker_factory({**FAST, "group.streams.num.standby.replicas": "1"})
    with WireClient(broker.host, broker.port) as c:
        wire_create_topic(c, "words", 4)
        ready_coordinator(c, "app")
        topology = word_count_topology("app", "words")
        a, b = StreamsMember(c, "app", topology), StreamsMember(c, "app", topology)
        a.join()
        converge([a], 8)
        assert a.standby == {}  # one process: no other place for a standby
        b.join()
        converge([a, b], 8)
        assert a.active == {"0": {0, 1}, "1": {0, 1}} and b.active == {"0": {2, 3}, "1": {2, 3}}
        assert a.standby == {"1": {2, 3}} and b.standby == {"1": {0, 1}}


def test_streams_version_zero_turns_the_protocol_off(broker_factory) -> None:
    """As Kafka's KafkaApis: with streams.version 0 the three APIs answer UNSUPPORTED_VERSION, and at 1
    again they serve (UpdateFeatures, the kafka-features tool's request); a topology description push
    then reaches the coordinator, which has no plugin to give it to."""
    broker = broker_factory(FAST)
    with WireClient(broker.host, broker.port) as c:
        wire_create_topic(c, "words", 2)
        ready_coordinator(c, "app")

        def set_level(level: int) -> None:
            r = c.request(57, 1, {"timeout_ms": 30000, "feature_updates": [
                {"feature": "streams.version", "max_version_level": level, "upgrade_type": 1 if level else 2}],
                "validate_only": False})
            assert r["error_code"] == 0 and all(x["error_code"] == 0 for x in r["results"]), r
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                api = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
                levels = {f["name"]: f["max_version_level"] for f in api["finalized_features"]}
                if levels.get("streams.version", 0) == level:
                    return
                time.sleep(0.1)
            raise AssertionError("the level never changed")

        set_level(0)
        m = StreamsMember(c, "app", word_count_topology("app", "words"))
        r = heartbeat(c, 1, group_id="app", member_id=m.member_id, member_epoch=0, rebalance_timeout_ms=1000,
                      topology=m.topology)
        assert r["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert describe(c, "app")["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        description = word_count_description("words", "app")
        r = topology_description_update(c, "app", m.member_id, 0, description)  # KafkaApis's answer
        assert (r["error_code"], r["error_message"]) == (ErrorCode.UNSUPPORTED_VERSION,
                                                         "The version of API is not supported.")
        set_level(1)
        m.join()
        converge([m], 4)
        r = topology_description_update(c, "app", m.member_id, 0, description)  # the coordinator's
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.UNSUPPORTED_VERSION, "The broker has no streams group topology description plugin configured.")
