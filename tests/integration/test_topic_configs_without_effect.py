"""Topic configs Odradek accepts but does not act on are warned about in the broker log, and the
values Kafka refuses are refused with INVALID_CONFIG, through a real admin client (confluent-kafka)
against the real daemon.

Kafka's tools and scripts set keys such as ``preallocate`` or the replication throttles, so they
are accepted (and DescribeConfigs echoes them, as Kafka echoes every topic config); what they ask
for does not happen, and the controller says so once the change is committed, as the broker's
start-up warning does for broker keys (storage/log_config.py ``no_effect``).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.support.broker_process import BrokerProcess

WARNING = re.compile(r"Topic (\S+): these settings are accepted but have no effect in Odradek: (.*)$")


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("topic-configs-without-effect"))
    b.start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def topic_name() -> str:
    return f"no-effect-{uuid.uuid4().hex[:8]}"


def warnings_for(broker: BrokerProcess, topic: str) -> list[list[str]]:
    """The keys named by each warning about ``topic``, in log order."""
    out = []
    for line in broker.log_text().splitlines():
        m = WARNING.search(line)
        if m and m.group(1) == topic:
            out.append([item.split(" (", 1)[0] for item in m.group(2).split("; ")])
    return out


def wait_for_warnings(broker: BrokerProcess, topic: str, count: int, timeout: float = 10.0) -> list[list[str]]:
    deadline = time.monotonic() + timeout
    while len(found := warnings_for(broker, topic)) < count:
        assert time.monotonic() < deadline, f"{count} warning(s) about {topic} expected, log:\n{broker.log_text()}"
        time.sleep(0.05)
    return found


def describe(admin: AdminClient, topic: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(10)


def create(admin: AdminClient, topic: str, config: dict[str, str], validate_only: bool = False) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=config)], validate_only=validate_only)[topic].result(10)


def incremental(admin: AdminClient, topic: str, values: dict[str, str]) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()])
    admin.incremental_alter_configs([res])[res].result(10)


def test_create_topics_names_the_keys_without_effect(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = topic_name()
    create(admin, topic, {"preallocate": "true", "retention.ms": "3600000", "local.retention.ms": "1000",
                          "leader.replication.throttled.replicas": "0:1"})
    # One warning, the keys in the order their records were written (sorted); retention.ms works.
    assert wait_for_warnings(broker, topic, 1) == [
        ["leader.replication.throttled.replicas", "local.retention.ms", "preallocate"]]
    # Accepted and echoed, as Kafka does.
    configs = describe(admin, topic)
    assert configs["preallocate"].value == "true"
    assert configs["preallocate"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["leader.replication.throttled.replicas"].value == "0:1"


def test_a_topic_created_with_keys_that_work_is_not_warned_about(broker: BrokerProcess, admin: AdminClient) -> None:
    quiet, loud = topic_name(), topic_name()
    create(admin, quiet, {"retention.ms": "3600000", "cleanup.policy": "compact"})
    create(admin, loud, {"preallocate": "false"})
    # The second topic's warning is logged after anything about the first.
    wait_for_warnings(broker, loud, 1)
    assert warnings_for(broker, quiet) == []


def test_validate_only_changes_nothing_and_warns_nothing(broker: BrokerProcess, admin: AdminClient) -> None:
    dry, real = topic_name(), topic_name()
    create(admin, dry, {"preallocate": "true"}, validate_only=True)
    create(admin, real, {"preallocate": "true"})
    wait_for_warnings(broker, real, 1)
    assert warnings_for(broker, dry) == []
    assert dry not in admin.list_topics(timeout=10).topics


def test_incremental_and_legacy_alter_configs_warn(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = topic_name()
    create(admin, topic, {})
    incremental(admin, topic, {"follower.replication.throttled.replicas": "*", "message.downconversion.enable": "false",
                               "retention.ms": "7200000"})
    assert wait_for_warnings(broker, topic, 1) == [
        ["follower.replication.throttled.replicas", "message.downconversion.enable"]]
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"local.retention.bytes": "1048576"})
    admin.alter_configs([legacy])[legacy].result(10)
    assert wait_for_warnings(broker, topic, 2)[1] == ["local.retention.bytes"]
    configs = describe(admin, topic)
    assert configs["local.retention.bytes"].value == "1048576"
    # Legacy AlterConfigs replaced the whole set: the earlier overrides are gone.
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize("config", [
    {"remote.storage.enable": "true"},  # tiered storage is off (Kafka: "Tiered Storage functionality is disabled")
    {"leader.replication.throttled.replicas": "all"},  # ThrottledReplicaListValidator
    {"follower.replication.throttled.replicas": "0:1,*"},
    {"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "50"},  # LogConfig.validateValues
])
def test_values_kafka_refuses_fail_creation_with_invalid_config(broker: BrokerProcess, admin: AdminClient,
                                                                 config: dict[str, str]) -> None:
    topic = topic_name()
    with pytest.raises(KafkaException) as info:
        create(admin, topic, config)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert topic not in admin.list_topics(timeout=10).topics
    assert warnings_for(broker, topic) == []


@pytest.mark.parametrize("values", [
    {"remote.storage.enable": "true"},
    {"leader.replication.throttled.replicas": "0-1"},
    {"max.compaction.lag.ms": "50", "min.compaction.lag.ms": "100"},
])
def test_values_kafka_refuses_fail_alteration_and_change_nothing(broker: BrokerProcess, admin: AdminClient,
                                                                  values: dict[str, str]) -> None:
    topic = topic_name()
    create(admin, topic, {"retention.ms": "3600000"})
    before = {k: (e.value, e.source) for k, e in describe(admin, topic).items()}
    with pytest.raises(KafkaException) as info:
        incremental(admin, topic, values)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert {k: (e.value, e.source) for k, e in describe(admin, topic).items()} == before
