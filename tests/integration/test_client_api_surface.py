"""The API surface clients see (issue 28's "Done when"): the same client steps against a real Apache Kafka
4.4 and against Odradek, each client through its own recording proxy per broker
(tests/support/recording_proxy.py), and the (api key, version) pairs each client sent must be the same
set on both. A client picks every version from the broker's ApiVersions answer (the highest both know)
and picks which APIs to call from what the broker advertises and answers, so a range Odradek advertises
differently from Kafka, or an answer that sends a client down another path, shows here as a pair sent to
one broker only.

The clients and their steps (run once per broker, in a module fixture; ~30 s in all with Kafka running):

- the Kafka 4.4 Java client and Kafka 4.4's tools: one JVM, tests/support/java/ClientSurface.java (admin:
  create/describe topics, describeCluster, describe/alter configs, listOffsets; an idempotent producer; a
  classic-protocol and a consumer-protocol group consumer; kafka-topics --describe, kafka-consumer-groups
  --describe, kafka-features describe);
- librdkafka 2.16 (confluent-kafka): admin create/describe topics, describe cluster, configs, list offsets,
  describe groups; an idempotent producer; a classic and a consumer-protocol group consumer;
- librdkafka 2.0.2 through Debian's kcat 1.7.1: metadata (-L), produce (-P), consume (-C).

Where a client is expected to see a different surface, the difference is listed in EXPECTED_DIFFERENCES
with its reason, and the test requires exactly that difference (strict: once it goes, the test fails
until the entry goes too).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.real_kafka import KEEP_RECORDS, create_topic, require_toolchain, shared_kafka, unique
from tests.support.recording_proxy import RecordingProxy
from tools.kafka_dist import LOG4J_TOOLS, classpath, java_command, log_config_option, temp_config_file

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TARGETS = ("kafka", "odradek")
CLIENTS = ("java-client", "kafka-tools", "librdkafka-2.16", "kcat-librdkafka-2.0")
COUNT = 10

# client -> {"kafka": pairs only Kafka 4.4 was sent, "odradek": pairs only Odradek was sent}, each pair
# (api key, version) -> why.
EXPECTED_DIFFERENCES: dict[str, dict[str, dict[tuple[int, int], str]]] = {}


def _names() -> dict[int, str]:
    from odradek.protocol.schema_data import MESSAGES

    return {spec["api_key"]: name[: -len("Request")] for name, spec in MESSAGES.items() if spec["type"] == "request"}


def _describe(pairs: set[tuple[int, int]]) -> str:
    names = _names()
    return ", ".join(f"{names.get(k, k)}({k}) v{v}" for k, v in sorted(pairs)) or "nothing"


# --- the clients' steps --------------------------------------------------------------------------------

def _java_steps(runs: list[tuple[str, RecordingProxy, RecordingProxy]]) -> None:
    """The Java client and the tools against every broker in turn: one JVM for all."""
    require_toolchain()
    args = [a for label, client, tools in runs for a in (label, client.endpoint, tools.endpoint)]
    log4j = temp_config_file("odradek-tools-log4j2.properties", LOG4J_TOOLS)
    cmd = java_command(str(SUPPORT / "java" / "ClientSurface.java"), args, classpath("kafka"),
                       ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", log_config_option(log4j)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    assert [line for line in proc.stdout.splitlines() if line.startswith("done ")] == \
        [f"done {label}" for label, _, _ in runs], proc.stdout[-3000:]


def _wait_led(admin, topic: str) -> None:
    """Until the new topic's partition answers ListOffsets (its leader serves it): see real_kafka.wait_until_led."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    deadline = time.monotonic() + 30
    while True:
        try:
            admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})[TopicPartition(topic, 0)].result()
            return
        except Exception:
            assert time.monotonic() < deadline, f"{topic} not led within 30 s"
            time.sleep(0.1)


def _consume(bootstrap: str, topic: str, group: str, protocol: str) -> None:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        conf["heartbeat.interval.ms"] = 200  # a Heartbeat within the second polled below
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < COUNT:
            assert time.monotonic() < deadline, f"{group}: read {seen} of {COUNT} records in 60 s"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen += 1
        end = time.monotonic() + 1
        while time.monotonic() < end:
            consumer.poll(0.1)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _librdkafka_steps(bootstrap: str) -> None:
    from confluent_kafka import Producer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

    topic = unique("surface-rdkafka")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=KEEP_RECORDS)])[topic].result(timeout=30)
    _wait_led(admin, topic)
    admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    admin.describe_cluster().result(timeout=30)
    for future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(COUNT):
        producer.produce(topic, value=f"value-{i}".encode(), key=f"key-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(timeout=30).offset == COUNT
    admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=30)
    admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    groups = [f"{topic}-classic", f"{topic}-consumer"]
    _consume(bootstrap, topic, groups[0], "classic")
    _consume(bootstrap, topic, groups[1], "consumer")
    for future in admin.describe_consumer_groups(groups).values():
        future.result(timeout=30)


def _kcat_steps(bootstrap: str, direct: str) -> None:
    """Metadata, produce and consume through ``bootstrap``; the topic is created at ``direct``, not through
    the proxy (kcat has no admin calls)."""
    topic = unique("surface-kcat")
    from tests.support.real_kafka import Target

    host, port = direct.rsplit(":", 1)
    create_topic(Target("direct", host, int(port), None), topic)  # type: ignore[arg-type]

    def kcat(*args: str, input: str | None = None) -> str:
        proc = subprocess.run(["kcat", "-b", bootstrap, *args], input=input, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, f"kcat {' '.join(args)}: {proc.stderr[-3000:]}"
        return proc.stdout

    assert topic in kcat("-L", "-t", topic)
    kcat("-P", "-t", topic, "-p", "0", "-K:", input="".join(f"key-{i}:value-{i}\n" for i in range(COUNT)))
    out = kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-c", str(COUNT), "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{i} key-{i} value-{i}" for i in range(COUNT)]


# --- the run -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def surfaces(tmp_path_factory) -> Iterator[dict[str, dict[str, set[tuple[int, int]]]]]:
    """client -> broker -> the (api key, version) pairs that client sent that broker."""
    kafka = shared_kafka()
    odradek = BrokerProcess(tmp_path_factory.mktemp("odradek"), overrides={
        "auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"})
    odradek.start()
    proxies = {(client, target): RecordingProxy(broker.host, broker.port).start()
               for target, broker in (("kafka", kafka), ("odradek", odradek)) for client in CLIENTS}
    try:
        _java_steps([(unique(target), proxies["java-client", target], proxies["kafka-tools", target])
                     for target in TARGETS])
        have_kcat = shutil.which("kcat") is not None
        for target, broker in (("kafka", kafka), ("odradek", odradek)):
            _librdkafka_steps(proxies["librdkafka-2.16", target].endpoint)
            if have_kcat:
                _kcat_steps(proxies["kcat-librdkafka-2.0", target].endpoint, f"{broker.host}:{broker.port}")
        for (client, target), proxy in proxies.items():
            assert not proxy.errors, f"{client} -> {target}: answers the proxy could not rewrite: {proxy.errors}"
        yield {client: {target: proxies[client, target].pairs for target in TARGETS} for client in CLIENTS}
    finally:
        for proxy in proxies.values():
            proxy.close()
        odradek.kill()


# What each client's steps must have sent (by api key) on both brokers, so that a proxy a client went
# around, or steps that did nothing, cannot pass for an equal surface.
MUST_SEND = {
    "java-client": {18: "ApiVersions", 3: "Metadata", 19: "CreateTopics", 2: "ListOffsets", 60: "DescribeCluster",
                    32: "DescribeConfigs", 44: "IncrementalAlterConfigs", 22: "InitProducerId", 0: "Produce",
                    1: "Fetch", 10: "FindCoordinator", 11: "JoinGroup", 14: "SyncGroup", 12: "Heartbeat",
                    8: "OffsetCommit", 9: "OffsetFetch", 13: "LeaveGroup", 68: "ConsumerGroupHeartbeat"},
    "kafka-tools": {18: "ApiVersions", 3: "Metadata", 2: "ListOffsets", 9: "OffsetFetch"},
    "librdkafka-2.16": {18: "ApiVersions", 3: "Metadata", 19: "CreateTopics", 2: "ListOffsets",
                        32: "DescribeConfigs", 22: "InitProducerId", 0: "Produce", 1: "Fetch", 10: "FindCoordinator",
                        11: "JoinGroup", 14: "SyncGroup", 12: "Heartbeat", 8: "OffsetCommit", 9: "OffsetFetch",
                        13: "LeaveGroup", 68: "ConsumerGroupHeartbeat"},
    "kcat-librdkafka-2.0": {18: "ApiVersions", 3: "Metadata", 0: "Produce", 1: "Fetch", 2: "ListOffsets"},
}


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sends_the_same_api_versions_to_odradek_as_to_kafka(surfaces, client: str) -> None:
    if client == "kcat-librdkafka-2.0" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian package kcat: kcat 1.7.1 on librdkafka 2.0.2)")
    kafka, odradek = surfaces[client]["kafka"], surfaces[client]["odradek"]
    for target, pairs in (("kafka", kafka), ("odradek", odradek)):
        missing = {key: name for key, name in MUST_SEND[client].items() if key not in {k for k, _ in pairs}}
        assert not missing, f"{client} sent {target} no {', '.join(missing.values())}; it sent {_describe(pairs)}"
    expected = EXPECTED_DIFFERENCES.get(client, {})
    only_kafka, only_odradek = kafka - odradek, odradek - kafka
    assert (only_kafka, only_odradek) == (set(expected.get("kafka", {})), set(expected.get("odradek", {}))), (
        f"{client}: sent only to Kafka 4.4: {_describe(only_kafka)}; only to Odradek: {_describe(only_odradek)} "
        f"(expected: {_describe(set(expected.get('kafka', {})))}; {_describe(set(expected.get('odradek', {})))})")


def test_the_recording_proxy_records_each_request_and_points_answers_at_itself(tmp_path) -> None:
    """The proxy itself, against one Odradek: what a client sends is recorded, and every broker address in
    Metadata, FindCoordinator (v3's top level, v4's list) and DescribeCluster answers is the proxy's."""
    from tests.support.wire import WireClient

    broker = BrokerProcess(tmp_path / "odradek").start()
    proxy = RecordingProxy(broker.host, broker.port).start()
    try:
        with WireClient("127.0.0.1", proxy.port) as c:
            metadata = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
            deadline = time.monotonic() + 30
            while True:  # until the coordinators are loaded (COORDINATOR_NOT_AVAILABLE carries no address)
                v4 = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
                if not any(n["error_code"] for n in v4["coordinators"]):
                    break
                assert time.monotonic() < deadline, v4
                time.sleep(0.1)
            v3 = c.request(10, 3, {"key": "g1", "key_type": 0})
            cluster = c.request(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        me = ("127.0.0.1", proxy.port)
        assert [(b["host"], b["port"]) for b in metadata["brokers"]] == [me]
        assert (v3["host"], v3["port"]) == me
        assert [(n["host"], n["port"]) for n in v4["coordinators"]] == [me, me]
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [me]
        assert proxy.pairs == {(3, 12), (10, 3), (10, 4), (60, 1)} and not proxy.errors
    finally:
        proxy.close()
        broker.kill()
