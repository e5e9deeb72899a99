"""Kafka 4.4's additions to streams groups over raw sockets, the same steps against Kafka 4.4 and
Odradek with the same answers required (the A/B harness): topology descriptions (KIP-1331:
StreamsGroupTopologyDescriptionUpdate, API 93; StreamsGroupHeartbeat v1's
TopologyDescriptionRequired; StreamsGroupDescribe v1's TopologyDescriptionStatus), the assignment
interval (group.streams.assignment.interval.ms, or the group's own streams.assignment.interval.ms) and
warm-up tasks.

Both brokers run with Kafka's defaults: no topology description plugin (Kafka keeps descriptions only
in one, see broker/group/streams_topology_descriptions.py), an assignment interval of 1 s,
num.warmup.replicas 2 and acceptable.recovery.lag 10000.
"""

from __future__ import annotations

import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.config_requests import set_group_configs
from tests.support.java_tools import run_tool
from tests.support.real_kafka import Target, comparison_fixtures, create_topic, unique
from tests.support.streams_wire import (
    StreamsMember,
    converge,
    describe,
    heartbeat,
    ready_coordinator,
    rows,
    topology_description_update,
    word_count_app,
    word_count_description,
    word_count_topology,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(180)

NO_PLUGIN = "The broker has no streams group topology description plugin configured."
NOT_REQUESTED, NOT_STORED = 0, 1
ASSIGNMENT_DELAYED = 5


targets, target = comparison_fixtures("StreamsGroupHeartbeat", "StreamsGroupDescribe",
                                      "StreamsGroupTopologyDescriptionUpdate")


def test_no_heartbeat_asks_for_a_description_and_a_push_is_unsupported(target: Target) -> None:
    """Without a plugin: every v1 heartbeat answers TopologyDescriptionRequired false, a push is
    UNSUPPORTED_VERSION with Kafka's message whoever sends it (a member, a stranger, an empty id, an
    unknown group: the plugin gate comes before any lookup), and describe says NOT_STORED when asked,
    NOT_REQUESTED when not, with no description; the group is unchanged by the pushes."""
    app = unique("tdesc")
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology)
        answers = [a.join()]
        deadline = time.monotonic() + 30
        while a.active != {"0": {0, 1}, "1": {0, 1}} and time.monotonic() < deadline:
            answers.append(a.beat())
            time.sleep(0.2)
        assert a.active == {"0": {0, 1}, "1": {0, 1}}
        assert all(r["topology_description_required"] is False for r in answers)
        before = describe(c, app)
        description = word_count_description(source, app)
        for group, member, epoch in ((app, a.member_id, 0), (app, "not-a-member", 0), (app, a.member_id, 7),
                                     (app, "", 0), ("", a.member_id, 0), (unique("nogroup"), "m", 0)):
            r = topology_description_update(c, group, member, epoch, description)
            assert (r["error_code"], r["error_message"]) == (ErrorCode.UNSUPPORTED_VERSION, NO_PLUGIN), (group, member)
        asked = describe(c, app, include_topology_description=True)
        assert (asked["error_code"], asked["topology_description_status"], asked["topology_description"]) == \
            (0, NOT_STORED, None)
        not_asked = describe(c, app)
        assert (not_asked["topology_description_status"], not_asked["topology_description"]) == (NOT_REQUESTED, None)
        for key in ("group_state", "group_epoch", "assignment_epoch", "topology"):
            assert not_asked[key] == before[key], key
        # An unknown group: its error, and no status even when asked.
        missing = describe(c, unique("nogroup"), include_topology_description=True)
        assert (missing["error_code"], missing["topology_description_status"], missing["topology_description"]) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, NOT_REQUESTED, None)
        assert a.beat()["topology_description_required"] is False


def test_a_second_assignment_within_the_interval_waits_for_it(target: Target) -> None:
    """group.streams.assignment.interval.ms (1 s): a member joining right after a target assignment
    is told ASSIGNMENT_DELAYED ("... the configured assignment interval.") and gets no task, the group
    stays Assigning; a heartbeat after the interval computes the new target."""
    app = unique("interval")
    source, topology = word_count_app(target, app, 4)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a, b, d = (StreamsMember(c, app, topology) for _ in range(3))
        a.join()
        converge([a], 8)
        time.sleep(1.2)  # past the interval of the first target
        r = b.join()  # the group epoch moves and this heartbeat computes a new target at once
        assert ASSIGNMENT_DELAYED not in {s["status_code"] for s in r["status"]}
        r = d.join()  # within the interval of that target
        assert [(s["status_code"], s["status_detail"]) for s in r["status"]] == [
            (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval.")]
        assert (d.active, d.standby, d.warmup) == ({}, {}, {})
        described = describe(c, app)
        assert described["group_state"] == "Assigning"
        assert described["group_epoch"] == described["assignment_epoch"] + 1
        time.sleep(1.2)
        converge([a, b, d], 8)
        assert all(m.active for m in (a, b, d))


def test_the_groups_own_assignment_interval_counts(target: Target) -> None:
    """The group config streams.assignment.interval.ms overrides the broker's 1 s (Kafka's
    streamsGroupAssignmentIntervalMs reads the group's config first): at 0 a member joining right
    after a target assignment is assigned at once; at 10 s one joining 1.2 s after it still waits."""
    delayed = (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval.")
    for interval, pause, expect_delay in (("0", 0.0, False), ("10000", 1.2, True)):
        app = unique("own-interval")
        source, topology = word_count_app(target, app, 4)
        with WireClient(target.host, target.port) as c:
            set_group_configs(c, app, {"streams.assignment.interval.ms": interval})
            ready_coordinator(c, app)
            a, b = (StreamsMember(c, app, topology) for _ in range(2))
            a.join()
            converge([a], 8)
            time.sleep(pause)
            r = b.join()
            statuses = [(s["status_code"], s["status_detail"]) for s in r["status"]]
            assert (delayed in statuses) == expect_delay, (interval, statuses)
            assert describe(c, app)["group_state"] == ("Assigning" if expect_delay else "Reconciling"), interval


def test_no_warm_up_task_even_for_a_member_without_state(target: Target) -> None:
    """Kafka 4.4.0 assigns no warm-up tasks (its AssignmentRefiner.refine returns the assignor's
    target): a new member on a new process, reporting no offsets for a stateful task the old member
    has caught up on far beyond acceptable.recovery.lag, is handed that task as active at once, with
    no warm-up task anywhere, in the heartbeat answers and in describe."""
    app = unique("warmup")
    source, topology = word_count_app(target, app, 2)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology)
        a.join()
        converge([a], 4)
        # a reports its changelog positions: 1,000,000 offsets of state on each stateful task.
        offsets = [{"subtopology_id": "1", "partition": p, "offset": 1_000_000} for p in (0, 1)]
        r = heartbeat(c, 1, group_id=app, member_id=a.member_id, member_epoch=a.epoch, active_tasks=rows(a.active),
                      standby_tasks=[], warmup_tasks=[], task_offsets=offsets, task_end_offsets=offsets)
        assert r["error_code"] == 0
        b = StreamsMember(c, app, topology)
        b.join()
        time.sleep(1.2)  # past the assignment interval, whichever heartbeat assigns
        converge([a, b], 4)
        assert a.warmup == {} and b.warmup == {}
        assert sum(len(ps) for ps in b.active.values()) == 2  # half of the four tasks moved at once
        for m in describe(c, app)["members"]:
            assert m["assignment"]["warmup_tasks"] == [] and m["target_assignment"]["warmup_tasks"] == []


def test_kafka_streams_groups_tool_finds_no_stored_topology(target: Target) -> None:
    """Kafka 4.4's ``kafka-streams-groups --describe --topology`` (its admin client's
    DescribeStreamsGroups v1 with IncludeTopologyDescription) on a live group: the same output and
    exit status from both brokers, the tool's words for NOT_STORED."""
    app = "tooltopology"  # fixed: the tool's output names the group on both brokers
    source = f"{app}-words"
    create_topic(target, source, 2)
    with WireClient(target.host, target.port) as c:
        ready_coordinator(c, app)
        a = StreamsMember(c, app, word_count_topology(app, source))
        a.join()
        converge([a], 4)
        tool = run_tool("kafka-streams-groups", ["--bootstrap-server", target.bootstrap, "--describe", "--group", app,
                                                 "--topology"], check=False)
        # Kafka 4.4's own output, the same from both brokers (checked against Kafka by this test).
        assert (tool.returncode, tool.stdout.strip(), tool.stderr) == (
            1, f"Error: No topology description is stored for streams group '{app}'.", ""), tool
