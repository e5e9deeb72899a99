"""Kafka's ClientMetricsManager: which metrics each client pushes and when, and what a push must satisfy.

State, per broker (as in Kafka: a client's instance lives on the broker it talks to):

- the subscriptions: the image's CLIENT_METRICS resources (odradek.controller.client_metrics_configs), parsed
  again whenever they change, each change raising ``version``;
- the client instances, by client instance id: the client's attributes (client_instance_id,
  client_id, client_software_name/version from its ApiVersions, client_source_address/port), its
  subscription (requested metrics, push interval, subscription id), the times of its last
  GetTelemetrySubscriptions and PushTelemetry, whether it said it is terminating, its last error.

Kafka's rules (ClientMetricsManager, ClientMetricsInstance, Kafka 4.4):

1. GetTelemetrySubscriptions with the zero id is given a new random id. Any request for an id the
   broker does not know (or knew on a connection since closed: Kafka drops an instance when the
   connection it was created on closes) creates its instance from the current request; an instance
   whose subscriptions changed since it was made is made again (same attributes, new timestamps).
2. A client's subscription: every subscription whose selectors all match it; the requested metrics
   are the union of their prefixes (in Java HashSet order, ``java_order``), just "*" when one of them
   has "*"; the push interval the smallest of theirs and 300000; the subscription id
   ``java_order.subscription_id``. No match: no metrics (the client pushes nothing), 300000 ms.
3. GetTelemetrySubscriptions sooner than one push interval after the last Get or Push is
   THROTTLING_QUOTA_EXCEEDED, unless the last push failed with UNKNOWN_SUBSCRIPTION_ID or
   UNSUPPORTED_COMPRESSION_TYPE. Accepted compression types: zstd, lz4, gzip, snappy; deltas.
4. PushTelemetry, in order: a reserved id (zero, or Kafka's metadata topic id 1) is INVALID_REQUEST
   with no instance made; after a terminating push every push is INVALID_REQUEST; a push sooner
   than one interval after the last push is THROTTLING_QUOTA_EXCEEDED (the first push after a Get
   is always accepted: clients jitter the interval; a terminating push is never throttled); another
   subscription id is UNKNOWN_SUBSCRIPTION_ID; a compression id outside 0-4 is
   UNSUPPORTED_COMPRESSION_TYPE; more than ``telemetry.max.bytes`` of payload is
   TELEMETRY_TOO_LARGE. The push time is kept once the throttling check passes, whatever follows.
   A payload that cannot be decompressed (or decompresses past ``telemetry.max.bytes``) or decoded
   is INVALID_RECORD (the handler: broker/api/handlers/push_telemetry.py).
5. An instance not heard from for max(60 s, 3 push intervals) is dropped; at most 16384 are kept
   (least recently used first out).

Ownership: the handler loop (every method). The exporter it feeds (odradek.broker.client_telemetry.exporter)
is read by the metrics thread under its own lock.
"""

from __future__ import annotations

import ipaddress
import logging
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.client_telemetry import java_order
from odradek.controller import client_metrics_configs as cmc
from odradek.controller.meta_properties import new_kafka_uuid, uuid_to_base64
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import GetTelemetrySubscriptionsResponse

log = logging.getLogger(__name__)

# Kafka's ClientMetricsManager.SUPPORTED_COMPRESSION_TYPES: zstd, lz4, gzip, snappy (the client takes
# the first it supports).
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
KNOWN_COMPRESSION_IDS = range(0, 5)  # Kafka's CompressionType.forId: none, gzip, snappy, lz4, zstd
CACHE_MAX_SIZE = 16384
CACHE_EXPIRY_MS = 60_000
EXPIRY_SCAN_INTERVAL_MS = 1000
ZERO_UUID = uuid.UUID(int=0)
RESERVED_IDS = frozenset({ZERO_UUID, uuid.UUID(int=1)})  # Kafka's Uuid.RESERVED (ZERO_UUID, METADATA_TOPIC_ID)
# What ClientInformation says of a client that sent no ApiVersions v3+.
UNKNOWN_SOFTWARE = "unknown"


def java_host_address(host: str) -> str:
    """InetAddress.getHostAddress: IPv4 as is, IPv6 as eight uncompressed hex groups."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 4:
        return str(address)
    return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))


def client_attributes(instance_id: uuid.UUID, client_id: str | None, conn: Any) -> dict[str, str | None]:
    """Kafka's ClientMetricsInstanceMetadata: what a subscription's selectors match against."""
    host, _, port = str(getattr(conn, "peer", "")).rpartition(":")
    return {
        cmc.CLIENT_INSTANCE_ID: uuid_to_base64(instance_id),
        cmc.CLIENT_ID: client_id,
        cmc.CLIENT_SOFTWARE_NAME: getattr(conn, "client_software_name", UNKNOWN_SOFTWARE),
        cmc.CLIENT_SOFTWARE_VERSION: getattr(conn, "client_software_version", UNKNOWN_SOFTWARE),
        cmc.CLIENT_SOURCE_ADDRESS: java_host_address(host) if host else None,
        cmc.CLIENT_SOURCE_PORT: port or None,
    }


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    attributes: dict[str, str | None]
    subscription_id: int
    subscription_version: int
    metrics: list[str]
    push_interval_ms: int
    connection: Callable[[], Any]  # weak reference to the connection it was made on
    last_get_ms: float = float("-inf")
    last_push_ms: float = float("-inf")
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    expires_at_ms: float = field(default=0.0)

    def connection_closed(self) -> bool:
        conn = self.connection()
        return conn is None or bool(getattr(conn, "closed", False))

    def accept_get(self, now_ms: float) -> bool:
        """ClientMetricsInstance.maybeUpdateGetRequestTimestamp."""
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def accept_push(self, now_ms: float) -> bool:
        """ClientMetricsInstance.maybeUpdatePushRequestTimestamp."""
        accept = self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms
        if accept:
            self.last_push_ms = now_ms
        return accept


@dataclass(frozen=True)
class PushVerdict:
    """What a PushTelemetry gets before its payload is read: an error, or the instance to export for."""

    error: ErrorCode
    instance: ClientInstance | None = None


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class ClientMetricsManager:
    def __init__(self, image_of: Callable[[], Any], telemetry_max_bytes: int,
                 clock_ms: Callable[[], float] = _monotonic_ms, cache_expiry_ms: int = CACHE_EXPIRY_MS) -> None:
        self._image_of = image_of
        self.telemetry_max_bytes = telemetry_max_bytes
        self._clock_ms = clock_ms
        self._cache_expiry_ms = cache_expiry_ms
        self._seen: dict[str, dict[str, str]] = {}
        self._subscriptions: list[cmc.Subscription] = []  # in Kafka's ConcurrentHashMap order
        self.version = 0
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self._next_expiry_scan_ms = float("-inf")

    # -- subscriptions ---------------------------------------------------------------------

    def _refresh(self) -> None:
        current: Mapping[str, dict[str, str]] = self._image_of().client_metrics
        if current == self._seen:
            return
        self._seen = {name: dict(props) for name, props in current.items()}
        parsed = []
        for name in java_order.hash_order(self._seen):
            try:
                parsed.append(cmc.parse(name, self._seen[name]))
            except cmc.ClientMetricsConfigError as e:  # the controller validated it: a newer writer's key?
                log.warning("client metrics subscription %s ignored: %s", name, e)
        self._subscriptions = parsed
        self.version += 1

    def subscription_names(self) -> list[str]:
        """The subscriptions as Kafka's listClientMetricsResources lists them."""
        self._refresh()
        return java_order.hash_order(self._seen)

    # -- instances -------------------------------------------------------------------------

    def _make(self, instance_id: uuid.UUID, attributes: dict[str, str | None], conn: Any) -> ClientInstance:
        interval = cmc.INTERVAL_MS_DEFAULT
        inserted: list[str] = []
        everything = False
        for sub in self._subscriptions:
            if sub.matches(attributes):
                everything = everything or cmc.ALL_METRICS in sub.metrics
                inserted += java_order.hash_order(sub.metrics, sized_for=len(sub.metrics))
                interval = min(interval, sub.interval_ms)
        metrics = [cmc.ALL_METRICS] if everything else java_order.hash_order(inserted)
        instance = ClientInstance(
            instance_id, attributes, java_order.subscription_id(metrics, interval, instance_id), self.version,
            metrics, interval, weakref.ref(conn) if conn is not None else (lambda: None))
        self._instances[instance_id] = instance
        while len(self._instances) > CACHE_MAX_SIZE:
            self._instances.popitem(last=False)
        return instance

    def _instance(self, instance_id: uuid.UUID, client_id: str | None, conn: Any, now_ms: float) -> ClientInstance:
        """ClientMetricsManager.clientInstance: found, made, or made again; its expiry pushed back."""
        self._refresh()
        self._expire(now_ms)
        instance = self._instances.get(instance_id)
        if instance is not None and (instance.connection_closed() or instance.expires_at_ms <= now_ms):
            instance = None  # Kafka dropped it when its connection closed, or when it expired
        if instance is None:
            instance = self._make(instance_id, client_attributes(instance_id, client_id, conn), conn)
        elif instance.subscription_version < self.version:
            instance = self._make(instance_id, instance.attributes, conn)
        self._instances.move_to_end(instance_id)
        instance.expires_at_ms = now_ms + max(self._cache_expiry_ms, 3 * instance.push_interval_ms)
        return instance

    def _expire(self, now_ms: float) -> None:
        # A scan of every instance, so at most once a second (16384 instances pushing every few
        # minutes would otherwise scan them all dozens of times a second).
        if now_ms < self._next_expiry_scan_ms:
            return
        self._next_expiry_scan_ms = now_ms + EXPIRY_SCAN_INTERVAL_MS
        for key in [k for k, i in self._instances.items() if i.expires_at_ms <= now_ms]:
            del self._instances[key]

    def instance(self, instance_id: uuid.UUID) -> ClientInstance | None:
        return self._instances.get(instance_id)

    # -- the two APIs ----------------------------------------------------------------------

    def get_subscriptions(self, instance_id: uuid.UUID, client_id: str | None,
                          conn: Any) -> GetTelemetrySubscriptionsResponse:
        """GetTelemetrySubscriptions' answer (rules 1-3)."""
        now = self._clock_ms()
        if instance_id == ZERO_UUID:
            instance_id = new_kafka_uuid()
            while instance_id in self._instances:
                instance_id = new_kafka_uuid()
        instance = self._instance(instance_id, client_id, conn, now)
        if not instance.accept_get(now) and instance.last_error not in (
                ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            return error_response(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        instance.last_error = ErrorCode.NONE
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "client_instance_id": instance_id,
            "subscription_id": instance.subscription_id,
            "accepted_compression_types": list(ACCEPTED_COMPRESSION_TYPES),
            "push_interval_ms": instance.push_interval_ms,
            "telemetry_max_bytes": self.telemetry_max_bytes,
            "delta_temporality": True,
            "requested_metrics": list(instance.metrics),
        }

    def check_push(self, instance_id: uuid.UUID, subscription_id: int, terminating: bool, compression: int,
                   size: int, client_id: str | None, conn: Any) -> PushVerdict:
        """PushTelemetry's checks before the payload is read (rule 4)."""
        if instance_id in RESERVED_IDS:
            return PushVerdict(ErrorCode.INVALID_REQUEST)
        now = self._clock_ms()
        instance = self._instance(instance_id, client_id, conn, now)
        error = ErrorCode.NONE
        if instance.terminating:
            error = ErrorCode.INVALID_REQUEST
        elif not instance.accept_push(now) and not terminating:
            error = ErrorCode.THROTTLING_QUOTA_EXCEEDED
        elif subscription_id != instance.subscription_id:
            error = ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        elif compression not in KNOWN_COMPRESSION_IDS:
            error = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        elif size > self.telemetry_max_bytes:
            error = ErrorCode.TELEMETRY_TOO_LARGE
        instance.terminating = terminating
        if error != ErrorCode.NONE:
            instance.last_error = error
            return PushVerdict(error)
        return PushVerdict(ErrorCode.NONE, instance)

    def push_done(self, instance: ClientInstance, error: ErrorCode) -> None:
        """The payload was exported (NONE) or refused (INVALID_RECORD)."""
        instance.last_error = error


def error_response(code: ErrorCode) -> GetTelemetrySubscriptionsResponse:
    """GetTelemetrySubscriptions' error answer: every other field at its zero value, as Kafka's."""
    return {"throttle_time_ms": 0, "error_code": code, "client_instance_id": ZERO_UUID, "subscription_id": 0,
            "accepted_compression_types": [], "push_interval_ms": 0, "telemetry_max_bytes": 0,
            "delta_temporality": False, "requested_metrics": []}
