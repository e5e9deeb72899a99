"""Client telemetry (KIP-714) pieces on their own: Java's orders and Kafka's subscription ids, the
ClientMetricsManager's rules on a controlled clock, the OTLP decoder and the /metrics exporter.

The subscription ids and requested-metric orders expected here are what a real Kafka 4.4 answered
(GetTelemetrySubscriptions with the same subscriptions and client instance ids);
tests/integration/test_client_telemetry_ab.py compares them on the wire.
"""

from __future__ import annotations

import gzip
import uuid
from types import SimpleNamespace

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb
from prometheus_client import CollectorRegistry, generate_latest

from odradek.broker.client_telemetry import exporter as exp
from odradek.broker.client_telemetry import java_order, otlp
from odradek.broker.client_telemetry.manager import ClientMetricsManager
from odradek.protocol.errors import ErrorCode

# Kafka 4.4's answers: four subscriptions created in this order, all matching the client.
KAFKA_SUBSCRIPTIONS = {"sub1": {"metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.", "interval.ms": "1000"},
                       "s3": {"metrics": " a , b "}, "s7": {"metrics": "org.apache.kafka."}, "s8": {"metrics": "x"}}
KAFKA_ORDER = ["org.apache.kafka.producer.", "a", "b", "org.apache.kafka.consumer.", "org.apache.kafka.", "x"]
KAFKA_IDS = {uuid.UUID("0c6a8e9f-3b47-4d2a-9a0e-5c1f2e3d4b5a"): 775822826,
             uuid.UUID("7a3bc69f-fd93-4994-ab8e-1c611a89f92e"): -1685085346}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Conn:
    """What the manager reads of a connection (weakly referenced, as the broker's)."""

    def __init__(self, peer: str, software: str) -> None:
        self.peer, self.closed = peer, False
        self.client_software_name, self.client_software_version = software, "1.0"


def conn(peer: str = "127.0.0.1:5555", software: str = "probe") -> Conn:
    return Conn(peer, software)


def manager(subscriptions: dict, clock: Clock, max_bytes: int = 2000) -> ClientMetricsManager:
    image = SimpleNamespace(client_metrics=subscriptions)
    return ClientMetricsManager(lambda: image, max_bytes, clock_ms=clock)


def test_java_string_hash_and_orders() -> None:
    assert java_order.to_int32(java_order.string_hash("hello")) == 99162322  # "hello".hashCode()
    assert java_order.string_hash("é€") == 0xE9 * 31 + 0x20AC  # over UTF-16 code units
    assert java_order.hash_order(["sub1", "s2", "s3", "s7", "s8"]) == ["s3", "s7", "s8", "sub1", "s2"]  # Kafka's list


def test_requested_metrics_and_subscription_ids_are_kafkas() -> None:
    m = manager(KAFKA_SUBSCRIPTIONS, Clock())
    for instance_id, expected in KAFKA_IDS.items():
        answer = m.get_subscriptions(instance_id, "wire-test", conn())
        assert answer["requested_metrics"] == KAFKA_ORDER
        assert (answer["subscription_id"], answer["push_interval_ms"]) == (expected, 1000)
    # No selector matches "other": s3 and s8 (no selectors) only, at the default interval.
    only = manager({**KAFKA_SUBSCRIPTIONS, "sub1": {**KAFKA_SUBSCRIPTIONS["sub1"], "match": "client_id=wire-.*"},
                    "s7": {"metrics": "org.apache.kafka.", "match": "client_id=wire-.*"}}, Clock())
    answer = only.get_subscriptions(uuid.UUID("d9a18081-4491-48d2-b683-14118738a9af"), "other", conn())
    assert (answer["requested_metrics"], answer["push_interval_ms"], answer["subscription_id"]) == (
        ["a", "b", "x"], 300000, -1552334864)


def test_star_subscribes_to_everything() -> None:
    m = manager({"a": {"metrics": "x,y"}, "b": {"metrics": "*", "interval.ms": "500"}}, Clock())
    answer = m.get_subscriptions(uuid.UUID(int=0), None, conn())
    assert answer["requested_metrics"] == ["*"] and answer["push_interval_ms"] == 500
    assert answer["client_instance_id"] != uuid.UUID(int=0)


def test_throttling_and_push_checks_in_kafkas_order() -> None:
    clock = Clock()
    m = manager({"s": {"metrics": "org.", "interval.ms": "1000"}}, clock)
    c = conn()
    first = m.get_subscriptions(uuid.UUID(int=0), "c", c)
    iid, sid = first["client_instance_id"], first["subscription_id"]
    assert m.get_subscriptions(iid, "c", c)["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED

    def push(sub: int = sid, terminating: bool = False, codec: int = 0, size: int = 10,
             instance: uuid.UUID = iid) -> ErrorCode:
        return m.check_push(instance, sub, terminating, codec, size, "c", c).error

    assert push(sub=sid + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID  # the first push after a Get is accepted...
    assert push() == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # ...and its time kept, so this one is too soon
    assert m.get_subscriptions(iid, "c", c)["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += 1000
    assert push(sub=sid + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert m.get_subscriptions(iid, "c", c)["error_code"] == ErrorCode.NONE  # after UNKNOWN_SUBSCRIPTION_ID: no wait
    # That Get was let through, not accepted: its time is not kept, the next push waits (Kafka's rule).
    assert push() == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += 1000
    assert push(codec=7) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    clock.now += 1000
    assert push(size=2001) == ErrorCode.TELEMETRY_TOO_LARGE
    clock.now += 1000
    assert push(size=2000) == ErrorCode.NONE
    assert push(instance=uuid.UUID(int=0)) == ErrorCode.INVALID_REQUEST
    assert push(instance=uuid.UUID(int=1)) == ErrorCode.INVALID_REQUEST
    assert push(terminating=True) == ErrorCode.NONE  # never throttled
    assert push() == ErrorCode.INVALID_REQUEST  # nothing after a terminating push


def test_a_subscription_change_remakes_the_instance_and_a_closed_connection_forgets_it() -> None:
    clock = Clock()
    subs = {"s": {"metrics": "a", "interval.ms": "1000"}}
    m = manager(subs, clock)
    c = conn()
    first = m.get_subscriptions(uuid.UUID(int=0), "c", c)
    iid = first["client_instance_id"]
    subs["s"] = {"metrics": "b", "interval.ms": "2000"}  # changed: the next Get is not throttled
    again = m.get_subscriptions(iid, "c", c)
    assert (again["error_code"], again["requested_metrics"], again["push_interval_ms"]) == (0, ["b"], 2000)
    assert m.get_subscriptions(iid, "c", c)["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    c.closed = True  # Kafka drops the instance with the connection it was made on
    assert m.get_subscriptions(iid, "c", conn())["error_code"] == ErrorCode.NONE


def test_instances_expire_after_max_of_60_s_and_three_intervals() -> None:
    clock = Clock()
    m = manager({"s": {"metrics": "a", "interval.ms": "30000"}}, clock)
    iid = m.get_subscriptions(uuid.UUID(int=0), "c", conn())["client_instance_id"]
    clock.now += 89_999
    m.get_subscriptions(uuid.uuid4(), "other", conn())
    assert m.instance(iid) is not None
    clock.now += 90_000
    m.get_subscriptions(uuid.uuid4(), "other", conn())
    assert m.instance(iid) is None


def test_client_attributes_for_selectors() -> None:
    clock = Clock()
    m = manager({"v6": {"metrics": "a", "match": "client_source_address=0:0:0:0:0:0:0:1,client_source_port=7"},
                 "sw": {"metrics": "b", "match": "client_software_name=apache-kafka-java,client_software_version=4.*"}},
                clock)
    assert m.get_subscriptions(uuid.UUID(int=0), None, conn("::1:7"))["requested_metrics"] == ["a"]
    java = conn(software="apache-kafka-java")
    java.client_software_version = "4.4.0"
    assert m.get_subscriptions(uuid.UUID(int=0), None, java)["requested_metrics"] == ["b"]


def metrics_data(*metrics: pb.Metric) -> bytes:
    return pb.MetricsData(resource_metrics=[pb.ResourceMetrics(scope_metrics=[pb.ScopeMetrics(
        metrics=list(metrics))])]).SerializeToString()


def delta_sum(name: str, value: int, **attributes: str) -> pb.Metric:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    point = pb.NumberDataPoint(as_int=value, attributes=[KeyValue(key=k, value=AnyValue(string_value=v))
                                                         for k, v in attributes.items()])
    return pb.Metric(name=name, sum=pb.Sum(data_points=[point], is_monotonic=True,
                                           aggregation_temporality=pb.AGGREGATION_TEMPORALITY_DELTA))


def gauge(name: str, value: float, unit: str = "") -> pb.Metric:
    return pb.Metric(name=name, unit=unit, gauge=pb.Gauge(data_points=[pb.NumberDataPoint(as_double=value)]))


def test_otlp_decoding_and_its_refusals() -> None:
    payload = metrics_data(delta_sum("org.apache.kafka.producer.record.send.total", 5, topic="t"),
                           gauge("org.apache.kafka.producer.io.wait.ratio", 0.25),
                           pb.Metric(name="h", histogram=pb.Histogram()))
    decoded = otlp.decode(1, gzip.compress(payload), 10_000)
    assert [(p.name, p.kind, p.value, p.delta, p.attributes) for p in decoded.points] == [
        ("org.apache.kafka.producer.record.send.total", otlp.COUNTER, 5.0, True, (("topic", "t"),)),
        ("org.apache.kafka.producer.io.wait.ratio", otlp.GAUGE, 0.25, False, ())]
    assert decoded.skipped == 1
    for codec, data in [(1, b"not gzip"), (0, b"\xff\xff\xff"), (1, gzip.compress(b"\0" * 20_000))]:
        with pytest.raises(otlp.TelemetryDecodeError):
            otlp.decode(codec, data, 10_000)


def scrape(e: exp.ClientTelemetryExporter) -> str:
    registry = CollectorRegistry()
    registry.register(e)
    return generate_latest(registry).decode()


LABELS = {"client_instance_id": "AAAA", "client_id": "p1", "client_software_name": "apache-kafka-java",
          "client_software_version": "4.4.0"}


def test_exporter_names_accumulates_deltas_and_expires() -> None:
    clock = Clock()
    e = exp.ClientTelemetryExporter(clock_ms=clock)
    points = otlp.decode(0, metrics_data(delta_sum("org.apache.kafka.producer.record.send.total", 5, topic="t",
                                                   client_id="shadow"),
                                         gauge("org.apache.kafka.producer.request.latency.avg", 7.5, unit="ms")),
                         10_000).points
    e.record("AAAA", LABELS, points, 1000)
    e.record("AAAA", LABELS, points, 1000)
    text = scrape(e)
    assert ('org_apache_kafka_producer_record_send_total{client_id="p1",client_instance_id="AAAA",'
            'client_software_name="apache-kafka-java",client_software_version="4.4.0",exported_client_id="shadow",'
            'topic="t"} 10.0') in text
    assert "# TYPE org_apache_kafka_producer_request_latency_avg_milliseconds gauge" in text
    assert "odradek_client_telemetry_clients 1.0" in text
    clock.now += 59_999
    assert "org_apache_kafka_producer" in scrape(e)
    clock.now += 1
    text = scrape(e)
    assert "org_apache_kafka_producer" not in text and "odradek_client_telemetry_clients 0.0" in text


def test_exporter_refuses_reserved_names_type_conflicts_and_too_many_series(monkeypatch: pytest.MonkeyPatch) -> None:
    e = exp.ClientTelemetryExporter(clock_ms=Clock())
    bad = otlp.decode(0, metrics_data(gauge("kafka.server.brokertopicmetrics.bytesin", 1.0),
                                      gauge("odradek_requests", 1.0), gauge("", 1.0), gauge("x", 1.0)), 1000).points
    e.record("A", LABELS, bad, 1000)
    e.record("B", {**LABELS, "client_instance_id": "B"},
             otlp.decode(0, metrics_data(delta_sum("x", 3)), 1000).points, 1000)
    text = scrape(e)
    assert "bytesin" not in text and "odradek_requests" not in text
    assert "# TYPE x gauge" in text and "x_total" not in text  # the first type seen wins
    monkeypatch.setattr(exp, "MAX_SERIES_PER_CLIENT", 2)
    many = otlp.decode(0, metrics_data(*[gauge(f"g{i}", 1.0) for i in range(5)]), 1000).points
    e.record("C", {**LABELS, "client_instance_id": "C"}, many, 1000)
    text = scrape(e)
    assert "g1{" in text and "g2{" not in text
    assert "odradek_client_telemetry_dropped_points_total 6.0" in text  # 2 reserved names, 1 empty, 3 over the limit
