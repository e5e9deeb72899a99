"""The metrics clients push (KIP-714), served on the broker's Prometheus endpoint (/metrics).

Kafka hands pushed metrics to a ClientTelemetry plugin and keeps nothing itself; Odradek serves
them with its own metrics, one series per client instance, metric and data point attributes.

Naming (OpenTelemetry's Prometheus compatibility rules): the metric name with every character
outside ``[a-zA-Z0-9_:]`` replaced by ``_`` (runs of ``_`` become one; a leading digit gets a ``_``),
then its unit (``ms`` -> ``_milliseconds``, ``s`` -> ``_seconds``, ``By`` -> ``_bytes``, another unit as
written; none, ``1`` or a ``{...}`` annotation adds nothing); a monotonic sum is a counter, served
with ``_total``; a gauge and a non-monotonic sum are gauges. So the Java producer's
``org.apache.kafka.producer.record.send.total`` (a monotonic sum) is
``org_apache_kafka_producer_record_send_total``. Labels: ``client_instance_id`` (Kafka's base64
form, as the client and Kafka's tools print it), ``client_id``, ``client_software_name``,
``client_software_version``, then each data point attribute, its name sanitized the same way (one
that collides with the four is served as ``exported_<name>``, as Prometheus renames a target's).

Values: the broker asks clients for deltas (GetTelemetrySubscriptions' delta_temporality), which
Prometheus cannot take: a delta sum is added to the series' running total here, so every counter is
cumulative on /metrics; a cumulative sum and a gauge are served as last pushed.

Bounds, so /metrics cannot grow without limit: a client's series go when it has not pushed for
max(60 s, 3 push intervals) (Kafka's client instance expiry), at the next push or scrape; a client
keeps at most ``MAX_SERIES_PER_CLIENT`` series and all clients ``MAX_SERIES``; a name that would be
one of the broker's own (``kafka_`` or ``odradek_`` prefixes) is not served, nor an empty name. The points left out for
these reasons are counted in ``odradek_client_telemetry_dropped_points_total``. A name pushed by
two clients as two types is served as the type of the first client seen (a Prometheus name has one
type), the other client's series left out of the scrape. ``odradek_client_telemetry_clients`` is the
number of clients with series.

Threads: ``record`` runs on the handler loop, ``collect`` on the metrics server's thread; a lock
guards the series (each call holds it for one push's points, or one scrape).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.broker.client_telemetry.otlp import COUNTER, Point

MAX_SERIES_PER_CLIENT = 10_000
MAX_SERIES = 100_000
EXPIRY_MS = 60_000
BROKER_LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version")
RESERVED_PREFIXES = ("kafka_", "odradek_")
_UNITS = {"ms": "milliseconds", "s": "seconds", "us": "microseconds", "ns": "nanoseconds", "By": "bytes",
          "KiBy": "kibibytes", "MiBy": "mebibytes", "%": "percent"}

_INVALID_NAME = re.compile(r"[^a-zA-Z0-9_:]+")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]+")
_UNDERSCORES = re.compile(r"__+")
_VALID_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # an empty name is the only one sanitizing leaves invalid


def metric_name(name: str, unit: str, kind: str) -> str:
    """The Prometheus family name of an OTLP metric (module docstring); counters without ``_total``
    (prometheus_client adds it to the sample)."""
    out = _UNDERSCORES.sub("_", _INVALID_NAME.sub("_", name))
    if out[:1].isdigit():
        out = "_" + out
    if unit and unit != "1" and not unit.startswith("{"):
        suffix = _UNDERSCORES.sub("_", _INVALID_NAME.sub("_", _UNITS.get(unit, unit))).strip("_")
        if suffix and not out.endswith("_" + suffix):
            out = f"{out}_{suffix}"
    if kind == COUNTER and out.endswith("_total"):
        out = out[: -len("_total")]
    return out


def label_name(key: str) -> str:
    out = _UNDERSCORES.sub("_", _INVALID_LABEL.sub("_", key)) or "_"
    if out[:1].isdigit():
        out = "key_" + out
    if out.startswith("__"):
        out = "key" + out
    if out in BROKER_LABELS:
        out = "exported_" + out
    return out


@dataclass
class _Series:
    kind: str
    help: str
    value: float


@dataclass
class _Client:
    labels: tuple[tuple[str, str], ...]
    expires_at_ms: float
    series: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = field(default_factory=dict)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class ClientTelemetryExporter(Collector):
    def __init__(self, clock_ms: Callable[[], float] = _monotonic_ms) -> None:
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._series_count = 0
        self.dropped = 0
        self._next_expiry_scan_ms = float("-inf")

    def record(self, instance_id: str, labels: dict[str, str | None], points: list[Point],
               push_interval_ms: int) -> None:
        """One accepted push of client ``instance_id`` (its broker-side ``labels``: BROKER_LABELS)."""
        now = self._clock_ms()
        expires = now + max(EXPIRY_MS, 3 * push_interval_ms)
        broker_labels = tuple((k, labels.get(k) or "") for k in BROKER_LABELS)
        with self._lock:
            self._expire(now)
            client = self._clients.get(instance_id)
            if client is None:
                client = self._clients[instance_id] = _Client(broker_labels, expires)
            client.labels, client.expires_at_ms = broker_labels, expires
            for p in points:
                name = metric_name(p.name, p.unit, p.kind)
                if not _VALID_NAME.fullmatch(name) or name.startswith(RESERVED_PREFIXES):
                    self.dropped += 1
                    continue
                key = (name, tuple(sorted((label_name(k), v) for k, v in p.attributes)))
                series = client.series.get(key)
                if series is None:
                    if len(client.series) >= MAX_SERIES_PER_CLIENT or self._series_count >= MAX_SERIES:
                        self.dropped += 1
                        continue
                    series = client.series[key] = _Series(p.kind, p.description, 0.0)
                    self._series_count += 1
                elif series.kind != p.kind:
                    self.dropped += 1
                    continue
                series.value = series.value + p.value if p.delta else p.value

    def _expire(self, now: float, force: bool = False) -> None:
        # A scan of every client: on a push at most once a second, on every scrape.
        if not force and now < self._next_expiry_scan_ms:
            return
        self._next_expiry_scan_ms = now + 1000.0
        for instance_id in [i for i, c in self._clients.items() if c.expires_at_ms <= now]:
            self._series_count -= len(self._clients.pop(instance_id).series)

    def client_count(self) -> int:
        with self._lock:
            return len(self._clients)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        kinds: dict[str, str] = {}
        with self._lock:
            self._expire(self._clock_ms(), force=True)
            for client in self._clients.values():
                for (name, attributes), series in client.series.items():
                    family = families.get(name)
                    if family is None:
                        cls = CounterMetricFamily if series.kind == COUNTER else GaugeMetricFamily
                        family = families[name] = cls(name, series.help or f"pushed by clients ({name})",
                                                      labels=[])
                        kinds[name] = series.kind
                    if kinds[name] != series.kind:
                        continue  # another client pushed this name as another type: the first wins
                    labels = dict(client.labels)
                    labels.update(attributes)
                    sample = f"{name}_total" if series.kind == COUNTER else name
                    family.add_sample(sample, labels, series.value)
            dropped = self.dropped
            clients = len(self._clients)
        yield from families.values()
        dropped_family = CounterMetricFamily("odradek_client_telemetry_dropped_points",
                                             "Pushed data points not served (reserved or conflicting names, "
                                             "series limits)")
        dropped_family.add_metric([], dropped)
        yield dropped_family
        clients_family = GaugeMetricFamily("odradek_client_telemetry_clients",
                                           "Clients whose pushed metrics are served")
        clients_family.add_metric([], clients)
        yield clients_family
