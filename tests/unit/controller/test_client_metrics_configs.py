"""Client metrics subscriptions (KIP-714) in the controller: Kafka 4.4's validation, the records, restarts.

Every expected code and message below is what a real Kafka 4.4 answered to the same
IncrementalAlterConfigs on a CLIENT_METRICS resource (tests/integration/test_client_telemetry_ab.py
sends the same requests to both).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.controller import client_metrics_configs as cmc
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

CM = ConfigResourceType.CLIENT_METRICS
SET, DELETE, APPEND, SUBTRACT = AlterConfigOp.SET, AlterConfigOp.DELETE, AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT
INVALID_REQUEST, INVALID_CONFIG = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG

# (subscription, operations) -> Kafka 4.4's (error code, message)
REFUSED = [
    ("", [("metrics", SET, "x")], INVALID_REQUEST, "Subscription name can't be empty"),
    ("s", [("foo", SET, "x")], INVALID_REQUEST, "Unknown client metrics configuration: foo"),
    ("s", [("interval.ms", SET, "50")], INVALID_REQUEST,
     "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    ("s", [("interval.ms", SET, "3600001")], INVALID_REQUEST,
     "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    ("s", [("interval.ms", SET, "abc")], INVALID_CONFIG,
     "Invalid value abc for configuration interval.ms: Not a number of type INT"),
    ("s", [("interval.ms", SET, "")], INVALID_CONFIG,
     "Invalid value  for configuration interval.ms: Not a number of type INT"),
    ("s", [("match", SET, "bad")], INVALID_CONFIG, "Illegal client matching pattern: bad"),
    ("s", [("match", SET, "foo=bar")], INVALID_CONFIG, "Illegal client matching pattern: foo=bar"),
    ("s", [("match", SET, "client_id=[")], INVALID_CONFIG, "Illegal client matching pattern: client_id=["),
    ("s", [("match", SET, "client_id=a=b")], INVALID_CONFIG, "Illegal client matching pattern: client_id=a=b"),
    ("s", [("metrics", APPEND, "x")], INVALID_CONFIG, "Can't APPEND to key metrics because its type is not LIST."),
    ("s", [("metrics", SUBTRACT, "x")], INVALID_CONFIG,
     "Can't SUBTRACT to key metrics because its type is not LIST."),
]


async def _alter(c: Controller, name: str, ops: list[tuple[str, AlterConfigOp, str | None]],
                 validate_only: bool = False) -> tuple[int, str | None]:
    (r,) = await c.incremental_alter_configs(
        [AlterConfigsResource(CM, name, [AlterableConfig(k, op, v) for k, op, v in ops])], validate_only)
    return r.error_code, r.error_message


@pytest.mark.parametrize(("name", "ops", "code", "message"), REFUSED)
async def test_kafkas_validation(controller: Controller, name: str, ops: list, code: int, message: str) -> None:
    before = controller.image.offset
    assert await _alter(controller, name, ops) == (code, message)
    assert controller.image.offset == before and controller.image.client_metrics == {}  # nothing written


async def test_accepted_values_are_stored_as_sent_and_deleting_every_key_drops_the_subscription(
        controller: Controller) -> None:
    seen = []
    controller.subscribe(seen.append)
    ok = (ErrorCode.NONE, None)
    assert await _alter(controller, "sub", [("metrics", SET, " a , b "), ("interval.ms", SET, "1000")]) == ok
    assert await _alter(controller, "dups", [("metrics", SET, "a,a"), ("match", SET, "client_id=a,client_id=a")]) == ok
    assert await _alter(controller, "all", [("metrics", SET, "*"),
                                            ("match", SET, "client_software_name=probe, client_id = wire-.*")]) == ok
    assert controller.image.client_metrics["sub"] == {"metrics": " a , b ", "interval.ms": "1000"}
    assert seen[-1].changed_client_metrics == {"all"}
    assert await _alter(controller, "v", [("metrics", SET, "x")], validate_only=True) == ok
    assert "v" not in controller.image.client_metrics
    assert await _alter(controller, "nothing", [("metrics", DELETE, None)]) == ok  # nothing to delete: no record
    assert "nothing" not in controller.image.client_metrics
    assert await _alter(controller, "sub", [("metrics", DELETE, None), ("interval.ms", DELETE, None)]) == ok
    assert list(controller.image.client_metrics) == ["dups", "all"]
    (r,) = await controller.alter_configs([AlterConfigsResource(CM, "all", {"metrics": "x"})])  # legacy: replaces
    assert r.error_code == ErrorCode.NONE and controller.image.client_metrics["all"] == {"metrics": "x"}


async def test_subscriptions_survive_a_restart(tmp_path: Path) -> None:
    c = make_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    await _alter(c, "zz", [("metrics", SET, "org.apache.kafka.producer."), ("interval.ms", SET, "1000")])
    await _alter(c, "aa", [("match", SET, "client_id=x")])
    await c.stop()
    again = make_controller(tmp_path)
    await again.start()
    try:
        assert again.image.client_metrics == {"zz": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"},
                                              "aa": {"match": "client_id=x"}}
        assert list(again.image.client_metrics) == ["zz", "aa"]
    finally:
        await again.stop()


async def test_refused_while_a_0_1_0_broker_may_read_the_log(tmp_path: Path) -> None:
    """A 0.1.0 broker refuses a ConfigRecord of a resource type it does not know: until the metadata
    format rises, the controller writes none (UNSUPPORTED_VERSION), and then it does."""
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
        code, message = await _alter(c, "sub", [("metrics", SET, "x")])
        assert code == ErrorCode.UNSUPPORTED_VERSION and message is not None and "level 2" in message
        assert not any(isinstance(r, ConfigRecord) for b in (await c._log_store.read(0)).batches for r in b.records)
        await c.register_broker(2, "h2", 9092)  # upgraded
        assert await _alter(c, "sub", [("metrics", SET, "x")]) == (ErrorCode.NONE, None)
    finally:
        await c.stop()


def test_parse_and_match() -> None:
    s = cmc.parse("s", {"metrics": " a , b ,", "interval.ms": " 1000 ", "match": "client_id = wire-.* , client_source_port=1"})
    assert s.metrics == ("a", "b", "") and s.interval_ms == 1000
    assert s.matches({"client_id": "wire-test", "client_source_port": "1"})
    assert not s.matches({"client_id": "wire-test", "client_source_port": "12"})  # the whole value must match
    assert not s.matches({"client_id": "x-wire-test", "client_source_port": "1"})
    assert not s.matches({"client_source_port": "1"})  # an attribute the client lacks matches nothing
    assert cmc.parse("s", {}).matches({})  # no selector: every client
    assert cmc.parse("s", {"match": "client_id=a="}).match[0][0] == "client_id"  # Java's split drops the trailing ""


def test_describe_shows_every_key_in_name_order_set_or_default() -> None:
    described = cmc.describe({"metrics": " a , b ", "interval.ms": " 1000"})
    assert [(d.name, d.value, d.source, d.config_type) for d in described] == [
        ("interval.ms", "1000", cmc.SOURCE_CLIENT_METRICS, cmc.TYPE_INT),
        ("match", "", cmc.SOURCE_DEFAULT, cmc.TYPE_LIST),
        ("metrics", "a,b", cmc.SOURCE_CLIENT_METRICS, cmc.TYPE_LIST),
    ]
