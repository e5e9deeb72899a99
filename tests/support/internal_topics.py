"""Read a broker's internal topics back through a real client (confluent-kafka, assign()), to see on
which partition of ``__consumer_offsets`` / ``__transaction_state`` a group's or transactional id's
records are, and what they hold.

``group_or_txn_id(key)``: the id every key of both topics starts with (int16 version, then the id
as an int16-length string: Kafka's OffsetCommitKey, GroupMetadataKey, the KIP-848 keys and
TransactionLogKey). None for a key of another shape.
"""

from __future__ import annotations

import struct
import time

import confluent_kafka


def group_or_txn_id(key: bytes | None) -> str | None:
    if key is None or len(key) < 4:
        return None
    version, length = struct.unpack_from(">hh", key, 0)
    if version < 0 or version > 100 or 4 + length > len(key):
        return None
    return key[4:4 + length].decode("utf-8")


def read_partitions(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, list[tuple[bytes, bytes | None]]]:
    """Every partition's (key, value)s, read from the start up to the high watermark each had when
    the read began."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "internal-topic-reader",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=timeout)[1]
                for p in partitions}
        out: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in partitions}
        waiting = {p for p, end in ends.items() if end > 0}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in waiting])
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p, offset, key, err = msg.partition(), msg.offset(), msg.key(), msg.error()
            assert p is not None
            if err is not None:
                if err.code() != confluent_kafka.KafkaError._PARTITION_EOF:
                    raise confluent_kafka.KafkaException(err)
            elif offset is not None and key is not None and offset < ends[p]:
                out[p].append((key, msg.value()))
            if p in waiting and consumer.position([confluent_kafka.TopicPartition(topic, p)])[0].offset >= ends[p]:
                waiting.discard(p)
        assert not waiting, f"{topic} partitions {sorted(waiting)} not read to their ends in {timeout} s"
        return out
    finally:
        consumer.close()


def partitions_holding(bootstrap: str, topic: str) -> dict[str, set[int]]:
    """id -> the partitions of ``topic`` that hold a live (non-tombstone) newest record of it."""
    latest: dict[tuple[int, bytes], bytes | None] = {}
    for p, records in read_partitions(bootstrap, topic).items():
        for key, value in records:
            latest[(p, key)] = value
    out: dict[str, set[int]] = {}
    for (p, key), value in latest.items():
        owner = group_or_txn_id(key)
        if owner is not None and value is not None:
            out.setdefault(owner, set()).add(p)
    return out
