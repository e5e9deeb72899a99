"""librdkafka's share consumer (confluent-kafka's ``ShareConsumer``, KIP-932) against Kafka 4.4 and
against Odradek, the same steps on each (the A/B harness, tests/support/real_kafka.py), with the same
observable results required (issue 30). The Java ``KafkaShareConsumer`` runs the same steps in
test_share_groups_java.py; these check that a second, independent client implementation of
ShareGroupHeartbeat / ShareFetch / ShareAcknowledge gets what Kafka gives it:

- two consumers in one group on a 2-partition topic accept every record exactly once, at delivery
  count 1 (implicit acknowledgement: a poll accepts what the previous poll returned);
- explicit acknowledgement: records released at their first delivery come back once, at delivery
  count 2 (``Message.delivery_count()``), and are then accepted;
- explicit acknowledgement: rejected records never come back.

Both brokers run their defaults, so share.auto.offset.reset is "latest": a share-partition starts at
the high watermark when the first ShareFetch reaches it. So each test first writes probes (values
"probe...", accepted, left out of the checks) to each partition until every partition delivered one
to some consumer, and only then its records (as the Java test does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka import ShareConsumer as RdkafkaShareConsumer

from tests.integration.test_share_groups_java import (
    assert_each_once_at_first_delivery,
    delivery_counts,
    produce,
    real,
    share_topic,
    wait_initialized,
    wait_until,
)
from tests.support.real_kafka import TARGETS, Target, kafka_and_odradek, unique
from tests.support.share_consumer import Delivery

pytestmark = pytest.mark.timeout(180)

SHARE_GROUP = ("ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge")


# What an explicit-mode consumer answers for a real (non-probe) record: (value, delivery count) -> type.
Action = Callable[[str, int], int]


def accept(value: str, count: int) -> int:
    return AcknowledgeType.ACCEPT


def release_first(value: str, count: int) -> int:
    return AcknowledgeType.RELEASE if count == 1 else AcknowledgeType.ACCEPT


def reject_odd(value: str, count: int) -> int:
    return AcknowledgeType.REJECT if int(value[1:]) % 2 else AcknowledgeType.ACCEPT


class Member:
    """One librdkafka share consumer polled on its own thread (an instance is not thread-safe, so
    only that thread touches it). ``records`` are its deliveries in order; ``stop()`` closes it,
    which sends the pending acknowledgements and leaves the group."""

    def __init__(self, bootstrap: str, group: str, topic: str, mode: str, action: Action) -> None:
        self.records: list[Delivery] = []
        self.errors: list[str] = []
        self._mode, self._action = mode, action
        self._stopping = threading.Event()
        self._config = {"bootstrap.servers": bootstrap, "group.id": group,
                        "share.acknowledgement.mode": mode}
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = RdkafkaShareConsumer(self._config)
        try:
            consumer.subscribe([self._topic])
            while not self._stopping.is_set():
                for m in consumer.poll(0.2):
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                        continue
                    value = m.value().decode()
                    count = m.delivery_count()
                    self.records.append(Delivery(m.partition(), m.offset(), count, value))
                    if self._mode == "explicit":
                        ack = AcknowledgeType.ACCEPT if value.startswith("probe") else self._action(value, count)
                        consumer.acknowledge(m, ack)
                if self._mode == "explicit":
                    consumer.commit_async()
        except Exception as e:  # reported by stop(): a test must not pass on a dead consumer
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            consumer.close()

    def real(self) -> list[Delivery]:
        return real(self)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "share consumer did not close"


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def run_members(target: Target, topic: str, partitions: int, n: int, mode: str, action: Action,
                values: list[str], expected_deliveries: int) -> list[Member]:
    """Start ``n`` members of a new group, initialize, write ``values``, wait for
    ``expected_deliveries`` real deliveries and 3 s more (nothing more may come), stop them all."""
    group = unique("rsg")
    members = [Member(target.bootstrap, group, topic, mode, action) for _ in range(n)]
    try:
        wait_initialized(target, members, topic, partitions, timeout=60)
        produce(target, topic, values, partitions)
        wait_until(lambda: sum(len(m.real()) for m in members) >= expected_deliveries, 60,
                   f"{expected_deliveries} deliveries")
        time.sleep(3)
    finally:
        for m in members:
            m.stop()
    assert [m.errors for m in members] == [[]] * n
    return members


@pytest.mark.parametrize("name", TARGETS)
def test_two_consumers_on_two_partitions_accept_each_record_once(targets, name: str) -> None:
    target = targets[name]
    topic = share_topic(target, SHARE_GROUP, "rsq", 2)
    values = [f"v{i}" for i in range(200)]
    members = run_members(target, topic, 2, 2, "implicit", accept, values, len(values))
    # every record, none twice
    assert_each_once_at_first_delivery([r for m in members for r in m.real()], values)
    # Kafka's share assignor gives each of two members one of the two partitions.
    assert all(m.real() for m in members), [len(m.real()) for m in members]


@pytest.mark.parametrize("name", TARGETS)
def test_released_records_come_back_with_a_higher_delivery_count(targets, name: str) -> None:
    target = targets[name]
    topic = share_topic(target, SHARE_GROUP, "rsr", 1)
    values = [f"r{i}" for i in range(20)]
    (member,) = run_members(target, topic, 1, 1, "explicit", release_first, values, 2 * len(values))
    assert delivery_counts(member.real()) == {v: [1, 2] for v in values}


@pytest.mark.parametrize("name", TARGETS)
def test_rejected_records_never_come_back(targets, name: str) -> None:
    target = targets[name]
    topic = share_topic(target, SHARE_GROUP, "rsj", 1)
    values = [f"j{i}" for i in range(20)]
    members = run_members(target, topic, 1, 2, "explicit", reject_odd, values, len(values))
    # odd ones rejected once, never again
    assert_each_once_at_first_delivery([r for m in members for r in m.real()], values)
