"""The real daemon driven by kafka-python, confluent-kafka and aiokafka admin clients:
connect, create a 3-partition topic, describe it, delete it; a restart keeps topics and ids."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.support.wire import WireClient


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def metadata(broker, topics=None) -> dict:
    with WireClient(broker.host, broker.port) as c:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        return c.request(3, 12, body)


def test_kafka_python_admin_create_describe_delete(broker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="kp-admin", request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kp-topic", num_partitions=3, replication_factor=1)])
        assert "kp-topic" in admin.list_topics()
        (described,) = admin.describe_topics(["kp-topic"])
        assert described["error_code"] == 0
        partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in partitions] == [0, 1, 2]
        assert all(p["leader_id"] == 1 for p in partitions)
        admin.delete_topics(["kp-topic"])
        wait_for(lambda: "kp-topic" not in admin.list_topics())
    finally:
        admin.close()


def test_confluent_kafka_admin_create_describe_delete(broker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("ck-topic", num_partitions=3, replication_factor=1)])
    futures["ck-topic"].result(10)
    md = admin.list_topics(topic="ck-topic", timeout=10)
    topic = md.topics["ck-topic"]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2]
    assert all(p.leader == 1 for p in topic.partitions.values())
    assert md.cluster_id and md.controller_id == 1
    admin.delete_topics(["ck-topic"])["ck-topic"].result(10)
    wait_for(lambda: "ck-topic" not in admin.list_topics(timeout=10).topics)


def test_confluent_kafka_create_existing_topic_reports_topic_already_exists(broker) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dup", num_partitions=1, replication_factor=1)])["dup"].result(10)
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("dup", num_partitions=1, replication_factor=1)])["dup"].result(10)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_aiokafka_admin_create_describe_delete(broker) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-topic", num_partitions=3, replication_factor=1)])
            assert "aio-topic" in await admin.list_topics()
            (described,) = await admin.describe_topics(["aio-topic"])
            assert described["error_code"] == 0
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
            await admin.delete_topics(["aio-topic"])
            for _ in range(100):
                if "aio-topic" not in await admin.list_topics():
                    break
                await asyncio.sleep(0.05)
            assert "aio-topic" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(scenario())


def test_restart_keeps_topics_and_ids(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        created = c.request(19, 7, {"topics": [{"name": "durable", "num_partitions": 3, "replication_factor": 1,
                                                "configs": [{"name": "retention.ms", "value": "12345"}]}],
                                    "timeout_ms": 5000})
    (topic,) = created["topics"]
    assert topic["error_code"] == 0
    assert topic["topic_id"] != uuid.UUID(int=0)
    before = metadata(broker, ["durable"])
    broker.restart()
    after = metadata(broker, ["durable"])
    assert after["cluster_id"] == before["cluster_id"]
    (t_before,), (t_after,) = before["topics"], after["topics"]
    assert t_after["topic_id"] == t_before["topic_id"] == topic["topic_id"]
    assert len(t_after["partitions"]) == 3
    # Leader epochs never go backwards across a restart (clients ignore metadata that does).
    for p_before, p_after in zip(t_before["partitions"], t_after["partitions"], strict=True):
        assert p_after["leader_epoch"] >= p_before["leader_epoch"]


def test_restart_after_sigkill_keeps_topics(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        c.request(19, 7, {"topics": [{"name": "crashy", "num_partitions": 2, "replication_factor": 1}],
                          "timeout_ms": 5000})
    topic_id = metadata(broker, ["crashy"])["topics"][0]["topic_id"]
    broker.kill()
    broker.start()
    assert metadata(broker, ["crashy"])["topics"][0]["topic_id"] == topic_id
