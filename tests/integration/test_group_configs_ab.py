"""Group configs (ConfigResource type GROUP, 32) on the wire, against a real Kafka 4.4 and Odradek: the same
raw requests get the same answers.

Compared, in order:
- IncrementalAlterConfigs on GROUP resources: Kafka 4.4's GroupConfig.validate (unknown key, a value of the
  wrong type, ConfigDef's lower bounds, the broker-level group.* bounds, session above heartbeat, the
  share.auto.offset.reset and share.isolation.level values, APPEND refused, a null value, an empty group
  name), each refusal followed by a DescribeConfigs showing the group's configs unchanged; validate_only;
- AlterConfigs (legacy) on a group;
- DescribeConfigs v4 and v1 of groups with and without configs (every key, Kafka's order, values, sources,
  synonyms, types, documentation; internal keys only once set; an empty name refused; keys asked for);
- ListConfigResources v1 listing the groups with configs (Kafka's order) before the brokers;
- DeleteGroups of a consumer group and of a share group with configs: Kafka 4.4 keeps the group's
  configs, and so does Odradek.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.config_requests import alter_configs, describe_configs
from tests.support.real_kafka import TARGETS, fresh_kafka_and_odradek
from tests.support.wire import WireClient

ALTER_CONFIGS, LIST_CONFIG_RESOURCES = 33, 74
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
LOCK = "share.record.lock.duration.ms"


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, tuple[str, int]]]:
    with fresh_kafka_and_odradek("odradek-groupcfg") as both:
        yield both


def same_on_both(targets: dict[str, tuple[str, int]], scenario: Any) -> Any:
    results = {name: scenario(WireClient(*targets[name]), "{}:{}".format(*targets[name])) for name in TARGETS}
    assert len(results["odradek"]) == len(results["kafka"])
    for step, (ours, kafkas) in enumerate(zip(results["odradek"], results["kafka"], strict=True)):
        assert (step, ours) == (step, kafkas)
    return results["kafka"]


def alter(c: WireClient, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> tuple:
    return alter_configs(c, GROUP, name, ops, validate_only)


def describe(c: WireClient, name: str, version: int = 4, keys: list[str] | None = None) -> dict:
    return describe_configs(c, GROUP, name, version, keys)


def overrides(c: WireClient, name: str) -> list[tuple[str, str]]:
    """The group's configs as DescribeConfigs shows them (source GROUP_CONFIG)."""
    return [(e["name"], e["value"]) for e in describe(c, name)["results"][0]["configs"] if e["config_source"] == 8]


REFUSED: list[tuple[str, list[tuple[str, int, str | None]]]] = [
    ("", [(LOCK, SET, "20000")]),
    ("g1", [("foo", SET, "1")]),
    ("g1", [(LOCK, SET, "abc")]),
    ("g1", [(LOCK, SET, "")]),
    ("g1", [(LOCK, SET, "999")]),
    ("g1", [(LOCK, SET, "14999")]),
    ("g1", [(LOCK, SET, "60001")]),
    ("g1", [("share.delivery.count.limit", SET, "1")]),
    ("g1", [("share.delivery.count.limit", SET, "11")]),
    ("g1", [("consumer.session.timeout.ms", SET, "44999")]),
    ("g1", [("share.auto.offset.reset", SET, "middle")]),
    ("g1", [("share.auto.offset.reset", SET, "EARLIEST")]),
    ("g1", [("share.isolation.level", SET, "READ_COMMITTED")]),
    ("g1", [("streams.num.standby.replicas", SET, "3")]),
    ("g1", [("streams.task.offset.interval.ms", SET, "1")]),
    ("g1", [("streams.rack.aware.assignment.tags", SET, "a,a")]),
    ("g1", [("share.renew.acknowledge.enable", SET, "maybe")]),
    ("g1", [("errors.deadletterqueue.topic.name", SET, "__x")]),
    ("g1", [(LOCK, APPEND, "20000")]),
    ("g1", [(LOCK, SET, None)]),
    ("g1", [(LOCK, SET, "20000"), ("share.delivery.count.limit", SET, "11")]),  # one bad key: nothing stored
]


def test_group_configs_are_validated_stored_described_and_listed_as_by_kafka(targets) -> None:
    def scenario(c: WireClient, bootstrap: str) -> list:
        with c:
            out: list[Any] = [describe(c, "nogroup"), describe(c, "nogroup", version=1)]
            out.append(alter(c, "g1", [("share.delivery.count.limit", SET, "3")]))
            for name, ops in REFUSED:
                out.append((name, ops, alter(c, name, ops), overrides(c, "g1")))  # refused: g1 unchanged
            for name, ops, *validate in [
                ("g1", [(LOCK, SET, " 20000 ")]),
                ("g1", [("consumer.heartbeat.interval.ms", SET, "15000"), ("consumer.session.timeout.ms", SET, "45000")]),
                ("g1", [("share.delivery.count.limit", SET, "2"), ("share.auto.offset.reset", SET, "earliest")]),
                ("g2", [("share.delivery.count.limit", DELETE, None)]),
                ("g3", [("share.delivery.count.limit", SET, "3")], True),
                ("p1", [("streams.num.warmup.replicas", SET, "1"), ("streams.acceptable.recovery.lag", SET, "5"),
                        ("consumer.assignor.offload.enable", SET, "true"),
                        ("share.auto.offset.reset", SET, "by_duration:PT1H")]),
                ("p2", [("share.session.timeout.ms", SET, "50000")]),
                ("p2", [("share.heartbeat.interval.ms", SET, "15000")]),
                ("p2", [("share.session.timeout.ms", DELETE, None)]),
            ]:
                out.append((name, alter(c, name, ops, *validate)))
            for name, configs in [("g4", [("share.delivery.count.limit", "4")]), ("g4", [("foo", "4")])]:
                out.append(c.request(ALTER_CONFIGS, 2, {"validate_only": False, "resources": [
                    {"resource_type": GROUP, "resource_name": name,
                     "configs": [{"name": k, "value": v} for k, v in configs]}]})["responses"])
            for name in ("g1", "g2", "g3", "g4", "p1", "p2", ""):
                out.append(describe(c, name))
            out.append(describe(c, "g1", version=1))
            out.append(describe(c, "p1", keys=["streams.num.warmup.replicas", "share.isolation.level", "nope"]))
            listed = c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})
            out.append(listed)
            out.append([r for r in c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": []})["config_resources"]
                        if r["resource_type"] == GROUP])
            return out

    same_on_both(targets, scenario)


def test_delete_groups_keeps_the_group_configs_as_kafka_does(targets) -> None:
    def scenario(c: WireClient, bootstrap: str) -> list:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"groupcfg-{int(time.time() * 1000)}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dg1", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        consumer.close()
        with c:
            out: list[Any] = [alter(c, "dg1", [("share.delivery.count.limit", SET, "3")])]
            admin.delete_consumer_groups(["dg1"])["dg1"].result()
            out.append(c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})["config_resources"])
            out.append(overrides(c, "dg1"))
            return out

    assert same_on_both(targets, scenario)[-1] == [("share.delivery.count.limit", "3")]


def test_delete_groups_of_a_share_group_keeps_its_configs_as_kafka_does(targets) -> None:
    group, topic = f"sdel-{int(time.time() * 1000)}", f"sdel-topic-{int(time.time() * 1000)}"

    def scenario(c: WireClient, bootstrap: str) -> list:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
        with c:
            deadline = time.monotonic() + 30
            while c.request(10, 1, {"key": group, "key_type": 0})["error_code"] != 0:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            join: dict = {"error_code": -1}
            while join["error_code"] != 0 and time.monotonic() < deadline:
                join = c.request(76, 1, {"group_id": group, "member_id": "member-1", "member_epoch": 0,
                                         "rack_id": None, "subscribed_topic_names": [topic]})
                time.sleep(0.2)
            leave = c.request(76, 1, {"group_id": group, "member_id": "member-1", "member_epoch": -1, "rack_id": None,
                                      "subscribed_topic_names": None})
            out: list[Any] = [join["error_code"], leave["error_code"],
                              alter(c, group, [("share.delivery.count.limit", SET, "3")])]
            out.append(c.request(42, 2, {"groups_names": [group]})["results"])
            out.append(overrides(c, group))
            return out

    assert same_on_both(targets, scenario)[-1] == [("share.delivery.count.limit", "3")]
