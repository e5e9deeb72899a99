"""Classic consumer groups with aiokafka against the real daemon.

aiokafka speaks the older group API versions (JoinGroup/SyncGroup/Heartbeat before static
membership), so this also covers requests that lack group_instance_id and protocol fields.
Three members with the range and roundrobin assignors share a topic's partitions exactly once;
one leaves and the other two take over within the session timeout; commits survive.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

pytestmark = pytest.mark.timeout(120)

GROUP_OVERRIDES = {"group.min.session.timeout.ms": "500"}
SESSION_MS = 3000
STRATEGIES = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}


async def _create_and_produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, str(i).encode(), partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def _poll_until(consumers: list[AIOKafkaConsumer], done, got: set, timeout: float = 20.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        for c in consumers:
            for tp, recs in (await c.getmany(timeout_ms=50)).items():
                got.update((tp.partition, r.offset) for r in recs)
        if done():
            return time.monotonic() - start
    raise AssertionError(f"timed out; owned: {[sorted(tp.partition for tp in c.assignment()) for c in consumers]}")


def _exactly_once(consumers: list[AIOKafkaConsumer], partitions: int):
    def check() -> bool:
        owned = [tp.partition for c in consumers for tp in c.assignment()]
        return sorted(owned) == list(range(partitions)) and all(c.assignment() for c in consumers)
    return check


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_three_members_share_leave_and_commit(broker_factory, strategy: str) -> None:
    broker = broker_factory(GROUP_OVERRIDES)

    async def run() -> None:
        await _create_and_produce(broker.bootstrap, "at", 6, 60)
        consumers = [AIOKafkaConsumer("at", bootstrap_servers=broker.bootstrap, group_id="ag", client_id=f"a{i}",
                                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200,
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      max_poll_interval_ms=10000,
                                      partition_assignment_strategy=(STRATEGIES[strategy],))
                     for i in range(3)]
        try:
            for c in consumers:
                await c.start()
            got: set = set()
            await _poll_until(consumers, _exactly_once(consumers, 6), got)
            await _poll_until(consumers, lambda: len(got) == 60, got)
            assert got == {(p, o) for p in range(6) for o in range(10)}
            for c in consumers:
                await c.commit()
            await consumers[0].stop()  # LeaveGroup
            elapsed = await _poll_until(consumers[1:], _exactly_once(consumers[1:], 6), got,
                                        timeout=SESSION_MS / 1000)
            assert elapsed < SESSION_MS / 1000
            committed = {p: await consumers[1].committed(tp)
                         for tp in consumers[1].assignment() for p in [tp.partition]}
            # Partitions handed over keep the offsets their previous owner committed.
            assert committed == dict.fromkeys(sorted(committed), 10) and len(committed) in (3, 4)
        finally:
            for c in consumers:
                await c.stop()

    asyncio.run(run())
