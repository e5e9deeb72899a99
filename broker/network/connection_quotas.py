"""Connection counts and limits: Kafka's ConnectionQuotas for ``max.connections``,
``max.connections.per.ip`` and ``max.connections.per.ip.overrides``.

Kafka's rules, kept here:
- ``max.connections`` (broker-wide): when every slot is taken, the acceptor *blocks* holding the
  connection it just accepted, and the rest wait in the kernel's listen backlog, until a connection
  closes. Kafka exempts the inter-broker listener (its "protected listener") when there are several
  listeners; Odradek has no inter-broker connections, so every listener counts alike. Kafka's
  per-listener ``listener.name.X.max.connections`` is not implemented; the connection creation
  rates (KIP-612) are broker/network/connection_rates.py's, applied by the acceptor before these
  counts.
- ``max.connections.per.ip`` (with per-host overrides): a connection that would exceed its
  address's limit is accepted and closed at once ("Rejected connection from ...").
- All three are dynamic: ``update`` applies new values to the live counts. A lower
  ``max.connections`` makes the socket server close the least recently active connections beyond
  it, as Kafka's processors do (``maxConnectionsExceeded``).

Thread safety: the acceptor runs on the handler loop; connections close on their network loops
(other threads). Counts, limits and the "acceptor waits for a slot" flag change only under one
lock, and ``dec``/``update`` decide whether to wake the acceptor under that same lock, so a slot
freed between the acceptor's look and its wait cannot be missed (the wake-up is guaranteed).
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class Admit(enum.Enum):
    OK = 1
    #: max.connections reached: hold the socket and wait for ``on_slot_free``.
    BLOCKED = 2
    #: the address is at its limit: close the socket now (nothing was counted).
    REJECTED = 3


def normalize_ip(addr: str) -> str:
    """One spelling per address (IPv4-mapped IPv6 counts as the IPv4 address, as Java's InetAddress does)."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """Host names and IPs to normalized IPs (Kafka: ``InetAddress.getByName``). A name resolving to
    several addresses applies to each; an unresolvable name is logged and skipped."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.error("max.connections.per.ip.overrides: cannot resolve %r (%s); entry ignored", host, exc)
            continue
        for info in infos:
            out[normalize_ip(str(info[4][0]))] = count
    return out


class ConnectionQuotas:
    def __init__(self, max_connections: int, max_per_ip: int, overrides: Mapping[str, int],
                 on_slot_free: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = resolve_overrides(overrides)
        self.counts: dict[str, int] = {}
        self.total = 0
        #: connections closed at accept for exceeding their address's limit (a metric)
        self.rejected = 0
        # True while the acceptor holds a connection waiting for a slot; cleared by whoever wakes it.
        self._acceptor_waiting = False
        # Must be callable from any thread; schedules the acceptor's retry on the handler loop.
        self._on_slot_free = on_slot_free

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    def try_inc(self, ip: str) -> Admit:
        with self._lock:
            if self.total >= self.max_connections:
                self._acceptor_waiting = True
                return Admit.BLOCKED
            count = self.counts.get(ip, 0)
            if count >= self.limit_for(ip):
                self.rejected += 1
                return Admit.REJECTED
            self.counts[ip] = count + 1
            self.total += 1
            return Admit.OK

    def dec(self, ip: str) -> None:
        with self._lock:
            count = self.counts.get(ip, 0)
            if count <= 0:
                log.error("connection count for %s decreased below zero", ip)
                return
            if count == 1:
                del self.counts[ip]
            else:
                self.counts[ip] = count - 1
            self.total -= 1
            wake = self._take_wakeup()
        if wake:
            self._on_slot_free()

    def update(self, max_connections: int, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        resolved = resolve_overrides(overrides)
        with self._lock:
            self.max_connections = max_connections
            self.max_per_ip = max_per_ip
            self.overrides = resolved
            wake = self._take_wakeup()
        if wake:
            self._on_slot_free()

    def excess(self) -> int:
        """Connections above ``max.connections`` (after it was lowered)."""
        with self._lock:
            return max(0, self.total - self.max_connections)

    def get(self, ip: str) -> int:
        with self._lock:
            return self.counts.get(ip, 0)

    def _take_wakeup(self) -> bool:
        if self._acceptor_waiting and self.total < self.max_connections:
            self._acceptor_waiting = False
            return True
        return False
