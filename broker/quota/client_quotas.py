"""Client quotas on the request path: Kafka's ClientQuotaManager (produce and fetch byte rates) and
ClientRequestQuotaManager (request_percentage), with KIP-219's throttling.

Theory of operation
1. Quotas come from the metadata image (``MetadataImage.client_quotas``, written by the controller
   from AlterClientQuotas); ``update`` rebuilds one table per quota key and clears the cached
   resolutions. ``active`` is True while any user/client-id quota exists: the dispatcher holds
   this object only then (``Dispatcher.set_quotas`` swaps in wrapped handlers and a throttling
   ``respond``), so with no quota configured Produce and Fetch pay nothing at all.
2. Who: the user is the connection's principal name (``User:ANONYMOUS`` -> ``ANONYMOUS`` on
   PLAINTEXT), the client id the request header's. The quota and the metric tags sharing one
   measured rate follow Kafka's precedence (broker/quota/entities.py ``resolve``); the resolution
   is cached per (user, client id).
3. What is measured (Kafka's KafkaApis): Produce records the bytes of its record sets when the
   response is ready (acks=0 included); Fetch records the bytes of the response's record sets, and
   when that overdraws the quota the bytes are "unrecorded" and the client gets an empty response
   with the throttle time instead (its next fetch reads them again); a fetch's ``max_bytes`` is
   bounded by what one quota window allows, so a response is never too big to ever be sent.
   Every API records the time its handler call took on the handler loop (the handler runs inside
   ``_quota_handle``; in percent-seconds, so the rate is a percentage of one thread; the steps of
   a coroutine handler after its first await are not counted). Fetches from followers and
   requests forwarded by other brokers are exempt, as Kafka exempts replication and cluster
   actions.
4. A connection a quota applies to is read one request at a time, as Kafka reads every channel
   (it mutes a channel while its request is processed); otherwise a pipelining client would have
   dozens of requests read before the first throttle took effect.
5. Throttle (KIP-219): the response goes out at once with ``throttle_time_ms`` = the larger of the
   byte-rate and the request-time delays, and the connection stops reading for that long
   (``Connection.throttle``), so a client that ignores the field is slowed all the same.
   Byte-rate delays are Kafka's unbounded X = (O - T) / T * W; request-time delays are bounded by
   one quota window.

Thread safety: the handler loop only (the dispatcher calls in; the connection's mute is scheduled
on the connection's own loop).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from odradek.broker.metadata.controller_client import is_forwarded
from odradek.broker.network.connection import MAX_IN_FLIGHT
from odradek.broker.quota.entities import Entity, resolve
from odradek.broker.runtime.rate import Rate, throttle_time_ms
from odradek.controller.client_quotas import CONSUMER_BYTE_RATE, IP, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

if TYPE_CHECKING:
    from odradek.broker.api.request_types import ApiRequest, Handler, HandlerResult
    from odradek.protocol.messages import FetchRequest, FetchResponse, ProduceRequest

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
FETCH_KEY = 1
# Kafka's cluster actions: exempt from the request quota (they come from other brokers).
EXEMPT_APIS = frozenset({4, 5, 6, 7, 27, 56, 58, 62, 63, 64, 67})

Tags = tuple[str, str]



class _LimitedConnection(Protocol):
    """The part of a connection the quotas' step sets (broker/network/connection.py's Connection)."""

    max_in_flight: int

class QuotaManager:
    """One quota key (Kafka: one ClientQuotaManager per QuotaType): quotas, rates, throttle stats."""

    def __init__(self, key: str, samples: int, window_ms: int, bounded: bool) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_ms
        # Request-time throttles are bounded by one window (ClientRequestQuotaManager), byte ones not.
        self.max_throttle_ms: float | None = float(window_ms) if bounded else None
        self.quotas: dict[Entity, float] = {}
        self._resolved: dict[tuple[str, str], tuple[Tags, float] | None] = {}
        self.rates: dict[Tags, Rate] = {}
        # tags -> [throttled responses, total throttle ms] (Kafka's throttle-time Avg sensor)
        self.throttles: dict[Tags, list[float]] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.quotas)

    def update(self, quotas: Mapping[Entity, float]) -> None:
        self.quotas = dict(quotas)
        self._resolved.clear()

    def resolve(self, user: str, client_id: str) -> tuple[Tags, float] | None:
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            found = self._resolved[key] = resolve(self.quotas, user, client_id)
            return found

    def _rate(self, tags: Tags) -> Rate:
        rate = self.rates.get(tags)
        if rate is None:
            rate = self.rates[tags] = Rate(self.samples, self.window_ms)
        return rate

    def record(self, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Record ``value`` and return the throttle time (0 within quota or without one)."""
        found = self.resolve(user, client_id)
        if found is None:
            return 0
        tags, bound = found
        rate = self._rate(tags)
        rate.record(value, now_ms)
        return throttle_time_ms(rate, bound, now_ms, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: float) -> None:
        found = self.resolve(user, client_id)
        if found is not None:
            self._rate(found[0]).record(-value, now_ms)

    def throttled(self, user: str, client_id: str, ms: int) -> None:
        found = self.resolve(user, client_id)
        if found is not None:
            stat = self.throttles.setdefault(found[0], [0.0, 0.0])
            stat[0] += 1
            stat[1] += ms

    def rate_of(self, tags: Tags, now_ms: float) -> float:
        rate = self.rates.get(tags)
        return 0.0 if rate is None else rate.measure(now_ms)


def _records_size(records: Any) -> int:
    if records is None:
        return 0
    size = getattr(records, "size", None)
    return size if type(size) is int else len(records)


def produce_bytes(body: ProduceRequest) -> int:
    return sum(_records_size(pd["records"]) for t in body["topic_data"] for pd in t["partition_data"])


def fetch_bytes(body: Mapping[str, Any]) -> int:
    """A FetchResponse's record bytes (the dispatcher holds it as the codec's dict)."""
    return sum(_records_size(p["records"]) for t in body["responses"] for p in t["partitions"])


def _is_follower_fetch(request: ApiRequest[FetchRequest]) -> bool:
    body = request.body
    if request.api_version < 15:
        return body["replica_id"] >= 0
    state = body.get("replica_state")
    return state is not None and state.get("replica_id", -1) >= 0


def throttled_fetch_response(request: ApiRequest[FetchRequest], throttle_ms: int) -> FetchResponse:
    """Kafka's FetchContext.getThrottledResponse: no partitions; a new or sessionless fetch gets
    session id 0 (the client starts over), an incremental one keeps its session."""
    body = request.body
    epoch = body.get("session_epoch", -1) if request.api_version >= 7 else -1
    session_id = body["session_id"] if epoch > 0 else 0
    return {"throttle_time_ms": throttle_ms, "error_code": 0, "session_id": session_id, "responses": []}


class ClientQuotas:
    """The three client quota managers and the dispatcher's hooks (module docstring)."""

    def __init__(self, samples: int, window_s: int, clock: Callable[[], float] = time.monotonic,
                 on_active: Callable[[bool], None] | None = None) -> None:
        window_ms = window_s * 1000
        self.produce = QuotaManager(PRODUCER_BYTE_RATE, samples, window_ms, bounded=False)
        self.fetch = QuotaManager(CONSUMER_BYTE_RATE, samples, window_ms, bounded=False)
        self.request = QuotaManager(REQUEST_PERCENTAGE, samples, window_ms, bounded=True)
        self.managers = (self.produce, self.fetch, self.request)
        self._clock = clock
        #: called with the new ``active`` value whenever it changes (the dispatcher's switch)
        self.on_active = on_active
        self.active = False
        # Connections read one request at a time because a quota applies to them.
        self._limited: weakref.WeakSet[_LimitedConnection] = weakref.WeakSet()

    def update(self, client_quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Take the quotas of the metadata image (entities without an ``ip`` component)."""
        by_key: dict[str, dict[Entity, float]] = {m.key: {} for m in self.managers}
        for entity, values in client_quotas.items():
            if any(etype == IP for etype, _ in entity):
                continue
            for key, value in values.items():
                if key in by_key:
                    by_key[key][entity] = value
        for m in self.managers:
            if by_key[m.key] != m.quotas:
                m.update(by_key[m.key])
        for conn in list(self._limited):  # re-limited at their next request if a quota still applies
            conn.max_in_flight = MAX_IN_FLIGHT
        self._limited.clear()
        active = any(m.enabled for m in self.managers)
        if active != self.active:
            self.active = active
            log.info("client quotas %s", "enabled" if active else "disabled (none configured)")
            if self.on_active is not None:
                self.on_active(active)

    def applies(self, user: str, client_id: str) -> bool:
        return any(m.enabled and m.resolve(user, client_id) is not None for m in self.managers)

    # -- the dispatcher's quota steps (only while active) --------------------------------------

    def run_handler(self, handle: Handler, request: ApiRequest[Any], conn: _LimitedConnection) -> HandlerResult:
        """The step around a handler: bound a consumer fetch to what its quota window can take
        (Kafka's getMaxValueInQuotaWindow: a larger response could never be sent unthrottled), then
        run the handler and count its time for request_percentage. A client with a quota has one
        request in flight at a time on ``conn`` (so a throttle applies before its next is read)."""
        if request.api_key == FETCH_KEY and self.fetch.enabled and not _is_follower_fetch(request):
            found = self.fetch.resolve(request.principal.name, request.client_id or "")
            if found is not None:
                window_bytes = found[1] * (self.fetch.samples - 1) * self.fetch.window_ms / 1000.0
                body = request.body
                body["max_bytes"] = max(1, min(body["max_bytes"], int(window_bytes)))
        if conn.max_in_flight != 1 and self.applies(request.principal.name, request.client_id or ""):
            conn.max_in_flight = 1
            self._limited.add(conn)
        start = time.perf_counter()
        try:
            return handle(request)
        finally:
            self.handler_time(request, time.perf_counter() - start)

    def handler_time(self, request: ApiRequest[Any], elapsed_s: float) -> None:
        """Record the handler's time for request_percentage (percent-seconds of one thread)."""
        if not self.request.enabled or request.api_key in EXEMPT_APIS or _forwarded(request):
            return
        self.request.record(request.principal.name, request.client_id or "", elapsed_s * 100.0,
                            self._clock() * 1000.0)

    def on_response(self, request: ApiRequest[Any], body: dict[str, Any] | None) -> tuple[dict[str, Any] | None, int]:
        """Record Produce/Fetch bytes, compute the throttle, put it in the body; returns the body to
        send (a throttled fetch's is empty) and the throttle time the connection must observe."""
        api_key = request.api_key
        if api_key in EXEMPT_APIS or _forwarded(request):
            return body, 0
        user = request.principal.name
        client_id = request.client_id or ""
        now_ms = self._clock() * 1000.0
        request_ms = self.request.record(user, client_id, 0.0, now_ms) if self.request.enabled else 0
        byte_ms = 0
        manager = self.request
        if api_key == PRODUCE_KEY and self.produce.enabled:
            byte_ms = self.produce.record(user, client_id, produce_bytes(request.body), now_ms)
            manager = self.produce if byte_ms > request_ms else manager
        elif api_key == FETCH_KEY and body is not None and self.fetch.enabled and not _is_follower_fetch(request):
            size = fetch_bytes(body)
            byte_ms = self.fetch.record(user, client_id, size, now_ms)
            throttle = max(byte_ms, request_ms)
            if throttle > 0:
                # Kafka returns an empty response to a throttled fetch, so the bytes were not sent.
                self.fetch.unrecord(user, client_id, size, now_ms)
                body = cast("dict[str, Any]", throttled_fetch_response(request, throttle))
            manager = self.fetch if byte_ms > request_ms else manager
        throttle = max(byte_ms, request_ms)
        if throttle > 0:
            manager.throttled(user, client_id, throttle)
            if body is not None and "throttle_time_ms" in body:
                body["throttle_time_ms"] = throttle
        return body, throttle

    # -- metrics -------------------------------------------------------------------------------

    def metric_samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Kafka's quota metrics (group Produce/Fetch/Request: byte-rate / request-time, and
        throttle-time, tagged user and client-id) as (name, labels, value)."""
        now_ms = self._clock() * 1000.0
        out: list[tuple[str, dict[str, str], float]] = []
        for m, rate_name in ((self.produce, "byte_rate"), (self.fetch, "byte_rate"), (self.request, "request_time")):
            group = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch", REQUEST_PERCENTAGE: "Request"}[m.key]
            for tags in m.rates:
                labels = {"quota_type": group, "user": tags[0], "client_id": tags[1]}
                out.append((rate_name, labels, m.rate_of(tags, now_ms)))
                count, total = m.throttles.get(tags, (0.0, 0.0))
                out.append(("throttle_time", labels, total / count if count else 0.0))
        return out


def _forwarded(request: ApiRequest[Any]) -> bool:
    return is_forwarded(request.client_id)
