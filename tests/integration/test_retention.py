"""Time retention on a quiet topic, against the real daemon and real clients.

Kafka deletes a retention-breached active segment too, once the high watermark reached its end
(UnifiedLog.deletableSegments), rolling a new empty one at the log end offset first
(deleteSegments): a low-volume topic does not keep expired records until segment.ms (7 days by
default) rolls its only segment. The log start offset then moves to the log end offset, consumers
below it get OFFSET_OUT_OF_RANGE, and producers go on at the same offsets.
"""

from __future__ import annotations

import time
from typing import Any

import pytest


def test_expired_records_of_a_quiet_topic_go_without_waiting_for_segment_ms(broker_factory) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import OffsetOutOfRangeError

    b = broker_factory({"log.retention.check.interval.ms": "50"})
    topic = "quiet"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    # segment.ms and segment.bytes stay at their defaults (7 days, 1 GiB): one segment, never rolled.
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "3000"})])[topic].result(10)
    # Idempotent: its producer state must outlive the segments that held its batches.
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "enable.idempotence": True})

    def produce(values: list[bytes]) -> list[int]:
        delivered: list[int] = []

        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            delivered.append(msg.offset())

        for value in values:
            producer.produce(topic, value=value, on_delivery=on_delivery)
        assert producer.flush(10) == 0
        return delivered

    watcher = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "retention-watcher"})
    readers: list[KafkaConsumer] = []
    try:

        def watermarks() -> tuple[int, int]:  # ListOffsets earliest and latest
            return watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)

        assert produce([b"old-%d" % i for i in range(5)]) == [0, 1, 2, 3, 4]
        assert watermarks() == (0, 5)  # not expired yet
        deadline = time.monotonic() + 20
        while watermarks()[0] == 0:
            assert time.monotonic() < deadline, "the expired active segment was never deleted"
            time.sleep(0.05)
        assert watermarks() == (5, 5)
        partition_dir = b.data_dir / "logs" / f"{topic}-0"
        assert sorted(p.name for p in partition_dir.glob("*.log")) == ["00000000000000000005.log"]

        # A consumer at an offset that is gone gets OFFSET_OUT_OF_RANGE (kafka-python raises it when
        # it has no reset policy).
        tp = KafkaTopicPartition(topic, 0)
        lost = KafkaConsumer(
            bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="none"
        )
        readers.append(lost)
        lost.assign([tp])
        lost.seek(tp, 0)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                lost.poll(timeout_ms=200)

        # Producers go on at the same offsets; a consumer from the beginning reads only those.
        assert produce([b"new-%d" % i for i in range(3)]) == [5, 6, 7]
        assert watermarks() == (5, 8)
        reader = KafkaConsumer(
            bootstrap_servers=b.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        readers.append(reader)
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 10
        while len(got) < 3:
            assert time.monotonic() < deadline, got
            for records in reader.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
        assert got == [(5, b"new-0"), (6, b"new-1"), (7, b"new-2")]
    finally:
        for r in readers:
            r.close()
        watcher.close()
