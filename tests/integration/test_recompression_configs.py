"""compression.type and compression.<codec>.level as configs: topic overrides, the broker-level default
(static and dynamic), changes that apply to the next append, and values refused as Kafka refuses them.

Kafka's rules: a topic without its own compression.type takes the broker's (``producer`` unless set,
per-broker dynamic > cluster-wide dynamic > server.properties); IncrementalAlterConfigs changes apply to
appends made after it, not to stored batches; the internal topics are created with their own
compression.type (``__consumer_offsets``: producer), so a broker-level codec leaves them as written;
an invalid value is INVALID_CONFIG for a topic (CreateTopics, IncrementalAlterConfigs) and
INVALID_REQUEST for a broker resource (checked against a real Kafka broker: the invalid-values test
runs on both), and changes nothing. Bad records sent to a recompressing topic get the answer they get
anywhere, through the rebuild off the handler loop, and nothing is appended.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.records import Record, RecordBatch, encode_batch, iter_batches
from tests.support.bad_batches import catalogue
from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import DriverError, JavaDriver
from tests.support.real_kafka import TARGETS, open_target, unique
from tests.support.wire import WireClient

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
INVALID_CONFIG, INVALID_REQUEST = 40, 42
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC = 2, 3, 4
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("recompression-configs"))
    b.start()
    yield b
    b.kill()


def new_topic(broker: Any, **configs: str) -> str:
    name = f"rcc-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                              "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                 "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp
    return name


def produce(broker: Any, topic: str, codec: int = LZ4, tag: str = "x") -> dict:
    batch = encode_batch([Record(timestamp=1, key=b"k%d" % i, value=f"{tag} {i} ".encode() * 50) for i in range(20)],
                         compression=codec)
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp["responses"][0]["partition_responses"][0]


def stored(broker: Any, topic: str) -> list[RecordBatch]:
    d = Path(broker.data_dir) / "logs" / f"{topic}-0"
    raw = b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
    return list(iter_batches(raw, allow_partial=False))


def incremental(broker: Any, rtype: int, name: str, ops: list[tuple[str, int, str | None]]) -> dict:
    with WireClient(broker.host, broker.port) as c:
        (resp,) = c.request(44, 1, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False})["responses"]
    return resp


def described(broker: Any, rtype: int, name: str, key: str) -> dict:
    with WireClient(broker.host, broker.port) as c:
        (result,) = c.request(32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                                     "configuration_keys": [key]}],
                                      "include_synonyms": False, "include_documentation": False})["results"]
    assert result["error_code"] == 0, result
    (entry,) = result["configs"]
    return entry


def test_topic_config_changes_apply_to_the_next_append(shared) -> None:
    topic = new_topic(shared, **{"compression.type": "zstd"})
    assert produce(shared, topic)["error_code"] == 0
    assert incremental(shared, TOPIC, topic, [("compression.type", SET, "gzip")])["error_code"] == 0
    assert produce(shared, topic)["error_code"] == 0
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("compression.type", "uncompressed", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    assert produce(shared, topic)["error_code"] == 0
    # Without its own value the topic takes the broker's: producer, the producer's lz4.
    assert incremental(shared, TOPIC, topic, [("compression.type", DELETE, None)])["error_code"] == 0
    assert produce(shared, topic)["error_code"] == 0
    assert [b.compression for b in stored(shared, topic)] == [ZSTD, GZIP, NONE, LZ4]


def test_levels_apply_to_the_next_append(shared) -> None:
    topic = new_topic(shared, **{"compression.type": "zstd", "compression.zstd.level": "1"})
    produce(shared, topic, NONE, "same")
    assert incremental(shared, TOPIC, topic, [("compression.zstd.level", SET, "19")])["error_code"] == 0
    produce(shared, topic, NONE, "same")
    fast, small = stored(shared, topic)
    assert fast.compression == small.compression == ZSTD
    assert [r.value for r in fast.records] == [r.value for r in small.records]
    assert small.size < fast.size


@pytest.fixture
def reset_broker_configs(shared) -> Iterator[None]:
    yield
    for name in ("", "1"):
        with WireClient(shared.host, shared.port) as c:
            (resp,) = c.request(33, 2, {"resources": [{"resource_type": BROKER, "resource_name": name, "configs": []}],
                                        "validate_only": False})["responses"]
        assert resp["error_code"] == 0, resp


def test_the_broker_default_applies_to_topics_without_their_own(shared, reset_broker_configs) -> None:
    plain = new_topic(shared)
    own = new_topic(shared, **{"compression.type": "producer"})
    assert incremental(shared, BROKER, "", [("compression.type", SET, "snappy")])["error_code"] == 0
    entry = described(shared, TOPIC, plain, "compression.type")
    assert (entry["value"], entry["config_source"]) == ("snappy", DYNAMIC_DEFAULT)
    produce(shared, plain)
    produce(shared, own)
    assert incremental(shared, BROKER, "1", [("compression.type", SET, "gzip")])["error_code"] == 0
    produce(shared, plain)  # the per-broker value wins over the cluster-wide one
    assert incremental(shared, BROKER, "1", [("compression.type", DELETE, None)])["error_code"] == 0
    assert incremental(shared, BROKER, "", [("compression.type", DELETE, None)])["error_code"] == 0
    produce(shared, plain)
    assert [b.compression for b in stored(shared, plain)] == [SNAPPY, GZIP, LZ4]
    assert [b.compression for b in stored(shared, own)] == [LZ4]


def test_broker_level_compression_type_in_server_properties(broker_factory) -> None:
    broker = broker_factory({"compression.type": "zstd", "compression.zstd.level": "7"})
    assert "compression.type" not in "\n".join(line for line in broker.log_text().splitlines()
                                               if "no effect" in line)
    topic = new_topic(broker)
    entry = described(broker, TOPIC, topic, "compression.type")
    assert (entry["value"], entry["config_source"]) == ("zstd", STATIC)
    assert produce(broker, topic)["error_code"] == 0
    assert [b.compression for b in stored(broker, topic)] == [ZSTD]
    # A group's commits: __consumer_offsets was made with compression.type=producer, as Kafka makes it,
    # so the coordinator's uncompressed batches are stored as written.
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rcc-group", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 7
    c.close()
    commits = []
    for d in sorted((Path(broker.data_dir) / "logs").glob("__consumer_offsets-*")):
        commits.extend(iter_batches(b"".join(f.read_bytes() for f in sorted(d.glob("*.log"))), allow_partial=False))
    assert commits and {b.compression for b in commits} == {NONE}


def test_bad_records_to_a_recompressing_topic_get_kafkas_answer_and_nothing_is_appended(shared) -> None:
    for topic_codec, codec in (("zstd", NONE), ("zstd", LZ4), ("zstd", ZSTD), ("uncompressed", GZIP)):
        topic = new_topic(shared, **{"compression.type": topic_codec})
        assert produce(shared, topic, codec, "before")["error_code"] == 0
        for bad in catalogue(codec):
            with WireClient(shared.host, shared.port) as c:
                resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": bad.batch}]}]})
            answer = resp["responses"][0]["partition_responses"][0]
            assert (bad.name, answer["error_code"]) == (bad.name, bad.code)
            assert bad.message in (answer["error_message"] or ""), (bad.name, answer["error_message"])
            assert [e["batch_index"] for e in answer["record_errors"]] == list(bad.record_errors), bad.name
            assert answer["base_offset"] == -1
        assert produce(shared, topic, codec, "after")["base_offset"] == 20
        batches = stored(shared, topic)
        assert [(b.base_offset, b.compression) for b in batches] == [(0, ZSTD if topic_codec == "zstd" else NONE),
                                                                    (20, ZSTD if topic_codec == "zstd" else NONE)]


# --- invalid values, on a real Kafka broker and on Odradek ----------------------------------------------


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory) -> Any:
    with open_target(request.param, tmp_path_factory.mktemp(f"rcc-{request.param}")) as t:
        yield t


BAD_VALUES = [("compression.type", "brotli"), ("compression.type", "ZSTD"), ("compression.zstd.level", "23"),
              ("compression.zstd.level", "-131073"), ("compression.gzip.level", "0"), ("compression.gzip.level", "10"),
              ("compression.lz4.level", "0"), ("compression.lz4.level", "18")]


def test_invalid_values_are_refused_as_kafka_refuses_them(target) -> None:
    target.require("CreateTopics", "Metadata", "IncrementalAlterConfigs", "DescribeConfigs")
    with JavaDriver(target.bootstrap) as driver:
        topic = unique("rcc-valid")
        driver.admin("create_topic", topic=topic, partitions=1, configs={"compression.type": "zstd"})
        broker_before = {k: v["value"] for k, v in driver.admin("describe_configs", resource_type="broker",
                                                                 name="1").items() if k.startswith("compression")}
        for key, value in BAD_VALUES:
            bad = unique("rcc-bad")
            with pytest.raises(DriverError) as exc:
                driver.admin("create_topic", topic=bad, partitions=1, configs={key: value})
            assert exc.value.error_class == "InvalidConfigurationException", (key, value)
            assert bad not in driver.admin("list_topics")
            with pytest.raises(DriverError) as exc:
                driver.admin("incremental_alter_configs", resource_type="topic", name=topic,
                             ops=[{"name": key, "value": value, "op": "set"}])
            assert exc.value.error_class == "InvalidConfigurationException", (key, value)
            for broker in ("", "1"):
                with pytest.raises(DriverError) as exc:
                    driver.admin("incremental_alter_configs", resource_type="broker", name=broker,
                                 ops=[{"name": key, "value": value, "op": "set"}])
                assert exc.value.error_class == "InvalidRequestException", (key, value, broker)
        config = driver.admin("describe_configs", resource_type="topic", name=topic)
        assert config["compression.type"]["value"] == "zstd"
        assert [config[k]["value"] for k in ("compression.gzip.level", "compression.lz4.level",
                                             "compression.zstd.level")] == ["-1", "9", "3"]
        assert {k: v["value"] for k, v in driver.admin("describe_configs", resource_type="broker", name="1").items()
                if k.startswith("compression")} == broker_before
