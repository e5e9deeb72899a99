"""A share group outlives its group coordinator (issue 30): on a 3-broker Odradek cluster with an
RF=3 ``__consumer_offsets``, Kafka 4.4's KafkaShareConsumer makes a share group and a second, live
one; the broker coordinating both is killed with SIGKILL. The successor loads the groups from the
share-group records of ``__consumer_offsets`` (broker/group/share_group.py, Kafka 4.4's formats):

- the empty group is still there: DescribeShareGroupOffsets and Kafka 4.4's ``kafka-share-groups
  --describe --offsets`` answer its start offset (before, it lived in the killed broker's memory
  only: GROUP_ID_NOT_FOUND until a member joined again);
- the live group's member is still a member (its epoch kept) and its consumer goes on receiving;
- Kafka 4.4's ``kafka-dump-log --offsets-decoder`` decodes the records on a surviving replica;
- DeleteGroups of the empty group writes its tombstones: after a second coordinator move it stays
  gone.

The group ids are picked so that the coordinator is not the data partition's leader (the
share-partition's state stays where it is; what is tested is the group coordinator's).

The second test resets an empty group's offsets with Kafka 4.4's ``kafka-share-groups`` at a
coordinator that does not lead the data partition (AlterShareGroupOffsets initializes the share
state anew at the share coordinator; the leader reads it again when a member comes back).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_share_groups_java import real, wait_initialized
from tests.integration.test_share_state_cluster import OVERRIDES, create_rf3_topic, produce
from tests.support.cluster import cluster_or_skip
from tests.support.cluster import wait_through_faults as wait_until
from tests.support.java_tools import run_tool
from tests.support.share_consumer import ShareConsumer
from tools.kafka_dist import ToolchainUnavailable

pytestmark = pytest.mark.timeout(600)

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # bin/kafka-share-groups.sh
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # type: ignore[type-arg]
    # Three __consumer_offsets partitions: groups coordinated by different brokers to pick from.
    with cluster_or_skip(Path(tmp_path_factory.mktemp("sg-coordinator")), 3,
                         {**OVERRIDES, "offsets.topic.num.partitions": "3"}) as c:
        yield c


def coordinator(c, group: str) -> tuple[int, int] | None:  # type: ignore[no-untyped-def]
    """(node id, error code) FindCoordinator answers from a live broker."""
    found = c.request(c.live_ids()[0], "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [group]})
    entry = found["coordinators"][0]
    return entry["node_id"], entry["error_code"]


def describe_offsets(c, group: str, topic: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(error code, start offset) of DescribeShareGroupOffsets v1 at the group's coordinator."""
    node, error = coordinator(c, group)  # type: ignore[misc]
    if error != 0 or node not in c.live_ids():
        return error or -1, -1
    r = c.request(node, "DescribeShareGroupOffsets", 1, {"groups": [
        {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})["groups"][0]
    if r["error_code"] != 0:
        return r["error_code"], -1
    return 0, int(r["topics"][0]["partitions"][0]["start_offset"])


def settled_start(c, group: str, topic: str) -> int | None:  # type: ignore[no-untyped-def]
    """The described start offset once two answers a second apart agree (its last write landed)."""
    first = describe_offsets(c, group, topic)
    time.sleep(1)
    again = describe_offsets(c, group, topic)
    return again[1] if first == again and again[0] == 0 and again[1] >= 0 else None


def share_group_describe(c, group: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    node, _ = coordinator(c, group)  # type: ignore[misc]
    return c.request(node, "ShareGroupDescribe", 1, {"group_ids": [group],
                                                     "include_authorized_operations": False})["groups"][0]


def tool_offsets(c, group: str) -> list[list[str]]:  # type: ignore[no-untyped-def]
    live = c.brokers[c.live_ids()[0]]
    out = run_tool(SHARE_GROUPS, ["--bootstrap-server", f"{live.host}:{live.port}", "--describe", "--group", group,
                                  "--offsets"], check=False)
    lines = [line.split() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return [cells for cells in lines if cells and cells[0] == group]


def run_case(c) -> None:  # type: ignore[no-untyped-def]
    topic = create_rf3_topic(c, "sg-coord")
    data_leader = c.partition_state(topic, 0)[0]
    # Two groups coordinated by one broker that does not lead the data partition.
    by_node: dict[int, list[str]] = {}
    for i in range(500):
        node, error = coordinator(c, f"sgc-{i}")  # type: ignore[misc]
        if error == 0 and node != data_leader:
            by_node.setdefault(node, []).append(f"sgc-{i}")
            if len(by_node[node]) == 2:
                victim, (idle, live) = node, by_node[node]
                break
    else:
        raise AssertionError("no two groups coordinated away from the data leader")

    try:
        stays = ShareConsumer(c.bootstrap, live, topic, "explicit", "accept", "live")
    except ToolchainUnavailable as exc:
        pytest.skip(f"needs Java and Kafka 4.4's jars: {exc}")
    with stays:
        stays.wait_subscribed()
        with ShareConsumer(c.bootstrap, idle, topic, "explicit", "accept", "first") as first:
            first.wait_subscribed()
            wait_initialized(c, [first, stays], topic, 1)
            produce(c, topic, [f"a{i}" for i in range(10)])
            wait_until(lambda: len(real(first)) >= 10 and len(real(stays)) >= 10, 60, "the a records")
            first.stop()
        # The start offset the share coordinator holds: Kafka's last write carries the one from
        # before its acknowledgement, so it may trail the records accepted; it is the same after the kill.
        wait_until(lambda: settled_start(c, idle, topic) is not None, 60, "a settled start offset before the kill")
        start = describe_offsets(c, idle, topic)[1]
        assert 0 <= start <= real(first)[-1].offset + 1, start
        before = share_group_describe(c, live)
        assert before["error_code"] == 0 and len(before["members"]) == 1, before
        member_id, member_epoch = before["members"][0]["member_id"], before["members"][0]["member_epoch"]

        c.kill(victim)
        wait_until(lambda: coordinator(c, idle)[0] not in (-1, victim), 60, "a new group coordinator")  # type: ignore[index]
        # The empty group, with no member to bring it back: known at once to the new coordinator.
        wait_until(lambda: describe_offsets(c, idle, topic)[0] not in (14, 15, 16), 60,
                   "the new coordinator to load")  # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE / NOT_COORDINATOR
        assert describe_offsets(c, idle, topic) == (0, start)
        assert [(r[1], r[2], r[3]) for r in tool_offsets(c, idle)] == [(topic, "0", str(start))]
        after = share_group_describe(c, live)
        assert after["error_code"] == 0, after
        assert [(m["member_id"], m["member_epoch"]) for m in after["members"]] == [(member_id, member_epoch)]
        # The live consumer goes on.
        produce(c, topic, [f"b{i}" for i in range(5)])
        wait_until(lambda: [r.value for r in real(stays)][-5:] == [f"b{i}" for i in range(5)], 60,
                   "the b records to the live consumer")
        stays.stop()

    # Kafka's own reader decodes the share-group records on a surviving replica.
    partition = _offsets_partition(c, idle)
    node = c.live_ids()[0]
    segment = c.brokers[node].data_dir / f"{OFFSETS_TOPIC}-{partition}" / f"{0:020d}.log"
    dump = run_tool("org.apache.kafka.tools.DumpLogSegments",
                    ["--files", str(segment), "--print-data-log", "--offsets-decoder"]).stdout
    # (type 32767: the partition rule's markers, broker/coordinator/rehash.py - not a group's)
    unknown = [line for line in dump.splitlines() if "Unknown record type" in line and " 32767 " not in line]
    assert unknown == [], unknown
    assert f'key: {{"type":"11","data":{{"groupId":"{idle}"}}}} payload: {{"version":"0","data":{{"epoch":1,' in dump
    assert f'key: {{"type":"15","data":{{"groupId":"{idle}"}}}} payload: {{"version":"0","data":' \
           f'{{"initializingTopics":[],"initializedTopics":[{{"topicId":' in dump, dump[-3000:]

    # DeleteGroups of the empty group: gone, and still gone once its coordinator moves again.
    node, _ = coordinator(c, idle)  # type: ignore[misc]
    r = c.request(node, "DeleteGroups", 2, {"groups_names": [idle]})["results"][0]
    assert r["error_code"] == 0, r
    c.start(victim, timeout=60)
    wait_until(lambda: len(c.partition_state(OFFSETS_TOPIC, partition)[2]) == 3, 90, "the offsets partition in sync")
    c.kill(node)
    wait_until(lambda: coordinator(c, idle)[0] not in (-1, node), 60, "another group coordinator")  # type: ignore[index]
    wait_until(lambda: describe_offsets(c, idle, topic)[0] not in (14, 15, 16), 60, "the load")
    assert describe_offsets(c, idle, topic)[0] == 69  # GROUP_ID_NOT_FOUND
    c.start(node, timeout=60)


def _offsets_partition(c, group: str) -> int:  # type: ignore[no-untyped-def]
    from odradek.broker.coordinator.hashing import partition_for
    n = next(len(t["partitions"]) for t in c.metadata()["topics"] if t["name"] == OFFSETS_TOPIC)
    return partition_for(group, n)


def test_a_share_group_outlives_its_coordinator(cluster) -> None:  # type: ignore[no-untyped-def]
    try:
        run_case(cluster)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.logs()[-12000:]}") from None


def test_reset_offsets_at_a_coordinator_that_does_not_lead_the_partition(cluster) -> None:  # type: ignore[no-untyped-def]
    """Kafka 4.4's ``kafka-share-groups --reset-offsets --to-earliest --execute`` sends
    AlterShareGroupOffsets to the group's coordinator; here that broker does not lead the data
    partition. It initializes the share state anew at the share coordinator (the next state epoch),
    and a new consumer of the group reads every record again from the start, each as new (before,
    the coordinator answered NOT_LEADER_OR_FOLLOWER and the tool failed)."""
    try:
        _reset_case(cluster)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.logs()[-12000:]}") from None


def _reset_case(c) -> None:  # type: ignore[no-untyped-def]
    wait_until(lambda: len(c.live_ids()) == 3, 60, "three brokers")
    topic = create_rf3_topic(c, "sg-reset")
    data_leader = c.partition_state(topic, 0)[0]
    group = next(g for i in range(500) if (g := f"sgr-{i}") and coordinator(c, g) is not None
                 and coordinator(c, g)[0] not in (-1, data_leader) and coordinator(c, g)[1] == 0)  # type: ignore[index]
    with ShareConsumer(c.bootstrap, group, topic, "explicit", "accept", "first") as first:
        first.wait_subscribed()
        wait_initialized(c, [first], topic, 1)
        produce(c, topic, [f"a{i}" for i in range(10)])
        wait_until(lambda: len(real(first)) >= 10, 60, "the a records")
        first.stop()
    end = real(first)[-1].offset + 1
    wait_until(lambda: share_group_describe(c, group)["group_state"] == "Empty", 60, "the group to be empty")
    live = c.brokers[c.live_ids()[0]]
    out = run_tool(SHARE_GROUPS, ["--bootstrap-server", f"{live.host}:{live.port}", "--reset-offsets", "--group",
                                  group, "--topic", topic, "--to-earliest", "--execute"], check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] == [group]]
    assert [(r[1], r[2], r[3]) for r in rows] == [(topic, "0", "0")], out.stdout
    assert describe_offsets(c, group, topic) == (0, 0)
    with ShareConsumer(c.bootstrap, group, topic, "explicit", "accept", "again") as again:
        again.wait_subscribed()
        wait_until(lambda: len(again.records) >= end, 60, "every record again")
        again.stop()
    assert [r.offset for r in again.records] == list(range(end)), again.records
    assert {r.delivery_count for r in again.records} == {1}
