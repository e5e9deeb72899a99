"""``kafka-configs`` (Kafka's own ConfigCommand, via bin/kafka-tool's launcher) against Odradek's
AlterClientQuotas / DescribeClientQuotas: alter, describe and delete round trips for clients,
users, user+client, the defaults and ip entities. Each call is one JVM launch, so one test walks
the whole round trip and checks between steps on the wire.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.integration.test_client_quotas import quotas_of
from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    require_toolchain()
    b = BrokerProcess(tmp_path_factory.mktemp("quota-cli"))
    b.start()
    yield b
    b.kill()


def configs(b: BrokerProcess, *args: str, check: bool = True) -> tuple[str, str]:
    proc = run_tool("kafka-configs", ["--bootstrap-server", b.bootstrap, *args], check=check)
    return proc.stdout, proc.stderr


def test_kafka_configs_round_trip(broker: BrokerProcess) -> None:
    b = broker
    cases: list[tuple[list[str], list[tuple[str, str | None]], str]] = [
        (["--entity-type", "clients", "--entity-name", "c1"], [("client-id", "c1")],
         "producer_byte_rate=1024,consumer_byte_rate=2048"),
        (["--entity-type", "users", "--entity-name", "u1"], [("user", "u1")], "request_percentage=25.5"),
        (["--entity-type", "users", "--entity-name", "u1", "--entity-type", "clients", "--entity-name", "c1"],
         [("user", "u1"), ("client-id", "c1")], "producer_byte_rate=512"),
        (["--entity-type", "users", "--entity-default"], [("user", None)], "consumer_byte_rate=4096"),
        (["--entity-type", "clients", "--entity-default"], [("client-id", None)], "producer_byte_rate=8192"),
        (["--entity-type", "ips", "--entity-name", "127.0.0.1"], [("ip", "127.0.0.1")],
         "connection_creation_rate=7"),
        (["--entity-type", "ips", "--entity-default"], [("ip", None)], "connection_creation_rate=50"),
    ]
    for entity_args, entity, values in cases:
        configs(b, "--alter", "--add-config", values, *entity_args)
        expected = {k: float(v) for k, v in (kv.split("=") for kv in values.split(","))}
        assert quotas_of(b, entity) == expected, entity

    out, _ = configs(b, "--describe", "--entity-type", "clients")
    assert "Quota configs for client-id 'c1' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0" in out
    assert "Quota configs for the default client-id are producer_byte_rate=8192.0" in out
    out, _ = configs(b, "--describe", "--entity-type", "ips")
    assert "Quota configs for ip '127.0.0.1' are connection_creation_rate=7.0" in out
    assert "Quota configs for the default ip are connection_creation_rate=50.0" in out
    # Describing users also asks for SCRAM credentials (DescribeUserScramCredentials, KIP-554):
    # the quotas are printed first; without SCRAM support the tool then fails on that call.
    out, err = configs(b, "--describe", "--entity-type", "users", "--entity-name", "u1", "--entity-type", "clients",
                       "--entity-name", "c1", check=False)
    assert "Quota configs for user-principal 'u1', client-id 'c1' are producer_byte_rate=512.0" in out, (out, err)
    out, err = configs(b, "--describe", "--entity-type", "users", check=False)
    assert "Quota configs for user-principal 'u1' are request_percentage=25.5" in out, (out, err)
    assert "Quota configs for the default user-principal are consumer_byte_rate=4096.0" in out, (out, err)

    configs(b, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients", "--entity-name", "c1")
    assert quotas_of(b, [("client-id", "c1")]) == {"producer_byte_rate": 1024.0}
    configs(b, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users", "--entity-name", "u1",
            "--entity-type", "clients", "--entity-name", "c1")
    assert quotas_of(b, [("user", "u1"), ("client-id", "c1")]) == {}
    configs(b, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "users", "--entity-default")
    assert quotas_of(b, [("user", None)]) == {}
    configs(b, "--alter", "--delete-config", "connection_creation_rate", "--entity-type", "ips", "--entity-name",
            "127.0.0.1")
    assert quotas_of(b, [("ip", "127.0.0.1")]) == {}
    # A key kafka-configs accepts but the entity does not: the broker's INVALID_REQUEST reaches the tool.
    _, err = configs(b, "--alter", "--add-config", "connection_creation_rate=3", "--entity-type", "clients",
                     "--entity-name", "c2", check=False)
    assert "connection_creation_rate" in err
    assert quotas_of(b, [("client-id", "c2")]) == {}
    # Quotas survive a restart (the controller's metadata log).
    b.restart()
    assert quotas_of(b, [("client-id", "c1")]) == {"producer_byte_rate": 1024.0}
    assert quotas_of(b, [("ip", None)]) == {"connection_creation_rate": 50.0}


def test_java_producer_reports_the_throttle_time(broker: BrokerProcess) -> None:
    """Kafka's ProducerPerformance (the Java client) over its producer_byte_rate: the broker's
    throttle_time_ms shows in the client's own produce-throttle-time metrics."""
    b = broker
    configs(b, "--alter", "--add-config", "producer_byte_rate=100000", "--entity-type", "clients",
            "--entity-name", "java-quota")
    # 1.5 MB against 100 KB/s: one minimum window (10 s, 1 MB) passes unthrottled, the rest is not.
    out = run_tool("kafka-producer-perf-test", [
        "--topic", "java-quota", "--num-records", "1500", "--record-size", "1000", "--throughput", "-1",
        "--print-metrics", "--command-property", f"bootstrap.servers={b.bootstrap}", "client.id=java-quota",
        "batch.size=16384", "linger.ms=5", "acks=1"], timeout=180).stdout
    found = re.search(r"producer-metrics:produce-throttle-time-max:\{client-id=java-quota\}\s*:\s*(\S+)", out)
    assert found is not None, out[-3000:]
    assert float(found.group(1)) > 0, out[-3000:]
