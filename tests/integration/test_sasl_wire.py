"""SASL_PLAINTEXT on the wire: the authentication state machine, Kafka's errors, SCRAM credentials,
re-authentication (KIP-368) and hostile input, with raw requests on real sockets."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import kafka_request
from odradek.broker.security.sasl.client import ScramClient, plain_token, scram_upsertion
from odradek.protocol.errors import ErrorCode
from tests.support.sasl import (
    SaslBroker,
    authenticate,
    failed_logins_while_served,
    handshake,
    login_plain,
    login_scram,
    start_sasl_broker,
)
from tests.support.wire import WireClient

METADATA_V9 = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    b = start_sasl_broker(tmp_path_factory.mktemp("sasl"))
    b.add_scram_user("scram512", "s512-secret", "SCRAM-SHA-512")
    b.add_scram_user("scram256", "s256-secret", "SCRAM-SHA-256")
    yield b
    b.process.kill()


def _client(b: SaslBroker) -> WireClient:
    return WireClient(b.host, b.sasl_port)


def _served(b: SaslBroker) -> bool:
    """A fresh PLAIN client authenticates and gets Metadata (the broker is up and serving)."""
    with _client(b) as c:
        assert login_plain(c, "alice", "alice-secret")["error_code"] == 0
        return c.request(3, 9, METADATA_V9)["brokers"] != []


def test_api_versions_advertise_the_sasl_apis(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in c.request(18, 3, {
            "client_software_name": "t", "client_software_version": "1"})["api_keys"]}
    assert keys[17] == (0, 1) and keys[36] == (0, 2)  # v0: bare tokens, tests/integration/test_sasl_handshake_v0.py and keys[50] == (0, 0) and keys[51] == (0, 0)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_login_then_requests_are_served(sasl_broker: SaslBroker, version: int) -> None:
    with _client(sasl_broker) as c:
        c.request(18, 0, {})
        hs = handshake(c, "PLAIN")
        assert hs["error_code"] == 0 and set(hs["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        resp = authenticate(c, plain_token("alice", "alice-secret"), version)
        assert resp["error_code"] == 0 and resp["error_message"] is None
        assert c.request(3, 9, METADATA_V9)["brokers"]


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("SCRAM-SHA-512", "scram512", "s512-secret"), ("SCRAM-SHA-256", "scram256", "s256-secret")])
def test_scram_login_verifies_both_ways(sasl_broker: SaslBroker, mechanism: str, user: str, password: str) -> None:
    with _client(sasl_broker) as c:
        assert login_scram(c, mechanism, user, password)["error_code"] == 0  # checks the server signature too
        assert c.request(3, 9, METADATA_V9)["brokers"]


def _assert_failed_and_closed(c: WireClient, resp: dict, message: str) -> None:
    assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp["error_message"] == message
    assert c.is_closed_by_peer()


def test_wrong_plain_password_and_unknown_user(sasl_broker: SaslBroker) -> None:
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        with _client(sasl_broker) as c:
            _assert_failed_and_closed(c, login_plain(c, user, password),
                                      "Authentication failed: Invalid username or password")
    with _client(sasl_broker) as c:
        _assert_failed_and_closed(c, login_plain(c, "alice", ""), "Authentication failed: password not specified")
    with _client(sasl_broker) as c:
        assert handshake(c, "PLAIN")["error_code"] == 0
        _assert_failed_and_closed(c, authenticate(c, b"alice\x00alice-secret"),
                                  "Invalid SASL/PLAIN response: expected 3 tokens, got 2")
    assert _served(sasl_broker)


def test_scram_failures_get_kafkas_generic_message(sasl_broker: SaslBroker) -> None:
    generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
    cases = [("SCRAM-SHA-512", "scram512", "wrong"), ("SCRAM-SHA-512", "nobody", "x"),
             ("SCRAM-SHA-512", "scram256", "s256-secret")]  # a SCRAM-SHA-256 user has no SHA-512 credential
    for mechanism, user, password in cases:
        with _client(sasl_broker) as c:
            _assert_failed_and_closed(c, login_scram(c, mechanism, user, password), generic.format(mechanism))
    # tokenauth (delegation tokens) is refused; other extensions are ignored.
    for extension, ok in ((",tokenauth=true", False), (",foo=bar", True)):
        with _client(sasl_broker) as c:
            assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
            client = ScramClient("SCRAM-SHA-512", "scram512", "s512-secret", extensions=extension)
            first = authenticate(c, client.first())
            if not ok:
                _assert_failed_and_closed(c, first, generic.format("SCRAM-SHA-512"))
                continue
            assert authenticate(c, client.final(bytes(first["auth_bytes"])))["error_code"] == 0


def test_unsupported_mechanism_answers_the_enabled_list_then_closes(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        resp = handshake(c, "GSSAPI")
        assert resp["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert set(resp["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert c.is_closed_by_peer()


def test_requests_before_authentication_close_the_connection(sasl_broker: SaslBroker) -> None:
    # Before the handshake: closed without an answer (Kafka's InvalidRequestException).
    with _client(sasl_broker) as c:
        corr, data = c.encode_request(3, 9, METADATA_V9)
        c.send_raw(data)
        assert c.is_closed_by_peer()
    # A second ApiVersions: closed too.
    with _client(sasl_broker) as c:
        c.request(18, 0, {})
        _, data = c.encode_request(18, 0, {})
        c.send_raw(data)
        assert c.is_closed_by_peer()
    # During the exchange: the API's own error response with ILLEGAL_SASL_STATE, then closed.
    with _client(sasl_broker) as c:
        assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
        assert c.request(16, 2, {})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert c.is_closed_by_peer()
    assert _served(sasl_broker)


def test_sasl_apis_on_a_plaintext_listener_answer_illegal_sasl_state(sasl_broker: SaslBroker) -> None:
    with WireClient(sasl_broker.host, sasl_broker.plain_port) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert c.request(36, 1, {"auth_bytes": b"x"})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert c.request(3, 9, METADATA_V9)["brokers"]


def test_authenticated_connection_answers_a_second_handshake_with_illegal_sasl_state(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        assert login_plain(c, "alice", "alice-secret")["error_code"] == 0
        assert handshake(c, "PLAIN")["error_code"] == ErrorCode.ILLEGAL_SASL_STATE  # no session lifetime set
        assert c.request(3, 9, METADATA_V9)["brokers"]


# -- hostile input -------------------------------------------------------------------------------------


def test_garbage_handshake_and_tokens_leave_the_broker_serving(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as authenticated:
        assert login_plain(authenticated, "alice", "alice-secret")["error_code"] == 0
        # A handshake frame whose body is garbage: closed.
        with _client(sasl_broker) as c:
            c.send_raw(struct.pack(">ihhi", 8 + 50, 17, 1, 1) + os.urandom(50))
            assert c.is_closed_by_peer()
        # Random bytes as the first frame (an HTTP client, a TLS client hello): closed.
        with _client(sasl_broker) as c:
            c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert c.is_closed_by_peer()
        # Garbage tokens for every mechanism: SASL_AUTHENTICATION_FAILED, closed.
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            for token in (os.urandom(300), b"", b"n,,n=,r=", b"\xff" * 10):
                with _client(sasl_broker) as c:
                    assert handshake(c, mechanism)["error_code"] == 0
                    resp = authenticate(c, token)
                    assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
                    assert c.is_closed_by_peer()
        # A garbage SCRAM client-final after a valid first message.
        with _client(sasl_broker) as c:
            assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
            client = ScramClient("SCRAM-SHA-512", "scram512", "s512-secret")
            assert authenticate(c, client.first())["error_code"] == 0
            assert authenticate(c, b"c=biws,r=forged,p=AAAA")["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert authenticated.request(3, 9, METADATA_V9)["brokers"]
    assert _served(sasl_broker)


def test_oversized_token_before_authentication_closes_at_the_size_prefix(sasl_broker: SaslBroker) -> None:
    with _client(sasl_broker) as c:
        assert handshake(c, "PLAIN")["error_code"] == 0
        # Only the size prefix is sent: the bound (sasl.server.max.receive.size) acts before any body.
        c.send_raw(struct.pack(">i", 524288 + 1))
        assert c.is_closed_by_peer()
    with _client(sasl_broker) as c:
        assert login_plain(c, "alice", "alice-secret")["error_code"] == 0
        # Authenticated: the bound is socket.request.max.bytes again (a 600 kB Metadata request).
        big = {**METADATA_V9, "topics": [{"name": f"t{i:06d}-" + "x" * 50, "topic_id": None}
                                         for i in range(10_000)]}
        assert len(c.request(3, 9, big)["topics"]) == 10_000
    assert _served(sasl_broker)


def test_scram_exchange_abandoned_halfway(sasl_broker: SaslBroker) -> None:
    held = []
    for _ in range(20):
        c = _client(sasl_broker)
        assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
        assert authenticate(c, ScramClient("SCRAM-SHA-512", "scram512", "s512-secret").first())["error_code"] == 0
        held.append(c)
    for c in held[:10]:
        c.close()  # gone mid-exchange
    assert _served(sasl_broker)  # the other ten still hang mid-exchange
    for c in held[10:]:
        c.close()


def test_thousands_of_failed_logins_in_parallel(sasl_broker: SaslBroker) -> None:
    per_thread, threads = 250, 6
    with _client(sasl_broker) as served:
        assert login_plain(served, "alice", "alice-secret")["error_code"] == 0
        failed, elapsed, latencies = failed_logins_while_served(
            lambda: _client(sasl_broker), lambda c, n: login_plain(c, "alice", f"guess{n}"), served,
            per_thread, threads)
    assert failed == per_thread * threads
    assert elapsed < 90, f"{per_thread * threads} failed logins took {elapsed:.1f} s"
    assert latencies and max(latencies) < 2.0, f"authenticated client waited up to {max(latencies):.2f} s"
    # Logged with the client address, rate-limited (at most 10 lines a second plus a count).
    log = sasl_broker.process.log_text()
    lines = [line for line in log.splitlines() if "Failed authentication with 127.0.0.1:" in line]
    assert 0 < len(lines) <= 10 * (elapsed + 2) + 60
    assert "failed authentication(s) not logged" in log


def test_secrets_never_reach_the_log_or_describe_configs(sasl_broker: SaslBroker) -> None:
    resp = kafka_request(sasl_broker.host, sasl_broker.plain_port, "DescribeConfigs", 4, {
        "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False})
    entries = {e["name"]: e for e in resp["results"][0]["configs"]}
    jaas = entries["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas["value"] is None and jaas["is_sensitive"] is True
    assert all(s["value"] is None for s in jaas["synonyms"])
    assert entries["sasl.enabled.mechanisms"]["value"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    log = sasl_broker.process.log_text()
    for secret in ("alice-secret", "admin-secret", "s512-secret", "guess1"):
        assert secret not in log


# -- SCRAM credentials through the controller -----------------------------------------------------------


def test_alter_and_describe_user_scram_credentials(sasl_broker: SaslBroker) -> None:
    host, port = sasl_broker.host, sasl_broker.plain_port

    def alter(deletions: list, upsertions: list) -> dict:
        resp = kafka_request(host, port, "AlterUserScramCredentials", 0,
                             {"deletions": deletions, "upsertions": upsertions})
        return {r["user"]: (r["error_code"], r["error_message"]) for r in resp["results"]}

    ok = scram_upsertion("SCRAM-SHA-256", "carol", "carol-secret")
    assert alter([], [ok]) == {"carol": (0, None)}
    bad = alter([{"name": "nobody", "mechanism": 1}], [
        {**ok, "name": "few", "iterations": 4095}, {**ok, "name": "many", "iterations": 16385},
        {**ok, "name": "", "iterations": 4096}, {**ok, "name": "unknown-mech", "mechanism": 3},
        {**ok, "name": "twice"}, {**ok, "name": "twice"}])
    assert bad == {
        "nobody": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "unknown-mech": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
    }
    described = kafka_request(host, port, "DescribeUserScramCredentials", 0,
                              {"users": [{"name": "carol"}, {"name": "few"}]})["results"]
    assert described[0]["credential_infos"] == [{"mechanism": 1, "iterations": 4096}]
    assert described[1]["error_code"] == ErrorCode.RESOURCE_NOT_FOUND
    everyone = kafka_request(host, port, "DescribeUserScramCredentials", 0, {"users": None})["results"]
    assert {"carol", "scram512", "scram256"} <= {r["user"] for r in everyone}
    with _client(sasl_broker) as c:
        assert login_scram(c, "SCRAM-SHA-256", "carol", "carol-secret")["error_code"] == 0
    assert alter([{"name": "carol", "mechanism": 1}], []) == {"carol": (0, None)}
    with _client(sasl_broker) as c:
        assert login_scram(c, "SCRAM-SHA-256", "carol", "carol-secret")["error_code"] == \
            ErrorCode.SASL_AUTHENTICATION_FAILED


def test_scram_credentials_survive_a_restart(tmp_path: Path) -> None:
    b = start_sasl_broker(tmp_path)
    try:
        b.add_scram_user("dave", "dave-secret", "SCRAM-SHA-512")
        b.process.restart()
        with WireClient(b.host, b.sasl_port) as c:
            assert login_scram(c, "SCRAM-SHA-512", "dave", "dave-secret")["error_code"] == 0
    finally:
        b.process.kill()


# -- re-authentication (KIP-368) ----------------------------------------------------------------------


def test_session_lifetime_reauthentication_and_expiry(tmp_path: Path) -> None:
    b = start_sasl_broker(tmp_path, {"connections.max.reauth.ms": "1500"})
    try:
        with WireClient(b.host, b.sasl_port) as c:
            resp = login_plain(c, "alice", "alice-secret", version=1)
            assert resp["session_lifetime_ms"] == 1500
            time.sleep(1.1)
            # Re-authenticate before expiry (handshake + authenticate, no ApiVersions), then keep going.
            again = login_plain(c, "alice", "alice-secret", version=1)
            assert again["error_code"] == 0 and again["session_lifetime_ms"] == 1500
            time.sleep(0.8)  # past the first session's end, inside the second
            assert c.request(3, 9, METADATA_V9)["brokers"]
            time.sleep(1.6)
            _, data = c.encode_request(3, 9, METADATA_V9)
            c.send_raw(data)
            assert c.is_closed_by_peer()  # expired, not re-authenticated
        with WireClient(b.host, b.sasl_port) as c:
            assert login_plain(c, "alice", "alice-secret", version=1)["error_code"] == 0
            time.sleep(1.1)
            resp = login_plain(c, "admin", "admin-secret", version=1)
            _assert_failed_and_closed(
                c, resp, "Cannot change principals during re-authentication from User.alice: User.admin")
        assert "SASL session expired" in b.process.log_text()
    finally:
        b.process.kill()


def test_failed_authentication_delay(tmp_path: Path) -> None:
    b = start_sasl_broker(tmp_path, {"connection.failed.authentication.delay.ms": "500"})
    try:
        with WireClient(b.host, b.sasl_port) as c:
            assert handshake(c, "PLAIN")["error_code"] == 0
            t0 = time.monotonic()
            resp = authenticate(c, plain_token("alice", "nope"))
            assert time.monotonic() - t0 >= 0.45
            assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        b.process.kill()


def test_failed_authentication_answer_is_not_followed_at_once_by_the_close(sasl_broker: SaslBroker) -> None:
    """The answer to a failed login arrives alone: the broker closes when the client does or after
    connection.CLOSE_LINGER_S. An answer and a FIN in one read made kafka-python 3 drop the answer
    and report "socket disconnected" instead of SaslAuthenticationFailedError."""
    from odradek.broker.network.connection import CLOSE_LINGER_S

    with _client(sasl_broker) as c:
        resp = login_plain(c, "alice", "wrong")
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        t0 = time.monotonic()
        assert not c.is_closed_by_peer(timeout=CLOSE_LINGER_S / 2), "closed right behind the answer"
        c.sock.sendall(b"\x00\x00\x00\x01x")  # whatever comes now is neither read as a request nor answered
        assert c.is_closed_by_peer(timeout=CLOSE_LINGER_S + 5)
        assert time.monotonic() - t0 >= CLOSE_LINGER_S * 0.9
    assert _served(sasl_broker)


def test_plain_socket_to_sasl_port_from_a_plaintext_client_is_closed(sasl_broker: SaslBroker) -> None:
    # A client configured for PLAINTEXT sends Metadata first: closed, as Kafka does.
    with socket.create_connection((sasl_broker.host, sasl_broker.sasl_port), timeout=5) as s:
        s.sendall(struct.pack(">ihhi", 10, 3, 0, 1) + b"\x00\x00\x00\x00\x00\x00")
        s.settimeout(5)
        assert s.recv(1) == b""
