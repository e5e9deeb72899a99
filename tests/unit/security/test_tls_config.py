"""TLS configuration: Kafka's ssl.* keys load the key material at validation time, every fault
stops start-up naming the key, listener prefixes override per listener, secrets are masked."""

from __future__ import annotations

import ssl

import pytest

from odradek.broker.config.broker_config import ConfigError, load_config
from odradek.broker.metadata.topic_config_view import broker_config_entries, config_layers
from odradek.broker.security.tls import client_tls, inter_broker_client_tls, resolve, server_tls

pytest.importorskip("cryptography")
from tests.support.certs import TestPki  # noqa: E402

NODE = ["node.id=1", "log.dirs=/tmp/odradek-unit-tls"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki):
    return pki.server()


def ssl_config(extra: dict[str, str]):
    base = {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"}
    return load_config(None, [*NODE, *(f"{k}={v}" for k, v in {**base, **extra}.items())], {})


def test_pem_keystore_file_and_truststore(server) -> None:
    cfg = ssl_config({**server.broker_props(), "ssl.client.auth": "required"})
    tls = server_tls(cfg, "SSL")
    assert tls.context.verify_mode == ssl.CERT_REQUIRED
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.context.maximum_version == ssl.TLSVersion.TLSv1_3


def test_inline_pem(server) -> None:
    cfg = ssl_config({**server.inline_props(), "ssl.client.auth": "requested"})
    assert server_tls(cfg, "SSL").context.verify_mode == ssl.CERT_OPTIONAL


def test_encrypted_key_needs_the_right_key_password(pki) -> None:
    enc = pki.server("enc", encrypted_key_password="s3cret-key")
    props = enc.broker_props()
    assert server_tls(ssl_config({**props, "ssl.key.password": "s3cret-key"}), "SSL")
    with pytest.raises(ConfigError, match="ssl.keystore.location.*cannot load.*ssl.key.password") as e:
        ssl_config({**props, "ssl.key.password": "wrong"})
    assert "wrong" not in str(e.value) and "s3cret" not in str(e.value)


def test_pkcs12_keystore(server) -> None:
    p12 = server.pkcs12("p12-pass")
    props = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12), "ssl.keystore.password": "p12-pass"}
    assert server_tls(ssl_config(props), "SSL")
    with pytest.raises(ConfigError, match="ssl.keystore.location.*ssl.keystore.password") as e:
        ssl_config({**props, "ssl.keystore.password": "nope-wrong"})
    assert "nope-wrong" not in str(e.value)


@pytest.mark.parametrize(("props", "named"), [
    ({}, "has no key store: set ssl.keystore.location"),
    ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "ssl.keystore.type=JKS is not supported"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent/ks.pem"},
     "Cannot read ssl.keystore.location='/nonexistent/ks.pem'"),
    ({"ssl.keystore.type": "BCFKS", "ssl.keystore.location": "/x"}, "configuration ssl.keystore.type"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"},
     "ssl.keystore.certificate.chain must be set too"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
])
def test_missing_or_bad_key_store_stops_start_up_naming_the_key(props: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(".", r"\.")):
        ssl_config(props)


def test_garbage_key_material_is_named(server, tmp_path) -> None:
    bad = tmp_path / "garbage.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n"
                   + server.cert_pem.read_text())
    with pytest.raises(ConfigError, match="ssl.keystore.location.*cannot load"):
        ssl_config({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(bad)})
    with pytest.raises(ConfigError, match="ssl.truststore.location.*no PEM certificate"):
        ssl_config({**server.broker_props(), "ssl.truststore.location": str(server.key_pem),
                    "ssl.client.auth": "required"})


def test_protocols_and_cipher_suites(server) -> None:
    props = server.broker_props()
    ctx = server_tls(ssl_config({**props, "ssl.enabled.protocols": "TLSv1.2",
                                 "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}), "SSL").context
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    assert server_tls(ssl_config({**props, "ssl.protocol": "TLSv1.2"}), "SSL").context.maximum_version == \
        ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="ssl.enabled.protocols.*not TLSv1.1"):
        ssl_config({**props, "ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    with pytest.raises(ConfigError, match="ssl.cipher.suites.*TLS_FOO_WITH_BAR"):
        ssl_config({**props, "ssl.cipher.suites": "TLS_FOO_WITH_BAR"})


def test_bad_principal_mapping_rules_stop_start_up(server) -> None:
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules.*Invalid rule"):
        ssl_config({**server.broker_props(), "ssl.principal.mapping.rules": "RULE:oops"})


def test_listener_prefix_overrides_per_key(pki, server) -> None:
    other = pki.server("other")
    cfg = ssl_config({**server.broker_props(), "listener.name.ssl.ssl.keystore.location": str(other.keystore_pem),
                      "listener.name.ssl.ssl.client.auth": "required"})
    values = resolve(cfg, "SSL")
    assert values["ssl.keystore.location"] == str(other.keystore_pem)
    assert values["ssl.client.auth"] == "required"
    assert values["ssl.truststore.location"] == str(server.ca_pem)  # not overridden: the broker-wide key
    with pytest.raises(ConfigError, match="Cannot read listener.name.ssl.ssl.keystore.location"):
        ssl_config({**server.broker_props(), "listener.name.ssl.ssl.keystore.location": "/nope"})


def test_inter_broker_client_on_an_ssl_listener(server) -> None:
    cfg = ssl_config({**server.broker_props(), "inter.broker.listener.name": "SSL"})
    tls = inter_broker_client_tls(cfg)
    assert tls is not None and tls.verify_hostname and tls.context.check_hostname
    assert client_tls(ssl_config({**server.broker_props(), "ssl.endpoint.identification.algorithm": ""}),
                      "SSL").verify_hostname is False
    assert inter_broker_client_tls(ssl_config(server.broker_props())) is None  # PLAINTEXT between brokers


def test_secrets_are_masked_in_describe_configs(server) -> None:
    secret = "very-secret-password"
    cfg = ssl_config({**server.inline_props(), "ssl.key.password": secret, "ssl.truststore.password": secret,
                      "listener.name.ssl.ssl.keystore.password": secret})
    entries = {e.name: e for e in broker_config_entries(cfg, config_layers(cfg), per_broker=True)}
    for key in ("ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
                "ssl.key.password", "ssl.truststore.password", "ssl.keystore.password",
                "listener.name.ssl.ssl.keystore.password"):
        assert entries[key].is_sensitive and entries[key].value is None, key
        assert all(value is None for _, value, _ in entries[key].synonyms), key
    assert entries["ssl.keystore.type"].value == "PEM" and not entries["ssl.keystore.type"].is_sensitive
    assert entries["ssl.key.password"].type_name == "password"


def test_sasl_ssl_listener_asks_for_certificates_only_with_the_listener_prefix(server) -> None:
    # KIP-684: the broker-wide ssl.client.auth does not apply to SASL_SSL listeners. (SASL_SSL
    # listeners themselves are the SASL layer's; the TLS underneath is built here.)
    pmap = "PLAINTEXT:PLAINTEXT,SSL:SSL,SECURE:SASL_SSL"
    cfg = ssl_config({**server.broker_props(), "ssl.client.auth": "required", "listener.security.protocol.map": pmap})
    assert server_tls(cfg, "SECURE").context.verify_mode == ssl.CERT_NONE
    assert server_tls(cfg, "SSL").context.verify_mode == ssl.CERT_REQUIRED
    cfg = ssl_config({**server.broker_props(), "listener.security.protocol.map": pmap,
                      "listener.name.secure.ssl.client.auth": "required"})
    assert server_tls(cfg, "SECURE").context.verify_mode == ssl.CERT_REQUIRED


def test_repr_of_the_config_hides_secrets(server) -> None:
    cfg = ssl_config({**server.inline_props(), "listener.name.ssl.ssl.key.password": "hunter2-secret"})
    text = repr(cfg)
    assert "hunter2-secret" not in text and "PRIVATE KEY" not in text
    assert "'listener.name.ssl.ssl.key.password': '[hidden]'" in text


def test_pkcs12_truststore(pki, server, tmp_path) -> None:
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    store = tmp_path / "trust.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [pki.ca_cert],
                                                            BestAvailableEncryption(b"trust-pass")))
    props = {**server.broker_props(), "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store),
             "ssl.truststore.password": "trust-pass", "ssl.client.auth": "required"}
    ctx = server_tls(ssl_config(props), "SSL").context
    assert [dict(rdn[0] for rdn in c["subject"])["commonName"] for c in ctx.get_ca_certs()] == ["Odradek Test CA"]
    with pytest.raises(ConfigError, match="ssl.truststore.location.*ssl.truststore.password"):
        ssl_config({**props, "ssl.truststore.password": "bad"})
