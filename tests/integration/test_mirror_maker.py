"""MirrorMaker 2 from a real Apache Kafka 4.4 into Odradek (issue 32, section 1): the migration path for a
user leaving Kafka (README, "Migrating from Kafka"), run as that user runs it: MirrorMaker 2's dedicated
mode (what Kafka's bin/connect-mirror-maker.sh starts; connect-mirror 4.3.1, 4.4.0's jar not being on
Maven Central) with the README's properties, the identity replication policy keeping the topic's name.

On the shared real Kafka a topic with three partitions gets a different number of records in each, and
a consumer group reads them all and commits. Expected, from MirrorMaker 2's documented behaviour:
- Odradek gets the topic (created by MirrorMaker, same name, same partition count) with every record in
  the partition it had on Kafka, in the same order at the same offsets (a fresh target topic, so
  downstream offsets are the upstream ones);
- with ``sync.group.offsets.enabled`` the group's committed offsets appear on Odradek translated
  through MirrorMaker's offset syncs: the end offset of each partition, as on Kafka, so the consumers
  moved to Odradek resume where they stopped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.connect import MirrorMaker
from tests.support.real_kafka import (
    CLASSIC_GROUP,
    FETCH,
    PRODUCE,
    Target,
    create_topic,
    open_target,
    require_toolchain,
    unique,
)
from tests.support.topic_reader import read_topic
from tests.support.waiting import wait_until

COUNTS = (30, 20, 10)  # records per partition on the source cluster


def mm2_properties(source: str, target: str, topics: str, groups: str) -> str:
    """The README's "Migrating from Kafka" properties, addresses and names filled in, plus what a
    one-broker test cluster needs (replication factor 1) and short intervals so the test takes seconds
    (MirrorMaker's defaults: checkpoints and group offsets every 60 s, new topics and groups every 10 min)."""
    return f"""\
clusters = kafka, odradek
kafka.bootstrap.servers = {source}
odradek.bootstrap.servers = {target}
kafka->odradek.enabled = true
kafka->odradek.topics = {topics}
kafka->odradek.groups = {groups}
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
sync.group.offsets.enabled = true
odradek->kafka.emit.heartbeats.enabled = false

replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
emit.checkpoints.interval.seconds = 1
sync.group.offsets.interval.seconds = 1
refresh.groups.interval.seconds = 1
refresh.topics.interval.seconds = 1
# The target's Connect worker commits every half second (default 60 s): MirrorMaker sends the offset
# syncs of the newest records, which the group offsets are translated with, when it commits.
odradek.offset.flush.interval.ms = 500
# Connect's plugins found through their ServiceLoader manifests, not by scanning every classpath jar
# (about 9 s of a busy machine per scan).
plugin.discovery = service_load
"""


def _produce(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {}
    for partition, count in enumerate(COUNTS):
        for i in range(count):
            value = f"p{partition}-{i}".encode()
            producer.produce(topic, value, key=b"k%d" % i, partition=partition)
            sent.setdefault(partition, []).append(value)
    assert producer.flush(30) == 0
    return sent


def _consume_and_commit(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    try:
        while seen < sum(COUNTS):
            msg = consumer.poll(10)
            assert msg is not None, f"consumer of {topic} got {seen} of {sum(COUNTS)} records"
            assert not msg.error(), msg.error()
            seen += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(len(COUNTS))])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@pytest.fixture
def odradek(tmp_path):
    require_toolchain()
    with open_target("odradek", tmp_path / "odradek") as t:
        yield t


def test_mirror_maker_2_migrates_records_and_group_offsets_from_kafka(odradek, tmp_path) -> None:
    odradek.require(*PRODUCE, *FETCH, *CLASSIC_GROUP, "CreateTopics", "DescribeConfigs", "OffsetCommit")
    with open_target("kafka", tmp_path / "kafka") as kafka:
        _mirror(kafka, odradek, tmp_path)


def _mirror(kafka: Target, odradek: Target, tmp_path: Path) -> None:
    topic, group = unique("mm2-orders"), unique("mm2-app")
    create_topic(kafka, topic, len(COUNTS))
    sent = _produce(kafka.bootstrap, topic)
    _consume_and_commit(kafka.bootstrap, topic, group)
    assert _committed(kafka.bootstrap, topic, group) == dict(enumerate(COUNTS))

    mm2 = MirrorMaker(tmp_path / "mm2", mm2_properties(kafka.bootstrap, odradek.bootstrap, topic, group))
    try:
        mm2.start()

        def mirrored() -> dict[int, list[tuple[int, bytes]]] | None:
            assert mm2.alive(), mm2.log_text()
            from confluent_kafka.admin import AdminClient

            md = AdminClient({"bootstrap.servers": odradek.bootstrap}).list_topics(timeout=10)
            if topic not in md.topics or md.topics[topic].error is not None:
                return None
            assert len(md.topics[topic].partitions) == len(COUNTS)
            got = read_topic(odradek.bootstrap, topic, len(COUNTS))
            return got if [len(r) for r in got.values()] == list(COUNTS) else None

        got = wait_until(mirrored, timeout=90, interval=1, what=f"{topic}'s records on Odradek")
        assert got == {p: list(enumerate(values)) for p, values in sent.items()}

        wait_until(lambda: _committed(odradek.bootstrap, topic, group) == dict(enumerate(COUNTS)),
                   timeout=60, interval=1, what=f"{group}'s offsets on Odradek")
    except BaseException:
        print(mm2.log_text(12000))
        raise
    finally:
        mm2.kill()
