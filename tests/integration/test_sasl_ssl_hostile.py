"""Hostile input on a SASL_SSL listener (TLS transport + SASL), beyond what test_tls_hostile.py (SSL)
and test_sasl_wire.py (SASL_PLAINTEXT) send: clients stalled mid-TLS-handshake, garbage once the TLS
handshake is done (in place of SaslHandshake, as a SASL token, as a length prefix), and many failed
SCRAM logins over TLS in parallel. Throughout, a client that authenticated first keeps being
served, promptly, and the broker logs no traceback.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_tls_hostile import _client_hello
from tests.support.certs import TestPki
from tests.support.sasl import (
    SASL_AUTHENTICATION_FAILED,
    SaslBroker,
    failed_logins_while_served,
    handshake,
    login_scram,
    start_sasl_broker,
    tls_wire_client,
)
from tests.support.wire import WireClient

HANDSHAKE_TIMEOUT_S = 2.0
USER, PASSWORD = "victor", "victor-secret"
METADATA = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    tmp = tmp_path_factory.mktemp("sasl-ssl-hostile")
    b = start_sasl_broker(tmp / "broker", pki=TestPki(tmp / "pki"),
                          extra={"connections.max.idle.ms": str(int(HANDSHAKE_TIMEOUT_S * 1000)),
                                 "connection.failed.authentication.delay.ms": "0"})
    b.add_scram_user(USER, PASSWORD)
    yield b
    log = b.process.log_text()
    b.process.kill()
    assert "Traceback" not in log, log[-4000:]


def _tls(b: SaslBroker, **kw: object) -> WireClient:
    assert b.pki is not None and b.ssl_port is not None
    return tls_wire_client(b.host, b.ssl_port, b.pki.ca_pem, **kw)


@pytest.fixture()
def authenticated(broker: SaslBroker) -> Iterator[WireClient]:
    """A client logged in before the hostile traffic starts; it must keep being served."""
    with _tls(broker) as c:
        assert login_scram(c, "SCRAM-SHA-512", USER, PASSWORD)["error_code"] == 0
        yield c


def _served(c: WireClient, within: float = 1.5) -> None:
    t0 = time.monotonic()
    assert c.request(3, 12, METADATA)["brokers"]
    assert time.monotonic() - t0 < within


def _wait_closed(socks: list, authenticated: WireClient, seconds: float) -> None:
    """Wait until the broker closed every socket in ``socks``, serving ``authenticated`` every ~0.5 s
    meanwhile (which also keeps it from being idle: connections.max.idle.ms is short here)."""
    open_ = list(socks)
    deadline = time.monotonic() + seconds
    while open_ and time.monotonic() < deadline:
        _served(authenticated)
        for s in list(open_):
            s.settimeout(0.02)
            try:
                if s.recv(4096) == b"":
                    open_.remove(s)
            except TimeoutError:
                pass
            except (ConnectionResetError, ssl.SSLError):
                open_.remove(s)
    assert not open_, f"{len(open_)} connections still open after {seconds} s"


def _tls_done_socket(b: SaslBroker) -> ssl.SSLSocket:
    assert b.pki is not None and b.ssl_port is not None
    ctx = ssl.create_default_context(cafile=str(b.pki.ca_pem))
    return ctx.wrap_socket(socket.create_connection((b.host, b.ssl_port), timeout=10), server_hostname=b.host)


def test_clients_stalled_mid_tls_handshake(broker: SaslBroker, authenticated: WireClient) -> None:
    assert broker.ssl_port is not None
    hello = _client_hello()
    stalled = [socket.create_connection((broker.host, broker.ssl_port), timeout=10) for _ in range(20)]
    try:
        for s in stalled:
            s.sendall(hello[: len(hello) // 2])
        t0 = time.monotonic()
        _served(authenticated)  # while 20 handshakes hang
        with _tls(broker) as fresh:  # and a new client still logs in
            assert login_scram(fresh, "SCRAM-SHA-512", USER, PASSWORD)["error_code"] == 0
        _wait_closed(stalled, authenticated, HANDSHAKE_TIMEOUT_S + 3)
        assert time.monotonic() - t0 < HANDSHAKE_TIMEOUT_S + 3
    finally:
        for s in stalled:
            s.close()
    _served(authenticated)


def test_tls_done_then_silence_is_closed_like_an_idle_connection(broker: SaslBroker,
                                                                 authenticated: WireClient) -> None:
    """The TLS handshake completes, then nothing (no SaslHandshake): closed by the idle sweep, while
    the authenticated client (busy every 0.5 s, so not idle itself) is served throughout."""
    quiet = [_tls_done_socket(broker) for _ in range(5)]
    try:
        _wait_closed(quiet, authenticated, HANDSHAKE_TIMEOUT_S * 3 + 5)
    finally:
        for s in quiet:
            s.close()
    _served(authenticated)


GARBAGE = {
    "random bytes": os.urandom(4096),
    "a huge length prefix": struct.pack(">i", 0x7FFFFFF0) + os.urandom(64),
    "a negative length prefix": struct.pack(">i", -5),
    "a Metadata request before SASL": None,  # sent through WireClient below
}


@pytest.mark.parametrize("what", list(GARBAGE))
def test_garbage_after_the_tls_handshake(broker: SaslBroker, authenticated: WireClient, what: str) -> None:
    if GARBAGE[what] is None:
        with pytest.raises((ConnectionError, OSError, EOFError)):
            with _tls(broker) as c:
                c.request(3, 12, METADATA)
    else:
        s = _tls_done_socket(broker)
        try:
            try:
                s.sendall(GARBAGE[what])  # type: ignore[arg-type]
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed while we were still writing: refused all the same
            s.settimeout(5)
            try:
                reply = s.recv(4096)
            except (ConnectionResetError, ssl.SSLError):
                reply = b""
            assert reply == b"", reply[:32]  # closed, no Kafka answer
        finally:
            s.close()
    _served(authenticated)


def test_garbage_sasl_tokens_over_tls(broker: SaslBroker, authenticated: WireClient) -> None:
    with _tls(broker) as c:
        assert handshake(c, "SCRAM-SHA-512")["error_code"] == 0
        response = c.request(36, 1, {"auth_bytes": os.urandom(300)})
        assert response["error_code"] == SASL_AUTHENTICATION_FAILED, response
    with _tls(broker) as c:
        assert handshake(c, "PLAIN")["error_code"] == 0
        response = c.request(36, 1, {"auth_bytes": b"\x00" * 10 + os.urandom(50)})
        assert response["error_code"] == SASL_AUTHENTICATION_FAILED, response
    _served(authenticated)


def test_many_failed_scram_logins_over_tls_in_parallel(broker: SaslBroker, authenticated: WireClient) -> None:
    per_thread, threads = 40, 4
    failed, elapsed, latencies = failed_logins_while_served(
        lambda: _tls(broker), lambda c, n: login_scram(c, "SCRAM-SHA-512", USER, f"guess{n}"), authenticated,
        per_thread, threads, metadata_version=12)
    assert failed == per_thread * threads
    assert elapsed < 90, f"{per_thread * threads} failed logins took {elapsed:.1f} s"
    assert latencies and max(latencies) < 2.0, f"the authenticated client waited up to {max(latencies):.2f} s"
    log = broker.process.log_text()
    assert "Failed authentication with 127.0.0.1:" in log and "SASL_SSL" in log
