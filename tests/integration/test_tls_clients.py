"""Real clients over SSL listeners: kafka-python, confluent-kafka, aiokafka and Kafka's Java tools.

One broker serves three listeners at once (Kafka's syntax, listener-prefixed overrides):

- PLAINTEXT (topic creation, and proof that plaintext keeps working beside TLS);
- SSL: server authentication only (``ssl.client.auth=none``);
- MTLS (mapped to SSL): ``listener.name.mtls.ssl.client.auth=required`` and
  ``listener.name.mtls.ssl.principal.mapping.rules`` mapping ``CN=<name>,OU=Clients,...`` to
  ``<name>`` lower-cased and nothing else, so a certificate of another OU (trusted CA, valid) is
  refused by the mapping, not by the handshake.

Refusals checked: a server certificate from a CA the client does not trust; on MTLS no client
certificate, an untrusted one and an expired one. After each, a good client is still served.
The certificates are made at test time (tests/support/certs.py).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import uuid
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.certs import TestPki
from tests.support.client_roundtrip import confluent_roundtrip
from tests.support.wire import WireClient, create_topic


class TlsBroker:
    def __init__(self, proc: BrokerProcess, pki: TestPki, ssl_port: int, mtls_port: int, tmp: Path) -> None:
        self.proc, self.pki, self.tmp = proc, pki, tmp
        self.plain = f"127.0.0.1:{proc.port}"
        self.ssl = f"127.0.0.1:{ssl_port}"
        self.mtls = f"127.0.0.1:{mtls_port}"
        self.ssl_port, self.mtls_port = ssl_port, mtls_port
        self.alice = pki.client("Alice")
        self.other_ou = pki.client("bob", ou="Partners")
        self.expired = pki.expired_client("late")
        self.stranger = TestPki(tmp / "other-ca", "Stranger CA").client("stranger")

    def topic(self, partitions: int = 1) -> str:
        name = f"tls-{uuid.uuid4().hex[:10]}"
        with WireClient("127.0.0.1", self.proc.port) as c:
            create_topic(c, name, partitions)
        return name

    def context(self, client: object | None = None, ca: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca or self.pki.ca_pem))
        if client is not None:
            ctx.load_cert_chain(str(client.cert_pem), str(client.key_pem))  # type: ignore[attr-defined]
        return ctx


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("tls")
    pki = TestPki(tmp / "pki")
    server = pki.server()
    plain, ssl_port, mtls_port = free_port(), free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port}"
    overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        **server.broker_props(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=Clients,.*$/$1/L",
    }
    old = os.environ.get("ODRADEK_LOG_LEVEL")
    os.environ["ODRADEK_LOG_LEVEL"] = "DEBUG"  # the principal of each TLS connection is logged at DEBUG
    try:
        proc = BrokerProcess(tmp / "broker", port=plain, overrides=overrides).start()
    finally:
        if old is None:
            os.environ.pop("ODRADEK_LOG_LEVEL")
        else:
            os.environ["ODRADEK_LOG_LEVEL"] = old
    yield TlsBroker(proc, pki, ssl_port, mtls_port, tmp)
    proc.stop()


def _api_versions_ok(host: str, port: int, ctx: ssl.SSLContext | None) -> bool:
    with WireClient(host, port, ssl_context=ctx) as c:
        return c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0


# -- confluent-kafka ------------------------------------------------------------------------------

def _confluent_roundtrip(bootstrap: str, topic: str, conf: dict[str, str], n: int = 20) -> list[bytes]:
    return confluent_roundtrip({"bootstrap.servers": bootstrap, **conf}, topic, n, prefix="value")


def test_confluent_kafka_over_ssl(tls_broker: TlsBroker) -> None:
    topic = tls_broker.topic()
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(tls_broker.pki.ca_pem)}
    assert _confluent_roundtrip(tls_broker.ssl, topic, conf) == [f"value-{i}".encode() for i in range(20)]


def test_confluent_kafka_mutual_tls(tls_broker: TlsBroker) -> None:
    topic = tls_broker.topic()
    alice = tls_broker.alice
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(tls_broker.pki.ca_pem),
            "ssl.certificate.location": str(alice.cert_pem), "ssl.key.location": str(alice.key_pem)}
    assert _confluent_roundtrip(tls_broker.mtls, topic, conf) == [f"value-{i}".encode() for i in range(20)]
    # The broker mapped the certificate's DN (Java's RFC 2253 form) with the listener's rule.
    log = tls_broker.proc.log_path.read_text(errors="replace")
    assert "on MTLS (TLSv1.3): principal User:alice" in log, log[-3000:]


def _confluent_refused(bootstrap: str, conf: dict[str, str]) -> str:
    """Metadata through a client that must fail; returns the error it reported."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": lambda e: errors.append(str(e)), **conf})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=4)
    return " ".join(errors)


def test_untrusted_server_certificate_is_refused_by_the_client(tls_broker: TlsBroker) -> None:
    stranger_ca = tls_broker.stranger.ca_pem
    _confluent_refused(tls_broker.ssl, {"security.protocol": "SSL", "ssl.ca.location": str(stranger_ca)})
    with pytest.raises(ssl.SSLCertVerificationError):
        _api_versions_ok("127.0.0.1", tls_broker.ssl_port, tls_broker.context(ca=stranger_ca))
    assert _api_versions_ok("127.0.0.1", tls_broker.ssl_port, tls_broker.context())


@pytest.mark.parametrize("who", ["none", "stranger", "expired", "other_ou"])
def test_mtls_refuses_missing_untrusted_expired_and_unmapped_client_certificates(tls_broker: TlsBroker,
                                                                                  who: str) -> None:
    client = {"none": None, "stranger": tls_broker.stranger, "expired": tls_broker.expired,
              "other_ou": tls_broker.other_ou}[who]
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(tls_broker.pki.ca_pem)}
    if client is not None:
        conf |= {"ssl.certificate.location": str(client.cert_pem), "ssl.key.location": str(client.key_pem)}
    _confluent_refused(tls_broker.mtls, conf)
    # The raw view: the handshake (or, for a DN no rule maps, the connection right after it) ends.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _api_versions_ok("127.0.0.1", tls_broker.mtls_port, tls_broker.context(client))
    # ...and a client with a good certificate is served right after.
    assert _api_versions_ok("127.0.0.1", tls_broker.mtls_port, tls_broker.context(tls_broker.alice))
    log = tls_broker.proc.log_path.read_text(errors="replace")
    if who == "other_ou":
        assert "No rules apply to CN=bob,OU=Partners,O=Odradek Test,C=US" in log
    else:
        assert "Failed authentication with 127.0.0.1 on MTLS (SSL handshake failed" in log


# -- kafka-python ---------------------------------------------------------------------------------

def test_kafka_python_over_ssl(tls_broker: TlsBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = tls_broker.topic()
    ssl_conf = {"security_protocol": "SSL", "ssl_cafile": str(tls_broker.pki.ca_pem), "ssl_check_hostname": True}
    producer = KafkaProducer(bootstrap_servers=tls_broker.ssl, **ssl_conf)
    for i in range(20):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=tls_broker.ssl, auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, group_id=f"g-{topic}", **ssl_conf)
    got = [m.value for _, m in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(20)]


def test_kafka_python_mutual_tls(tls_broker: TlsBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = tls_broker.topic()
    alice = tls_broker.alice
    ssl_conf = {"security_protocol": "SSL", "ssl_cafile": str(tls_broker.pki.ca_pem),
                "ssl_certfile": str(alice.cert_pem), "ssl_keyfile": str(alice.key_pem)}
    producer = KafkaProducer(bootstrap_servers=tls_broker.mtls, **ssl_conf)
    producer.send(topic, b"mtls").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=tls_broker.mtls, auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **ssl_conf)
    assert [m.value for _, m in zip(range(1), consumer, strict=False)] == [b"mtls"]
    consumer.close()


# -- aiokafka -------------------------------------------------------------------------------------

def test_aiokafka_over_ssl(tls_broker: TlsBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = tls_broker.topic()

    async def run() -> list[bytes]:
        ctx = create_ssl_context(cafile=str(tls_broker.pki.ca_pem))
        producer = AIOKafkaProducer(bootstrap_servers=tls_broker.ssl, security_protocol="SSL", ssl_context=ctx)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=tls_broker.ssl, security_protocol="SSL",
                                    ssl_context=ctx, auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in consumer:
                    got.append(m.value)
                    if len(got) == 20:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"aio-{i}".encode() for i in range(20)]


# -- the Java client (Kafka's console tools) ------------------------------------------------------

def _java_props(path: Path, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


@pytest.mark.parametrize("mutual", [False, True], ids=["ssl", "mtls"])
def test_java_console_tools_over_ssl(tls_broker: TlsBroker, mutual: bool) -> None:
    from tests.support.java_tools import run_tool
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    topic = tls_broker.topic()
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_broker.pki.ca_pem)}
    bootstrap = tls_broker.ssl
    if mutual:
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_broker.alice.keystore_pem)}
        bootstrap = tls_broker.mtls
    config = _java_props(tls_broker.tmp / f"client-{mutual}.properties", props)
    lines = [f"java-{i}" for i in range(10)]
    run_tool("kafka-console-producer", ["--bootstrap-server", bootstrap, "--topic", topic,
                                        "--command-config", config], input="\n".join(lines) + "\n")
    out = run_tool("kafka-console-consumer", ["--bootstrap-server", bootstrap, "--topic", topic,
                                              "--command-config", config, "--from-beginning",
                                              "--max-messages", "10", "--timeout-ms", "30000"]).stdout
    assert out.split() == lines


def test_java_client_refuses_untrusted_server(tls_broker: TlsBroker) -> None:
    from tests.support.java_tools import run_tool
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    config = _java_props(tls_broker.tmp / "stranger.properties", {
        "security.protocol": "SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls_broker.stranger.ca_pem)})
    proc = run_tool("kafka-topics", ["--bootstrap-server", tls_broker.ssl, "--list", "--command-config", config],
                    check=False, timeout=120)
    assert proc.returncode != 0
    assert "SSLHandshakeException" in proc.stdout + proc.stderr or "PKIX" in proc.stdout + proc.stderr


def test_plaintext_listener_still_serves_beside_tls(tls_broker: TlsBroker) -> None:
    assert _api_versions_ok("127.0.0.1", tls_broker.proc.port, None)
