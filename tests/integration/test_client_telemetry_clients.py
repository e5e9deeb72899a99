"""Real clients push their metrics to Odradek (KIP-714) and Odradek serves them on /metrics.

- Kafka 4.4's ``kafka-client-metrics`` creates a subscription (``--alter --name --metrics --interval``),
  lists it (ListConfigResources), describes it (DescribeConfigs) and deletes it (IncrementalAlterConfigs
  DELETE of each key), printing what it prints against Kafka.
- The Kafka 4.4 Java producer (kafka-producer-perf-test: enable.metrics.push is on by default) gets
  the subscription and pushes: /metrics has its ``org.apache.kafka.producer.record.send.total`` (the
  records it had sent at its last push; per topic the same), labelled with its client id, software name and version, and a
  client instance id in Kafka's base64 form.
- Kafka 4.4's ``kafka-configs --entity-type client-metrics`` sets, describes (the set keys, source
  DYNAMIC_CLIENT_METRICS_CONFIG) and deletes keys, and is refused an interval out of bounds with Kafka's
  message, the subscription unchanged.
- librdkafka (confluent-kafka's, 2.5+ implements KIP-714; zstd-compressed pushes) pushes as well,
  on a subscription matching the software name confluent-kafka-python gives it only.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest

from odradek.broker.launcher.cluster_launcher import free_port
from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port("127.0.0.1")
    b = BrokerProcess(tmp_path_factory.mktemp("telemetry") / "b",
                      overrides={"odradek.metrics.port": str(port), "odradek.metrics.host": "127.0.0.1"}).start()
    yield b, port
    b.kill()


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = re.fullmatch(re.escape(name) + r"\{(.*)\} (\S+)", line)
        if m:
            out.append((dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))), float(m.group(2))))
    return out


def client_metrics(bootstrap: str, *args: str) -> str:
    return run_tool("kafka-client-metrics", ["--bootstrap-server", bootstrap, *args]).stdout


def test_kafka_client_metrics_tool_and_the_java_producer(broker) -> None:
    require_toolchain()
    b, port = broker
    out = client_metrics(b.bootstrap, "--alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.",
                         "--interval", "1000")
    assert out.strip() == "Altered client metrics config for producers."
    assert client_metrics(b.bootstrap, "--list").split() == ["producers"]
    assert client_metrics(b.bootstrap, "--describe", "--name", "producers").splitlines() == [
        "Client metrics configs for producers are:", "  interval.ms=1000", "  match=",
        "  metrics=org.apache.kafka.producer."]

    perf = run_tool("kafka-producer-perf-test", [
        "--topic", "telemetry", "--num-records", "300", "--throughput", "100", "--record-size", "100",
        "--command-property", f"bootstrap.servers={b.bootstrap}", "client.id=perf-1"])
    assert "300 records sent" in perf.stdout
    # The producer pushed every second or so (jittered) while it ran, its counts as deltas since its
    # last push, which /metrics adds up: the total it had sent at its last push (it sends no final
    # push as it closes).
    sent = samples(scrape(port), "org_apache_kafka_producer_record_send_total")
    assert len(sent) == 1, sent
    labels, value = sent[0]
    assert 0 < value <= 300 and value == int(value)
    assert labels["client_id"] == "perf-1" and labels["client_software_name"] == "apache-kafka-java"
    assert labels["client_software_version"] == "4.4.0"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", labels["client_instance_id"])
    per_topic = samples(scrape(port), "org_apache_kafka_producer_topic_record_send_total")
    assert [(lb["topic"], v) for lb, v in per_topic] == [("telemetry", value)]

    out = client_metrics(b.bootstrap, "--delete", "--name", "producers")
    assert out.strip() == "Deleted client metrics config for producers."
    assert client_metrics(b.bootstrap, "--list").strip() == ""


def test_kafka_configs_entity_type_client_metrics(broker) -> None:
    require_toolchain()
    b, _ = broker

    def configs(*args: str, check: bool = True) -> tuple[int, str, str]:
        p = run_tool("kafka-configs", ["--bootstrap-server", b.bootstrap, "--entity-type", "client-metrics",
                                       "--entity-name", "cfg", *args], check=check)
        return p.returncode, p.stdout, p.stderr

    metrics = "org.apache.kafka.consumer.,org.apache.kafka.producer."
    assert configs("--alter", "--add-config", f"metrics=[{metrics}],interval.ms=2000")[1] == (
        "Completed updating config for client-metric cfg.\n")
    described = [
        "Dynamic configs for client-metric cfg are:",
        "  interval.ms=2000 sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=2000}",
        f"  metrics={metrics} sensitive=false synonyms={{DYNAMIC_CLIENT_METRICS_CONFIG:metrics={metrics}}}"]
    assert configs("--describe")[1].splitlines() == described
    code, _, err = configs("--alter", "--add-config", "interval.ms=5", check=False)
    assert code == 1 and ("InvalidRequestException: Invalid value 5 for interval.ms, interval must be between 100 "
                          "and 3600000 (1 hour)") in err
    assert configs("--describe")[1].splitlines() == described
    configs("--alter", "--delete-config", "interval.ms")
    assert configs("--describe")[1].splitlines() == [described[0], described[2]]
    configs("--alter", "--delete-config", "metrics")


def test_librdkafka_pushes_its_metrics(broker) -> None:
    from confluent_kafka import Producer

    b, port = broker
    require_toolchain()
    client_metrics(b.bootstrap, "--alter", "--name", "librdkafka", "--metrics", "org.apache.kafka.producer.",
                   "--interval", "500", "--match", "client_software_name=confluent-kafka-python")
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "rdk-1", "enable.metrics.push": True})
    try:
        deadline = time.monotonic() + 30
        found: list = []
        while not found:
            p.produce("telemetry-rdk", b"x")
            p.poll(0.2)
            found = [s for s in scrape(port).splitlines()
                     if s.startswith("org_apache_kafka_producer_") and 'client_id="rdk-1"' in s]
            assert time.monotonic() < deadline, "librdkafka pushed nothing"
        assert all('client_software_name="confluent-kafka-python"' in s for s in found)
        assert any(s.startswith("org_apache_kafka_producer_request_latency_avg{") for s in found)
    finally:
        p.flush(10)
        client_metrics(b.bootstrap, "--delete", "--name", "librdkafka")
