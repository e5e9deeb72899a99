"""Real clients over SASL_SSL: kafka-python, confluent-kafka (librdkafka), aiokafka and the Java client
(Kafka's console tools) produce and consume with SCRAM-SHA-512 and PLAIN over TLS, each verifying the
broker's certificate (tests/support/certs.py). A wrong password is refused with each client's SASL
error, a server certificate from a CA the client does not trust with its TLS error.

Where the layers meet: the principal of a SASL_SSL connection is the SASL user, not the client
certificate's DN (Kafka's SaslServerAuthenticator builds it from the SASL authorization id), and a
SASL_SSL listener with ``listener.name.<l>.ssl.client.auth=required`` needs both a trusted client
certificate and a SASL login.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.support.certs import TestPki
from tests.support.client_roundtrip import (
    aiokafka_roundtrip,
    confluent_roundtrip,
    kafka_python_roundtrip,
    values,
)
from tests.support.java_tools import console_roundtrip, run_tool
from tests.support.real_kafka import require_toolchain
from tests.support.sasl import (
    SaslBroker,
    aiokafka_config,
    java_properties,
    kafka_python_config,
    kafka_python_refusal_timeouts,
    librdkafka_config,
    login_plain,
    login_scram,
    start_sasl_broker,
    tls_wire_client,
)

USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-512": ("scram512", "s512-secret")}
MECHANISMS = list(USERS)
SCRAM_REFUSED = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                 "SCRAM-SHA-512")
PLAIN_REFUSED = "Authentication failed: Invalid username or password"
REFUSED = {"PLAIN": PLAIN_REFUSED, "SCRAM-SHA-512": SCRAM_REFUSED}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    b = start_sasl_broker(tmp / "broker", pki=TestPki(tmp / "pki"), debug=True)
    b.add_scram_user(*USERS["SCRAM-SHA-512"], "SCRAM-SHA-512")
    yield b
    b.process.kill()


@pytest.fixture(scope="module")
def stranger_ca(tmp_path_factory: pytest.TempPathFactory):
    """A CA the broker's certificate does not chain to."""
    return TestPki(tmp_path_factory.mktemp("stranger"), "Stranger CA").ca_pem


def _topic(hint: str) -> str:
    return f"sasl-ssl-{hint}-{uuid.uuid4().hex[:8]}"


def _creds(mechanism: str, password: str | None = None) -> tuple[str, str]:
    user, good = USERS[mechanism]
    return user, good if password is None else password


# -- kafka-python ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes(broker: SaslBroker, mechanism: str) -> None:
    assert broker.pki is not None
    cfg = kafka_python_config(broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism), ca=broker.pki.ca_pem)
    assert kafka_python_roundtrip(cfg, _topic("kp"), prefix="kp") == values("kp", 5)


def test_kafka_python_refusals(broker: SaslBroker, stranger_ca, caplog: pytest.LogCaptureFixture) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    assert broker.pki is not None
    caplog.set_level(logging.ERROR, logger="kafka")
    for mechanism in MECHANISMS:
        with pytest.raises(KafkaError):
            KafkaAdminClient(**kafka_python_config(broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism, "wrong"),
                                                   ca=broker.pki.ca_pem), **kafka_python_refusal_timeouts())
        assert f"SaslAuthenticationFailedError: {REFUSED[mechanism]}" in caplog.text
    caplog.clear()
    with pytest.raises(KafkaError):
        KafkaAdminClient(**kafka_python_config(broker.sasl_ssl_bootstrap, "SCRAM-SHA-512", *_creds("SCRAM-SHA-512"),
                                               ca=stranger_ca), **kafka_python_refusal_timeouts())
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes(broker: SaslBroker, mechanism: str) -> None:
    assert broker.pki is not None
    cfg = librdkafka_config(broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism), ca=broker.pki.ca_pem)
    assert confluent_roundtrip(cfg, _topic("ck"), prefix="ck") == values("ck", 5)


def _librdkafka_first_error(cfg: dict) -> tuple[int, str]:
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({**cfg, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    return errors[0].code(), errors[0].str()


def test_confluent_kafka_refusals(broker: SaslBroker, stranger_ca) -> None:
    from confluent_kafka import KafkaError

    assert broker.pki is not None
    for mechanism in MECHANISMS:
        code, text = _librdkafka_first_error(librdkafka_config(
            broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism, "wrong"), ca=broker.pki.ca_pem))
        assert code == KafkaError._AUTHENTICATION and REFUSED[mechanism] in text, text
    code, text = _librdkafka_first_error(librdkafka_config(
        broker.sasl_ssl_bootstrap, "SCRAM-SHA-512", *_creds("SCRAM-SHA-512"), ca=stranger_ca))
    assert code in (KafkaError._SSL, KafkaError._TRANSPORT) and "certificate verify failed" in text, text


# -- aiokafka --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes(broker: SaslBroker, mechanism: str) -> None:
    assert broker.pki is not None
    cfg = aiokafka_config(broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism), ca=broker.pki.ca_pem)
    assert aiokafka_roundtrip(cfg, _topic("aio"), prefix="aio") == values("aio", 5)


def test_aiokafka_refusals(broker: SaslBroker, stranger_ca) -> None:
    from aiokafka.conn import create_conn
    from aiokafka.errors import SaslAuthenticationFailed

    assert broker.pki is not None
    port = broker.ssl_port
    assert port is not None

    async def connect(mechanism: str, password: str | None, ca) -> None:
        cfg = aiokafka_config(broker.sasl_ssl_bootstrap, mechanism, *_creds(mechanism, password), ca=ca)
        cfg.pop("bootstrap_servers")
        conn = await create_conn(broker.host, port, **cfg)
        conn.close()

    for mechanism in MECHANISMS:
        with pytest.raises(SaslAuthenticationFailed) as exc:
            asyncio.run(connect(mechanism, "wrong", broker.pki.ca_pem))
        assert REFUSED[mechanism] in str(exc.value)
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(connect("SCRAM-SHA-512", None, stranger_ca))
    asyncio.run(connect("SCRAM-SHA-512", None, broker.pki.ca_pem))  # and a good client is served


# -- the Java client (Kafka's console tools) ---------------------------------------------------------------

@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_java_console_producer_and_consumer(broker: SaslBroker, tmp_path, mechanism: str) -> None:
    require_toolchain()
    assert broker.pki is not None
    props = java_properties(tmp_path, mechanism, *_creds(mechanism), ca=broker.pki.ca_pem)
    topic = _topic("java")
    assert console_roundtrip(broker.sasl_ssl_bootstrap, topic, props, ["j-0", "j-1", "j-2"]) == ["j-0", "j-1", "j-2"]


def test_java_refusals(broker: SaslBroker, tmp_path, stranger_ca) -> None:
    require_toolchain()
    assert broker.pki is not None
    cases = [(java_properties(tmp_path, "SCRAM-SHA-512", *_creds("SCRAM-SHA-512", "wrong"), ca=broker.pki.ca_pem),
              f"org.apache.kafka.common.errors.SaslAuthenticationException: {SCRAM_REFUSED}"),
             (java_properties(tmp_path, "PLAIN", *_creds("PLAIN"), ca=stranger_ca),
              "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed")]
    for props, message in cases:
        proc = run_tool("kafka-topics", ["--bootstrap-server", broker.sasl_ssl_bootstrap, "--list",
                                         "--command-config", props], check=False, timeout=90)
        assert proc.returncode != 0
        assert message in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


# -- where TLS and SASL meet -----------------------------------------------------------------------------

def _metadata_ok(c) -> list[int]:
    response = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    return [b["port"] for b in response["brokers"]]


def test_principal_is_the_sasl_user_not_the_certificate(broker: SaslBroker) -> None:
    """On the SASL_SSL listener that requires a client certificate, CN=carol logs in as alice: the
    connection's principal is User:alice (Kafka's rule), and Metadata advertises that listener."""
    assert broker.pki is not None and broker.mtls_port is not None
    carol = broker.pki.client("carol")
    with tls_wire_client(broker.host, broker.mtls_port, broker.pki.ca_pem, carol) as c:
        assert login_plain(c, "alice", "alice-secret")["error_code"] == 0
        assert _metadata_ok(c) == [broker.mtls_port]
        peer = f"127.0.0.1:{c.sock.getsockname()[1]}"
    log = broker.process.log_text()
    assert f"{peer} authenticated as User:alice with PLAIN on listener SASL_MTLS" in log, log[-3000:]


def test_client_auth_required_needs_both_a_certificate_and_sasl(broker: SaslBroker) -> None:
    assert broker.pki is not None and broker.mtls_port is not None
    port, ca = broker.mtls_port, broker.pki.ca_pem
    dave = broker.pki.client("dave")
    # No client certificate: the handshake is refused, before any SASL.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with tls_wire_client(broker.host, port, ca) as c:
            login_scram(c, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"])
    # A certificate but no SASL: a Kafka request before SaslHandshake closes the connection.
    with pytest.raises((ConnectionError, OSError, EOFError)):
        with tls_wire_client(broker.host, port, ca, dave) as c:
            _metadata_ok(c)
    # A certificate and a wrong password: SASL_AUTHENTICATION_FAILED (58).
    with tls_wire_client(broker.host, port, ca, dave) as c:
        assert login_scram(c, "SCRAM-SHA-512", "scram512", "wrong")["error_code"] == 58
    # Both: served.
    with tls_wire_client(broker.host, port, ca, dave) as c:
        assert login_scram(c, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"])["error_code"] == 0
        assert _metadata_ok(c) == [port]
    # And the server-auth-only SASL_SSL listener does not ask for a certificate (KIP-684).
    assert broker.ssl_port is not None
    with tls_wire_client(broker.host, broker.ssl_port, ca) as c:
        assert login_scram(c, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"])["error_code"] == 0


def test_find_coordinator_answers_the_sasl_ssl_endpoint(broker: SaslBroker) -> None:
    assert broker.pki is not None and broker.ssl_port is not None
    with tls_wire_client(broker.host, broker.ssl_port, broker.pki.ca_pem) as c:
        assert login_scram(c, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"])["error_code"] == 0
        response = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["g-endpoint"]})
        (coordinator,) = response["coordinators"]
        assert coordinator["error_code"] == 0 and coordinator["port"] == broker.ssl_port, response
