"""Client telemetry (KIP-714) on the wire, against a real Kafka 4.4 and Odradek: the same raw requests
get the same answers.

Both brokers run with telemetry.max.bytes=2000. Compared, in order:

- IncrementalAlterConfigs / AlterConfigs on CLIENT_METRICS resources: Kafka's validation (codes and
  messages), validate_only, deleting what is not there, APPEND refused;
- DescribeConfigs of subscriptions (v1 and v4: every key, set or default, sources, synonyms, types,
  documentation; an unknown name shows the defaults; an empty name is refused);
- ListConfigResources v0 and v1 (types, UNSUPPORTED_VERSION for an unknown type, Kafka's order);
- GetTelemetrySubscriptions with fixed client instance ids: the same subscription ids, requested
  metrics in the same order, interval, compression types, limits; throttling;
- PushTelemetry's refusals in Kafka's order: UNKNOWN_SUBSCRIPTION_ID, THROTTLING_QUOTA_EXCEEDED,
  UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE, INVALID_RECORD (a payload that does not
  decompress, or decompresses past the limit), INVALID_REQUEST (a reserved id; after terminating);
- ApiVersions: Kafka 4.4 without a ClientTelemetry receiver advertises ListConfigResources but not
  the telemetry APIs, as Odradek does without /metrics; with /metrics Odradek advertises them.

Where the two differ on purpose (Odradek decodes the payload itself, Kafka without a receiver never
reads it), Odradek alone: tests/integration/test_client_telemetry_wire.py.
"""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.launcher.cluster_launcher import free_port
from tests.support.broker_process import BrokerProcess
from tests.support.config_requests import alter_configs, describe_configs
from tests.support.real_kafka import TARGETS, fresh_kafka_and_odradek
from tests.support.wire import WireClient

API_VERSIONS, ALTER_CONFIGS = 18, 33
GET_SUBSCRIPTIONS, PUSH, LIST_CONFIG_RESOURCES = 71, 72, 74
CM = 16
SET, DELETE, APPEND = 0, 1, 2
ZERO = uuid.UUID(int=0)
MAX_BYTES = "2000"


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, tuple[str, int]]]:
    with fresh_kafka_and_odradek("odradek-telemetry", {"telemetry.max.bytes": MAX_BYTES},
                                 {"telemetry.max.bytes": MAX_BYTES, "odradek.metrics.host": "127.0.0.1",
                                  "odradek.metrics.port": str(free_port("127.0.0.1"))}) as both:
        yield both


def same_on_both(targets: dict[str, tuple[str, int]], scenario: Any) -> Any:
    results = {name: scenario(WireClient(*targets[name])) for name in TARGETS}
    assert results["odradek"] == results["kafka"]
    return results["kafka"]


def alter(c: WireClient, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> tuple:
    return alter_configs(c, CM, name, ops, validate_only)


def describe(c: WireClient, name: str, version: int = 4, keys: list[str] | None = None) -> dict:
    return describe_configs(c, CM, name, version, keys)


def test_subscriptions_are_validated_stored_described_and_listed_as_by_kafka(targets) -> None:
    def scenario(c: WireClient) -> list:
        with c:
            out: list[Any] = []
            for name, ops, *validate in [
                ("", [("metrics", SET, "x")]),
                ("s2", [("foo", SET, "x")]),
                ("s2", [("interval.ms", SET, "50")]),
                ("s2", [("interval.ms", SET, "3600001")]),
                ("s2", [("interval.ms", SET, "abc")]),
                ("s2", [("interval.ms", SET, "")]),
                ("s2", [("match", SET, "bad")]),
                ("s2", [("match", SET, "foo=bar")]),
                ("s2", [("match", SET, "client_id=[")]),
                ("s2", [("match", SET, "client_id=a=b")]),
                ("s2", [("metrics", SET, None)]),
                ("sub1", [("metrics", SET, "org.apache.kafka.producer.,org.apache.kafka.consumer."),
                          ("interval.ms", SET, "1000")]),
                ("sub1", [("metrics", APPEND, "org.apache.kafka.admin.")]),
                ("s2", [("match", SET, "client_id=a,client_id=a"), ("metrics", SET, "a,a")]),
                ("s3", [("metrics", SET, " a , b ")]),
                ("s5", [("metrics", DELETE, None)]),
                ("s6", [("metrics", SET, "x")], True),
                ("s7", [("match", SET, "client_software_name=probe, client_id = wire-.*"),
                        ("metrics", SET, "org.apache.kafka.")]),
            ]:
                out.append((name, alter(c, name, ops, *validate)))
            legacy = c.request(ALTER_CONFIGS, 2, {"validate_only": False, "resources": [
                {"resource_type": CM, "resource_name": "s8", "configs": [{"name": "metrics", "value": "x"}]}]})
            out.append(legacy["responses"])
            for name in ("sub1", "s3", "s5", "s6", "s7", "s8", ""):
                out.append(describe(c, name))
            out.append(describe(c, "sub1", version=1))
            out.append(describe(c, "s7", keys=["interval.ms", "match"]))
            for version, types in [(0, None), (1, []), (1, [CM]), (1, [2, CM]), (1, [99]), (1, [4, 8, 32])]:
                out.append(c.request(LIST_CONFIG_RESOURCES, version, {} if types is None else {"resource_types": types}))
            return out

    same_on_both(targets, scenario)


def test_get_telemetry_subscriptions_gives_kafkas_subscription_ids(targets) -> None:
    """Run after the subscriptions above: four match a client named wire-test using software "probe"."""
    fixed = [uuid.UUID("0c6a8e9f-3b47-4d2a-9a0e-5c1f2e3d4b5a"), uuid.UUID("7a3bc69f-fd93-4994-ab8e-1c611a89f92e")]

    def scenario(c: WireClient) -> list:
        with c:
            c.request(API_VERSIONS, 3, {"client_software_name": "probe", "client_software_version": "1.0"})
            out = []
            for instance_id in fixed:
                out.append(c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance_id}))
                out.append(c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance_id}))  # too soon
            fresh = c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": ZERO})
            assert fresh["client_instance_id"] not in (ZERO, *fixed)
            out.append({k: v for k, v in fresh.items() if k not in ("client_instance_id", "subscription_id")})
            host, port = c.sock.getpeername()[:2]
        with WireClient(host, port, client_id="other") as other:
            unmatched = other.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=12345)})
            out.append(unmatched)
        return out

    answers = same_on_both(targets, scenario)
    assert answers[0]["subscription_id"] == 775822826  # what Kafka 4.4 gave when this test was written
    assert answers[0]["requested_metrics"] == ["org.apache.kafka.producer.", "a", "b", "org.apache.kafka.consumer.",
                                               "org.apache.kafka.", "x"]
    assert answers[1]["error_code"] == 89 and answers[1]["subscription_id"] == 0  # THROTTLING_QUOTA_EXCEEDED
    assert "org.apache.kafka." not in answers[-1]["requested_metrics"]  # s7's selectors do not match "other"


def test_push_telemetry_refusals_in_kafkas_order(targets) -> None:
    def scenario(c: WireClient) -> list:
        with c:
            got = c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": ZERO})
            instance, sid = got["client_instance_id"], got["subscription_id"]

            def push(sub: int = sid, codec: int = 0, data: bytes = b"", terminating: bool = False,
                     iid: uuid.UUID = instance) -> int:
                return c.request(PUSH, 0, {"client_instance_id": iid, "subscription_id": sub, "terminating": terminating,
                                           "compression_type": codec, "metrics": data})["error_code"]

            out = [push(sub=sid + 1), push()]
            for case in [dict(codec=7), dict(data=b"x" * 2001), dict(codec=1, data=b"notgzip"),
                         dict(codec=1, data=gzip.compress(b"\0" * 100_000))]:
                time.sleep(1.05)
                out.append(push(**case))  # type: ignore[arg-type]
            out += [push(iid=ZERO), push(sub=12345, iid=uuid.UUID("5b5fbf5d-3d1f-4f73-a2b7-2d8c1f0e9a11")),
                    push(terminating=True), push()]
            out.append(c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})["error_code"])
            return out

    assert same_on_both(targets, scenario) == [117, 89, 76, 118, 87, 87, 42, 117, 0, 42, 89]


def test_deleting_every_key_removes_the_subscription(targets) -> None:
    def scenario(c: WireClient) -> list:
        with c:
            return [alter(c, "sub1", [("metrics", DELETE, None), ("interval.ms", DELETE, None)]), describe(c, "sub1"),
                    c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [CM]})]

    assert "sub1" not in [r["resource_name"] for r in same_on_both(targets, scenario)[2]["config_resources"]]


def test_telemetry_apis_are_advertised_only_where_pushed_metrics_go(targets, tmp_path: Path) -> None:
    def advertised(host: str, port: int) -> dict[int, tuple[int, int]]:
        with WireClient(host, port) as c:
            keys = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})["api_keys"]
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in keys
                if k["api_key"] in (GET_SUBSCRIPTIONS, PUSH, LIST_CONFIG_RESOURCES)}

    assert advertised(*targets["kafka"]) == {LIST_CONFIG_RESOURCES: (0, 1)}  # no ClientTelemetry receiver
    assert advertised(*targets["odradek"]) == {GET_SUBSCRIPTIONS: (0, 0), PUSH: (0, 0), LIST_CONFIG_RESOURCES: (0, 1)}
    plain = BrokerProcess(tmp_path / "plain").start()  # odradek.metrics.port -1: nowhere to send them
    try:
        assert advertised(plain.host, plain.port) == {LIST_CONFIG_RESOURCES: (0, 1)}
        with WireClient(plain.host, plain.port) as c:  # served all the same, as Kafka serves them
            assert c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": ZERO})["error_code"] == 0
    finally:
        plain.kill()
