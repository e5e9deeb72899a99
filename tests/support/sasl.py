"""SASL test helpers: a broker with a PLAINTEXT and a SASL_PLAINTEXT listener (and, given a test PKI,
a SASL_SSL listener and a SASL_SSL one that also requires a client certificate), SCRAM users created
through AlterUserScramCredentials, each client's SASL settings, and a raw-socket SASL client
(broker/security/sasl/client.py)."""

from __future__ import annotations

import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.broker.launcher.cluster_launcher import kafka_request
from odradek.broker.security.sasl.client import ScramClient, plain_token, scram_upsertion
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.wire import WireClient

if TYPE_CHECKING:
    from tests.support.certs import Issued, TestPki

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
SASL_AUTHENTICATION_FAILED = 58


class SaslBroker:
    """A started broker: ``plain_port`` (PLAINTEXT, for set-up) and ``sasl_port`` (SASL_PLAINTEXT);
    with a PKI also ``ssl_port`` (SASL_SSL, server certificate only) and ``mtls_port`` (SASL_SSL with
    ``listener.name.sasl_mtls.ssl.client.auth=required``)."""

    def __init__(self, process: BrokerProcess, sasl_port: int, ssl_port: int | None = None,
                 mtls_port: int | None = None, pki: TestPki | None = None) -> None:
        self.process = process
        self.host = process.host
        self.plain_port = process.port
        self.sasl_port = sasl_port
        self.ssl_port = ssl_port
        self.mtls_port = mtls_port
        self.pki = pki

    @property
    def sasl_bootstrap(self) -> str:
        return f"{self.host}:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"{self.host}:{self.ssl_port}"

    @property
    def mtls_bootstrap(self) -> str:
        return f"{self.host}:{self.mtls_port}"

    def add_scram_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                       iterations: int = 4096) -> None:
        resp = kafka_request(self.host, self.plain_port, "AlterUserScramCredentials", 0,
                             {"deletions": [], "upsertions": [scram_upsertion(mechanism, user, password, iterations)]})
        assert [r["error_code"] for r in resp["results"]] == [0], resp


def start_sasl_broker(data_dir: Path, extra: dict[str, str] | None = None, pki: TestPki | None = None,
                      debug: bool = False) -> SaslBroker:
    """Start one broker (the caller kills ``.process``). With ``pki``: the SASL_SSL listeners too,
    the broker's certificate issued by it. ``debug``: log at DEBUG (each connection's principal)."""
    plain_port, sasl_port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    overrides = {
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "20",
    }
    ssl_port = mtls_port = None
    if pki is not None:
        ssl_port, mtls_port = free_port(), free_port()
        listeners += f",SASL_SSL://127.0.0.1:{ssl_port},SASL_MTLS://127.0.0.1:{mtls_port}"
        overrides |= {
            "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                               "SASL_SSL:SASL_SSL,SASL_MTLS:SASL_SSL"),
            **pki.server().broker_props(),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_mtls.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_mtls.ssl.client.auth": "required",
        }
    overrides |= {"listeners": listeners, "advertised.listeners": listeners}
    overrides.update(extra or {})
    process = BrokerProcess(data_dir, port=plain_port, overrides=overrides)
    with log_level("DEBUG" if debug else None):
        process.start()
    return SaslBroker(process, sasl_port, ssl_port, mtls_port, pki)


@contextmanager
def log_level(level: str | None) -> Iterator[None]:
    """ODRADEK_LOG_LEVEL for the brokers started inside (None: leave it as it is)."""
    old = os.environ.get("ODRADEK_LOG_LEVEL")
    if level is not None:
        os.environ["ODRADEK_LOG_LEVEL"] = level
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ODRADEK_LOG_LEVEL", None)
        else:
            os.environ["ODRADEK_LOG_LEVEL"] = old


# -- each client's SASL settings (protocol SASL_PLAINTEXT, or SASL_SSL with ``ca`` as trust store) -------

def kafka_python_config(bootstrap: str, mechanism: str, user: str, password: str, ca: Path | None = None,
                        client: Issued | None = None) -> dict:
    """kafka-python's (and aiokafka's, which shares the names except for TLS) keyword arguments."""
    cfg: dict = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
                 "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    if ca is not None:
        cfg |= {"ssl_cafile": str(ca), "ssl_check_hostname": True}
    if client is not None:
        cfg |= {"ssl_certfile": str(client.cert_pem), "ssl_keyfile": str(client.key_pem)}
    return cfg


def aiokafka_config(bootstrap: str, mechanism: str, user: str, password: str, ca: Path | None = None,
                    client: Issued | None = None) -> dict:
    cfg = kafka_python_config(bootstrap, mechanism, user, password)
    if ca is not None:
        ctx = ssl.create_default_context(cafile=str(ca))
        if client is not None:
            ctx.load_cert_chain(str(client.cert_pem), str(client.key_pem))
        cfg |= {"security_protocol": "SASL_SSL", "ssl_context": ctx}
    return cfg


def librdkafka_config(bootstrap: str, mechanism: str, user: str, password: str, ca: Path | None = None,
                      client: Issued | None = None) -> dict:
    cfg = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
           "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if ca is not None:
        cfg["ssl.ca.location"] = str(ca)
    if client is not None:
        cfg |= {"ssl.certificate.location": str(client.cert_pem), "ssl.key.location": str(client.key_pem)}
    return cfg


def java_properties(directory: Path, mechanism: str, user: str, password: str, ca: Path | None = None,
                    client: Issued | None = None) -> str:
    """A Java client properties file (the tools' --command-config); returns its path."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    lines = [f"security.protocol={'SASL_SSL' if ca else 'SASL_PLAINTEXT'}", f"sasl.mechanism={mechanism}",
             f'sasl.jaas.config={module} required username="{user}" password="{password}";']
    if ca is not None:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={ca}"]
    if client is not None:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={client.keystore_pem}"]
    path = directory / f"client-{mechanism}-{uuid.uuid4().hex[:6]}.properties"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def tls_wire_client(host: str, port: int, ca: Path, client: Issued | None = None, **kw: object) -> WireClient:
    """A raw WireClient over TLS, verifying the broker's certificate against ``ca``."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert_pem), str(client.key_pem))
    return WireClient(host, port, ssl_context=ctx, **kw)  # type: ignore[arg-type]


def handshake(c: WireClient, mechanism: str) -> dict:
    return c.request(17, 1, {"mechanism": mechanism})


def authenticate(c: WireClient, token: bytes, version: int = 1) -> dict:
    return c.request(36, version, {"auth_bytes": token})


def login_plain(c: WireClient, user: str, password: str, version: int = 1) -> dict:
    assert handshake(c, "PLAIN")["error_code"] == 0
    return authenticate(c, plain_token(user, password), version)


def login_scram(c: WireClient, mechanism: str, user: str, password: str, version: int = 1) -> dict:
    assert handshake(c, mechanism)["error_code"] == 0
    client = ScramClient(mechanism, user, password)
    first = authenticate(c, client.first(), version)
    if first["error_code"]:
        return first
    final = authenticate(c, client.final(bytes(first["auth_bytes"])), version)
    if final["error_code"] == 0:
        client.verify(bytes(final["auth_bytes"]))
    return final


def failed_logins_while_served(connect: Callable[[], WireClient], login: Callable[[WireClient, int], dict],
                               served: WireClient, per_thread: int, threads: int,
                               metadata_version: int = 9) -> tuple[int, float, list[float]]:
    """``threads`` threads each open ``per_thread`` connections with ``connect`` and fail a login on
    each (``login(client, n)``), while the authenticated client ``served`` sends Metadata every 50 ms.
    Returns (SASL_AUTHENTICATION_FAILED answers, seconds taken, ``served``'s latencies)."""
    failures: list[int] = []
    latencies: list[float] = []
    stop = threading.Event()
    body = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}

    def guess() -> None:
        n = 0
        for i in range(per_thread):
            with connect() as c:
                n += login(c, i)["error_code"] == SASL_AUTHENTICATION_FAILED
        failures.append(n)

    def served_meanwhile() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            assert served.request(3, metadata_version, body)["brokers"]
            latencies.append(time.monotonic() - t0)
            time.sleep(0.05)

    watcher = threading.Thread(target=served_meanwhile)
    watcher.start()
    t0 = time.monotonic()
    workers = [threading.Thread(target=guess) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    elapsed = time.monotonic() - t0
    stop.set()
    watcher.join(10)
    return sum(failures), elapsed, latencies


def kafka_python_refusal_timeouts() -> dict:
    """KafkaAdminClient timeouts for a connection that must be refused: the bootstrap gives up after
    5 s rather than kafka-python 3's default 30 s (older releases have no bootstrap_timeout_ms)."""
    from kafka.admin import KafkaAdminClient

    timeouts = {"request_timeout_ms": 10000}
    if "bootstrap_timeout_ms" in KafkaAdminClient.DEFAULT_CONFIG:
        timeouts["bootstrap_timeout_ms"] = 5000
    return timeouts
