"""Connection limits: parsing max.connections.per.ip.overrides, and ConnectionQuotas' counts and wake-up.

The wake-up tests are deterministic: the acceptor waits for a max.connections slot only after
``try_inc`` answered BLOCKED, and whichever call frees a slot (``dec`` on a network thread, ``update``
raising the limit) must call ``on_slot_free`` exactly once, even when it races the acceptor's look.
"""

from __future__ import annotations

import threading

import pytest

from odradek.broker.config.broker_config import BrokerConfig, ConfigError, parse_ip_overrides
from odradek.broker.network.connection_quotas import Admit, ConnectionQuotas, normalize_ip

# -- parsing (Kafka's Csv.parseCsvMap + KafkaConfig validation) -----------------------------------------


def test_overrides_parse_hosts_ips_and_ipv6_at_the_last_colon() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.1:5, localhost : 7 ,::1:3,fe80::1%eth0:2") == {
        "127.0.0.1": 5, "localhost": 7, "::1": 3, "fe80::1%eth0": 2}


@pytest.mark.parametrize("raw, message", [
    ("127.0.0.1", "is not host:count"),
    (":5", "is not host:count"),
    ("127.0.0.1:many", "count 'many' of 127.0.0.1 is not an integer"),
    ("127.0.0.1:-1", "is negative"),
    ("bad/host:1", "max.connections.per.ip.overrides contains invalid addresses : bad/host"),
])
def test_bad_overrides_are_config_errors(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_ip_overrides(raw)
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_props({"node.id": "1", "max.connections.per.ip.overrides": raw})


def test_zero_per_ip_needs_overrides() -> None:
    with pytest.raises(ConfigError, match="max.connections.per.ip can be set to zero only if "
                                          "max.connections.per.ip.overrides property is set."):
        BrokerConfig.from_props({"node.id": "1", "max.connections.per.ip": "0"})
    cfg = BrokerConfig.from_props({"node.id": "1", "max.connections.per.ip": "0",
                                   "max.connections.per.ip.overrides": "10.0.0.1:3"})
    assert cfg["max.connections.per.ip"] == 0


def test_ipv4_mapped_ipv6_counts_as_the_ipv4_address() -> None:
    assert normalize_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_ip("::1") == "::1"
    assert normalize_ip("not-an-ip") == "not-an-ip"


# -- counts --------------------------------------------------------------------------------------------


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_per_ip_limit_rejects_without_counting_and_overrides_win() -> None:
    q = ConnectionQuotas(100, 2, {"127.0.0.2": 1, "localhost": 3}, Wakes())
    assert [q.try_inc("10.0.0.1") for _ in range(3)] == [Admit.OK, Admit.OK, Admit.REJECTED]
    assert [q.try_inc("127.0.0.2") for _ in range(2)] == [Admit.OK, Admit.REJECTED]
    assert [q.try_inc("127.0.0.1") for _ in range(4)] == [Admit.OK] * 3 + [Admit.REJECTED]  # localhost
    assert q.total == 6 and q.rejected == 3 and q.get("10.0.0.1") == 2
    q.dec("10.0.0.1")
    assert q.try_inc("10.0.0.1") is Admit.OK


def test_slot_freed_by_dec_wakes_the_waiting_acceptor_exactly_once() -> None:
    wakes = Wakes()
    q = ConnectionQuotas(2, 100, {}, wakes)
    assert q.try_inc("a") is Admit.OK and q.try_inc("b") is Admit.OK
    q.dec("a")  # nobody waits: no wake-up
    assert wakes.count == 0
    assert q.try_inc("a") is Admit.OK
    assert q.try_inc("c") is Admit.BLOCKED  # the acceptor now waits
    t = threading.Thread(target=q.dec, args=("b",))  # a network thread closes a connection
    t.start()
    t.join()
    assert wakes.count == 1
    q.dec("a")  # a second free slot: the acceptor was already woken, not woken twice
    assert wakes.count == 1
    assert q.try_inc("c") is Admit.OK


def test_raising_max_connections_wakes_the_waiting_acceptor() -> None:
    wakes = Wakes()
    q = ConnectionQuotas(1, 100, {}, wakes)
    assert q.try_inc("a") is Admit.OK
    assert q.try_inc("b") is Admit.BLOCKED
    q.update(1, 100, {})  # still full
    assert wakes.count == 0
    q.update(2, 100, {})
    assert wakes.count == 1
    assert q.try_inc("b") is Admit.OK


def test_lowering_max_connections_reports_the_excess() -> None:
    q = ConnectionQuotas(10, 100, {}, Wakes())
    for ip in "abcde":
        q.try_inc(ip)
    q.update(3, 100, {})
    assert q.excess() == 2
    assert q.try_inc("f") is Admit.BLOCKED


def test_unresolvable_override_is_skipped_not_fatal() -> None:
    q = ConnectionQuotas(10, 2, {"no-such-host.invalid": 5, "127.0.0.9": 1}, Wakes())
    assert q.overrides == {"127.0.0.9": 1}
