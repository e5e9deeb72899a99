"""Share state survives a leader kill at RF=3 on a 3-broker Odradek cluster (issue 30), with Kafka
4.4's own KafkaShareConsumer: the share-partition leader reads and writes its state through the
share coordinator wherever that is (broker/share/share_persister.py, APIs 83-87 between brokers).

The steps and the observable checks are those of the A/B test against a 3-node Kafka 4.4
(tests/integration/test_share_groups_ab_cluster.py), which Kafka 4.4 passes: on an RF=3 topic a
consumer accepts some records (A) and leaves; a second acquires the next ones (B) and holds them,
unacknowledged. Then, with the group picked so that the data partition and the group's
``__share_group_state`` partition have different leaders, a node is killed with SIGKILL:

- ``data``: the leader of the topic's partition. The new leader must start from the state the
  share coordinator (another broker) keeps - before this, that state lived in the old leader's
  memory only, and the new leader started at the log end: B was never delivered.
- ``state``: the leader of the ``__share_group_state`` partition. The data leader lives on and
  must write its later changes (the holder's release) to the new share coordinator.

The holder is then killed too, more records (C) are written, and a new consumer reads: the accepted records never come back,
each held record comes back once - with delivery count 1 after the ``data`` kill (Kafka 4.4 writes
no acquisition: the new leader knows of no delivery), 2 after the ``state`` kill (the live data
leader released them when the holder died) - each record of C exactly once with count 1;
DescribeShareGroupOffsets from the group's coordinator (whichever broker that is) shows B's first
offset once the reader accepted all (Kafka writes the start offset as it stood before the
acknowledgement it writes). The describe right after the kill, against Kafka too, is
test_share_groups_ab_cluster.py's; a killed group coordinator's successor knows the group from
its records on __consumer_offsets (test_share_group_coordinator_kill.py).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.share.share_state_store import kafka_uuid_string
from tests.integration.test_share_groups_java import real, wait_initialized
from tests.support.cluster import cluster_or_skip
from tests.support.cluster import wait_through_faults as wait_until
from tests.support.share_consumer import Delivery, ShareConsumer
from tests.support.wire import WireClient
from tools.kafka_dist import ToolchainUnavailable

pytestmark = pytest.mark.timeout(600)

STATE_TOPIC = "__share_group_state"
STATE_PARTITIONS = 3
OVERRIDES = {"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
             "share.coordinator.state.topic.replication.factor": "3",
             "offsets.topic.replication.factor": "3", "min.insync.replicas": "2"}
_groups = iter(range(1_000_000))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # type: ignore[type-arg]
    with cluster_or_skip(Path(tmp_path_factory.mktemp("share-cluster")), 3, OVERRIDES) as c:
        # A first share group makes the brokers create __share_group_state.
        topic = create_rf3_topic(c, "warmup")
        try:
            with ShareConsumer(c.bootstrap, "warmup-group", topic, "explicit", "accept") as consumer:
                consumer.wait_subscribed()
                wait_initialized(c, [consumer], topic, 1)
                consumer.stop()
        except ToolchainUnavailable as exc:
            pytest.skip(f"needs Java and Kafka 4.4's jars: {exc}")
        wait_until(lambda: all(len(c.partition_state(STATE_TOPIC, p)[2]) == 3 for p in range(STATE_PARTITIONS)),
                   60, "__share_group_state in sync")
        yield c


def create_rf3_topic(c, topic: str) -> str:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, 1, 3, config={"retention.ms": "-1"})], operation_timeout=30)[topic].result(60)
    wait_until(lambda: len(c.partition_state(topic, 0)[2]) == 3, 60, f"{topic}-0 led with 3 replicas in sync")
    return topic


def topic_id(c, topic: str) -> object:  # type: ignore[no-untyped-def]
    return next(t["topic_id"] for t in c.metadata()["topics"] if t["name"] == topic)


def produce(c, topic: str, values: list[str]) -> None:  # type: ignore[no-untyped-def]
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3})
    for v in values:
        producer.produce(topic, v.encode(), partition=0)
    assert producer.flush(60) == 0, f"records of {values[0]}.. not acknowledged"


def described_start_offset(c, group: str, topic: str) -> int | None:  # type: ignore[no-untyped-def]
    """The start offset DescribeShareGroupOffsets v1 answers from the group's coordinator (what
    ``kafka-share-groups --describe --offsets`` shows); None while the coordinator moves."""
    found = c.request(c.live_ids()[0], "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [group]})
    entry = found["coordinators"][0]
    if entry["error_code"] != 0:
        return None
    r = c.request(entry["node_id"], "DescribeShareGroupOffsets", 1, {"groups": [
        {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})["groups"][0]
    if r["error_code"] != 0:
        return None
    return int(r["topics"][0]["partitions"][0]["start_offset"])


def describe(records: list[Delivery]) -> str:
    return " ".join(f"{r.offset}:{r.value}x{r.delivery_count}" for r in records)


def group_with_state_elsewhere(c, topic: str, data_leader: int, prefix: str) -> tuple[str, int, int]:  # type: ignore[no-untyped-def]
    """(group, its __share_group_state partition for ``topic``-0, that partition's leader): a group
    whose share state another broker than ``data_leader`` keeps."""
    for _ in range(100):
        group = f"{prefix}-{next(_groups)}"
        state_p = partition_for(f"{group}:{kafka_uuid_string(topic_id(c, topic))}:0", STATE_PARTITIONS)
        state_leader = c.partition_state(STATE_TOPIC, state_p)[0]
        if state_leader != data_leader:
            return group, state_p, state_leader
    raise AssertionError(f"every group's state is led by the data leader {data_leader}")


def run_case(c, kill: str) -> None:  # type: ignore[no-untyped-def]
    topic = create_rf3_topic(c, f"sq-{kill}")
    data_leader = c.partition_state(topic, 0)[0]
    group, state_p, state_leader = group_with_state_elsewhere(c, topic, data_leader, f"sg-{kill}")
    victim, (led_topic, led_partition) = {"data": (data_leader, (topic, 0)),
                                          "state": (state_leader, (STATE_TOPIC, state_p))}[kill]

    accepted = [f"a{i}" for i in range(10)]
    held_batch = [f"b{i}" for i in range(10)]
    never_delivered = [f"c{i}" for i in range(10)]
    with ShareConsumer(c.bootstrap, group, topic, "explicit", "accept", "acceptor") as acceptor:
        acceptor.wait_subscribed()
        wait_initialized(c, [acceptor], topic, 1)
        produce(c, topic, accepted)
        wait_until(lambda: len(real(acceptor)) >= len(accepted), 60, "the acceptor's records")
        acceptor.stop()
    assert [r.value for r in real(acceptor)] == accepted
    first_held = real(acceptor)[-1].offset + 1

    with ShareConsumer(c.bootstrap, group, topic, "explicit", "hold", "holder") as holder:
        holder.wait_subscribed()
        produce(c, topic, held_batch)
        wait_until(lambda: real(holder) != [], 60, "the holder's records")
        time.sleep(2)  # whatever is written of the acquisition (nothing, as Kafka) is written before the kill
        held = real(holder)
        assert held and held[0].offset == first_held and {r.delivery_count for r in held} == {1}, held
        c.kill(victim)
        wait_until(lambda: c.partition_state(led_topic, led_partition)[0] not in (-1, victim), 60,
                   f"a new leader of {led_topic}-{led_partition}")
        holder.kill()
    # C is written only once the holder is gone: a live share consumer keeps a ShareFetch parked at
    # the broker (Kafka's client prefetches), so records written while it lived could be acquired by
    # it and come back at delivery count 2 - the client's timing, not the state's survival (it failed
    # so 1 run in 4 after ShareFetch waits moved to the purgatory).
    produce(c, topic, never_delivered)

    rest = [v for v in held_batch + never_delivered if v not in {r.value for r in held}]
    expected = len(held) + len(rest)
    with ShareConsumer(c.bootstrap, group, topic, "explicit", "accept", "reader") as reader:
        reader.wait_subscribed()
        wait_until(lambda: len(real(reader)) >= expected, 120,
                   f"{expected} records after killing node {victim} (got {describe(real(reader))})")
        time.sleep(3)  # nothing more may come
        reader.stop()
    got: dict[str, list[int]] = collections.defaultdict(list)
    for r in real(reader):
        got[r.value].append(r.delivery_count)
    redelivery = {"data": 1, "state": 2}[kill]
    assert dict(got) == {**{r.value: [redelivery] for r in held}, **{v: [1] for v in rest}}, describe(reader.records)
    end = first_held + len(held_batch) + len(never_delivered)
    assert max(r.offset for r in real(reader)) == end - 1
    # B and C accepted in one acknowledgement: its write carries the start offset before it, B's first.
    wait_until(lambda: described_start_offset(c, group, topic) == first_held, 60,
               f"DescribeShareGroupOffsets to show start offset {first_held} (seen "
               f"{described_start_offset(c, group, topic)})")


@pytest.mark.parametrize("kill", ["data", "state"])
def test_share_state_survives_a_leader_kill(cluster, kill: str) -> None:  # type: ignore[no-untyped-def]
    try:
        run_case(cluster, kill)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.logs()[-12000:]}") from None
    finally:
        for node in cluster.node_ids:  # the next case needs all three (min ISR 2 from a full ISR)
            if not cluster.brokers[node].alive():
                cluster.start(node, timeout=60)
        wait_until(lambda: all(len(cluster.partition_state(STATE_TOPIC, p)[2]) == 3
                               for p in range(STATE_PARTITIONS)), 90, "__share_group_state in sync again")


NOT_LEADER_OR_FOLLOWER = 6
SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
ACCEPT = 1


def join(c, group: str, member: str, topic: str) -> None:  # type: ignore[no-untyped-def]
    """``member`` joins share group ``group``, subscribed to ``topic``, at the group's coordinator."""
    found = c.request(c.live_ids()[0], "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [group]})
    joined = c.request(found["coordinators"][0]["node_id"], "ShareGroupHeartbeat", 1, {
        "group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": [topic]})
    assert joined["error_code"] == 0, joined


def test_an_acknowledgement_is_answered_once_the_share_coordinator_holds_it(cluster) -> None:  # type: ignore[no-untyped-def]
    """The share-partition's state is kept by another broker's share coordinator, and that broker is
    stopped (SIGSTOP, well inside its 10 s lease): a ShareAcknowledge to the data leader is not
    answered until the coordinator is back and has taken the write - as Kafka 4.4's SharePartition
    answers after its persister's write - and then the state holds the acceptance. Before, the
    answer came at once (NONE), with the write still to be sent: a crash in between redelivered
    records the client was told were accepted."""
    c = cluster
    topic = create_rf3_topic(c, "sq-durable-ack")
    tid = topic_id(c, topic)
    data_leader = c.partition_state(topic, 0)[0]
    group, _, state_leader = group_with_state_elsewhere(c, topic, data_leader, "sg-durable-ack")
    member = "durable-member-0000000001"
    join(c, group, member, topic)
    leader = c.brokers[data_leader]
    conn = WireClient(leader.host, leader.port, timeout=30)  # one connection: the share session's
    epoch = 0

    def request(api: int, fields: dict[str, object]) -> dict:  # type: ignore[type-arg]
        nonlocal epoch
        r = conn.request(api, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, **fields})
        assert r["error_code"] == 0, r
        epoch += 1
        return r  # type: ignore[no-any-return]

    def fetched() -> list[tuple[int, int]]:
        r = request(SHARE_FETCH, {
            "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "partition_max_bytes": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []})
        return [(a["first_offset"], a["last_offset"]) for t in r["responses"] for p in t["partitions"]
                for a in p["acquired_records"]]

    def summary() -> tuple[int, int]:
        r = c.request(state_leader, "ReadShareGroupStateSummary", 1, {"group_id": group, "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        part = r["results"][0]["partitions"][0]
        assert part["error_code"] == 0, r
        return part["start_offset"], part["delivery_complete_count"]

    answered: list[dict] = []  # type: ignore[type-arg]
    with conn:
        assert fetched() == []  # opens the session; the share-partition's state is read meanwhile
        wait_until(lambda: summary()[0] == 0, 30, "the share-partition initialized at offset 0")
        produce(c, topic, [f"d{i}" for i in range(5)])
        got: list[tuple[int, int]] = []
        wait_until(lambda: bool(got.extend(fetched()) or got), 30, "records 0-4 acquired")
        assert got == [(0, 4)], got
        c.pause(state_leader)
        try:
            ack = threading.Thread(target=lambda: answered.append(request(SHARE_ACKNOWLEDGE, {"topics": [
                {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 4, "acknowledge_types": [ACCEPT]}]}]}]})))
            ack.start()
            ack.join(2.0)
            assert answered == [], f"answered while the share coordinator was stopped: {answered}"
        finally:
            c.resume(state_leader)
        ack.join(20)
        assert len(answered) == 1, "no answer within 20 s of the share coordinator's return"
    part = answered[0]["responses"][0]["partitions"][0]
    assert (part["error_code"], part["error_message"]) == (0, None), answered
    # The state holds the acceptance: Kafka's write carries the start offset as it stood (0) and
    # the 5 acknowledged records above it (KIP-1226's delivery-complete count).
    assert summary() == (0, 5)


def test_a_fenced_state_read_is_refused_not_started_fresh(cluster) -> None:  # type: ignore[no-untyped-def]
    """The share coordinator holds a newer leader epoch than the data partition's leader reads with
    (as when another broker has since led the partition and read the state): the read is refused
    with FENCED_LEADER_EPOCH, and the share-partition answers its fetches NOT_LEADER_OR_FOLLOWER, as
    Kafka 4.4's SharePartition.fetchPersisterError maps it. Before, Odradek took the refusal for a
    share-partition never initialized and started afresh at the log end: the records below it, which
    the state says are still to be delivered, would never have been."""
    c = cluster
    topic = create_rf3_topic(c, "sq-fenced")
    tid = topic_id(c, topic)
    data_leader = c.partition_state(topic, 0)[0]
    group, _, state_leader = group_with_state_elsewhere(c, topic, data_leader, "sg-fenced")

    def state_api(api: str, fields: dict[str, object]) -> dict:  # type: ignore[type-arg]
        r = c.request(state_leader, api, 0, {"group_id": group, "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, **fields}]}]})
        return r["results"][0]["partitions"][0]  # type: ignore[no-any-return]

    produce(c, topic, [f"r{i}" for i in range(5)])  # offsets 0-4, to be delivered from start offset 0
    assert state_api("InitializeShareGroupState", {"state_epoch": 0, "start_offset": 0})["error_code"] == 0
    assert state_api("ReadShareGroupState", {"leader_epoch": 1000})["error_code"] == 0  # epoch 1000 recorded

    member = "fenced-member-0000000001"
    join(c, group, member, topic)

    epoch = 0
    seen: list[tuple[int, list[tuple[int, int]]]] = []
    leader = c.brokers[data_leader]
    conn = WireClient(leader.host, leader.port)  # one connection: a share session closes with its own

    def fetch() -> tuple[int, list[tuple[int, int]]] | None:
        nonlocal epoch
        r = conn.request(SHARE_FETCH, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "partition_max_bytes": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []})
        assert r["error_code"] == 0, r
        epoch += 1
        for t in r["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == 0:
                    outcome = (p["error_code"], [(a["first_offset"], a["last_offset"]) for a in p["acquired_records"]])
                    seen.append(outcome)
                    return outcome
        return None

    with conn:
        fetch()  # opens the session: the share-partition's state is read meanwhile
        produce(c, topic, [f"s{i}" for i in range(5)])  # offsets 5-9: what a fresh start would acquire
        deadline = time.monotonic() + 30
        while (outcome := fetch()) is None or outcome == (0, []):
            assert time.monotonic() < deadline, f"no error within 30 s; the fetches saw {seen}"
    assert outcome == (NOT_LEADER_OR_FOLLOWER, []), seen
    # The fenced leader wrote nothing: the state is as initialized.
    r = state_api("ReadShareGroupState", {"leader_epoch": 1000})
    assert (r["error_code"], r["start_offset"], r["state_batches"]) == (0, 0, []), r
