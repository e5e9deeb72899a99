"""Prometheus metrics: request rates and latencies per API, bytes in and out, live state gauges.

Served over HTTP at ``/metrics`` when ``odradek.metrics.port`` is 0 or more (0 = any free port;
-1, the default, = off). Names follow Kafka's JMX metrics in spirit (RequestsPerSec,
TotalTimeMs, BytesInPerSec, PurgatorySize) in Prometheus' naming style. Log dir health is
``odradek_offline_log_directory_count`` and ``odradek_log_directory_offline{log_directory}``
(Kafka's OfflineLogDirectoryCount and LogDirectoryOffline), registered by broker.server.

Cost on the request path: one counter increment and one histogram observation per request,
through label children resolved once per API (no per-request label lookups).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("odradek_requests", "Requests handled, by API", ["api"], registry=self.registry)
        self.latency = Histogram(
            "odradek_request_latency_seconds", "Time from a request's arrival to its response, by API", ["api"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.bytes_in = Counter("odradek_produce_bytes", "Record bytes appended by Produce", registry=self.registry)
        self._per_api: dict[str, tuple[Any, Any]] = {}
        self._labelled: dict[str, Gauge] = {}
        self.server: Any = None

    def for_api(self, api: str) -> tuple[Any, Any]:
        found = self._per_api.get(api)
        if found is None:
            found = self._per_api[api] = (self.requests.labels(api), self.latency.labels(api))
        return found

    def gauge(self, name: str, doc: str, fn: Callable[[], float], labels: dict[str, str] | None = None) -> None:
        """A gauge read from ``fn`` at scrape time; with ``labels``, one labelled child of ``name``
        (call again with other label values for more children)."""
        if not labels:
            Gauge(name, doc, registry=self.registry).set_function(fn)
            return
        if name not in self._labelled:
            self._labelled[name] = Gauge(name, doc, list(labels), registry=self.registry)
        self._labelled[name].labels(**labels).set_function(fn)

    def serve(self, host: str, port: int) -> int:
        self.server, _thread = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        bound = self.server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", bound)
        return bound

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
