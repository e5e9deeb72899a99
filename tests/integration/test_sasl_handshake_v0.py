"""SaslHandshake v0 (the flow before KIP-152): after it, SASL tokens travel as bare frames.

Kafka 4.4 serves SaslHandshake v0-1. After a v0 handshake its SaslServerAuthenticator reads every
frame as a bare SASL token (no request header, no SaslAuthenticate) and answers each with the
server's token, size-prefixed and nothing else (an empty one for PLAIN's last step); a refused
credential has no answer to carry the error, so the connection is closed (after
connection.failed.authentication.delay.ms). kafka-python 3.x speaks this flow when told the broker
is 0.10.1 (``api_version=(0, 10, 1)``: SaslHandshake v0 in its version table); the raw tests do
byte for byte what such a client does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from odradek.broker.launcher.cluster_launcher import kafka_request
from odradek.broker.security.sasl.client import ScramClient, plain_token
from odradek.protocol.errors import ErrorCode
from tests.support.sasl import SaslBroker, kafka_python_config, start_sasl_broker
from tests.support.wire import WireClient

METADATA_V9 = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
TOPIC = "v0-handshake"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    b = start_sasl_broker(tmp_path_factory.mktemp("sasl-v0"))
    b.add_scram_user("scram512", "s512-secret", "SCRAM-SHA-512")
    created = kafka_request(b.host, b.plain_port, "CreateTopics", 7, {
        "topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000})
    assert created["topics"][0]["error_code"] == 0, created
    yield b
    b.process.kill()


def _client(b: SaslBroker) -> WireClient:
    return WireClient(b.host, b.sasl_port)


def _handshake_v0(c: WireClient, mechanism: str) -> dict:
    return c.request(17, 0, {"mechanism": mechanism})


def _token(c: WireClient, token: bytes) -> bytes:
    """One bare token and the bare answer: what a v0 client writes and reads."""
    c.send_raw(struct.pack(">i", len(token)) + token)
    return c.recv_frame()


def test_api_versions_advertise_handshake_v0(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in c.request(18, 0, {})["api_keys"]}
    assert keys[17] == (0, 1)


def test_plain_bare_token_gets_an_empty_answer_then_requests_are_served(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        hs = _handshake_v0(c, "PLAIN")
        assert hs["error_code"] == 0 and set(hs["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert _token(c, plain_token("alice", "alice-secret")) == b""
        assert [t["name"] for t in c.request(3, 9, {**METADATA_V9, "topics": [{"name": TOPIC}]})["topics"]] == [TOPIC]
        # No re-authentication after a v0 exchange (KIP-368 needs SaslAuthenticate v1): a handshake now
        # reaches the handler, which answers ILLEGAL_SASL_STATE, and the session goes on.
        again = _handshake_v0(c, "PLAIN")
        assert again == {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
        assert c.request(3, 9, METADATA_V9)["brokers"]


def test_scram_bare_exchange_verifies_both_ways(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        assert _handshake_v0(c, "SCRAM-SHA-512")["error_code"] == 0
        client = ScramClient("SCRAM-SHA-512", "scram512", "s512-secret")
        server_first = _token(c, client.first())
        server_final = _token(c, client.final(server_first))
        client.verify(server_final)  # the server knew the credential
        assert c.request(3, 9, METADATA_V9)["brokers"]


@pytest.mark.parametrize("case", ["plain-wrong-password", "plain-unknown-user", "scram-wrong-password",
                                  "framed-request-instead-of-a-token"])
def test_refused_credentials_close_the_connection_without_an_answer(sasl_broker: SaslBroker, case: str) -> None:
    with _client(sasl_broker) as c:
        if case.startswith("plain") or case.startswith("framed"):
            assert _handshake_v0(c, "PLAIN")["error_code"] == 0
            if case == "plain-wrong-password":
                token = plain_token("alice", "wrong")
            elif case == "plain-unknown-user":
                token = plain_token("mallory", "alice-secret")
            else:  # a v1 client's SaslAuthenticate: after a v0 handshake it is a bare (malformed) token
                token = c.encode_request(36, 1, {"auth_bytes": plain_token("alice", "alice-secret")})[1][4:]
            c.send_raw(struct.pack(">i", len(token)) + token)
        else:
            assert _handshake_v0(c, "SCRAM-SHA-512")["error_code"] == 0
            client = ScramClient("SCRAM-SHA-512", "scram512", "wrong")
            server_first = _token(c, client.first())
            final = client.final(server_first)
            c.send_raw(struct.pack(">i", len(final)) + final)
        assert c.is_closed_by_peer()  # recv gives b"" with no byte before it: no answer at all
    assert "Failed authentication with 127.0.0.1" in sasl_broker.process.log_text()
    with _client(sasl_broker) as c:  # others are served on
        assert _handshake_v0(c, "PLAIN")["error_code"] == 0
        assert _token(c, plain_token("alice", "alice-secret")) == b""


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "scram512", "s512-secret")])
def test_kafka_python_speaking_0_10_1_authenticates_with_bare_tokens(sasl_broker: SaslBroker, mechanism: str,
                                                                    user: str, password: str) -> None:
    from kafka import KafkaAdminClient  # type: ignore[import-untyped]  # no type hints

    admin = KafkaAdminClient(**kafka_python_config(sasl_broker.sasl_bootstrap, mechanism, user, password),
                             api_version=(0, 10, 1), request_timeout_ms=10000)
    try:
        assert TOPIC in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_speaking_0_10_1_with_a_wrong_password_is_refused(sasl_broker: SaslBroker) -> None:
    """The bare flow has no answer for a failure: the client only sees its connections closed, and
    gives up bootstrapping; the broker logs why."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError  # type: ignore[import-untyped]

    before = sasl_broker.process.log_text().count("(Authentication failed: Invalid username or password)")
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaAdminClient(**kafka_python_config(sasl_broker.sasl_bootstrap, "PLAIN", "alice", "wrong"),
                         api_version=(0, 10, 1), request_timeout_ms=3000, bootstrap_timeout_ms=3000)
    after = sasl_broker.process.log_text().count("(Authentication failed: Invalid username or password)")
    assert after > before
