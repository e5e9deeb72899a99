"""Prometheus metrics: request rates and latencies per API, bytes in and out, live state gauges.

Served over HTTP at ``/metrics`` when ``odradek.metrics.port`` is 0 or more (0 = any free port;
-1, the default, = off). Names follow Kafka's JMX metrics in spirit (RequestsPerSec,
TotalTimeMs, BytesInPerSec, PurgatorySize) in Prometheus' naming style. Log dir health is
``odradek_offline_log_directory_count`` and ``odradek_log_directory_offline{log_directory}``
(Kafka's OfflineLogDirectoryCount and LogDirectoryOffline), registered by odradek.broker.server.

Kafka's names, as the Prometheus JMX exporter's example Kafka config (example_configs/
kafka-2_0_0.yml, ``lowercaseOutputName: true``) turns Kafka's MBeans into Prometheus names, are
served too, so dashboards and alerts written for Kafka work unchanged:
``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec[,topic=T]`` is
``kafka_server_brokertopicmetrics_bytesin_total[{topic="T"}]``,
``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V`` is
``kafka_network_requestmetrics_requests_total{request,version}``, and a gauge ``...,name=X``
is ``kafka_<domain>_<type>_x``. One difference: Kafka's TotalTimeMs histogram becomes
``kafka_network_requestmetrics_totaltimems`` with quantile gauges; here it is a Prometheus
histogram of that name (``_count`` matches, quantiles come from ``histogram_quantile`` over
``_bucket``). See KAFKA_NAMES for the list and docs/metrics.md.

Cost on the request path: two counter increments and two histogram observations per request,
through label children resolved once per (API, version) (no per-request label lookups); per
appended or fetched batch set, a few integer additions in TopicStats (no per-record work).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS_MS = tuple(b * 1000 for b in LATENCY_BUCKETS)

# The Kafka-named series this broker serves (JMX exporter names of Kafka's documented MBeans,
# docs/ops.html "Monitoring"). Tests check each is in a scrape; the Grafana dashboard uses them.
KAFKA_NAMES = (
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_brokertopicmetrics_totalproducerequests_total",
    "kafka_server_brokertopicmetrics_totalfetchrequests_total",
    "kafka_network_requestmetrics_requests_total",
    "kafka_network_requestmetrics_totaltimems_count",
    "kafka_network_requestmetrics_totaltimems_bucket",
    "kafka_network_requestchannel_requestqueuesize",
    "kafka_network_socketserver_memorypoolavailable",
    "kafka_network_socketserver_memorypoolused",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_offlinereplicacount",
    "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpands_total",
    "kafka_server_delayedoperationpurgatory_purgatorysize",
    "kafka_log_logmanager_offlinelogdirectorycount",
    "kafka_log_logmanager_logdirectoryoffline",
    "kafka_server_kafkaserver_brokerstate",
    # Share groups (broker/share/share_metrics.py and the group coordinator's gauges).
    "kafka_server_brokertopicmetrics_totalsharefetchrequests_total",
    "kafka_server_brokertopicmetrics_failedsharefetchrequests_total",
    "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total",
    "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total",
    "kafka_server_sharegroupmetrics_recordacknowledgements_total",
    "kafka_server_group_coordinator_metrics_group_count",
    "kafka_server_group_coordinator_metrics_share_group_count",
)

_BYTES_IN, _MESSAGES_IN, _BYTES_OUT, _PRODUCE_REQUESTS, _FETCH_REQUESTS = range(5)
_TOPIC_SERIES = (
    ("bytesin", "Bytes appended (Kafka's BytesInPerSec)"),
    ("messagesin", "Records appended (Kafka's MessagesInPerSec)"),
    ("bytesout", "Record bytes sent to consumers (Kafka's BytesOutPerSec)"),
    ("totalproducerequests", "Partition appends by Produce (Kafka's TotalProduceRequestsPerSec)"),
    ("totalfetchrequests", "Consumer Fetch responses carrying the topic's records (Kafka's TotalFetchRequestsPerSec)"),
)


class TopicStats(Collector):
    """Kafka's BrokerTopicMetrics: one all-topics series and one per topic, under the same name
    (as the JMX exporter shows the all-topics MBean and each ``topic=`` one).

    Plain int lists rather than prometheus_client Counters: the event loop adds to them once per
    append or fetched partition, without a lock; the scrape thread reads them (a value a moment
    old is fine for a counter)."""

    def __init__(self) -> None:
        self.total = [0] * len(_TOPIC_SERIES)
        self.topics: dict[str, list[int]] = {}
        # The topics that exist now (set by odradek.broker.server): a deleted topic's series go at the
        # next scrape, as Kafka's BrokerTopicStats.removeMetrics drops them on deletion.
        self.existing: Callable[[], Container[str]] | None = None

    def of(self, topic: str) -> list[int]:
        found = self.topics.get(topic)
        if found is None:
            found = self.topics[topic] = [0] * len(_TOPIC_SERIES)
        return found

    def appended(self, topic: str, size: int, records: int) -> None:
        for row in (self.total, self.of(topic)):
            row[_BYTES_IN] += size
            row[_MESSAGES_IN] += records
            row[_PRODUCE_REQUESTS] += 1

    def sent(self, topic: str, size: int) -> None:
        for row in (self.total, self.of(topic)):
            row[_BYTES_OUT] += size
            row[_FETCH_REQUESTS] += 1

    def collect(self) -> Iterator[Metric]:
        if self.existing is not None:
            existing = self.existing()
            for gone in [t for t in list(self.topics) if t not in existing]:
                self.topics.pop(gone, None)
        topics = list(self.topics.items())
        for i, (name, doc) in enumerate(_TOPIC_SERIES):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc)
            family.add_metric([], self.total[i])
            for topic, row in topics:
                family.samples.append(family.samples[0]._replace(labels={"topic": topic}, value=row[i]))
            yield family


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("odradek_requests", "Requests handled, by API", ["api"], registry=self.registry)
        self.latency = Histogram(
            "odradek_request_latency_seconds", "Time from a request's arrival to its response, by API", ["api"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.bytes_in = Counter("odradek_produce_bytes", "Record bytes appended by Produce", registry=self.registry)
        # Kafka's kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V and
        # name=TotalTimeMs,request=R (milliseconds, like Kafka's).
        self.kafka_requests = Counter(
            "kafka_network_requestmetrics_requests", "Requests handled (Kafka's RequestsPerSec)",
            ["request", "version"], registry=self.registry,
        )
        self.kafka_total_time = Histogram(
            "kafka_network_requestmetrics_totaltimems", "Request total time in ms (Kafka's TotalTimeMs)",
            ["request"], buckets=LATENCY_BUCKETS_MS, registry=self.registry,
        )
        self.topic_stats = TopicStats()
        self.registry.register(self.topic_stats)
        # Kafka's IsrShrinksPerSec / IsrExpandsPerSec: this broker changes no ISR yet, so they
        # stay 0, but dashboards and alerts expect the series.
        self.isr_shrinks = Counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks", registry=self.registry)
        self.isr_expands = Counter("kafka_server_replicamanager_isrexpands", "ISR expands", registry=self.registry)
        self._per_api: dict[tuple[str, int], tuple[Counter, Histogram, Counter, Histogram]] = {}
        self._labelled: dict[str, Gauge] = {}
        self.server: WSGIServer | None = None

    def for_api(self, api: str, version: int) -> tuple[Counter, Histogram, Counter, Histogram]:
        """The per-request children for ``api`` at ``version``: (count, latency in s, Kafka's
        RequestsPerSec count, Kafka's TotalTimeMs), resolved once."""
        key = (api, version)
        found = self._per_api.get(key)
        if found is None:
            found = self._per_api[key] = (
                self.requests.labels(api), self.latency.labels(api),
                self.kafka_requests.labels(api, str(version)), self.kafka_total_time.labels(api),
            )
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
        server, _thread = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        self.server = server
        bound = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", bound)
        return bound

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None
