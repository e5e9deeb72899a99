"""Group configs (odradek.controller.group_configs): Kafka 4.4's GroupConfig.validate and describe, and the
controller storing GROUP resources.

Every expected code and message below is what a real Kafka 4.4 broker with default group.* configs
answered to the same IncrementalAlterConfigs (tests/integration/test_group_configs_ab.py sends them to
both brokers).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import BrokerConfig
from odradek.controller import group_configs
from odradek.controller.controller import Controller
from odradek.controller.log_store import LocalMetadataLogStore
from odradek.controller.records import (
    ConfigRecord,
    ConfigResourceType,
    LeaderChangeRecord,
    RegisterBrokerRecord,
)
from odradek.controller.requests import AlterableConfig, AlterConfigOp, AlterConfigsResource
from odradek.protocol.errors import ErrorCode
from tests.unit.controller.conftest import make_controller

GROUP = ConfigResourceType.GROUP
SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
CONFIG = BrokerConfig.from_props({"node.id": "1", "log.dirs": "/unused"})

LOCK = "share.record.lock.duration.ms"
REFUSED = [
    ({"foo": "1"}, "Unknown group config name: foo"),
    ({LOCK: "abc"}, "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT"),
    ({LOCK: ""}, "Invalid value  for configuration share.record.lock.duration.ms: Not a number of type INT"),
    ({LOCK: "999"}, "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ({LOCK: "14999"}, "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({LOCK: "60001"}, "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive."),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.delivery.count.limit": "11"}, "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ({"share.auto.offset.reset": "middle"},
     "Invalid value middle for configuration share.auto.offset.reset: Invalid value `middle` for configuration "
     "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS>'."),
    ({"share.auto.offset.reset": "by_duration:-PT1H"},
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value `by_duration:-PT1H` "
     "for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS>'."),
    ({"share.isolation.level": "READ_COMMITTED"}, "Invalid value READ_COMMITTED for configuration "
     "share.isolation.level: String must be one of: read_committed, read_uncommitted"),
    ({"streams.num.standby.replicas": "3"}, "streams.num.standby.replicas must be less than or equal to 2"),
    ({"streams.task.offset.interval.ms": "1"}, "streams.task.offset.interval.ms must be greater than or equal to 15000"),
    ({"consumer.assignment.interval.ms": "99999999"},
     "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
    ({"streams.assignor.name": "foo"},
     "streams.assignor.name 'foo' is not a registered task assignor. Registered assignors are: [sticky]."),
    ({"streams.rack.aware.assignment.tags": "a,a"}, "streams.rack.aware.assignment.tags must not contain duplicate "
     "tag keys."),
    ({"share.renew.acknowledge.enable": "maybe"},
     "Invalid value maybe for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ({"errors.deadletterqueue.topic.name": "__x"},
     "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    ({"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000", "consumer.session.timeout.ms": "x"},
     "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT"),
]
ACCEPTED = [
    {LOCK: " 20000 "},
    {"consumer.heartbeat.interval.ms": "15000", "consumer.session.timeout.ms": "45000"},
    {"share.delivery.count.limit": "2", "share.auto.offset.reset": "earliest"},
    {"share.auto.offset.reset": "by_duration:PT1H"},
    {"streams.num.warmup.replicas": "1", "streams.acceptable.recovery.lag": "5",
     "consumer.assignor.offload.enable": "true"},
    {"share.isolation.level": "read_committed", "share.delivery.count.limit": "3"},
]


@pytest.mark.parametrize(("props", "message"), REFUSED)
def test_kafkas_validation_and_messages(props: dict[str, str], message: str) -> None:
    with pytest.raises(group_configs.GroupConfigError) as e:
        group_configs.validate(props, CONFIG.__getitem__)
    assert (e.value.code, str(e.value)) == (ErrorCode.INVALID_CONFIG, message)


@pytest.mark.parametrize("props", ACCEPTED)
def test_accepted(props: dict[str, str]) -> None:
    group_configs.validate(props, CONFIG.__getitem__)


def test_bounds_are_the_brokers() -> None:
    """The range checks read this broker's group.share.min/max.* (here lowered), not Kafka's defaults."""
    config = BrokerConfig.from_props({"node.id": "1", "log.dirs": "/unused",
                                      "group.share.min.record.lock.duration.ms": "1000",
                                      "group.share.record.lock.duration.ms": "2000"})
    group_configs.validate({LOCK: "1000"}, config.__getitem__)
    with pytest.raises(group_configs.GroupConfigError, match="in the range 15000 to 60000"):
        group_configs.validate({LOCK: "1000"}, CONFIG.__getitem__)


def _broker_entry(name: str) -> list[tuple[str, str, int]]:
    if name not in CONFIG:
        return []
    value = CONFIG[name]
    return [(name, ",".join(value) if isinstance(value, list) else str(value), 5)]


def test_describe_defaults_in_kafkas_order_and_overrides_with_synonyms() -> None:
    """Kafka 4.4's DescribeConfigs of a group without configs lists these 21 keys in this order."""
    described = group_configs.describe({}, _broker_entry)
    assert [d.name for d in described] == [
        "consumer.session.timeout.ms", "streams.assignor.name", "consumer.assignment.interval.ms",
        "errors.deadletterqueue.copy.record.enable", "share.auto.offset.reset", "streams.rack.aware.assignment.tags",
        "share.renew.acknowledge.enable", "streams.initial.rebalance.delay.ms", "share.session.timeout.ms",
        "streams.assignment.interval.ms", "share.heartbeat.interval.ms", "streams.heartbeat.interval.ms",
        "share.delivery.count.limit", "errors.deadletterqueue.topic.name", "consumer.heartbeat.interval.ms",
        "share.record.lock.duration.ms", "share.assignment.interval.ms", "share.isolation.level",
        "streams.session.timeout.ms", "share.partition.max.record.locks", "streams.num.standby.replicas"]
    by_name = {d.name: d for d in described}
    assert by_name["share.auto.offset.reset"].synonyms == [("share.auto.offset.reset", "latest", 5)]
    assert by_name["streams.assignor.name"].value == "sticky"
    lock = {d.name: d for d in group_configs.describe({LOCK: " 20000 "}, _broker_entry)}[LOCK]
    assert (lock.value, lock.source) == ("20000", 8)
    assert lock.synonyms == [(LOCK, "20000", 8), ("group.share.record.lock.duration.ms", "30000", 5)]
    with_internal = [d.name for d in group_configs.describe(
        {"streams.num.warmup.replicas": "1", "streams.acceptable.recovery.lag": "5",
         "consumer.assignor.offload.enable": "true"}, _broker_entry)]
    assert with_internal[:3] == ["streams.num.warmup.replicas", "consumer.assignor.offload.enable",
                                 "streams.acceptable.recovery.lag"]


async def _alter(c: Controller, name: str, ops: list[tuple[str, AlterConfigOp, str | None]]) -> tuple[int, str | None]:
    (r,) = await c.incremental_alter_configs(
        [AlterConfigsResource(GROUP, name, [AlterableConfig(k, op, v) for k, op, v in ops])], False)
    return r.error_code, r.error_message


async def test_controller_stores_group_configs_across_a_restart(tmp_path: Path) -> None:
    c = make_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    ok = (ErrorCode.NONE, None)
    assert await _alter(c, "", [(LOCK, SET, "20000")]) == (ErrorCode.INVALID_REQUEST,
                                                            "Default group resources are not allowed.")
    assert await _alter(c, "q", [(LOCK, AlterConfigOp.APPEND, "1")]) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key share.record.lock.duration.ms because its type is not LIST.")
    assert c.image.group_configs == {}
    assert await _alter(c, "q", [(LOCK, SET, "20000"), ("share.delivery.count.limit", SET, "2")]) == ok
    assert await _alter(c, "gone", [(LOCK, SET, "20000")]) == ok
    assert await _alter(c, "gone", [(LOCK, DELETE, None)]) == ok
    await c.stop()
    again = make_controller(tmp_path)
    await again.start()
    try:
        assert again.image.group_configs == {"q": {LOCK: "20000", "share.delivery.count.limit": "2"}}
    finally:
        await again.stop()


async def test_refused_while_a_0_1_0_broker_may_read_the_log(tmp_path: Path) -> None:
    store = LocalMetadataLogStore(tmp_path)
    await store.open()
    await store.append([LeaderChangeRecord(1, 0)], 0)
    await store.append([RegisterBrokerRecord(2, 2, uuid.uuid4(), "h2", 9092)], 0)
    await store.close()
    c = make_controller(tmp_path)
    await c.start()
    try:
        await c.register_broker(1, "h1", 9091)
        await c.register_broker(2, "h2", 9092, features=())  # still 0.1.0
        code, message = await _alter(c, "q", [(LOCK, SET, "20000")])
        assert code == ErrorCode.UNSUPPORTED_VERSION and message is not None and "level 2" in message
        assert not any(isinstance(r, ConfigRecord) for b in (await c._log_store.read(0)).batches for r in b.records)
        await c.register_broker(2, "h2", 9092)  # upgraded
        assert await _alter(c, "q", [(LOCK, SET, "20000")]) == (ErrorCode.NONE, None)
    finally:
        await c.stop()
