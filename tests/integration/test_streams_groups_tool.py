"""Kafka 4.4's kafka-streams-groups against Kafka 4.4 and Odradek alike (the A/B harness), on a live
group of two wire members (tests/support/streams_wire.py; one static): --list (with --state),
--describe --members --verbose, --describe --state --verbose, then with the members gone
--reset-offsets (--dry-run, --execute, which also deletes the group's internal topics),
--describe --offsets and --delete. Each step's output, member and process ids replaced by names and
runs of spaces by one, and its exit code must be the same on both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.support.config_requests import set_group_configs
from tests.support.java_tools import run_tool
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.streams_wire import (
    StreamsMember,
    converge,
    describe,
    ready_coordinator,
    word_count_topology,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def topic_exists(c: WireClient, topic: str) -> bool:
    r = c.request(3, 12, {"topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
                          "include_cluster_authorized_operations": False,
                          "include_topic_authorized_operations": False})
    return r["topics"][0]["error_code"] == 0


def scenario(target: Target, app: str) -> list[tuple[str, int, str]]:
    source = f"{app}-words"
    create_topic(target, source, 2)
    producer = Producer({"bootstrap.servers": target.bootstrap})
    for i in range(5):
        producer.produce(source, value=b"w", partition=i % 2)
    assert producer.flush(30) == 0
    topology = word_count_topology(app, source)
    names: dict[str, str] = {app: "APP", source: "SOURCE", f"{target.host}:{target.port}": "BROKER"}
    out: list[tuple[str, int, str]] = []

    def tool(step: str, *args: str) -> None:
        proc = run_tool("kafka-streams-groups", ["--bootstrap-server", target.bootstrap, *args], check=False)
        text = proc.stdout + proc.stderr
        for raw, name in sorted(names.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(raw, name)
        lines = [re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip()]
        # Another test's groups may share Kafka's broker: --list keeps this one's lines.
        if step.startswith("list"):
            lines = [line for line in lines if "APP" in line or line.startswith("GROUP")]
        # Kafka lists the members in its hash map's order, which the random member ids decide.
        # and the reset's partitions in its map's order too.
        if step.startswith(("describe-members", "reset")):
            lines = lines[:1] + sorted(lines[1:])
        out.append((step, proc.returncode, "\n".join(lines)))

    with WireClient(target.host, target.port) as c:
        set_group_configs(c, app, {"streams.initial.rebalance.delay.ms": "0"})
        ready_coordinator(c, app)
        a = StreamsMember(c, app, topology, instance_id="instance-a")
        b = StreamsMember(c, app, topology)
        names.update({a.member_id: "MEMBER-A", b.member_id: "MEMBER-B", a.process_id: "PROCESS-A",
                      b.process_id: "PROCESS-B"})
        epochs = []
        for step in (a.join, lambda: converge([a], 4), b.join, lambda: converge([a, b], 4)):
            step()
            epochs.append(describe(c, app)["group_epoch"])
        out.append(("group epochs", 0, repr(epochs)))
        # The members commit their positions on the input (as Kafka Streams does): 1 and 2.
        r = c.request(8, 9, {"group_id": app, "generation_id_or_member_epoch": a.epoch, "member_id": a.member_id,
                             "group_instance_id": "instance-a", "topics": [{"name": source, "partitions": [
                                 {"partition_index": p, "committed_offset": p + 1, "committed_leader_epoch": -1,
                                  "committed_metadata": ""} for p in (0, 1)]}]})
        out.append(("offset commit", 0, repr([[p["error_code"] for p in t["partitions"]] for t in r["topics"]])))
        tool("list", "--list")
        tool("list-state", "--list", "--state")
        tool("describe-members", "--describe", "--group", app, "--members", "--verbose")
        tool("describe-state", "--describe", "--group", app, "--state", "--verbose")
        tool("reset-while-active", "--reset-offsets", "--group", app, "--all-input-topics", "--to-latest",
             "--dry-run")
        tool("delete-while-active", "--delete", "--group", app)
        a.leave()
        b.leave()
        tool("reset-dry-run", "--reset-offsets", "--group", app, "--all-input-topics", "--to-latest", "--dry-run")
        tool("reset-execute", "--reset-offsets", "--group", app, "--input-topic", f"{source}:1", "--to-offset", "2",
             "--execute")
        out.append(("internal topics after reset", 0, repr([topic_exists(c, f"{app}-counts-{kind}")
                                                             for kind in ("repartition", "changelog")])))
        tool("describe-offsets", "--describe", "--group", app, "--offsets")
        tool("delete", "--delete", "--group", app)
        tool("list-after-delete", "--list")
        tool("describe-after-delete", "--describe", "--group", app)
    return out


def test_kafka_streams_groups_tool_gives_kafkas_answers(targets) -> None:
    results = {name: scenario(targets[name], unique("tool")) for name in TARGETS}
    for step, rc, text in results["kafka"]:
        print(f"--- {step} (exit {rc})\n{text}")
    for ours, kafkas in zip(results["odradek"], results["kafka"], strict=True):
        assert ours == kafkas, f"\nodradek: {ours}\nkafka:   {kafkas}"
