"""Kafka's quota metrics in the Prometheus endpoint, computed at scrape time (nothing on the
request path).

Kafka registers, per quota type (Produce, Fetch, Request) and per user/client-id metric tags,
``kafka.server:type=<T>,user=<u>,client-id=<c>`` with the attributes ``byte-rate`` (Request:
``request-time``) and ``throttle-time`` (average ms of the throttled responses). The Prometheus
JMX exporter's Kafka rules turn them into ``kafka_server_quota_<attribute>`` gauges labelled
``resource``, ``user`` and ``clientId``, which is what this serves, so Kafka dashboards work.
Connection-rate throttling (KIP-612) is counted as ``odradek_connections_creation_delayed_total``
and ``odradek_connections_ip_throttled_total``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.broker.network.connection_rates import ConnectionRates
from odradek.broker.quota.client_quotas import ClientQuotas


class QuotaMetrics(Collector):
    def __init__(self, quotas: ClientQuotas, rates: ConnectionRates) -> None:
        self.quotas = quotas
        self.rates = rates

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for name, labels, value in self.quotas.metric_samples():
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    f"kafka_server_quota_{name}", f"Kafka's {name.replace('_', '-')} per user/client-id quota entity",
                    labels=["resource", "user", "clientId"])
            family.add_metric([labels["quota_type"], labels["user"], labels["client_id"]], value)
        yield from families.values()
        delayed = CounterMetricFamily("odradek_connections_creation_delayed",
                                      "Connections the acceptor delayed for max.connection.creation.rate (KIP-612)")
        delayed.add_metric([], self.rates.delayed)
        yield delayed
        throttled = CounterMetricFamily("odradek_connections_ip_throttled",
                                        "Connections closed for exceeding their address's connection_creation_rate")
        throttled.add_metric([], self.rates.ip_throttled)
        yield throttled
