"""Controller topic lifecycle: CreateTopics / DeleteTopics / CreatePartitions with Kafka's errors."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.controller import (
    Controller,
    CreatableTopic,
    CreatePartitionsTopic,
    ReplicaAssignment,
)
from odradek.controller.image import ZERO_UUID
from odradek.protocol.errors import ErrorCode, KafkaApiError


def _log_size(c: Controller) -> int:
    return (c.metadata_dir / "__cluster_metadata-0" / "metadata.log").stat().st_size


async def _create_one(c: Controller, topic: CreatableTopic, validate_only: bool = False):
    (result,) = await c.create_topics([topic], validate_only)
    return result


async def test_create_topic_defaults_and_leaders(controller: Controller) -> None:
    seen = []
    controller.subscribe(seen.append)
    r = await _create_one(controller, CreatableTopic("orders"))
    assert r.error_code == ErrorCode.NONE and r.error_message is None
    assert r.num_partitions == 3 and r.replication_factor == 1
    assert r.topic_id != ZERO_UUID and r.topic_id.version == 4
    topic = controller.image.topics["orders"]
    assert controller.image.topics_by_id[r.topic_id] is topic
    assert sorted(topic.partitions) == [0, 1, 2]
    for p in topic.partitions.values():
        assert (p.leader, p.leader_epoch, p.partition_epoch, p.replicas, p.isr) == (1, 0, 0, (1,), (1,))
    assert len(seen) == 1 and seen[0].created_topics == {"orders"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is invalid: the empty string is not allowed"),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        ("a" * 250, f"Topic name is invalid: the length of '{'a' * 250}' is longer than the max allowed length 249"),
        ("bad name", "Topic name is invalid: 'bad name' contains one or more characters other than "
                     "ASCII alphanumerics, '.', '_' and '-'"),
        ("ünï", "Topic name is invalid: 'ünï' contains one or more characters other than "
                "ASCII alphanumerics, '.', '_' and '-'"),
    ],
)
async def test_invalid_topic_names(controller: Controller, name: str, message: str) -> None:
    before = _log_size(controller)
    r = await _create_one(controller, CreatableTopic(name))
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_TOPIC_EXCEPTION, message)
    assert r.topic_id == ZERO_UUID and r.num_partitions == -1
    assert _log_size(controller) == before and controller.image.topics == {}


async def test_longest_legal_name_accepted(controller: Controller) -> None:
    r = await _create_one(controller, CreatableTopic("a" * 249))
    assert r.error_code == ErrorCode.NONE


async def test_collision_and_already_exists(controller: Controller) -> None:
    assert (await _create_one(controller, CreatableTopic("my.topic"))).error_code == ErrorCode.NONE
    r = await _create_one(controller, CreatableTopic("my_topic"))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic 'my_topic' collides with existing topic: my.topic")
    r = await _create_one(controller, CreatableTopic("my.topic"))
    assert (r.error_code, r.error_message) == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'my.topic' already exists.")
    # After deletion the colliding name is free again.
    await controller.delete_topics(names=["my.topic"])
    assert (await _create_one(controller, CreatableTopic("my_topic"))).error_code == ErrorCode.NONE


async def test_duplicate_names_in_one_request(controller: Controller) -> None:
    results = await controller.create_topics([CreatableTopic("d"), CreatableTopic("ok"), CreatableTopic("d")])
    assert [(r.name, r.error_code, r.error_message) for r in results] == [
        ("d", ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        ("ok", ErrorCode.NONE, None),
    ]
    assert set(controller.image.topics) == {"ok"}


@pytest.mark.parametrize("count", [0, -2])
async def test_invalid_partitions(controller: Controller, count: int) -> None:
    r = await _create_one(controller, CreatableTopic("t", num_partitions=count))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    assert "t" not in controller.image.topics


@pytest.mark.parametrize("rf", [0, -2])
async def test_invalid_replication_factor(controller: Controller, rf: int) -> None:
    r = await _create_one(controller, CreatableTopic("t", replication_factor=rf))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor must be larger than 0, or -1 to use the default value.")


async def test_replication_factor_above_broker_count(controller: Controller) -> None:
    r = await _create_one(controller, CreatableTopic("t", 1, 3))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be "
        "reached because only 1 broker(s) are registered or some brokers have all their log directories cordoned.")
    assert controller.image.topics == {}


async def test_invalid_config(controller: Controller) -> None:
    r = await _create_one(controller, CreatableTopic("t", configs={"retention.ms": "soon"}))
    assert r.error_code == ErrorCode.INVALID_CONFIG and "retention.ms" in r.error_message
    r = await _create_one(controller, CreatableTopic("t", configs={"no.such.config": "1"}))
    assert r.error_code == ErrorCode.INVALID_CONFIG and "no.such.config" in r.error_message
    r = await _create_one(controller, CreatableTopic("t", configs={"retention.ms": None, "segment.ms": None}))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: retention.ms,segment.ms")
    assert controller.image.topics == {}
    r = await _create_one(controller, CreatableTopic("t", configs={"cleanup.policy": "compact"}))
    assert r.error_code == ErrorCode.NONE and r.configs == {"cleanup.policy": "compact"}
    assert controller.describe_topic_configs("t") == {"cleanup.policy": "compact"}


async def test_manual_assignment(controller: Controller) -> None:
    await controller.register_broker(2, "h2", 9093)
    r = await _create_one(controller, CreatableTopic("m", assignments=[
        ReplicaAssignment(0, (2, 1)), ReplicaAssignment(1, (1, 2))]))
    assert (r.error_code, r.num_partitions, r.replication_factor) == (ErrorCode.NONE, 2, 2)
    parts = controller.image.topics["m"].partitions
    assert (parts[0].leader, parts[0].replicas, parts[0].isr) == (2, (2, 1), (2, 1))
    assert parts[1].leader == 1


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (CreatableTopic("m", replication_factor=1, assignments=[ReplicaAssignment(0, (1,))]),
         ErrorCode.INVALID_REQUEST,
         "A manual partition assignment was specified, but replication factor was not set to -1."),
        (CreatableTopic("m", num_partitions=1, assignments=[ReplicaAssignment(0, (1,))]),
         ErrorCode.INVALID_REQUEST,
         "A manual partition assignment was specified, but numPartitions was not set to -1."),
        (CreatableTopic("m", assignments=[ReplicaAssignment(0, (1,)), ReplicaAssignment(0, (1,))]),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for partition 0"),
        (CreatableTopic("m", assignments=[ReplicaAssignment(0, ())]),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (CreatableTopic("m", assignments=[ReplicaAssignment(0, (7,))]),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 7, but no such broker is registered."),
        (CreatableTopic("m", assignments=[ReplicaAssignment(0, (1, 1))]),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 1 more than once."),
        (CreatableTopic("m", assignments=[ReplicaAssignment(1, (1,))]),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"),
    ],
)
async def test_bad_manual_assignments(controller: Controller, topic, code, message) -> None:
    before = _log_size(controller)
    r = await _create_one(controller, topic)
    assert (r.error_code, r.error_message) == (code, message)
    assert _log_size(controller) == before and "m" not in controller.image.topics


async def test_inconsistent_replication_factor_in_assignment(controller: Controller) -> None:
    await controller.register_broker(2, "h2", 9093)
    r = await _create_one(controller, CreatableTopic("m", assignments=[
        ReplicaAssignment(0, (1, 2)), ReplicaAssignment(1, (1,))]))
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent "
        "with previous partitions, which have 2 replica(s).")


async def test_validate_only_writes_nothing(controller: Controller) -> None:
    seen = []
    controller.subscribe(seen.append)
    before = _log_size(controller)
    r = await _create_one(controller, CreatableTopic("v", 4, 1, configs={"retention.ms": "1"}), validate_only=True)
    assert (r.error_code, r.num_partitions, r.replication_factor) == (ErrorCode.NONE, 4, 1)
    assert _log_size(controller) == before
    assert controller.image.topics == {} and seen == []
    assert (await _create_one(controller, CreatableTopic("v"))).error_code == ErrorCode.NONE
    (p,) = await controller.create_partitions([CreatePartitionsTopic("v", 10)], validate_only=True)
    assert p.error_code == ErrorCode.NONE and len(controller.image.topics["v"].partitions) == 3


async def test_one_bad_topic_does_not_block_the_others(controller: Controller) -> None:
    results = await controller.create_topics([CreatableTopic("good"), CreatableTopic("bad!"), CreatableTopic("also")])
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.NONE]
    assert set(controller.image.topics) == {"good", "also"}


async def test_delete_topics_by_name_and_id(controller: Controller) -> None:
    a, b = await controller.create_topics([CreatableTopic("a"), CreatableTopic("b")])
    seen = []
    controller.subscribe(seen.append)
    results = await controller.delete_topics(names=["a", "missing"], topic_ids=[b.topic_id, uuid.uuid4()])
    by = {(r.name, r.error_code) for r in results}
    assert ("a", ErrorCode.NONE) in by and ("b", ErrorCode.NONE) in by
    assert ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) in by
    assert (None, ErrorCode.UNKNOWN_TOPIC_ID) in by
    assert controller.image.topics == {} and controller.image.topics_by_id == {}
    assert set(seen[0].deleted_topics) == {"a", "b"}
    assert seen[0].deleted_topics["a"].topic_id == a.topic_id


async def test_delete_topics_request_errors(controller: Controller) -> None:
    (t,) = await controller.create_topics([CreatableTopic("t")])
    results = await controller.delete_topics(names=["t", "x", "x"], topic_ids=[t.topic_id, ZERO_UUID])
    msgs = {(r.name, r.error_code, r.error_message) for r in results}
    assert ("x", ErrorCode.INVALID_REQUEST, "Duplicate topic name.") in msgs
    assert (None, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.") in msgs
    assert ("t", ErrorCode.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied.") in msgs
    assert "t" in controller.image.topics  # nothing deleted


async def test_delete_disabled(tmp_path: Path, new_controller) -> None:
    c = new_controller(tmp_path, delete_topic_enable=False)
    await c.start(host="localhost", port=9092)
    await c.create_topics([CreatableTopic("t")])
    with pytest.raises(KafkaApiError) as e:
        await c.delete_topics(names=["t"])
    assert e.value.code == ErrorCode.TOPIC_DELETION_DISABLED
    assert "t" in c.image.topics
    await c.stop()


async def test_create_partitions(controller: Controller) -> None:
    await controller.create_topics([CreatableTopic("p", 2, 1)])
    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 5)])
    assert r.error_code == ErrorCode.NONE
    parts = controller.image.topics["p"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4] and parts[4].leader == 1 and parts[4].leader_epoch == 0

    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 5)])
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 5 partition(s).")
    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 3)])
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_PARTITIONS, "The topic p currently has 5 partition(s); 3 would not be an increase.")
    (r,) = await controller.create_partitions([CreatePartitionsTopic("nope", 3)])
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 7, assignments=[[1]])])
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 6, assignments=[[9]])])
    assert r.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    results = await controller.create_partitions([CreatePartitionsTopic("p", 9), CreatePartitionsTopic("p", 9)])
    assert [(r.error_code, r.error_message) for r in results] == [(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")]
    assert len(controller.image.topics["p"].partitions) == 5
    (r,) = await controller.create_partitions([CreatePartitionsTopic("p", 6, assignments=[[1]])])
    assert r.error_code == ErrorCode.NONE and len(controller.image.topics["p"].partitions) == 6


async def test_internal_topic(controller: Controller) -> None:
    r = await controller.create_internal_topic("__consumer_offsets", 5, 1, {"cleanup.policy": "compact"})
    assert r.error_code == ErrorCode.NONE
    t = controller.image.topics["__consumer_offsets"]
    assert t.is_internal and len(t.partitions) == 5 and t.configs == {"cleanup.policy": "compact"}
    again = await controller.create_internal_topic("__consumer_offsets", 5, 1)
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
