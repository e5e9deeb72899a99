"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against the real daemon.

Raw-socket requests check Kafka's exact semantics (values, sources, synonym order, error codes and
messages, and that a rejected change changes nothing); confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient show that real clients work. Changes are checked to persist across
a restart (the controller's metadata log).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
INVALID_REQUEST, INVALID_CONFIG, UNKNOWN_TOPIC, INVALID_TOPIC = 42, 40, 3, 17

_names = itertools.count()


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[BrokerProcess]:
    """One broker for the tests that only touch their own topics (and undo broker-level changes)."""
    b = BrokerProcess(tmp_path_factory.mktemp("admin-configs"), overrides={"log.segment.bytes": "1048576"})
    b.start()
    yield b
    b.kill()


def client(b: BrokerProcess) -> WireClient:
    return WireClient(b.host, b.port)


def new_topic(b: BrokerProcess, configs: dict[str, str] | None = None) -> str:
    name = f"cfg-topic-{next(_names)}"
    with client(b) as c:
        body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout_ms": 5000, "validate_only": False}
        assert c.request(19, 7, body)["topics"][0]["error_code"] == 0
    return name


def describe(b: BrokerProcess, resources: list[tuple[int, str, list[str] | None]], version: int = 4,
             synonyms: bool = True, docs: bool = False) -> list[dict]:
    with client(b) as c:
        body = {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": k}
                              for t, n, k in resources],
                "include_synonyms": synonyms, "include_documentation": docs}
        return c.request(32, version, body)["results"]


def entries(b: BrokerProcess, rtype: int, name: str, keys: list[str] | None = None, **kw) -> dict[str, dict]:
    (result,) = describe(b, [(rtype, name, keys)], **kw)
    assert result["error_code"] == 0, result
    return {e["name"]: e for e in result["configs"]}


def overrides(b: BrokerProcess, topic: str) -> dict[str, str]:
    """The topic's TOPIC_CONFIG entries: what AlterConfigs has stored."""
    return {k: e["value"] for k, e in entries(b, TOPIC, topic).items() if e["config_source"] == TOPIC_CONFIG}


def dynamic_broker_state(b: BrokerProcess) -> tuple[dict, dict]:
    cluster = {k: e["value"] for k, e in entries(b, BROKER, "").items()}
    node = {k: (e["value"], e["config_source"]) for k, e in entries(b, BROKER, "1").items()
            if e["config_source"] == DYNAMIC_BROKER}
    return cluster, node


def incremental(b: BrokerProcess, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                validate_only: bool = False, version: int = 1) -> list[dict]:
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
                          for t, n, ops in resources],
            "validate_only": validate_only}
    with client(b) as c:
        return c.request(44, version, body)["responses"]


def legacy(b: BrokerProcess, resources: list[tuple[int, str, dict[str, str | None]]],
           validate_only: bool = False, version: int = 2) -> list[dict]:
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "value": v} for k, v in cfg.items()]}
                          for t, n, cfg in resources],
            "validate_only": validate_only}
    with client(b) as c:
        return c.request(33, version, body)["responses"]


def syn(entry: dict) -> list[tuple[str, str | None, int]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


@pytest.fixture
def clean_broker_configs(shared: BrokerProcess) -> Iterator[None]:
    yield
    for name in ("", "1"):
        current = entries(shared, BROKER, name)
        keys = [k for k, e in current.items() if e["config_source"] in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)]
        if name == "" or keys:
            legacy(shared, [(BROKER, name, {})])


# ---------------------------------------------------------------------------------------------------
# DescribeConfigs


def test_topic_defaults_with_kafkas_sources_synonyms_types_and_docs(shared) -> None:
    topic = new_topic(shared)
    got = entries(shared, TOPIC, topic, docs=True)
    # Kafka's dropWhile: log.retention.ms has no default and log.retention.hours is dropped.
    assert got["retention.ms"]["value"] == "604800000"
    assert got["retention.ms"]["config_source"] == DEFAULT and syn(got["retention.ms"]) == []
    # A static broker value comes first, then the broker key's default.
    assert got["segment.bytes"]["value"] == "1048576" and got["segment.bytes"]["config_source"] == STATIC
    assert syn(got["segment.bytes"]) == [("log.segment.bytes", "1048576", STATIC),
                                         ("log.segment.bytes", "1073741824", DEFAULT)]
    assert syn(got["cleanup.policy"]) == [("log.cleanup.policy", "delete", DEFAULT)]
    assert got["cleanup.policy"]["config_type"] == 7 and got["retention.ms"]["config_type"] == 5
    assert got["min.cleanable.dirty.ratio"]["value"] == "0.5" and got["min.cleanable.dirty.ratio"]["config_type"] == 6
    assert all(not e["read_only"] and not e["is_sensitive"] for e in got.values())
    assert got["retention.ms"]["documentation"]


def test_topic_override_is_first_synonym_and_keys_filter(shared) -> None:
    topic = new_topic(shared, {"retention.ms": "1000"})
    got = entries(shared, TOPIC, topic, ["retention.ms", "no.such.key"])
    assert list(got) == ["retention.ms"]
    assert got["retention.ms"]["value"] == "1000" and got["retention.ms"]["config_source"] == TOPIC_CONFIG
    assert syn(got["retention.ms"]) == [("retention.ms", "1000", TOPIC_CONFIG)]
    # Empty key list = all keys, like null.
    assert len(entries(shared, TOPIC, topic, [])) == len(entries(shared, TOPIC, topic, None)) > 30


def test_old_versions_no_synonyms_or_docs(shared) -> None:
    """v1 and v2 (v0, with is_default, was retired by Kafka 4.0, KIP-896: the connection closes,
    tests/integration/test_kafka_4_4_retired_versions.py)."""
    topic = new_topic(shared, {"retention.ms": "1000"})
    v1 = entries(shared, TOPIC, topic, version=1, synonyms=False)
    assert v1["segment.bytes"]["synonyms"] == [] and v1["segment.bytes"]["config_source"] == STATIC
    v2 = entries(shared, TOPIC, topic, version=2, docs=True)
    assert v2["retention.ms"]["documentation"] is None and v2["retention.ms"]["config_type"] == 0


def test_broker_resource_values_sources_read_only(shared) -> None:
    got = entries(shared, BROKER, "1", docs=True)
    assert got["node.id"]["value"] == "1" and got["node.id"]["config_source"] == STATIC
    assert got["node.id"]["read_only"] is True
    assert syn(got["node.id"]) == [("node.id", "1", STATIC), ("node.id", "-1", DEFAULT)]
    assert got["num.io.threads"]["read_only"] is False and got["num.io.threads"]["config_source"] == DEFAULT
    assert got["log.retention.ms"]["value"] is None and syn(got["log.retention.ms"]) == []
    assert syn(got["log.retention.hours"]) == [("log.retention.hours", "168", DEFAULT)]
    assert got["log.cleanup.policy"]["config_type"] == 7 and got["log.cleanup.policy"]["value"] == "delete"
    assert got["log.segment.bytes"]["documentation"]
    assert entries(shared, BROKER, "") == {}  # no cluster-wide dynamic defaults yet


def test_describe_errors(shared) -> None:
    results = describe(shared, [(TOPIC, "no-such-topic", None), (TOPIC, "bad name!", None),
                                (BROKER, "2", None), (BROKER, "one", None), (32, "", None)])
    codes = [(r["error_code"], r["error_message"], r["configs"]) for r in results]
    assert codes[0] == (UNKNOWN_TOPIC, None, [])
    assert codes[1][0] == INVALID_TOPIC and codes[1][1].startswith("Topic name is invalid")
    assert codes[2] == (INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 2", [])
    assert codes[3] == (INVALID_REQUEST, "Broker id must be an integer, but it is: one", [])
    assert codes[4] == (INVALID_REQUEST, "Group name must not be empty", [])  # Kafka 4.4's (a GROUP resource)
    assert [r["resource_name"] for r in results] == ["no-such-topic", "bad name!", "2", "one", ""]


def test_unknown_resource_type_fails_the_whole_request(shared) -> None:
    topic = new_topic(shared)
    results = describe(shared, [(TOPIC, topic, None), (99, "x", None)])
    assert [r["error_code"] for r in results] == [INVALID_REQUEST, INVALID_REQUEST]
    assert all(r["configs"] == [] and "malformed" in r["error_message"] for r in results)


# ---------------------------------------------------------------------------------------------------
# IncrementalAlterConfigs / AlterConfigs on topics


def test_incremental_set_delete_append_subtract_persist_across_restart(broker_factory) -> None:
    b = broker_factory()
    topic = new_topic(b)
    resp = incremental(b, [(TOPIC, topic, [("retention.ms", SET, "60000"), ("cleanup.policy", APPEND, "compact"),
                                           ("segment.ms", SET, "3600000")])])
    assert resp == [{"error_code": 0, "error_message": None, "resource_type": TOPIC, "resource_name": topic}]
    assert overrides(b, topic) == {"retention.ms": "60000", "cleanup.policy": "delete,compact",
                                   "segment.ms": "3600000"}
    incremental(b, [(TOPIC, topic, [("cleanup.policy", SUBTRACT, "delete"), ("segment.ms", DELETE, None)])])
    assert overrides(b, topic) == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert entries(b, TOPIC, topic, ["segment.ms"])["segment.ms"]["value"] == "604800000"
    b.stop()
    b.start()
    assert overrides(b, topic) == {"retention.ms": "60000", "cleanup.policy": "compact"}


def test_incremental_validate_only_changes_nothing(shared) -> None:
    topic = new_topic(shared)
    resp = incremental(shared, [(TOPIC, topic, [("retention.ms", SET, "60000")])], validate_only=True)
    assert resp[0]["error_code"] == 0
    assert overrides(shared, topic) == {}
    resp = incremental(shared, [(TOPIC, topic, [("retention.ms", SET, "bogus")])], validate_only=True)
    assert resp[0]["error_code"] == INVALID_CONFIG


@pytest.mark.parametrize("ops, code, message", [
    ([("retention.ms", APPEND, "5")], INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST."),
    ([("retention.ms", SET, "abc")], INVALID_CONFIG, None),
    ([("retention.ms", SET, "-5")], INVALID_CONFIG, None),
    ([("no.such.config", SET, "1")], INVALID_CONFIG, None),
    ([("cleanup.policy", SET, "shred")], INVALID_CONFIG, None),
    ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], INVALID_REQUEST,
     "Error due to duplicate config keys"),
    ([("retention.ms", SET, None), ("cleanup.policy", APPEND, None)], INVALID_REQUEST,
     "Null value not supported for : retention.ms, cleanup.policy"),
    ([("retention.ms", 7, "1")], INVALID_REQUEST, "Unknown operations type 7"),
])
def test_incremental_topic_errors_change_nothing(shared, ops, code, message) -> None:
    topic = new_topic(shared, {"retention.ms": "1000"})
    # A valid change in the same op list must not be applied either: one resource fails as a whole.
    (resp,) = incremental(shared, [(TOPIC, topic, [("segment.ms", SET, "1000"), *ops])])
    assert resp["error_code"] == code, resp
    if message is not None:
        assert resp["error_message"] == message
    else:
        assert resp["error_message"]
    assert overrides(shared, topic) == {"retention.ms": "1000"}


def test_resource_level_errors_and_other_resources_still_apply(shared) -> None:
    topic = new_topic(shared)
    other = new_topic(shared)
    resp = incremental(shared, [
        (TOPIC, other, [("retention.ms", SET, "1")]),
        (TOPIC, other, [("retention.ms", SET, "2")]),
        (TOPIC, "no-such-topic", [("retention.ms", SET, "1")]),
        (TOPIC, "", [("retention.ms", SET, "1")]),
        (TOPIC, "bad/name", [("retention.ms", SET, "1")]),
        (99, "x", [("a", SET, "1")]),
        (TOPIC, topic, [("retention.ms", SET, "12345")]),
    ])
    got = [(r["resource_name"], r["error_code"], r["error_message"]) for r in resp]
    assert got[0] == (other, INVALID_REQUEST, "Each resource must appear at most once.")
    assert got[1] == (other, INVALID_REQUEST, "Each resource must appear at most once.")
    assert got[2][:2] == ("no-such-topic", UNKNOWN_TOPIC)
    assert got[3] == ("", INVALID_REQUEST, "Default topic resources are not allowed.")
    assert got[4][1] == INVALID_TOPIC
    assert got[5] == ("x", INVALID_REQUEST, "Unknown resource type 99")
    assert got[6] == (topic, 0, None)
    assert overrides(shared, other) == {}
    assert overrides(shared, topic) == {"retention.ms": "12345"}


def test_legacy_alter_configs_replaces_all_overrides(shared) -> None:
    topic = new_topic(shared, {"retention.ms": "1000", "segment.ms": "2000"})
    for version in (0, 1, 2):
        resp = legacy(shared, [(TOPIC, topic, {"cleanup.policy": "compact", "retention.bytes": str(version)})],
                      version=version)
        assert resp[0]["error_code"] == 0
        assert overrides(shared, topic) == {"cleanup.policy": "compact", "retention.bytes": str(version)}
    assert legacy(shared, [(TOPIC, topic, {})])[0]["error_code"] == 0
    assert overrides(shared, topic) == {}


def test_legacy_alter_configs_errors_change_nothing(shared) -> None:
    topic = new_topic(shared, {"retention.ms": "1000"})
    resp = legacy(shared, [(TOPIC, topic, {"retention.ms": "x"})])
    assert resp[0]["error_code"] == INVALID_CONFIG and resp[0]["error_message"]
    resp = legacy(shared, [(TOPIC, topic, {"retention.ms": None, "segment.ms": "5"})])
    assert resp[0] == {"error_code": INVALID_REQUEST, "error_message": "Null value not supported for : retention.ms",
                       "resource_type": TOPIC, "resource_name": topic}
    resp = legacy(shared, [(TOPIC, topic, {"segment.ms": "5"})], validate_only=True)
    assert resp[0]["error_code"] == 0
    resp = legacy(shared, [(8, "1", {"kafka": "DEBUG"})])
    assert resp[0]["error_code"] == INVALID_REQUEST and resp[0]["error_message"] == "Unknown resource type 8"
    assert overrides(shared, topic) == {"retention.ms": "1000"}


# ---------------------------------------------------------------------------------------------------
# Broker (dynamic) configs


def test_dynamic_broker_configs_precedence_and_topic_defaults(shared, clean_broker_configs) -> None:
    topic = new_topic(shared)
    assert incremental(shared, [(BROKER, "", [("log.retention.ms", SET, "7200000")])])[0]["error_code"] == 0
    cluster = entries(shared, BROKER, "")
    assert list(cluster) == ["log.retention.ms"]
    assert cluster["log.retention.ms"]["config_source"] == DYNAMIC_DEFAULT
    assert syn(cluster["log.retention.ms"]) == [("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]
    got = entries(shared, TOPIC, topic, ["retention.ms"])["retention.ms"]
    assert got["value"] == "7200000" and got["config_source"] == DYNAMIC_DEFAULT
    assert syn(got) == [("log.retention.ms", "7200000", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)]

    assert incremental(shared, [(BROKER, "1", [("log.retention.ms", SET, "3600000")])])[0]["error_code"] == 0
    node = entries(shared, BROKER, "1", ["log.retention.ms"])["log.retention.ms"]
    assert node["value"] == "3600000" and node["config_source"] == DYNAMIC_BROKER
    assert syn(node) == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                         ("log.retention.ms", "7200000", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)]
    got = entries(shared, TOPIC, topic, ["retention.ms"])["retention.ms"]
    assert got["value"] == "3600000" and got["config_source"] == DYNAMIC_BROKER
    # Legacy AlterConfigs on the broker replaces its whole dynamic config.
    assert legacy(shared, [(BROKER, "1", {"log.cleanup.policy": "compact"})])[0]["error_code"] == 0
    assert entries(shared, TOPIC, topic, ["retention.ms"])["retention.ms"]["value"] == "7200000"
    got = entries(shared, TOPIC, topic, ["cleanup.policy"])["cleanup.policy"]
    assert got["value"] == "compact" and got["config_source"] == DYNAMIC_BROKER


def test_broker_list_append_and_subtract(shared, clean_broker_configs) -> None:
    resp = incremental(shared, [(BROKER, "1", [("log.cleanup.policy", APPEND, "compact")])])
    assert resp[0]["error_code"] == 0
    assert entries(shared, BROKER, "1", ["log.cleanup.policy"])["log.cleanup.policy"]["value"] == "delete,compact"
    resp = incremental(shared, [(BROKER, "1", [("log.cleanup.policy", SUBTRACT, "delete")])])
    assert resp[0]["error_code"] == 0
    assert entries(shared, BROKER, "1", ["log.cleanup.policy"])["log.cleanup.policy"]["value"] == "compact"


@pytest.mark.parametrize("name, ops, code, message", [
    ("1", [("log.dirs", SET, "/tmp/x")], INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)"),
    ("", [("log.retention.hours", SET, "1")], INVALID_REQUEST,
     "Cannot update these configs dynamically: Set(log.retention.hours)"),
    ("1", [("num.io.threads", SET, "many")], INVALID_REQUEST, None),
    ("1", [("log.retention.ms", SET, "0")], INVALID_REQUEST, None),
    ("", [("listeners", SET, "PLAINTEXT://127.0.0.1:1")], INVALID_REQUEST,
     "Cannot update these configs at default cluster level, broker id must be specified: Set(listeners)"),
    ("1", [("advertised.listeners", SET, "PLAINTEXT://example.com:9")], INVALID_REQUEST,
     "Advertised listeners cannot be altered when using a Raft-based metadata quorum."),
    ("2", [("num.io.threads", SET, "4")], INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2"),
    ("x", [("num.io.threads", SET, "4")], INVALID_REQUEST, "Node id must be an integer, but it is: x"),
    ("1", [("num.io.threads", APPEND, "4")], INVALID_CONFIG,
     "Config value append is not allowed for config key: num.io.threads"),
])
def test_broker_config_errors_change_nothing(shared, clean_broker_configs, name, ops, code, message) -> None:
    assert incremental(shared, [(BROKER, "", [("log.retention.ms", SET, "7200000")])])[0]["error_code"] == 0
    before = dynamic_broker_state(shared)
    (resp,) = incremental(shared, [(BROKER, name, [("log.flush.interval.ms", SET, "1000"), *ops])])
    assert resp["error_code"] == code, resp
    assert resp["error_message"] == message if message is not None else resp["error_message"]
    if all(op == SET for _, op, _ in ops):
        (legacy_resp,) = legacy(shared, [(BROKER, name, {k: v for k, _, v in ops})])
        assert legacy_resp["error_code"] == code, legacy_resp
        assert legacy_resp["error_message"] == message if message is not None else legacy_resp["error_message"]
    assert dynamic_broker_state(shared) == before


# ---------------------------------------------------------------------------------------------------
# Real clients


def test_confluent_admin_describe_alter_incremental(shared, clean_broker_configs) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    topic = new_topic(shared)
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([inc])[inc].result(10)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "86400000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"

    legacy_res = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "3600000"})
    admin.alter_configs([legacy_res])[legacy_res].result(10)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["segment.ms"].value == "3600000" and configs["retention.ms"].value == "604800000"

    broker = ConfigResource(ResourceType.BROKER, "1")
    broker_configs = admin.describe_configs([broker])[broker].result(10)
    assert broker_configs["node.id"].value == "1" and broker_configs["node.id"].is_read_only

    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)])
    from confluent_kafka import KafkaError, KafkaException
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_kafka_python_admin_describe_and_alter(shared) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = new_topic(shared)
    admin = KafkaAdminClient(bootstrap_servers=shared.bootstrap, request_timeout_ms=10000)
    try:
        resp = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "5000"})])
        assert resp == {"topic": {topic: "OK"}}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entry = described["topic"][topic]["retention.ms"]
        assert entry["value"] == "5000" and entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert entry["config_type"] == "LONG"
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        node_id = described["broker"]["1"]["node.id"]
        assert node_id["value"] == "1" and node_id["read_only"] and node_id["config_source"] == "STATIC_BROKER_CONFIG"
        bad = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "x"})])
        assert bad["topic"][topic] != "OK"
    finally:
        admin.close()
    assert overrides(shared, topic) == {"retention.ms": "5000"}


# ---------------------------------------------------------------------------------------------------
# Changes take effect on the broker's logs


def test_retention_change_applies_to_the_running_log(broker_factory) -> None:
    """retention.ms set by IncrementalAlterConfigs reaches the topic's log: old segments go and
    ListOffsets(earliest) moves, without a restart."""
    import time

    from confluent_kafka import Consumer, Producer, TopicPartition

    b = broker_factory({"log.retention.check.interval.ms": "50"})
    topic = new_topic(b, {"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, value=b"x" * 300, key=str(i).encode())
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "retention-probe"})
    try:
        def watermarks() -> tuple[int, int]:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)

        deadline = time.monotonic() + 10
        # Once (of ~10 runs) the high watermark read 14 right after all 20 acks: waited for here
        # because this test is about retention; reported to the lead as a Produce/ListOffsets race.
        while watermarks() != (0, 20):
            assert time.monotonic() < deadline, watermarks()
            time.sleep(0.05)
        time.sleep(0.3)  # several retention checks with the default 7 days: nothing goes
        assert watermarks() == (0, 20)
        assert incremental(b, [(TOPIC, topic, [("retention.ms", SET, "1")])])[0]["error_code"] == 0
        deadline = time.monotonic() + 10
        while watermarks()[0] == 0:
            assert time.monotonic() < deadline, "retention.ms=1 never deleted a segment"
            time.sleep(0.05)
        low, high = watermarks()
        assert 0 < low <= high == 20
    finally:
        consumer.close()
