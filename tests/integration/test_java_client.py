"""Kafka's Java client (3.9.1, via the odradek-driver JVM) against a real Apache Kafka and against Odradek.

Each test runs once per target. Against Odradek, a test whose APIs the daemon does not advertise
fails naming them (Target.require); everything else must behave exactly as on real Kafka.
One driver JVM per target per module keeps JVM start-ups to two.
"""

from __future__ import annotations

import time

import pytest

from tests.support.java_tools import DriverError, JavaDriver
from tests.support.real_kafka import (
    CLASSIC_GROUP,
    CONSUMER_GROUP,
    FETCH,
    KEEP_RECORDS,
    PRODUCE,
    TARGETS,
    open_target,
    unique,
)


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


@pytest.fixture(scope="module")
def driver(target):
    with JavaDriver(target.bootstrap) as d:
        yield d


def new_topic(target, driver, partitions: int = 1, configs: dict | None = None) -> str:
    target.require("CreateTopics", "Metadata")
    name = unique("java")
    driver.admin("create_topic", topic=name, partitions=partitions, configs={**KEEP_RECORDS, **(configs or {})})
    return name


def test_driver_answers_and_reports_unknown_scenarios(driver) -> None:
    assert driver.call("ping") == {"pong": True}
    with pytest.raises(DriverError) as e:
        driver.call("no-such-scenario")
    assert e.value.error_class == "IllegalArgumentException"


def test_admin_topic_lifecycle(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    assert topic in driver.admin("list_topics")
    described = driver.admin("describe_topics", topics=[topic])[topic]
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1] for p in described["partitions"])
    assert described["internal"] is False

    target.require("CreatePartitions")
    driver.admin("create_partitions", topic=topic, total=4)
    described = driver.admin("describe_topics", topics=[topic])[topic]
    assert len(described["partitions"]) == 4

    target.require("DeleteTopics")
    driver.admin("delete_topic", topic=topic)
    assert topic not in driver.admin("list_topics")


def test_admin_errors_are_kafkas_exceptions(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    with pytest.raises(DriverError) as e:
        driver.admin("create_topic", topic=topic, partitions=1)
    assert e.value.error_class == "TopicExistsException"
    with pytest.raises(DriverError) as e:
        driver.admin("describe_topics", topics=[unique("missing")])
    assert e.value.error_class == "UnknownTopicOrPartitionException"
    target.require("CreatePartitions")
    with pytest.raises(DriverError) as e:
        driver.admin("create_partitions", topic=topic, total=1)
    assert e.value.error_class == "InvalidPartitionsException"
    with pytest.raises(DriverError) as e:
        driver.admin("create_topic", topic="bad/name", partitions=1)
    assert e.value.error_class == "InvalidTopicException"
    # nothing was lost by the failed calls
    assert len(driver.admin("describe_topics", topics=[topic])[topic]["partitions"]) == 2


def test_describe_cluster(target, driver) -> None:
    target.require("DescribeCluster")
    cluster = driver.admin("describe_cluster")
    assert cluster["cluster_id"]
    assert [n["id"] for n in cluster["nodes"]] == [1]
    assert cluster["nodes"][0]["port"] == target.port


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_then_assign_consume_exact(target, driver, compression) -> None:
    topic = new_topic(target, driver, partitions=3)
    target.require(*PRODUCE, *FETCH)
    sent = driver.call("produce", topic=topic, count=300, key_prefix="k", key_mod=17, headers=True,
                       compression=compression, idempotent=True)
    assert sent["sent"] == 300
    # Each partition's offsets are dense from 0.
    for p, s in sent["partitions"].items():
        assert (s["first"], s["last"]) == (0, s["count"] - 1), (p, s)
    got = driver.call("consume_assign", topic=topic, seek="earliest", max_records=300, timeout_ms=20000)
    assert got["count"] == 300
    by_value = {r["value"]: r for r in got["records"]}
    assert set(by_value) == {f"v{i}" for i in range(300)}
    for i in range(300):
        r = by_value[f"v{i}"]
        assert r["key"] == f"k{i % 17}"
        assert r["headers"] == [["seq", str(i)], ["src", "driver"]]
    # Same key → same partition, and per-partition order is send order.
    for p in range(3):
        seq = [int(r["value"][1:]) for r in got["records"] if r["partition"] == p]
        assert seq == sorted(seq)
    assert {int(p): n for p, n in got["positions"].items()} == {
        int(p): s["count"] for p, s in sent["partitions"].items()} | {
        p: 0 for p in range(3) if str(p) not in sent["partitions"]}


def test_null_keys_values_and_explicit_partition_and_timestamps(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    target.require(*PRODUCE, *FETCH)
    records = [
        {"key": None, "value": "no-key", "partition": 1, "timestamp": 1_700_000_000_000},
        {"key": "tombstone", "value": None, "partition": 1, "timestamp": 1_700_000_000_001},
        {"key": "h", "value": "x", "partition": 1, "timestamp": 1_700_000_000_002, "headers": {"a": "1", "b": None}},
    ]
    driver.call("produce", topic=topic, records=records)
    got = driver.call("consume_assign", topic=topic, partitions=[1], seek="earliest", max_records=3)
    assert [(r["key"], r["value"], r["offset"], r["timestamp"]) for r in got["records"]] == [
        (None, "no-key", 0, 1_700_000_000_000), ("tombstone", None, 1, 1_700_000_000_001),
        ("h", "x", 2, 1_700_000_000_002)]
    assert got["records"][2]["headers"] == [["a", "1"], ["b", None]]
    assert all(r["timestamp_type"] == "CreateTime" for r in got["records"])


def test_list_offsets_earliest_latest_timestamp_and_seek(target, driver) -> None:
    topic = new_topic(target, driver, partitions=1)
    target.require(*PRODUCE, *FETCH)
    base = 1_600_000_000_000
    driver.call("produce", topic=topic, count=50, timestamp=base)
    assert driver.admin("list_offsets", topic=topic, spec="earliest")["0"]["offset"] == 0
    assert driver.admin("list_offsets", topic=topic, spec="latest")["0"]["offset"] == 50
    at = driver.admin("list_offsets", topic=topic, spec={"timestamp": base + 20})["0"]
    assert (at["offset"], at["timestamp"]) == (20, base + 20)
    # A timestamp after every record → no offset (-1), as Kafka answers.
    assert driver.admin("list_offsets", topic=topic, spec={"timestamp": base + 10_000})["0"]["offset"] == -1
    mx = driver.admin("list_offsets", topic=topic, spec="max_timestamp")["0"]
    assert (mx["offset"], mx["timestamp"]) == (49, base + 49)
    got = driver.call("consume_assign", topic=topic, seek={"0": 45}, max_records=5)
    assert [r["offset"] for r in got["records"]] == [45, 46, 47, 48, 49]


def test_delete_records_moves_log_start(target, driver) -> None:
    topic = new_topic(target, driver, partitions=1)
    target.require(*PRODUCE, *FETCH, "DeleteRecords")
    driver.call("produce", topic=topic, count=20)
    assert driver.admin("delete_records", topic=topic, before={"0": 12}) == {"0": 12}
    assert driver.admin("list_offsets", topic=topic, spec="earliest")["0"]["offset"] == 12
    got = driver.call("consume_assign", topic=topic, seek="earliest", max_records=8)
    assert [r["value"] for r in got["records"]] == [f"v{i}" for i in range(12, 20)]
    with pytest.raises(DriverError) as e:
        driver.admin("delete_records", topic=topic, before={"0": 21})
    assert e.value.error_class == "OffsetOutOfRangeException"
    assert driver.admin("list_offsets", topic=topic, spec="latest")["0"]["offset"] == 20


def test_classic_group_subscribe_commit_and_resume(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    target.require(*PRODUCE, *FETCH, *CLASSIC_GROUP)
    group = unique("g")
    driver.call("produce", topic=topic, count=40, key_prefix="k")
    first = driver.call("consume_subscribe", topic=topic, group=group, max_records=40, timeout_ms=30000)
    assert first["count"] == 40 and first["assignment"] == [0, 1]
    assert first["committed"] == first["positions"]
    driver.call("produce", topic=topic, count=10, value_prefix="late", key_prefix="k")
    second = driver.call("consume_subscribe", topic=topic, group=group, max_records=10, timeout_ms=30000)
    assert sorted(r["value"] for r in second["records"]) == sorted(f"late{i}" for i in range(10))


def test_consumer_group_protocol_kip848(target, driver) -> None:
    topic = new_topic(target, driver, partitions=2)
    target.require(*PRODUCE, *FETCH, *CONSUMER_GROUP)
    group = unique("g848")
    driver.call("produce", topic=topic, count=30, key_prefix="k")
    got = driver.call("consume_subscribe", topic=topic, group=group, group_protocol="consumer",
                      max_records=30, timeout_ms=30000)
    assert got["count"] == 30
    assert sum(got["committed"].values()) == 30


def test_configs_describe_and_incremental_alter(target, driver) -> None:
    topic = new_topic(target, driver, configs={"retention.ms": "3600000"})
    target.require("DescribeConfigs", "IncrementalAlterConfigs")
    cfg = driver.admin("describe_configs", resource_type="topic", name=topic)
    assert cfg["retention.ms"]["value"] == "3600000"
    assert cfg["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert cfg["cleanup.policy"]["value"] == "delete"
    driver.admin("incremental_alter_configs", resource_type="topic", name=topic,
                 ops=[{"name": "retention.ms", "op": "delete"}, {"name": "max.message.bytes", "value": "200000"}])
    cfg = driver.admin("describe_configs", resource_type="topic", name=topic)
    assert cfg["retention.ms"]["source"] != "DYNAMIC_TOPIC_CONFIG"
    assert cfg["max.message.bytes"]["value"] == "200000"
    with pytest.raises(DriverError) as e:
        driver.admin("incremental_alter_configs", resource_type="topic", name=topic,
                     ops=[{"name": "no.such.config", "value": "1"}])
    assert e.value.error_class == "InvalidConfigurationException"
    assert driver.admin("describe_configs", resource_type="topic", name=topic)["max.message.bytes"]["value"] == "200000"


def test_describe_log_dirs_sizes(target, driver) -> None:
    topic = new_topic(target, driver)
    target.require(*PRODUCE, "DescribeLogDirs")
    driver.call("produce", topic=topic, count=10, value_size=100)
    deadline = time.monotonic() + 10
    while True:
        dirs = driver.admin("describe_log_dirs", broker=1)
        sizes = [d["replicas"].get(f"{topic}-0") for d in dirs.values() if d["error"] is None]
        if any(sizes) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert any(s and s >= 10 * 100 for s in sizes), dirs
