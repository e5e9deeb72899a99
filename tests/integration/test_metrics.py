"""The Prometheus endpoint reports real request counts, latencies and produced bytes."""

from __future__ import annotations

import re
import urllib.request

from odradek.protocol.records import Record, encode_batch
from tests.support.broker_process import free_port
from tests.support.wire import WireClient


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def value(text: str, pattern: str) -> float:
    m = re.search(pattern + r" ([0-9.e+-]+)$", text, re.M)
    assert m, f"{pattern} not in metrics"
    return float(m.group(1))


def test_metrics_endpoint_counts_requests_and_bytes(broker_factory) -> None:
    port = free_port()
    broker = broker_factory({"odradek.metrics.port": str(port), "odradek.metrics.host": "127.0.0.1"})
    records = encode_batch([Record(timestamp=1, value=b"x" * 100)])
    with WireClient(broker.host, broker.port) as c:
        for _ in range(3):
            c.request(18, 3, {"client_software_name": "m", "client_software_version": "1"})
        c.request(19, 7, {"topics": [{"name": "m", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1000})
        c.request(0, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "m", "partition_data": [{"index": 0, "records": records}]}]})
    text = scrape(port)
    assert value(text, r'odradek_requests_total\{api="ApiVersions"\}') == 3
    assert value(text, r'odradek_requests_total\{api="Produce"\}') == 1
    assert value(text, r'odradek_request_latency_seconds_count\{api="CreateTopics"\}') == 1
    assert value(text, "odradek_produce_bytes_total") == len(records)
    assert value(text, "odradek_partitions") == 1
    assert value(text, "odradek_connections") >= 0
