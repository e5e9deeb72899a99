"""Kafka 4.4's ``kafka-share-groups`` (ShareGroupCommand) against Kafka 4.4 and Odradek, the same steps
on each (the A/B harness): list, describe members/state/offsets, reset the offsets of an empty group
(AlterShareGroupOffsets) and delete them (DeleteShareGroupOffsets), and the refusal of a reset while
a member is in the group. The group is made by Kafka 4.4's KafkaShareConsumer
(tests/support/share_consumer.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.integration.test_share_groups_java import real, wait_initialized, wait_until
from tests.support.java_tools import run_tool
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.share_consumer import ShareConsumer
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(300)

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # bin/kafka-share-groups.sh


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def tool(target: Target, *args: str, check: bool = True) -> str:
    p = run_tool(SHARE_GROUPS, ["--bootstrap-server", target.bootstrap, *args], check=check)
    return p.stdout + (p.stderr if not check else "")


def log_end(target: Target, topic: str) -> int:
    with WireClient(target.host, target.port) as c:
        r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def rows(out: str) -> list[list[str]]:
    """The table the tool printed, without its header."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    return [cells for cells in lines if cells[0] != "GROUP"]


@pytest.mark.parametrize("name", TARGETS)
def test_kafka_share_groups_lists_describes_resets_and_deletes(targets, name: str) -> None:
    target = targets[name]
    target.require("ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
                   "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets")
    topic, group = unique("stool"), unique("sg")
    create_topic(target, topic, 1)
    values = [f"t{i}" for i in range(5)]
    with ShareConsumer(target.bootstrap, group, topic, "explicit", "accept", "tool-client") as consumer:
        consumer.wait_subscribed()
        wait_initialized(target, [consumer], topic, 1)
        producer = Producer({"bootstrap.servers": target.bootstrap})
        for v in values:
            producer.produce(topic, v.encode(), partition=0)
        producer.flush(30)
        wait_until(lambda: len(real(consumer)) == len(values), 60, "the records")
        end = log_end(target, topic)
        assert group in tool(target, "--list").split()
        members = rows(tool(target, "--describe", "--group", group, "--members"))
        assert [(m[0], m[3], m[4], m[5]) for m in members] == [(group, "tool-client", "1", f"{topic}:0")]
        state = rows(tool(target, "--describe", "--group", group, "--state"))
        assert [(s[0], s[-2], s[-1]) for s in state] == [(group, "Stable", "1")]
        # Everything accepted: no lag. (The start offset Kafka 4.4 shows is the last one its share
        # coordinator persisted, which trails the share-partition's: not compared.)
        deadline = time.monotonic() + 30
        while (offsets := rows(tool(target, "--describe", "--group", group, "--offsets"))) == [] or \
                [(o[0], o[1], o[2], o[4]) for o in offsets] != [(group, topic, "0", "0")]:
            assert time.monotonic() < deadline, (end, offsets)
            time.sleep(0.5)
        assert 0 <= int(offsets[0][3]) <= end
        # A reset while the member is in the group is refused.
        out = tool(target, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute",
                   check=False)
        assert "not empty" in out.lower() or "is not empty" in out.lower() or "inactive" in out.lower(), out
        consumer.stop()
    # Empty now: reset to the earliest offset, and a new member gets every record again, as new.
    deadline = time.monotonic() + 60
    while rows(tool(target, "--describe", "--group", group, "--state"))[0][-2] != "Empty":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    tool(target, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert rows(tool(target, "--describe", "--group", group, "--offsets")) == [[group, topic, "0", "0", str(end)]]
    with ShareConsumer(target.bootstrap, group, topic, "explicit", "accept") as again:
        again.wait_subscribed()
        wait_until(lambda: len(again.records) >= end, 60, "every record again")
        again.stop()
    assert [r.offset for r in again.records] == list(range(end)) and {r.delivery_count for r in again.records} == {1}
    # Deleting the topic's offsets: the group no longer has a start offset for it.
    deadline = time.monotonic() + 60
    while rows(tool(target, "--describe", "--group", group, "--state"))[0][-2] != "Empty":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    tool(target, "--delete-offsets", "--group", group, "--topic", topic)
    assert topic not in tool(target, "--describe", "--group", group, "--offsets")
