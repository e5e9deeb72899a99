"""Share-group metrics under Kafka 4.4's names (KIP-932's "Metrics"), for the Prometheus endpoint
(broker/runtime/metrics.py, docs/metrics.md).

Kafka's MBeans, named as the Prometheus JMX exporter's example Kafka config names them
(``lowercaseOutputName``; a ``...PerSec`` meter's Count is ``..._total``):

- ``kafka.server:type=BrokerTopicMetrics,name=TotalShareFetchRequestsPerSec[,topic=T]``, and
  ``FailedShareFetchRequestsPerSec``, ``TotalShareAcknowledgementRequestsPerSec``,
  ``FailedShareAcknowledgementRequestsPerSec`` (Kafka 4.4's BrokerTopicMetrics, marked by its
  SharePartitionManager): once per topic of a request, for the topic and for all topics; a topic
  fails once per request in which one of its partitions answered an error. Acknowledgements count
  those of ShareAcknowledge and those a ShareFetch carries, as Kafka's do.
  -> ``kafka_server_brokertopicmetrics_totalsharefetchrequests_total[{topic}]``, ...
- ``kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,ackType=Accept|Release|
  Reject|Renew`` (ShareGroupMetrics): records acknowledged, by type, once applied (a batch with one
  type counts its offsets; per-offset types count one each; gaps are not counted).
  -> ``kafka_server_sharegroupmetrics_recordacknowledgements_total{ackType}``.

Plain ints, added to on the handler loop without a lock and read by the scrape thread (a value a
moment old is fine for a counter), as TopicStats does: a ShareFetch pays a few additions.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

# Kafka's AcknowledgeType ids and the ackType tag ShareGroupMetrics gives them.
ACK_TYPES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}

_FETCH, _FAILED_FETCH, _ACK, _FAILED_ACK = range(4)
_TOPIC_SERIES = (
    ("totalsharefetchrequests", "Share fetch requests per topic (Kafka's TotalShareFetchRequestsPerSec)"),
    ("failedsharefetchrequests", "Share fetch requests that failed per topic (Kafka's FailedShareFetchRequestsPerSec)"),
    ("totalshareacknowledgementrequests",
     "Share acknowledgement requests per topic (Kafka's TotalShareAcknowledgementRequestsPerSec)"),
    ("failedshareacknowledgementrequests",
     "Share acknowledgement requests that failed per topic (Kafka's FailedShareAcknowledgementRequestsPerSec)"),
)


class ShareMetrics(Collector):
    def __init__(self) -> None:
        self.total = [0] * len(_TOPIC_SERIES)
        self.topics: dict[str, list[int]] = {}
        self.acknowledged = dict.fromkeys(ACK_TYPES, 0)
        # The topics that exist now (set by the broker): a deleted topic's series go at the next
        # scrape, as Kafka's BrokerTopicStats.removeMetrics drops them.
        self.existing: Callable[[], Container[str]] | None = None

    def _row(self, topic: str) -> list[int]:
        row = self.topics.get(topic)
        if row is None:
            row = self.topics[topic] = [0] * len(_TOPIC_SERIES)
        return row

    def _mark(self, index: int, topics: Iterable[str]) -> None:
        for topic in topics:
            self.total[index] += 1
            self._row(topic)[index] += 1

    def share_fetch(self, topics: Iterable[str], failed: Iterable[str]) -> None:
        """A ShareFetch read ``topics``; ``failed``: those with a partition answering an error."""
        self._mark(_FETCH, topics)
        self._mark(_FAILED_FETCH, failed)

    def share_acknowledgement(self, topics: Iterable[str], failed: Iterable[str]) -> None:
        """Acknowledgements (ShareAcknowledge, or a ShareFetch's) for ``topics``; ``failed`` as above."""
        self._mark(_ACK, topics)
        self._mark(_FAILED_ACK, failed)

    def records_acknowledged(self, batches: Iterable[tuple[int, int, list[int]]]) -> None:
        """Applied acknowledgement batches (first offset, last offset, types)."""
        counts = self.acknowledged
        for first, last, types in batches:
            if len(types) == 1:
                if types[0] in counts:
                    counts[types[0]] += last - first + 1
            else:
                for kind in types:
                    if kind in counts:
                        counts[kind] += 1

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
        acks = CounterMetricFamily("kafka_server_sharegroupmetrics_recordacknowledgements",
                                   "Records acknowledged by share consumers, by type (Kafka's RecordAcknowledgementsPerSec)",
                                   labels=["ackType"])
        for kind, label in ACK_TYPES.items():
            acks.add_metric([label], self.acknowledged[kind])
        yield acks
