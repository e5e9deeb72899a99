"""Read a whole topic as it stands, partition by partition, with librdkafka (no group, no commit): what
the tests that check a tool's output (Connect, MirrorMaker 2) compare against their expected records.

Who may call it: any test thread; each call has its own consumer.
"""

from __future__ import annotations

import time


def read_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` now, as {partition: [(offset, value), ...]} in offset order, up to each
    partition's high watermark when the call starts."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "topic-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        left = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in left])
        deadline = time.monotonic() + timeout
        while left:
            assert time.monotonic() < deadline, f"{topic}: read {got} of {ends} within {timeout} s"
            msg = consumer.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert not msg.error(), msg.error()
            p, offset = msg.partition(), msg.offset()
            if offset < ends[p]:
                got[p].append((offset, msg.value()))
            if offset + 1 >= ends[p]:
                left.discard(p)
        return got
    finally:
        consumer.close()
