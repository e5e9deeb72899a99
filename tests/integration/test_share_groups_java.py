"""Kafka 4.4's own KafkaShareConsumer against Kafka 4.4 and against Odradek, the same steps on each
(the A/B harness, tests/support/real_kafka.py), with the same observable results required (issue 30):

- three consumers on two partitions accept every record exactly once, and more than one gets records
  (implicit and explicit acknowledgement);
- released records come back with a higher delivery count;
- records held by a consumer that is killed come back at once, with a higher delivery count;
- records held by a live consumer come back only when their acquisition lock expires (30 s, the
  default of both brokers);
- rejected records never come back;
- a record released at each delivery is archived after the delivery count limit (5, the default).

Both brokers run their defaults, so share.auto.offset.reset is "latest": a share-partition starts at
the high watermark when the first ShareFetch reaches it, and records written before are never
delivered. So each test first writes probes (values "probe...", accepted by every consumer, left
out of the checks) to each partition until every partition delivered one, and only then its records.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import pytest
from confluent_kafka import Producer

from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.share_consumer import Delivery, ShareConsumer

pytestmark = pytest.mark.timeout(240)

SHARE_GROUP = ("ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge", "DescribeShareGroupOffsets")
LOCK_MS = 30_000  # group.share.record.lock.duration.ms, both brokers' default
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit, both brokers' default


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


class Delivers(Protocol):
    """A share consumer as these helpers see it: the Java one (tests/support/share_consumer.py) or
    librdkafka's (test_share_groups_rdkafka.py)."""

    records: list[Delivery]
    errors: list[str]


def wait_initialized(target: Target, consumers: Sequence[Delivers], topic: str, partitions: int,
                     timeout: float = 90) -> None:
    """Write probes to every partition until each has delivered one to some consumer: from then on
    every share-partition has a start offset, and every record written is delivered."""
    producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        delivered = {r.partition for c in consumers for r in c.records if r.value.startswith("probe")}
        if len(delivered) == partitions:
            return
        for p in set(range(partitions)) - delivered:
            producer.produce(topic, f"probe{n}".encode(), partition=p)
            n += 1
        producer.flush(30)
        time.sleep(0.5)
    raise AssertionError(f"{target.name}: no probe delivered from some partition of {topic}: "
                         f"{[c.errors for c in consumers]}")


def real(consumer: Delivers) -> list[Delivery]:
    return [r for r in consumer.records if not r.value.startswith("probe")]


def delivery_counts(records: Iterable[Delivery]) -> dict[str, list[int]]:
    """Each value's delivery counts, in the order delivered."""
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for r in records:
        seen[r.value].append(r.delivery_count)
    return seen


def assert_each_once_at_first_delivery(got: list[Delivery], values: list[str]) -> None:
    """Every value delivered, none twice, none redelivered (rejected ones included: never again)."""
    assert sorted(r.value for r in got) == sorted(values)
    assert {r.delivery_count for r in got} == {1}


def share_topic(target: Target, apis: Sequence[str], prefix: str, partitions: int) -> str:
    """A test's first steps: fail (Odradek) unless the target advertises ``apis``, then a new topic."""
    target.require(*apis)
    topic = unique(prefix)
    create_topic(target, topic, partitions)
    return topic


def produce(target: Target, topic: str, values: list[str], partitions: int, rounds: int = 1) -> None:
    """``values`` round-robin over the partitions, in ``rounds`` flushes a little apart (several
    fetches' worth, so that several consumers acquire some). Each round is one batch per partition:
    linger.ms keeps the records queued until the flush, which sends them at once. With linger.ms 0
    librdkafka may send a round's first record alone, and a "hold" consumer, which stops after its
    first poll with records, holds only that: Kafka 4.4's holder got l0 alone in the fresh-clone CI
    at ecc29e7."""
    producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 1000})
    per_round = -(-len(values) // rounds)
    for start in range(0, len(values), per_round):
        for i in range(start, min(start + per_round, len(values))):
            producer.produce(topic, values[i].encode(), partition=i % partitions)
        producer.flush(30)
        time.sleep(0.1)


def start(target: Target, group: str, topic: str, n: int, mode: str, action: str, first: int = 0) -> list[ShareConsumer]:
    """``n`` consumers, client ids ``{group}-{first}`` on."""
    consumers = [ShareConsumer(target.bootstrap, group, topic, mode, action, f"{group}-{i}")
                 for i in range(first, first + n)]
    for c in consumers:
        c.wait_subscribed()
    return consumers


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wait_held(holder: ShareConsumer, values: list[str]) -> None:
    """Until a "hold" consumer has every one of ``values``; on a timeout, what it got and its log."""
    try:
        wait_until(lambda: len(real(holder)) == len(values), 60, "the holder's records")
    except AssertionError as e:
        raise AssertionError(f"{e}: it got {real(holder)}; its stderr: {holder.stderr()}") from None


def stop_all(consumers: list[ShareConsumer]) -> None:
    for c in consumers:
        c.stop()


@pytest.mark.parametrize("mode", ["implicit", "explicit"])
@pytest.mark.parametrize("name", TARGETS)
def test_three_consumers_on_two_partitions_accept_each_record_once(targets, name: str, mode: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sq", 2), unique("sg")
    values = [f"v{i}" for i in range(300)]
    consumers = start(target, group, topic, 3, mode, "accept")
    try:
        wait_initialized(target, consumers, topic, 2)
        produce(target, topic, values, 2, rounds=15)
        wait_until(lambda: sum(len(real(c)) for c in consumers) >= len(values), 90, "every record")
        time.sleep(2)  # nothing more may arrive: each record once
    finally:
        stop_all(consumers)
    # every record, none twice
    assert_each_once_at_first_delivery([r for c in consumers for r in real(c)], values)
    assert sum(1 for c in consumers if real(c)) >= 2, [len(real(c)) for c in consumers]


@pytest.mark.parametrize("name", TARGETS)
def test_members_joining_while_records_flow_get_no_record_twice(targets, name: str) -> None:
    """Each new member moves partitions between members, at their next heartbeats: a member whose
    partition moves away forgets it in its next ShareFetch and still acknowledges the records it
    already handed to the application. Those must stay its own until then (a broker that released
    them at the forget would hand them to the new holder too). Records it fetched and had not
    handed out yet it releases itself, so they may come back with a higher count: each value once,
    whatever its count."""
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sm", 2), unique("sg")
    values = [f"m{i}" for i in range(450)]
    consumers = start(target, group, topic, 1, "implicit", "accept")
    try:
        wait_initialized(target, consumers, topic, 2)
        for step in range(3):  # records over some seconds, a member joining after each part
            produce(target, topic, values[step * 150:(step + 1) * 150], 2, rounds=30)
            if step < 2:
                consumers += start(target, group, topic, 1, "implicit", "accept", first=len(consumers))
        wait_until(lambda: {r.value for c in consumers for r in real(c)} >= set(values), 90, "every record")
        time.sleep(2)  # nothing more may arrive: each record once
    finally:
        stop_all(consumers)
    got = collections.Counter(r.value for c in consumers for r in real(c))
    assert sorted(got) == sorted(values)
    assert [v for v, n in got.items() if n > 1] == []


@pytest.mark.parametrize("name", TARGETS)
def test_released_records_come_back_with_a_higher_delivery_count(targets, name: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sr", 1), unique("sg")
    values = [f"r{i}" for i in range(20)]
    (consumer,) = start(target, group, topic, 1, "explicit", "release-first")
    try:
        wait_initialized(target, [consumer], topic, 1)
        produce(target, topic, values, 1)
        wait_until(lambda: len(real(consumer)) >= 2 * len(values), 60, "each record twice")
        time.sleep(2)
    finally:
        consumer.stop()
    assert delivery_counts(real(consumer)) == {v: [1, 2] for v in values}


@pytest.mark.parametrize("name", TARGETS)
def test_killed_consumer_records_come_back_at_once(targets, name: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sk", 1), unique("sg")
    values = [f"k{i}" for i in range(10)]
    (holder,) = start(target, group, topic, 1, "explicit", "hold")
    try:
        wait_initialized(target, [holder], topic, 1)
        produce(target, topic, values, 1)
        wait_held(holder, values)
        (taker,) = start(target, group, topic, 1, "explicit", "accept")
        time.sleep(3)
        assert real(taker) == []  # locked to the live holder
        killed_at = time.monotonic()
        holder.kill()
        wait_until(lambda: len(real(taker)) >= len(values), 60, "the killed consumer's records")
        # Released when the connection went, long before the 30 s lock.
        assert time.monotonic() - killed_at < LOCK_MS / 1000 - 5
        time.sleep(1)
        taker.stop()
    finally:
        holder.kill()
    assert sorted(r.value for r in real(taker)) == sorted(values)
    assert {r.delivery_count for r in real(taker)} == {2}


@pytest.mark.parametrize("name", TARGETS)
def test_live_holder_records_come_back_when_the_lock_expires(targets, name: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sl", 1), unique("sg")
    values = [f"l{i}" for i in range(10)]
    (holder,) = start(target, group, topic, 1, "explicit", "hold")
    try:
        wait_initialized(target, [holder], topic, 1)
        produce(target, topic, values, 1)
        wait_held(holder, values)
        acquired_at = time.monotonic()
        (taker,) = start(target, group, topic, 1, "explicit", "accept")
        wait_until(lambda: len(real(taker)) >= len(values), LOCK_MS / 1000 + 30, "the expired lock's records")
        waited = time.monotonic() - acquired_at
        taker.stop()
    finally:
        holder.kill()
    assert waited >= LOCK_MS / 1000 - 2, waited  # not before the lock expired
    assert sorted(r.value for r in real(taker)) == sorted(values)
    assert {r.delivery_count for r in real(taker)} == {2}


@pytest.mark.parametrize("name", TARGETS)
def test_rejected_records_never_come_back(targets, name: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sj", 1), unique("sg")
    values = [f"j{i}" for i in range(20)]
    consumers = start(target, group, topic, 2, "explicit", "reject-odd")
    try:
        wait_initialized(target, consumers, topic, 1)
        produce(target, topic, values, 1)
        wait_until(lambda: sum(len(real(c)) for c in consumers) >= len(values), 60, "every record")
        time.sleep(4)
    finally:
        stop_all(consumers)
    # odd ones rejected once, never again
    assert_each_once_at_first_delivery([r for c in consumers for r in real(c)], values)


@pytest.mark.parametrize("name", TARGETS)
def test_delivery_count_limit_archives_a_record(targets, name: str) -> None:
    target = targets[name]
    topic, group = share_topic(target, SHARE_GROUP, "sd", 1), unique("sg")
    values = [f"d{i}" for i in range(3)]
    (consumer,) = start(target, group, topic, 1, "explicit", "release")
    try:
        wait_initialized(target, [consumer], topic, 1)
        produce(target, topic, values, 1)
        wait_until(lambda: len(real(consumer)) >= DELIVERY_LIMIT * len(values), 60, "every delivery")
        time.sleep(3)  # archived: no sixth delivery
    finally:
        consumer.stop()
    assert delivery_counts(real(consumer)) == {v: list(range(1, DELIVERY_LIMIT + 1)) for v in values}
