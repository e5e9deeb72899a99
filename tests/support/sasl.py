"""SASL test helpers: a broker with a PLAINTEXT and a SASL_PLAINTEXT listener, SCRAM users created
through AlterUserScramCredentials, and a raw-socket SASL client (broker/security/sasl/client.py)."""

from __future__ import annotations

from pathlib import Path

from broker.cluster_launcher import kafka_request
from broker.security.sasl.client import ScramClient, plain_token, scram_upsertion
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.wire import WireClient

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


class SaslBroker:
    """A started broker: ``plain_port`` (PLAINTEXT, for set-up) and ``sasl_port`` (SASL_PLAINTEXT)."""

    def __init__(self, process: BrokerProcess, sasl_port: int) -> None:
        self.process = process
        self.host = process.host
        self.plain_port = process.port
        self.sasl_port = sasl_port

    @property
    def sasl_bootstrap(self) -> str:
        return f"{self.host}:{self.sasl_port}"

    def add_scram_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                       iterations: int = 4096) -> None:
        resp = kafka_request(self.host, self.plain_port, "AlterUserScramCredentials", 0,
                             {"deletions": [], "upsertions": [scram_upsertion(mechanism, user, password, iterations)]})
        assert [r["error_code"] for r in resp["results"]] == [0], resp


def start_sasl_broker(data_dir: Path, extra: dict[str, str] | None = None) -> SaslBroker:
    """Start one broker (the caller kills ``.process``)."""
    plain_port, sasl_port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": "20",
    }
    overrides.update(extra or {})
    process = BrokerProcess(data_dir, port=plain_port, overrides=overrides)
    process.start()
    return SaslBroker(process, sasl_port)


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
