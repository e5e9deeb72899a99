"""Share-group metrics with Kafka 4.4's names on the Prometheus endpoint (broker/share/share_metrics.py,
docs/metrics.md), moved by a real Kafka 4.4 KafkaShareConsumer and by raw requests.

Expected values come from what the client did: in explicit mode with "reject-odd" it acknowledges
each record once, REJECT for values ending in an odd digit, ACCEPT for the rest and for the probes
(Kafka's ShareGroupMetrics counts acknowledged records by type); each ShareFetch names the one topic
(Kafka's BrokerTopicMetrics marks TotalShareFetchRequestsPerSec once per topic of a request).
"""

from __future__ import annotations

import time
import types

import pytest

from tests.integration.test_kafka_metrics import scrape, series, start
from tests.integration.test_share_fetch_wire import acquired, fetch_topics, produce, share_fetch
from tests.integration.test_share_groups_java import produce as produce_values
from tests.integration.test_share_groups_java import wait_initialized, wait_until
from tests.integration.test_share_groups_wire import wait_for_coordinator
from tests.support.share_consumer import ShareConsumer
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(240)

BTM = "kafka_server_brokertopicmetrics_"
ACKS = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
GROUPS = "kafka_server_group_coordinator_metrics_"


def value(s: dict[str, float], name: str) -> float:
    return s.get(name, 0.0)


def requests(s: dict[str, float], api: str) -> float:
    return sum(v for k, v in s.items()
               if k.startswith("kafka_network_requestmetrics_requests_total{") and f'request="{api}"' in k)


def test_share_metrics_move_with_a_kafka_share_consumer(broker_factory) -> None:
    broker, port = start(broker_factory)
    before = series(scrape(port))
    # Served from the start, at 0 (dashboards and alerts expect the series).
    for name in ("totalsharefetchrequests", "failedsharefetchrequests", "totalshareacknowledgementrequests",
                 "failedshareacknowledgementrequests"):
        assert before[f"{BTM}{name}_total"] == 0
    for kind in ("Accept", "Release", "Reject", "Renew"):
        assert before[f'{ACKS}{{ackType="{kind}"}}'] == 0
    assert before[f'{GROUPS}group_count{{protocol="share"}}'] == 0
    assert before[f'{GROUPS}share_group_count{{state="Stable"}}'] == 0
    assert before['kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation="ShareFetch"}'] == 0

    bootstrap = f"{broker.host}:{broker.port}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "sm", 1)
    values = [f"v{i}" for i in range(20)]  # 10 end in an odd digit
    consumer = ShareConsumer(bootstrap, "smg", "sm", "explicit", "reject-odd", "metrics-test")
    try:
        consumer.wait_subscribed()
        target = types.SimpleNamespace(bootstrap=bootstrap, name="odradek")
        wait_initialized(target, [consumer], "sm", 1)  # type: ignore[arg-type]
        produce_values(target, "sm", values, 1)  # type: ignore[arg-type]
        wait_until(lambda: sum(1 for r in consumer.records if not r.value.startswith("probe")) >= 20, 60,
                   "every record")
        running = series(scrape(port))
        assert running[f'{GROUPS}group_count{{protocol="share"}}'] == 1
        assert running[f'{GROUPS}share_group_count{{state="Stable"}}'] == 1
        assert running[f'{GROUPS}share_group_count{{state="Empty"}}'] == 0
    finally:
        consumer.stop()  # commits: the last acknowledgements reach the broker
    probes = sum(1 for r in consumer.records if r.value.startswith("probe"))
    assert sorted(r.value for r in consumer.records if not r.value.startswith("probe")) == sorted(values)

    def settled() -> bool:
        s = series(scrape(port))
        return value(s, f'{ACKS}{{ackType="Accept"}}') + value(s, f'{ACKS}{{ackType="Reject"}}') >= probes + 20
    wait_until(settled, 10, "the acknowledgements")
    after = series(scrape(port))
    assert after[f'{ACKS}{{ackType="Accept"}}'] == probes + 10
    assert after[f'{ACKS}{{ackType="Reject"}}'] == 10
    assert after[f'{ACKS}{{ackType="Release"}}'] == 0
    fetches = after[f'{BTM}totalsharefetchrequests_total{{topic="sm"}}']
    assert 1 <= fetches <= requests(after, "ShareFetch")
    assert after[f"{BTM}totalsharefetchrequests_total"] == fetches  # one topic: all-topics = the topic
    acks = after[f'{BTM}totalshareacknowledgementrequests_total{{topic="sm"}}']
    assert 1 <= acks <= requests(after, "ShareFetch") + requests(after, "ShareAcknowledge")
    assert after[f"{BTM}failedsharefetchrequests_total"] == 0
    assert after[f"{BTM}failedshareacknowledgementrequests_total"] == 0
    # The member left: the group is empty.
    wait_until(lambda: series(scrape(port))[f'{GROUPS}share_group_count{{state="Empty"}}'] == 1, 10, "Empty")


def test_a_refused_acknowledgement_is_counted_failed_and_nothing_acknowledged(broker_factory) -> None:
    broker, port = start(broker_factory)
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sf", 1)
        wait_for_coordinator(c)
        share_fetch(c, topics=fetch_topics(topic_id, [0]))
        produce(c, "sf", 0, 3)
        with WireClient(broker.host, broker.port) as holder:
            assert acquired(share_fetch(holder, member_id="h", topics=fetch_topics(topic_id, [0]))) == \
                {0: [(0, 2, 1)]}
            # Member m acknowledges records that h holds: INVALID_RECORD_STATE, applied to nothing.
            r = c.request(79, 1, {"group_id": "sg", "member_id": "m", "share_session_epoch": 1,
                                  "topics": fetch_topics(topic_id, [0], {0: [(0, 2, [1])]})})
            assert r["responses"][0]["partitions"][0]["error_code"] == 121  # INVALID_RECORD_STATE
            s = series(scrape(port))
            assert s[f'{BTM}failedshareacknowledgementrequests_total{{topic="sf"}}'] == 1
            assert s[f'{BTM}totalshareacknowledgementrequests_total{{topic="sf"}}'] == 1
            assert s[f'{ACKS}{{ackType="Accept"}}'] == 0
            # The holder accepts them: counted once, as accepted records.
            r = share_fetch(holder, member_id="h", share_session_epoch=1,
                            topics=fetch_topics(topic_id, [0], {0: [(0, 2, [1])]}))
            assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
            time.sleep(0.2)
            s = series(scrape(port))
            assert s[f'{ACKS}{{ackType="Accept"}}'] == 3
            assert s[f'{BTM}totalshareacknowledgementrequests_total{{topic="sf"}}'] == 2
            assert s[f'{BTM}failedshareacknowledgementrequests_total{{topic="sf"}}'] == 1
