"""Produce-then-consume round trips through each Python client, for tests that only vary how the
client connects (its security settings): ``n`` values ``f"{prefix}-{i}"`` produced to ``topic``,
then read back from the beginning by a consumer of a fresh group. Each returns what it read."""

from __future__ import annotations

import asyncio
import time


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def kafka_python_roundtrip(cfg: dict, topic: str, n: int = 5, prefix: str = "kp") -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(**cfg)
    for value in values(prefix, n):
        producer.send(topic, value).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, **cfg, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000)
    got = [m.value for _, m in zip(range(n), consumer, strict=False)]
    consumer.close()
    return got


def confluent_roundtrip(cfg: dict, topic: str, n: int = 5, prefix: str = "ck") -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer(cfg)
    for value in values(prefix, n):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**cfg, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def aiokafka_roundtrip(cfg: dict, topic: str, n: int = 5, prefix: str = "aio") -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**cfg)
        await producer.start()
        try:
            for value in values(prefix, n):
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **cfg, group_id=f"g-{topic}", auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == n:
                        break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())
