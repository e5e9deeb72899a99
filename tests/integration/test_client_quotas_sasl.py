"""Quotas by authenticated user: the user a SASL_SSL login names (not the client certificate's DN) is
the quota entity. ``kafka-configs --entity-type users --entity-name alice`` (sent over SASL_SSL by an
authenticated admin) throttles alice's produce while bob on the same broker is not throttled, and a
user+client-id quota wins over the user's own (Kafka's precedence). Short: one over-quota request
each, read from throttle_time_ms (the 30-s accuracy test is test_client_quotas.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_client_quotas import alter, produce_request
from tests.support.certs import TestPki
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain
from tests.support.sasl import SaslBroker, java_properties, login_scram, start_sasl_broker, tls_wire_client
from tests.support.wire import WireClient, create_topic

TOPIC = "quota-sasl"
PASSWORDS = {"alice": "alice-scram", "bob": "bob-scram"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    tmp = tmp_path_factory.mktemp("quota-sasl")
    b = start_sasl_broker(tmp / "broker", pki=TestPki(tmp / "pki"), extra={"quota.window.num": "2"})
    for user, password in PASSWORDS.items():
        b.add_scram_user(user, password)
    with WireClient(b.host, b.plain_port) as c:
        create_topic(c, TOPIC, 1)
    yield b
    b.process.kill()


def _throttle(b: SaslBroker, user: str, client_id: str, port: int | None = None, cert: object = None) -> int:
    """One 20 KB produce over SASL_SSL as ``user`` (SCRAM-SHA-512); its throttle_time_ms."""
    assert b.pki is not None and b.ssl_port is not None
    with tls_wire_client(b.host, port or b.ssl_port, b.pki.ca_pem, cert, client_id=client_id) as c:  # type: ignore[arg-type]
        assert login_scram(c, "SCRAM-SHA-512", user, PASSWORDS[user])["error_code"] == 0
        response = c.request(0, 9, produce_request(TOPIC, 20_000))
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
        return response["throttle_time_ms"]


def test_user_quota_set_by_kafka_configs_throttles_that_user_only(broker: SaslBroker, tmp_path: Path) -> None:
    require_toolchain()
    assert broker.pki is not None
    admin = java_properties(tmp_path, "PLAIN", "admin", "admin-secret", ca=broker.pki.ca_pem)
    for entity in (["--entity-type", "users", "--entity-name", "alice"],
                   ["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                    "--entity-name", "fast-app"]):
        rate = "5000" if len(entity) == 4 else "100000000"
        out = run_tool("kafka-configs", ["--bootstrap-server", broker.sasl_ssl_bootstrap, "--command-config", admin,
                                         "--alter", "--add-config", f"producer_byte_rate={rate}", *entity]).stdout
        assert "Completed updating config" in out, out
    assert _throttle(broker, "alice", "app") > 0
    assert _throttle(broker, "bob", "app") == 0  # the same client id, another user: no quota
    assert _throttle(broker, "alice", "fast-app") == 0  # user+client-id beats the user's own quota


def test_quota_follows_the_sasl_user_not_the_certificate(broker: SaslBroker) -> None:
    """On the SASL_SSL listener that requires certificates, CN=carol logging in as bob is bob: a tiny
    quota for the certificate's DN does not apply, a tiny one for bob does."""
    assert broker.pki is not None and broker.mtls_port is not None
    carol = broker.pki.client("carol")
    dn = "CN=carol,OU=Clients,O=Odradek Test,C=US"
    assert alter(broker.process, [("user", dn)], [("producer_byte_rate", 1000)])["error_code"] == 0
    assert _throttle(broker, "bob", "cert-app", broker.mtls_port, carol) == 0
    assert alter(broker.process, [("user", "bob"), ("client-id", "cert-app")],
                 [("producer_byte_rate", 1000)])["error_code"] == 0
    assert _throttle(broker, "bob", "cert-app", broker.mtls_port, carol) > 0
