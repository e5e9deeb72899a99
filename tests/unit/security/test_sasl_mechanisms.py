"""SASL building blocks without a broker: JAAS parsing, PLAIN and SCRAM servers (RFC 7677's test
vector), SCRAM records in the metadata log's encoding, per-listener settings checks."""

from __future__ import annotations

import base64

import pytest

from odradek.broker.config.broker_config import BrokerConfig, ConfigError
from odradek.broker.security.sasl import scram as scram_module
from odradek.broker.security.sasl import scram_formatter as F
from odradek.broker.security.sasl.client import ScramClient, plain_token
from odradek.broker.security.sasl.jaas import JaasConfigError, parse_jaas_config
from odradek.broker.security.sasl.mechanism import SaslAuthenticationError, SaslError
from odradek.broker.security.sasl.plain import PlainSaslServer, plain_users
from odradek.broker.security.sasl.scram import ScramSaslServer
from odradek.broker.security.sasl.settings import listener_settings
from odradek.controller.records import UserScramCredentialRecord, record_from_dict, record_to_dict

KAFKA_EXAMPLE = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                 'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_jaas_parses_kafkas_example() -> None:
    [entry] = parse_jaas_config(KAFKA_EXAMPLE)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert plain_users(entry.options) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_jaas_quotes_escapes_comments_and_several_entries() -> None:
    entries = parse_jaas_config(
        "/* c */ a.B required k1=word k2='single \"q\"' k3=\"esc\\\"aped;\" // line\n; "
        "c.D optional;")
    assert entries[0].options == {"k1": "word", "k2": 'single "q"', "k3": 'esc"aped;'}
    assert entries[1].login_module == "c.D" and entries[1].options == {}


@pytest.mark.parametrize(("text", "message"), [
    ("", "Login module not specified in JAAS config"),
    ("a.B", "Login module control flag not specified in JAAS config"),
    ("a.B mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
    ('a.B required k="v"', "JAAS config entry not terminated by semi-colon"),
    ("a.B required k=123;", "Value not specified for key 'k' in JAAS config"),
    ("a.B required k;", "Value not specified for key 'k' in JAAS config"),
])
def test_jaas_errors_are_kafkas(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError, match=message):
        parse_jaas_config(text)


def test_plain_server() -> None:
    users = {"alice": "alice-secret"}
    ok = PlainSaslServer(users)
    assert ok.evaluate(plain_token("alice", "alice-secret")) == b"" and ok.authorization_id == "alice"
    assert PlainSaslServer(users).evaluate(plain_token("alice", "alice-secret", authzid="alice")) == b""
    for token, message in [
        (plain_token("alice", "nope"), "Authentication failed: Invalid username or password"),
        (plain_token("bob", "alice-secret"), "Authentication failed: Invalid username or password"),
        (plain_token("", "x"), "Authentication failed: username not specified"),
        (plain_token("alice", ""), "Authentication failed: password not specified"),
        (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (plain_token("alice", "alice-secret", authzid="admin"),
         "Authentication failed: Client requested an authorization id that is different from username"),
    ]:
        server = PlainSaslServer(users)
        with pytest.raises(SaslAuthenticationError, match=message):
            server.evaluate(token)
        assert not server.complete


def test_scram_sha_256_rfc_7677_test_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = F.credential_from_password(F.SCRAM_SHA_256, "pencil", 4096, salt)
    monkeypatch.setattr(scram_module, "secure_random_string", lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = ScramSaslServer(F.SCRAM_SHA_256, lambda user, mech: credential if user == "user" else None)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mechanism", [F.SCRAM_SHA_256, F.SCRAM_SHA_512])
def test_scram_client_and_server_agree_and_escape_names(mechanism: F.ScramMechanism) -> None:
    credential = F.credential_from_password(mechanism, "p=w,d", 4096)
    server = ScramSaslServer(mechanism, lambda user, mech: credential if user == "a,b=c" else None)
    client = ScramClient(mechanism.name, "a,b=c", "p=w,d")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.authorization_id == "a,b=c"


def test_scram_failures() -> None:
    credential = F.credential_from_password(F.SCRAM_SHA_512, "secret", 4096)
    weak = F.credential_from_password(F.SCRAM_SHA_512, "secret", 1000)
    lookup = {"u": credential, "weak": weak}

    def server() -> ScramSaslServer:
        return ScramSaslServer(F.SCRAM_SHA_512, lambda user, mech: lookup.get(user))

    for first in (b"garbage", b"y,,n=u,r=abc", b"n,,n=nobody,r=abc", b"n,,n=weak,r=abc",
                  b"n,,n=u,r=abc,tokenauth=true"):
        with pytest.raises(SaslError):
            server().evaluate(first)
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        server().evaluate(b"n,a=other,n=u,r=abc")
    s = server()
    client = ScramClient("SCRAM-SHA-512", "u", "wrong")
    with pytest.raises(SaslError, match="Invalid client credentials"):
        s.evaluate(client.final(s.evaluate(client.first())))
    with pytest.raises(SaslError):  # nothing more after a failure
        s.evaluate(b"anything")
    s = server()
    s.evaluate(b"n,,n=u,r=abc")
    with pytest.raises(SaslError, match="Invalid client nonce"):
        s.evaluate(b"c=biws,r=abcother,p=AAAA")


def test_scram_record_round_trips_and_hides_its_secrets() -> None:
    record = UserScramCredentialRecord("alice", 2, b"\x00salt", b"stored", b"server", 8192)
    assert record_from_dict(record_to_dict(record)) == record
    assert "salt" not in repr(record).replace("salt=", "") and "stored" not in repr(record)


def _cfg(**extra: str) -> BrokerConfig:
    return BrokerConfig.from_props({"node.id": "1", "log.dirs": "/tmp/x",
                                    "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093", **extra})


def test_listener_settings_and_start_up_refusals() -> None:
    cfg = _cfg(**{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": KAFKA_EXAMPLE})
    settings = listener_settings(cfg)["SASL_PLAINTEXT"]
    assert settings.mechanisms == ("PLAIN", "SCRAM-SHA-512") and settings.plain_users["alice"] == "alice-secret"
    assert "alice-secret" not in repr(settings) and "alice-secret" not in repr(cfg)
    # Per-listener mechanisms win over the broker-wide key.
    cfg = _cfg(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert listener_settings(cfg)["SASL_PLAINTEXT"].mechanisms == ("SCRAM-SHA-256",)
    for extra, message in [
        ({}, "sasl.enabled.mechanisms enables GSSAPI"),
        ({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-1"}, "enables SCRAM-SHA-1"),
        ({"sasl.enabled.mechanisms": "OAUTHBEARER", "inter.broker.listener.name": "SASL_PLAINTEXT",
          "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"}, "OAUTHBEARER is not implemented for brokers"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set"),
        ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required"},
         "JAAS config entry not terminated by semi-colon"),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-512", "inter.broker.listener.name": "SASL_PLAINTEXT"},
         "sasl.mechanism.inter.broker.protocol \\(GSSAPI\\) must be included"),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-512", "inter.broker.listener.name": "SASL_PLAINTEXT",
          "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, "must set username and password"),
    ]:
        with pytest.raises(ConfigError, match=message) as e:
            _cfg(**extra)
        assert "secret" not in str(e.value)


def test_request_log_never_shows_salted_passwords() -> None:
    from odradek.broker.api.handlers.alter_user_scram_credentials import loggable

    body = {"deletions": [], "upsertions": [{"name": "u", "mechanism": 2, "iterations": 4096, "salt": b"s" * 32,
                                             "salted_password": b"p" * 64}]}
    shown = loggable(body)
    assert shown["upsertions"][0]["salted_password"] == b"" and shown["upsertions"][0]["salt"] == b""
    assert body["upsertions"][0]["salted_password"] == b"p" * 64  # the request itself is untouched
