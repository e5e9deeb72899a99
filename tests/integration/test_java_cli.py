"""Kafka's own CLI tools (4.4.0 main classes, the same code bin/kafka-*.sh runs) against a real Apache
Kafka and against Odradek. Every tool invocation is one JVM launch, so each test does one scenario
end to end with as few launches as it can; against Odradek, a test needing an API it does not
advertise fails naming it (Target.require).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.java_tools import run_tool
from tests.support.real_kafka import (
    CLASSIC_GROUP,
    FETCH,
    PRODUCE,
    TARGETS,
    create_topic,
    open_target,
    require_toolchain,
    unique,
)


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    require_toolchain()
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


def test_kafka_topics_create_describe_and_reject_duplicate(target) -> None:
    target.require("CreateTopics", "Metadata")
    topic = unique("cli")
    b = target.bootstrap
    run_tool("kafka-topics", ["--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
                              "--replication-factor", "1", "--config", "retention.ms=7200000"])
    out = run_tool("kafka-topics", ["--bootstrap-server", b, "--describe", "--topic", topic]).stdout
    assert re.search(rf"Topic: {re.escape(topic)}\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 1", out), out
    assert len(re.findall(r"Partition: \d+\s+Leader: 1\s+Replicas: 1\s+Isr: 1", out)) == 3, out
    dup = run_tool("kafka-topics", ["--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1"],
                   check=False)
    assert dup.returncode != 0
    assert "already exists" in dup.stdout + dup.stderr


def test_console_producer_then_console_consumer_and_get_offsets(target) -> None:
    target.require(*PRODUCE, *FETCH)
    topic = unique("console")
    create_topic(target, topic, partitions=1)
    lines = [f"key{i % 5}:value-{i}" for i in range(25)]
    run_tool("kafka-console-producer", ["--bootstrap-server", target.bootstrap, "--topic", topic,
                                        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
                                        "--command-property", "linger.ms=0"],
             input="\n".join(lines) + "\n")
    out = run_tool("kafka-console-consumer", ["--bootstrap-server", target.bootstrap, "--topic", topic,
                                              "--partition", "0", "--offset", "earliest", "--max-messages", "25",
                                              "--timeout-ms", "20000", "--formatter-property", "print.key=true",
                                              "--formatter-property", "key.separator=:"]).stdout
    # One partition, so the console consumer (assign mode: no group) prints them in send order.
    assert out.split() == lines
    out = run_tool("kafka-get-offsets", ["--bootstrap-server", target.bootstrap, "--topic", topic]).stdout
    assert out.split() == [f"{topic}:0:25"]


def test_delete_records_command(target, tmp_path) -> None:
    target.require(*PRODUCE, *FETCH, "DeleteRecords")
    topic = unique("delrec")
    create_topic(target, topic)
    run_tool("kafka-producer-perf-test", ["--topic", topic, "--num-records", "100", "--record-size", "50",
                                          "--throughput", "-1", "--command-property",
                                          f"bootstrap.servers={target.bootstrap}", "acks=all"])
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 60}]}))
    out = run_tool("kafka-delete-records", ["--bootstrap-server", target.bootstrap,
                                            "--offset-json-file", str(spec)]).stdout
    assert re.search(rf"partition: {re.escape(topic)}-0\s+low_watermark: 60", out), out
    out = run_tool("kafka-get-offsets", ["--bootstrap-server", target.bootstrap, "--topic", topic,
                                         "--time", "earliest"]).stdout
    assert out.split() == [f"{topic}:0:60"]


def test_kafka_configs_alter_and_describe(target) -> None:
    target.require("DescribeConfigs", "IncrementalAlterConfigs")
    topic = unique("cfg")
    create_topic(target, topic)
    b = target.bootstrap
    run_tool("kafka-configs", ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                               "--alter", "--add-config", "retention.ms=12345,max.message.bytes=65536"])
    out = run_tool("kafka-configs", ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                                     "--describe"]).stdout
    assert "retention.ms=12345" in out and "max.message.bytes=65536" in out, out
    bad = run_tool("kafka-configs", ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                                     "--alter", "--add-config", "retention.ms=not-a-number"], check=False)
    assert bad.returncode != 0
    out = run_tool("kafka-configs", ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                                     "--describe"]).stdout
    assert "retention.ms=12345" in out, out


def test_consumer_groups_describe_after_console_consumer(target) -> None:
    target.require(*PRODUCE, *FETCH, *CLASSIC_GROUP, "ListGroups", "DescribeGroups")
    topic, group = unique("grp"), unique("cg")
    create_topic(target, topic, partitions=2)
    run_tool("kafka-producer-perf-test", ["--topic", topic, "--num-records", "40", "--record-size", "20",
                                          "--throughput", "-1", "--command-property",
                                          f"bootstrap.servers={target.bootstrap}"])
    run_tool("kafka-console-consumer", ["--bootstrap-server", target.bootstrap, "--topic", topic, "--group", group,
                                        "--from-beginning", "--max-messages", "40", "--timeout-ms", "20000"])
    out = run_tool("kafka-consumer-groups", ["--bootstrap-server", target.bootstrap, "--describe",
                                             "--group", group]).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert sorted((r[2], r[5]) for r in rows) == [("0", "0"), ("1", "0")], out
    assert sum(int(r[3]) for r in rows) == 40, out


def test_perf_tools_and_end_to_end_latency(target) -> None:
    target.require(*PRODUCE, *FETCH, "FindCoordinator", "OffsetCommit")
    topic = unique("perf")
    create_topic(target, topic)
    out = run_tool("kafka-producer-perf-test", ["--topic", topic, "--num-records", "5000", "--record-size", "100",
                                                "--throughput", "-1", "--command-property",
                                                f"bootstrap.servers={target.bootstrap}", "acks=1"]).stdout
    assert re.search(r"^5000 records sent", out, re.M), out
    out = run_tool("kafka-consumer-perf-test", ["--bootstrap-server", target.bootstrap, "--topic", topic,
                                                "--num-records", "5000", "--timeout", "20000"]).stdout
    # header line then: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    row = out.strip().splitlines()[-1].split(", ")
    assert int(row[4]) == 5000, out
    out = run_tool("kafka-e2e-latency", ["--bootstrap-server", target.bootstrap, "--topic", topic, "--num-records", "200",
                                         "--producer-acks", "all", "--record-size", "64"]).stdout
    assert re.search(r"Avg latency: [\d.]+ ms", out), out
