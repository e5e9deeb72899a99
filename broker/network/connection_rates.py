"""Connection creation rates (KIP-612, Kafka's ConnectionQuotas): ``max.connection.creation.rate``
(broker-wide), ``listener.name.<l>.max.connection.creation.rate`` (per listener) and the
``connection_creation_rate`` quota of ``ip`` entities (AlterClientQuotas; ``ips/<default>``).

Kafka's rules, kept here (the acceptor in broker/network/reactor.py applies the answers):
1. Every accepted connection is recorded in the broker-wide and its listener's rate (Kafka's
   sampled Rate, broker/runtime/rate.py, over ``quota.window.num`` x ``quota.window.size.seconds``).
   Over either limit, the acceptor *waits* the longer throttle time (bounded by one quota window)
   holding that connection before it admits it, and accepts nothing else on that listener
   meanwhile: new connections are spread out in time, none is refused, and established
   connections keep being served (the wait is a timer, not a blocked thread).
2. Then the address's own rate (its ip quota, else the ip default; none: not measured). Over it,
   the connection is un-recorded from the address, broker and listener rates and closed after the
   throttle time (Kafka's DelayedCloseSocket): the client learns nothing earlier, and a
   reconnecting storm from one address is slowed without touching other addresses.
3. Limits are dynamic: ``max.connection.creation.rate`` through the broker config, ip quotas
   through the metadata image; per-listener limits are read at start-up. A limit of
   ``2147483647`` (the default) means unlimited and costs nothing per accept.

Ownership: the handler loop (the acceptor and metadata updates both run there), so no lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from odradek.broker.network.connection_quotas import normalize_ip, resolve_overrides
from odradek.broker.runtime.rate import Rate, throttle_time_ms

log = logging.getLogger(__name__)

UNLIMITED = 2**31 - 1
_LISTENER_KEY = "max.connection.creation.rate"


def listener_rates(originals: Mapping[str, str], listeners: list[str]) -> dict[str, int]:
    """``listener.name.<name>.max.connection.creation.rate`` for each listener that sets it (Kafka's
    listener prefix is the lower-cased name)."""
    out: dict[str, int] = {}
    for name in listeners:
        raw = originals.get(f"listener.name.{name.lower()}.{_LISTENER_KEY}")
        if raw is not None and raw.strip():
            value = int(raw)
            if value < 0:
                raise ValueError(f"listener.name.{name.lower()}.{_LISTENER_KEY} must be at least 0")
            out[name] = value
    return out


class ConnectionRates:
    def __init__(self, samples: int, window_s: int, broker_rate: int = UNLIMITED,
                 per_listener: Mapping[str, int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.samples = samples
        self.window_ms = window_s * 1000
        self._clock = clock
        self.broker_limit = broker_rate
        self.listener_limits: dict[str, int] = dict(per_listener or {})
        self._broker = Rate(samples, self.window_ms)
        self._listeners: dict[str, Rate] = {}
        self.ip_default: int = UNLIMITED
        self.ip_limits: dict[str, int] = {}
        self._ips: dict[str, Rate] = {}
        #: accepted connections the acceptor delayed (rule 1) / closed for their address (rule 2)
        self.delayed = 0
        self.ip_throttled = 0

    def now_ms(self) -> float:
        return self._clock() * 1000.0

    def set_broker_limit(self, rate: int) -> None:
        if rate != self.broker_limit:
            log.info("max.connection.creation.rate now %d", rate)
            self.broker_limit = rate

    def set_ip_quotas(self, client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]]) -> None:
        """Take the ip entities' connection_creation_rate from the metadata image."""
        default = UNLIMITED
        named: dict[str, int] = {}
        for entity, values in client_quotas.items():
            if len(entity) != 1 or entity[0][0] != "ip" or "connection_creation_rate" not in values:
                continue
            rate = int(values["connection_creation_rate"])
            if entity[0][1] is None:
                default = rate
            else:
                named[entity[0][1]] = rate
        resolved = resolve_overrides(named) if named else {}
        if (default, resolved) != (self.ip_default, self.ip_limits):
            log.info("connection_creation_rate per ip now: default %s, overrides %s",
                     "unlimited" if default == UNLIMITED else default, resolved)
            self.ip_default, self.ip_limits = default, resolved
            self._ips = {ip: r for ip, r in self._ips.items() if self.ip_limit(ip) != UNLIMITED}

    def ip_limit(self, ip: str) -> int:
        return self.ip_limits.get(normalize_ip(ip), self.ip_default)

    def _bounded(self, rate: Rate, limit: int, now_ms: float) -> int:
        return throttle_time_ms(rate, float(limit), now_ms, float(self.window_ms))

    def record_connection(self, listener: str) -> int:
        """Rule 1: record one connection; the ms the acceptor must wait before admitting it."""
        broker_limit = self.broker_limit
        listener_limit = self.listener_limits.get(listener, UNLIMITED)
        if broker_limit == UNLIMITED and listener_limit == UNLIMITED:
            return 0
        now = self.now_ms()
        delay = 0
        if broker_limit != UNLIMITED:
            self._broker.record(1.0, now)
            delay = self._bounded(self._broker, broker_limit, now)
        if listener_limit != UNLIMITED:
            rate = self._listeners.get(listener)
            if rate is None:
                rate = self._listeners[listener] = Rate(self.samples, self.window_ms)
            rate.record(1.0, now)
            delay = max(delay, self._bounded(rate, listener_limit, now))
        if delay:
            self.delayed += 1
        return delay

    def ip_throttle(self, ip: str, listener: str) -> int:
        """Rule 2: 0 to go on, else the ms after which to close this connection (un-recorded)."""
        limit = self.ip_limit(ip)
        if limit == UNLIMITED:
            return 0
        now = self.now_ms()
        rate = self._ips.get(ip)
        if rate is None:
            rate = self._ips[ip] = Rate(self.samples, self.window_ms)
        rate.record(1.0, now)
        delay = self._bounded(rate, limit, now)
        if delay:
            rate.record(-1.0, now)
            if self.broker_limit != UNLIMITED:
                self._broker.record(-1.0, now)
            listener_rate = self._listeners.get(listener)
            if listener_rate is not None:
                listener_rate.record(-1.0, now)
            self.ip_throttled += 1
        return delay
