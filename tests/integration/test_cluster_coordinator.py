"""The group coordinator on a replicated __consumer_offsets, across killing its broker (issue 13).

Three brokers; __consumer_offsets gets offsets.topic.replication.factor (Kafka's default, 3)
replicas. A librdkafka consumer group commits (a commit is answered once replicated), the broker
leading the group's __consumer_offsets partition - its coordinator - is SIGKILLed: leadership moves
to another in-sync replica, whose coordinator loads the partition; the consumer follows
NOT_COORDINATOR to it, rejoins, and the offsets committed before the kill are there. The same with
a controlled shutdown (SIGTERM) of the coordinator's broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
PARTITIONS = 3
GROUP = "billing"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "5000"})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def consumer(bootstrap: str) -> Any:
    return confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000})


def consume(c: Any, count: int, timeout: float = 60.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    return got


def commit(c: Any, timeout: float = 60.0) -> None:
    """A synchronous commit, retried through a coordinator move (librdkafka surfaces some errors)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.commit(asynchronous=False)
            return
        except confluent_kafka.KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def coordinator_of(cluster: ClusterProcesses, via: int) -> int:
    found = cluster.request(via, "FindCoordinator", 3, {"key": GROUP, "key_type": 0})
    return int(found["node_id"]) if found["error_code"] == 0 else -1


def offsets_partitions(cluster: ClusterProcesses, via: int) -> list[dict]:
    md = cluster.request(via, "Metadata", 12, {"topics": [{"name": "__consumer_offsets", "topic_id": None}]})
    return list(md["topics"][0]["partitions"])


def group_state(cluster: ClusterProcesses, coordinator: int) -> tuple[str, int]:
    (group,) = cluster.request(coordinator, "DescribeGroups", 5, {"groups": [GROUP],
                                                                "include_authorized_operations": False})["groups"]
    assert group["error_code"] == 0, group
    return group["group_state"], len(group["members"])


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_committed_offsets_survive_losing_the_coordinator_and_the_group_rejoins(cluster: ClusterProcesses,
                                                                               fault: str) -> None:
    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 3, "configs": []}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    produce(cluster.bootstrap, [b"a%d" % i for i in range(30)])

    first = consumer(cluster.bootstrap)
    first.subscribe([TOPIC])
    try:
        assert sorted(consume(first, 30)) == sorted(b"a%d" % i for i in range(30))
        commit(first)
        # __consumer_offsets is replicated as configured: 3 replicas, all in sync.
        (offsets_partition,) = offsets_partitions(cluster, 1)
        assert sorted(offsets_partition["replica_nodes"]) == [1, 2, 3], offsets_partition
        assert cluster.wait_until(lambda: len(offsets_partitions(cluster, 1)[0]["isr_nodes"]) == 3, 10)
        victim = coordinator_of(cluster, 1)
        assert victim == offsets_partition["leader_id"]

        killed_at = time.monotonic()
        if fault == "kill":
            cluster.kill(victim)  # SIGKILL: the client finds its coordinator gone
        else:
            # SIGTERM: a controlled shutdown moves the leadership first; the old coordinator
            # resigns and answers NOT_COORDINATOR until it stops.
            cluster.stop(victim)
        survivors = [n for n in cluster.node_ids if n != victim]
        assert cluster.wait_until(lambda: coordinator_of(cluster, survivors[0]) in survivors, 30), cluster.logs()
        moved = coordinator_of(cluster, survivors[0])
        print(f"{fault}: coordinator moved from broker {victim} to {moved} in {time.monotonic() - killed_at:.1f} s")

        # The new coordinator loaded what the old one committed.
        tps = [confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        committed = first.committed(tps, timeout=30)
        assert sorted((tp.partition, tp.offset) for tp in committed) == [(p, 10) for p in range(PARTITIONS)]
        # The same consumer follows the coordinator, rejoins and goes on from where it was.
        survivors_bootstrap = ",".join(cluster.broker(n).bootstrap for n in survivors)
        produce(survivors_bootstrap, [b"b%d" % i for i in range(30)])
        assert sorted(consume(first, 30)) == sorted(b"b%d" % i for i in range(30)), cluster.logs()
        commit(first)
        assert group_state(cluster, moved) == ("Stable", 1)
        print(f"the group consumed and committed again {time.monotonic() - killed_at:.1f} s after the kill")
    finally:
        first.close()

    # The offsets committed through both coordinators are the group's: a new member starts there.
    second = consumer(survivors_bootstrap)
    second.subscribe([TOPIC])
    try:
        committed = second.committed(tps, timeout=30)
        assert sorted((tp.partition, tp.offset) for tp in committed) == [(p, 20) for p in range(PARTITIONS)]
        produce(survivors_bootstrap, [b"c%d" % i for i in range(3)])
        assert sorted(consume(second, 3)) == [b"c0", b"c1", b"c2"]
        assert consume(second, 1, timeout=2) == []  # nothing consumed before was read again
    finally:
        second.close()


def test_offsets_topic_waits_for_as_many_live_brokers_as_its_replication_factor(cluster: ClusterProcesses) -> None:
    cluster.kill(3)
    assert cluster.wait_until(lambda: len(cluster.metadata(1)["brokers"]) == 2, 30), cluster.logs()
    # Kafka: not created with fewer replicas than offsets.topic.replication.factor; clients retry.
    for _ in range(3):
        assert coordinator_of(cluster, 1) == -1
    md = cluster.request(1, "Metadata", 12, {"topics": None})
    assert "__consumer_offsets" not in [t["name"] for t in md["topics"]]
    # The clients retry without a word, so the broker's log says why, once, as a WARN with the remedy.
    (line,) = [x for x in cluster.log_text(1, 200_000).splitlines() if "does not meet the required" in x]
    assert (" WARN" in line and "Number of alive brokers '2' does not meet the required replication factor '3' "
            "for the offsets topic (configured via 'offsets.topic.replication.factor')" in line
            and "start more brokers, or set offsets.topic.replication.factor to at most 2" in line), line
    cluster.start(3)
    assert cluster.wait_until(lambda: coordinator_of(cluster, 1) > 0, 30), cluster.logs()
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in offsets_partitions(cluster, 1))


def commit_raw(cluster: ClusterProcesses, node: int, offset: int) -> int:
    body = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    return int(cluster.request(node, "OffsetCommit", 7, body)["topics"][0]["partitions"][0]["error_code"])


def fetch_raw(cluster: ClusterProcesses, node: int) -> tuple[int, int]:
    """(error code, committed offset of orders-0) as broker ``node`` answers OffsetFetch."""
    response = cluster.request(node, "OffsetFetch", 5, {"group_id": GROUP, "topics": None, "require_stable": False})
    if response["error_code"]:
        return int(response["error_code"]), -1
    offsets = [p["committed_offset"] for t in response["topics"] for p in t["partitions"] if p["partition_index"] == 0]
    return 0, offsets[0] if offsets else -1


def test_the_coordinator_moves_back_with_leadership_and_the_one_it_left_answers_not_coordinator(
        cluster: ClusterProcesses) -> None:
    reply = cluster.request(cluster.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": 1, "replication_factor": 3, "configs": []}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    assert cluster.wait_until(lambda: coordinator_of(cluster, 1) > 0, 30), cluster.logs()
    first = coordinator_of(cluster, 1)
    assert cluster.wait_until(lambda: commit_raw(cluster, first, 5) == 0, 20)

    cluster.kill(first)
    others = [n for n in cluster.node_ids if n != first]
    assert cluster.wait_until(lambda: coordinator_of(cluster, others[0]) in others, 30), cluster.logs()
    second = coordinator_of(cluster, others[0])
    assert cluster.wait_until(lambda: fetch_raw(cluster, second) == (0, 5), 20)  # loaded from the log
    assert commit_raw(cluster, second, 7) == 0

    # The first broker comes back, catches up, and a preferred leader election gives it the
    # partition again (it was the first replica): it loads the commit made while it was down.
    cluster.start(first)
    assert cluster.wait_until(lambda: len(offsets_partitions(cluster, second)[0]["isr_nodes"]) == 3, 30), \
        cluster.logs()
    (offsets_partition,) = offsets_partitions(cluster, second)
    assert offsets_partition["replica_nodes"][0] == first, offsets_partition
    elected = cluster.request(cluster.controller_id(), "ElectLeaders", 2, {
        "election_type": 0, "timeout_ms": 10000,
        "topic_partitions": [{"topic": "__consumer_offsets", "partitions": [0]}]})
    assert elected["error_code"] == 0, elected
    assert cluster.wait_until(lambda: coordinator_of(cluster, second) == first, 20), cluster.logs()
    assert cluster.wait_until(lambda: fetch_raw(cluster, first) == (0, 7), 20), fetch_raw(cluster, first)
    # The broker it left resigned: clients are sent to look the coordinator up again.
    assert fetch_raw(cluster, second) == (16, -1)  # NOT_COORDINATOR
    assert commit_raw(cluster, second, 9) == 16
