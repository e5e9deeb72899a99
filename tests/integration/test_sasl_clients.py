"""Real clients over SASL_PLAINTEXT: kafka-python, confluent-kafka (librdkafka), aiokafka and the Java
client (Kafka's CLI tools) produce and consume with PLAIN and SCRAM, are refused with Kafka's errors
on a wrong password or an unknown user, and (Java) re-authenticate under connections.max.reauth.ms."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    java_properties,
    kafka_python_config,
    kafka_python_refusal_timeouts,
    librdkafka_config,
    start_sasl_broker,
)

USERS = {  # mechanism -> (user, password)
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-512": ("scram512", "s512-secret"),
    "SCRAM-SHA-256": ("scram256", "s256-secret"),
}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    b = start_sasl_broker(tmp_path_factory.mktemp("sasl-clients"))
    b.add_scram_user(*USERS["SCRAM-SHA-512"], "SCRAM-SHA-512")
    b.add_scram_user(*USERS["SCRAM-SHA-256"], "SCRAM-SHA-256")
    yield b
    b.process.kill()


def _topic(hint: str) -> str:
    return f"sasl-{hint}-{uuid.uuid4().hex[:8]}"


# -- kafka-python ----------------------------------------------------------------------------------------


def _kafka_python_config(b: SaslBroker, mechanism: str, password: str | None = None) -> dict:
    user, good = USERS[mechanism]
    return kafka_python_config(b.sasl_bootstrap, mechanism, user, good if password is None else password)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_kafka_python_produces_and_consumes(sasl_broker: SaslBroker, mechanism: str) -> None:
    assert kafka_python_roundtrip(_kafka_python_config(sasl_broker, mechanism), _topic("kp"), prefix="kp") == \
        values("kp", 5)


def test_kafka_python_wrong_password_is_sasl_authentication_failed(sasl_broker: SaslBroker,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    caplog.set_level(logging.ERROR, logger="kafka")
    for mechanism, password in (("PLAIN", "wrong"), ("SCRAM-SHA-512", "wrong")):
        with pytest.raises(KafkaError):
            KafkaAdminClient(**_kafka_python_config(sasl_broker, mechanism, password), **kafka_python_refusal_timeouts())
    text = caplog.text
    assert "SaslAuthenticationFailedError: Authentication failed: Invalid username or password" in text
    assert ("SaslAuthenticationFailedError: Authentication failed during authentication due to invalid credentials "
            "with SASL mechanism SCRAM-SHA-512") in text


# -- confluent-kafka (librdkafka) --------------------------------------------------------------------------


def _librdkafka_config(b: SaslBroker, mechanism: str, user: str | None = None, password: str | None = None) -> dict:
    default_user, good = USERS[mechanism]
    return librdkafka_config(b.sasl_bootstrap, mechanism, user or default_user, good if password is None else password)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_kafka_produces_and_consumes(sasl_broker: SaslBroker, mechanism: str) -> None:
    assert confluent_roundtrip(_librdkafka_config(sasl_broker, mechanism), _topic("ck"), prefix="ck") == \
        values("ck", 5)


@pytest.mark.parametrize(("mechanism", "user", "password", "message"), [
    ("PLAIN", None, "wrong", "Authentication failed: Invalid username or password"),
    ("PLAIN", "mallory", "x", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", None, "wrong",
     "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("SCRAM-SHA-512", "mallory", "x",
     "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
])
def test_confluent_kafka_refused_with_authentication_error(sasl_broker: SaslBroker, mechanism: str,
                                                           user: str | None, password: str, message: str) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    producer = Producer({**_librdkafka_config(sasl_broker, mechanism, user, password),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert message in errors[0].str()


# -- aiokafka ---------------------------------------------------------------------------------------------


def _aiokafka_config(b: SaslBroker, mechanism: str, password: str | None = None) -> dict:
    return _kafka_python_config(b, mechanism, password)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka_produces_and_consumes(sasl_broker: SaslBroker, mechanism: str) -> None:
    assert aiokafka_roundtrip(_aiokafka_config(sasl_broker, mechanism), _topic("aio"), prefix="aio") == \
        values("aio", 5)


def test_aiokafka_wrong_password_is_sasl_authentication_failed(sasl_broker: SaslBroker) -> None:
    from aiokafka.conn import create_conn
    from aiokafka.errors import SaslAuthenticationFailed

    async def run(mechanism: str) -> str:
        cfg = _aiokafka_config(sasl_broker, mechanism, "wrong")
        with pytest.raises(SaslAuthenticationFailed) as exc:
            await create_conn(sasl_broker.host, sasl_broker.sasl_port, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism=mechanism, sasl_plain_username=cfg["sasl_plain_username"],
                              sasl_plain_password="wrong")
        return str(exc.value)

    assert "Authentication failed: Invalid username or password" in asyncio.run(run("PLAIN"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in asyncio.run(run("SCRAM-SHA-512"))


# -- the Java client (Kafka's CLI tools) ----------------------------------------------------------------------


def _java_properties(tmp_path: Path, mechanism: str, password: str | None = None, user: str | None = None) -> str:
    default_user, good = USERS[mechanism]
    return java_properties(tmp_path, mechanism, user or default_user, good if password is None else password)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java_console_producer_and_consumer(sasl_broker: SaslBroker, tmp_path: Path, mechanism: str) -> None:
    require_toolchain()
    props = _java_properties(tmp_path, mechanism)
    topic = _topic("java")
    assert console_roundtrip(sasl_broker.sasl_bootstrap, topic, props, ["j-0", "j-1", "j-2"]) == ["j-0", "j-1", "j-2"]


@pytest.mark.parametrize(("mechanism", "user", "message"), [
    ("PLAIN", None, "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", "mallory",
     "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
])
def test_java_wrong_credentials_are_sasl_authentication_exception(sasl_broker: SaslBroker, tmp_path: Path,
                                                                   mechanism: str, user: str | None,
                                                                   message: str) -> None:
    require_toolchain()
    props = _java_properties(tmp_path, mechanism, password="wrong", user=user)
    proc = run_tool("kafka-topics", ["--bootstrap-server", sasl_broker.sasl_bootstrap, "--list",
                                     "--command-config", props], check=False, timeout=90)
    assert proc.returncode != 0
    assert f"org.apache.kafka.common.errors.SaslAuthenticationException: {message}" in proc.stdout + proc.stderr


def test_kafka_configs_creates_scram_users_the_clients_log_in_with(sasl_broker: SaslBroker, tmp_path: Path) -> None:
    require_toolchain()
    admin = _java_properties(tmp_path, "PLAIN", user="admin", password="admin-secret")
    b = sasl_broker.sasl_bootstrap
    # One mechanism per command: two for the same user in one request are DUPLICATE_RESOURCE, as in
    # Kafka's ScramControlManager.
    both = run_tool("kafka-configs", ["--bootstrap-server", b, "--command-config", admin, "--alter", "--add-config",
                                      "SCRAM-SHA-512=[password=x],SCRAM-SHA-256=[password=y]",
                                      "--entity-type", "users", "--entity-name", "erin"], check=False)
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same request" in both.stderr
    for config in ("SCRAM-SHA-512=[password=erin-secret]", "SCRAM-SHA-256=[iterations=8192,password=erin-256]"):
        out = run_tool("kafka-configs", ["--bootstrap-server", b, "--command-config", admin, "--alter",
                                         "--add-config", config, "--entity-type", "users",
                                         "--entity-name", "erin"]).stdout
        assert "Completed updating config for user erin." in out
    from kafka.admin import KafkaAdminClient

    for mechanism, password in (("SCRAM-SHA-512", "erin-secret"), ("SCRAM-SHA-256", "erin-256")):
        client = KafkaAdminClient(bootstrap_servers=b, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                  sasl_plain_username="erin", sasl_plain_password=password)
        assert client.list_topics() is not None
        client.close()
    out = run_tool("kafka-configs", ["--bootstrap-server", b, "--command-config", admin, "--alter",
                                     "--delete-config", "SCRAM-SHA-256", "--entity-type", "users",
                                     "--entity-name", "erin"]).stdout
    assert "Completed updating config for user erin." in out


def test_java_client_reauthenticates_within_connections_max_reauth_ms(tmp_path: Path) -> None:
    """A 2 s session lifetime: the Java consumer re-authenticates its connections (KIP-368) and keeps
    consuming records produced over 7 s; the broker closes none of its connections as expired."""
    require_toolchain()
    b = start_sasl_broker(tmp_path, {"connections.max.reauth.ms": "2000"})
    try:
        from kafka import KafkaProducer

        topic = _topic("reauth")
        producer = KafkaProducer(bootstrap_servers=f"{b.host}:{b.plain_port}")
        producer.send(topic, b"r-0").get(timeout=30)

        def later() -> None:
            for i in range(1, 4):
                time.sleep(2.5)
                producer.send(topic, f"r-{i}".encode()).get(timeout=30)

        feeder = threading.Thread(target=later)
        feeder.start()
        props = _java_properties(tmp_path, "SCRAM-SHA-512")
        b.add_scram_user(*USERS["SCRAM-SHA-512"], "SCRAM-SHA-512")
        out = run_tool("kafka-console-consumer", [
            "--bootstrap-server", b.sasl_bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "4",
            "--timeout-ms", "30000", "--command-config", props]).stdout
        feeder.join()
        producer.close()
        assert out.split() == ["r-0", "r-1", "r-2", "r-3"]
        log = b.process.log_text()
        assert "SASL session expired" not in log, log[-3000:]
    finally:
        b.process.kill()


def test_kafka_configs_describes_scram_users(sasl_broker: SaslBroker, tmp_path: Path) -> None:
    require_toolchain()
    sasl_broker.add_scram_user("grace", "grace-secret", "SCRAM-SHA-256", iterations=8192)
    admin = _java_properties(tmp_path, "PLAIN", user="admin", password="admin-secret")
    out = run_tool("kafka-configs", ["--bootstrap-server", sasl_broker.sasl_bootstrap, "--command-config", admin,
                                     "--describe", "--entity-type", "users", "--entity-name", "grace"]).stdout
    assert "SCRAM credential configs for user-principal 'grace' are SCRAM-SHA-256=iterations=8192" in out
