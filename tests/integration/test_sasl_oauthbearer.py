"""SASL/OAUTHBEARER with Kafka's default unsecured JWS validator: raw exchanges (valid, expired,
signed, malformed, wrong scope; the token's exp bounds the session) and real clients (librdkafka's
and the Java client's unsecured tokens) producing and consuming."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.security.sasl.oauthbearer import initial_response, unsecured_token
from odradek.protocol.errors import ErrorCode
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain
from tests.support.sasl import MECHANISMS, SaslBroker, authenticate, handshake, start_sasl_broker
from tests.support.wire import WireClient

METADATA_V9 = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
VALIDATOR = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
             'unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="1000";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    b = start_sasl_broker(tmp_path_factory.mktemp("oauth"), {
        "sasl.enabled.mechanisms": MECHANISMS + ",OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": VALIDATOR,
    })
    yield b
    b.process.kill()


def _login(b: SaslBroker, token: str, authzid: str = "") -> tuple[WireClient, dict]:
    c = WireClient(b.host, b.sasl_port)
    assert handshake(c, "OAUTHBEARER")["error_code"] == 0
    return c, authenticate(c, initial_response(token, authzid))


def test_valid_unsecured_token_logs_in_with_the_token_lifetime(broker: SaslBroker) -> None:
    c, resp = _login(broker, unsecured_token("alice", lifetime_s=60, scope=["kafka", "other"]))
    with c:
        assert resp["error_code"] == 0 and resp["auth_bytes"] == b""
        assert 55_000 < resp["session_lifetime_ms"] <= 60_000  # the token's exp bounds the session
        assert c.request(3, 9, METADATA_V9)["brokers"]


@pytest.mark.parametrize(("token", "status"), [
    (unsecured_token("alice", lifetime_s=-60, scope=["kafka"]), '{"status":"invalid_token"}'),
    (unsecured_token("alice", scope=["kafka"], header={"alg": "HS256"}), '{"status":"invalid_token"}'),
    (unsecured_token("alice", scope=["kafka"])[:-1] + "c2lnbmF0dXJl", '{"status":"invalid_token"}'),
    (unsecured_token("", scope=["kafka"]), '{"status":"invalid_token"}'),
    (unsecured_token("alice", scope=["kafka"], claims={"exp": "soon"}), '{"status":"invalid_token"}'),
    ("e30.e30.", '{"status":"invalid_token"}'),
    (unsecured_token("alice", scope=["read"]), '{"status":"insufficient_scope","scope":"kafka"}'),
])
def test_invalid_tokens_get_kafkas_error_challenge_then_fail(broker: SaslBroker, token: str, status: str) -> None:
    c, resp = _login(broker, token)
    with c:
        # Kafka's OAuthBearerSaslServer: the error goes out as a challenge, the client answers %x01,
        # and the exchange fails with the same JSON as its message.
        assert resp["error_code"] == 0 and bytes(resp["auth_bytes"]).decode() == status
        final = authenticate(c, b"\x01")
        assert final["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert final["error_message"] == status
        assert c.is_closed_by_peer()


def test_malformed_initial_response_and_other_authzid(broker: SaslBroker) -> None:
    for garbage in (b"", b"n,,auth=Bearer x", b"\x01\x01", b"n,,\x01auth=Basic abc\x01\x01"):
        with WireClient(broker.host, broker.sasl_port) as c:
            assert handshake(c, "OAUTHBEARER")["error_code"] == 0
            resp = authenticate(c, garbage)
            assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert resp["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                             "with SASL mechanism OAUTHBEARER")
    c, resp = _login(broker, unsecured_token("alice", scope=["kafka"]), authzid="admin")
    with c:
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert resp["error_message"] == ("Authentication failed: Client requested an authorization id (admin) that is "
                                         "different from the token's principal name (alice)")


def test_session_ends_when_the_token_expires(broker: SaslBroker) -> None:
    c, resp = _login(broker, unsecured_token("alice", lifetime_s=2.5, scope=["kafka"]))
    with c:
        assert resp["error_code"] == 0 and 0 < resp["session_lifetime_ms"] <= 2500
        assert c.request(3, 9, METADATA_V9)["brokers"]
        time.sleep(2.7)
        _, data = c.encode_request(3, 9, METADATA_V9)
        c.send_raw(data)
        assert c.is_closed_by_peer()


def test_confluent_kafka_with_an_unsecured_token(broker: SaslBroker) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    cfg = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
           "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
           "sasl.oauthbearer.config": "principal=alice scope=kafka"}
    producer = Producer(cfg)
    for i in range(3):
        producer.produce(topic, f"o-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**cfg, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [b"o-0", b"o-1", b"o-2"]
    # Without the required scope: refused with the error challenge's JSON.
    errors: list = []
    refused = Producer({**cfg, "sasl.oauthbearer.config": "principal=alice scope=read", "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        refused.poll(0.2)
    assert errors and '{"status":"insufficient_scope","scope":"kafka"}' in errors[0].str()


def test_java_console_clients_with_an_unsecured_token(broker: SaslBroker, tmp_path: Path) -> None:
    require_toolchain()
    props = tmp_path / "oauth.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                     'unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",kafka";\n')
    topic = f"oauth-java-{uuid.uuid4().hex[:8]}"
    b = broker.sasl_bootstrap
    run_tool("kafka-console-producer", ["--bootstrap-server", b, "--topic", topic, "--command-config", str(props)],
             input="j-0\nj-1\n")
    out = run_tool("kafka-console-consumer", ["--bootstrap-server", b, "--topic", topic, "--from-beginning",
                                              "--max-messages", "2", "--timeout-ms", "30000",
                                              "--command-config", str(props)]).stdout
    assert out.split() == ["j-0", "j-1"]
