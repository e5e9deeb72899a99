"""Pushed client metrics on Odradek's /metrics (KIP-714), over raw sockets: what a push puts there,
and that a refused push changes nothing there.

A client gets its subscription, pushes OpenTelemetry MetricsData (gzip, as clients compress it):
a delta counter twice and a gauge; /metrics then serves the counter's running total and the gauge's
last value, labelled with the client instance id (Kafka's base64 form), client id and software.
Every refused push after that (a payload that is not a MetricsData: Kafka's INVALID_RECORD for a
push its receiver cannot read; too soon; another subscription id; too large; a compression id
outside 0-4) leaves those series exactly as they were. A subscription matching on client_id
selects who pushes: a client it does not match is asked for nothing. The comparison of these
answers with a real Kafka 4.4 is tests/integration/test_client_telemetry_ab.py.
"""

from __future__ import annotations

import gzip
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from odradek.broker.launcher.cluster_launcher import free_port
from odradek.controller.meta_properties import uuid_to_base64
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

API_VERSIONS, INCREMENTAL_ALTER_CONFIGS, GET_SUBSCRIPTIONS, PUSH = 18, 44, 71, 72
ZERO = uuid.UUID(int=0)


@pytest.fixture
def broker(tmp_path) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port("127.0.0.1")
    b = BrokerProcess(tmp_path / "b", overrides={"odradek.metrics.port": str(port), "odradek.metrics.host": "127.0.0.1",
                                                 "telemetry.max.bytes": "4096"}).start()
    yield b, port
    b.kill()


def scrape(port: int) -> list[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sorted(line for line in text.splitlines() if line.startswith("app_"))


def payload(delta: int, gauge: float) -> bytes:
    topic = [KeyValue(key="topic", value=AnyValue(string_value="orders"))]
    data = pb.MetricsData(resource_metrics=[pb.ResourceMetrics(scope_metrics=[pb.ScopeMetrics(metrics=[
        pb.Metric(name="app.records.sent.total", sum=pb.Sum(
            data_points=[pb.NumberDataPoint(as_int=delta, attributes=topic)], is_monotonic=True,
            aggregation_temporality=pb.AGGREGATION_TEMPORALITY_DELTA)),
        pb.Metric(name="app.queue.depth", gauge=pb.Gauge(data_points=[pb.NumberDataPoint(as_double=gauge)])),
    ])])])
    return gzip.compress(data.SerializeToString())


def subscribe(c: WireClient, name: str, metrics: str, match: str | None = None) -> None:
    ops = [{"name": "metrics", "config_operation": 0, "value": metrics},
           {"name": "interval.ms", "config_operation": 0, "value": "500"}]
    if match is not None:
        ops.append({"name": "match", "config_operation": 0, "value": match})
    r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 16, "resource_name": name, "configs": ops}]})
    assert r["responses"][0]["error_code"] == 0, r


def test_pushed_metrics_on_metrics_and_refused_pushes_change_nothing(broker) -> None:
    b, port = broker
    with WireClient(b.host, b.port, client_id="app-1") as c:
        subscribe(c, "apps", "app.", match="client_id=app-.*")
        c.request(API_VERSIONS, 3, {"client_software_name": "wire-client", "client_software_version": "7.1"})
        got = c.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": ZERO})
        assert (got["requested_metrics"], got["push_interval_ms"], got["telemetry_max_bytes"]) == (["app."], 500, 4096)
        instance, sid = got["client_instance_id"], got["subscription_id"]

        def push(data: bytes, codec: int = 1, sub: int = sid) -> int:
            return c.request(PUSH, 0, {"client_instance_id": instance, "subscription_id": sub, "terminating": False,
                                       "compression_type": codec, "metrics": data})["error_code"]

        assert push(payload(5, 3.0)) == 0
        time.sleep(0.55)
        assert push(payload(7, 2.5)) == 0
        labels = (f'client_id="app-1",client_instance_id="{uuid_to_base64(instance)}",'
                  'client_software_name="wire-client",client_software_version="7.1"')
        expected = [f"app_queue_depth{{{labels}}} 2.5", f'app_records_sent_total{{{labels},topic="orders"}} 12.0']
        assert scrape(port) == expected

        refusals = []
        for data, codec, sub in [(b"\xff\xff\xff", 0, sid), (gzip.compress(b"\x0a\xff"), 1, sid),
                                 (payload(100, 9.0), 1, sid), (payload(100, 9.0), 1, sid + 1),
                                 (b"x" * 4097, 0, sid), (payload(100, 9.0), 6, sid)]:
            time.sleep(0.55)
            refusals.append(push(data, codec, sub))
        # Not a MetricsData, plain and gzipped: INVALID_RECORD; a good push; then UNKNOWN_SUBSCRIPTION_ID,
        # TELEMETRY_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE. Only the good push moved the series.
        assert refusals == [87, 87, 0, 117, 118, 76]
        assert scrape(port) == [f"app_queue_depth{{{labels}}} 9.0",
                                f'app_records_sent_total{{{labels},topic="orders"}} 112.0']
        time.sleep(0.1)
        assert push(payload(1, 1.0)) == 89  # THROTTLING_QUOTA_EXCEEDED: nothing recorded
        assert scrape(port)[1].endswith(" 112.0")

    with WireClient(b.host, b.port, client_id="other") as other:  # not matched by client_id=app-.*
        got = other.request(GET_SUBSCRIPTIONS, 0, {"client_instance_id": ZERO})
        assert (got["requested_metrics"], got["push_interval_ms"]) == ([], 300000)
