"""Connection creation rates (KIP-612) with real sockets: a burst above
``max.connection.creation.rate`` is accepted spread out in time while established clients keep
being served, and an address over its ``connection_creation_rate`` quota (ip entity, set with
AlterClientQuotas) has its excess connections closed after a delay while other addresses connect
freely.

Both brokers use ``quota.window.num=2``: Kafka's rate lets a new source burst (samples - 1)
windows' worth first; with two samples that is one second, which keeps the tests short.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_client_quotas import alter, quotas_of
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, key, version, correlation id, null client


def api_versions_answered(host: str, port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> float | None:
    """Connect from ``source``, send ApiVersions v0: seconds until answered, None if the broker
    closed the connection first."""
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(API_VERSIONS_V0)
        try:
            head = s.recv(4)
        except ConnectionResetError:
            return None
        return None if len(head) < 4 else time.monotonic() - started


@pytest.fixture
def rate_limited(tmp_path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path, overrides={"max.connection.creation.rate": "20", "quota.window.num": "2",
                                           "socket.listen.backlog.size": "200"})
    b.start()
    yield b
    b.kill()


def test_burst_above_the_creation_rate_is_spread_out(rate_limited: BrokerProcess) -> None:
    b = rate_limited
    established = WireClient(b.host, b.port)  # connected before the burst
    n = 60
    answered: list[float | None] = [None] * n

    def connect(i: int) -> None:
        answered[i] = api_versions_answered(b.host, b.port)

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    latencies = []
    while any(t.is_alive() for t in threads):
        t0 = time.monotonic()
        established.request(18, 0, {})
        latencies.append(time.monotonic() - t0)
        time.sleep(0.05)
    total = time.monotonic() - start
    established.close()
    assert all(a is not None for a in answered), "a connection was refused instead of delayed"
    # 20 at once (one window's allowance), then 20/s: the last ones wait about 2 s.
    assert total >= 1.5, f"{n} connections accepted in {total:.2f} s despite max.connection.creation.rate=20"
    assert sorted(answered)[n // 4] < 1.0  # type: ignore[type-var]
    # (the burst takes ~2 s: an acceptor that blocked the loop would stall this client that long)
    assert max(latencies) < 1.0, f"the established connection waited {max(latencies):.2f} s"
    assert "ERROR" not in b.log_text()


@pytest.fixture
def two_samples(broker_factory) -> BrokerProcess:
    return broker_factory({"quota.window.num": "2"})


def test_ip_connection_creation_rate_quota(two_samples: BrokerProcess) -> None:
    b = two_samples
    assert alter(b, [("ip", "127.0.0.1")], [("connection_creation_rate", 5)])["error_code"] == 0
    # The quota reaches the acceptor through the metadata image (asynchronously on a cluster).
    assert quotas_of(b, [("ip", "127.0.0.1")]) == {"connection_creation_rate": 5.0}
    results = [api_versions_answered(b.host, b.port) for _ in range(15)]
    served = [r for r in results if r is not None]
    closed = [r for r in results if r is None]
    assert 3 <= len(served) <= 11, results
    assert closed, "no connection over the address's rate was closed"
    # Another address (127.0.0.2, also loopback) is not limited.
    assert all(api_versions_answered(b.host, b.port, source="127.0.0.2") is not None for _ in range(15))
    # Removing the quota lifts the limit.
    assert alter(b, [("ip", "127.0.0.1")], [("connection_creation_rate", None)])["error_code"] == 0
    time.sleep(1.1)
    assert all(api_versions_answered(b.host, b.port) is not None for _ in range(15))


def set_ip_quota(c: WireClient, name: str | None, rate: float | None) -> None:
    body = {"entries": [{"entity": [{"entity_type": "ip", "entity_name": name}],
                         "ops": [{"key": "connection_creation_rate", "value": rate or 0.0, "remove": rate is None}]}],
            "validate_only": False}
    assert c.request(49, 1, body)["entries"][0]["error_code"] == 0


def test_ip_throttled_connection_is_closed_after_a_delay(two_samples: BrokerProcess) -> None:
    b = two_samples
    with WireClient(b.host, b.port) as admin:  # opened first: quotas do not touch open connections
        set_ip_quota(admin, None, 1)  # the ip default
        time.sleep(1.1)  # let the admin connection's own creation age out of the window
        assert api_versions_answered(b.host, b.port) is not None  # the first is within the quota
        started = time.monotonic()
        with socket.create_connection((b.host, b.port), timeout=5) as s:
            s.sendall(API_VERSIONS_V0)
            try:
                data = s.recv(4)
            except ConnectionResetError:
                data = b""
        waited = time.monotonic() - started
        assert data == b"", "the throttled connection was served"
        assert 0.2 <= waited <= 2.0, f"closed after {waited:.2f} s, not after the throttle time (<= one window)"
        set_ip_quota(admin, None, None)
    assert api_versions_answered(b.host, b.port) is not None


def test_max_connection_creation_rate_is_dynamic(two_samples: BrokerProcess) -> None:
    b = two_samples
    with WireClient(b.host, b.port) as admin:
        body = {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "max.connection.creation.rate", "config_operation": 0, "value": "5"}]}], "validate_only": False}
        assert admin.request(44, 1, body)["responses"][0]["error_code"] == 0
    time.sleep(1.1)  # the admin connection's creation ages out of the window
    started = time.monotonic()
    assert all(api_versions_answered(b.host, b.port) is not None for _ in range(12))
    # 5 at once, then 5/s: the last 7 take well over a second; none is refused.
    assert time.monotonic() - started >= 1.0
    assert "max.connection.creation.rate now 5" in b.log_text()
