"""AlterPartition (KIP-497) on the controller: a leader's ISR change, and Kafka's refusals."""

from __future__ import annotations

import uuid

from odradek.controller import Controller, CreatableTopic, ReplicaAssignment
from odradek.controller.requests import AlterPartitionResult
from odradek.protocol.errors import ErrorCode, KafkaApiError


async def _partition(controller: Controller) -> tuple:
    await controller.register_broker(2, "h2", 9093)
    await controller.register_broker(3, "h3", 9094)
    (r,) = await controller.create_topics([CreatableTopic("r", assignments=[ReplicaAssignment(0, (1, 2, 3))])])
    assert r.error_code == 0
    topic = controller.image.topics["r"]
    return topic.topic_id, topic.partitions[0]


async def test_shrink_then_expand_bumps_the_partition_epoch(controller: Controller) -> None:
    topic_id, p = await _partition(controller)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 0, 0, (1, 2, 3))
    result = await controller.alter_partition(topic_id, 0, 1, 0, 0, [1, 2])
    assert (result.error_code, result.leader_id, result.leader_epoch, result.partition_epoch, result.isr) == (
        ErrorCode.NONE, 1, 0, 1, (1, 2))
    assert controller.image.topics["r"].partitions[0].isr == (1, 2)
    # A stale request (the old partition epoch) is refused.
    stale = await controller.alter_partition(topic_id, 0, 1, 0, 0, [1, 2, 3])
    assert stale.error_code == ErrorCode.INVALID_UPDATE_VERSION
    expanded = await controller.alter_partition(topic_id, 0, 1, 0, 1, [1, 2, 3])
    assert (expanded.error_code, expanded.partition_epoch, expanded.isr) == (ErrorCode.NONE, 2, (1, 2, 3))
    # No change: no record, the current state.
    same = await controller.alter_partition(topic_id, 0, 1, 0, 2, [1, 2, 3])
    assert (same.error_code, same.partition_epoch) == (ErrorCode.NONE, 2)


async def test_refusals_in_kafkas_order(controller: Controller) -> None:
    topic_id, _ = await _partition(controller)

    def code(result: AlterPartitionResult) -> int:
        return result.error_code

    assert code(await controller.alter_partition(uuid.uuid4(), 0, 1, 0, 0, [1])) == ErrorCode.UNKNOWN_TOPIC_ID
    assert code(await controller.alter_partition(topic_id, 7, 1, 0, 0, [1])) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert code(await controller.alter_partition(topic_id, 0, 1, 1, 0, [1])) == ErrorCode.NOT_CONTROLLER
    assert code(await controller.alter_partition(topic_id, 0, 2, 0, 0, [1, 2])) == ErrorCode.INVALID_REQUEST
    assert code(await controller.alter_partition(topic_id, 0, 1, 0, 0, [2, 3])) == ErrorCode.INVALID_REQUEST
    assert code(await controller.alter_partition(topic_id, 0, 1, 0, 0, [1, 4])) == ErrorCode.INVALID_REQUEST
    assert code(await controller.alter_partition(topic_id, 0, 1, 0, 0, [1, 1])) == ErrorCode.INVALID_REQUEST
    await controller.fence_broker(3)  # leaves the ISR: partition epoch 1
    p = controller.image.topics["r"].partitions[0]
    assert p.isr == (1, 2) and p.partition_epoch == 1
    assert code(await controller.alter_partition(topic_id, 0, 1, 0, 1, [1, 2, 3])) == ErrorCode.INELIGIBLE_REPLICA
    await controller.fence_broker(1)  # the leader moves to 2: epoch 1
    assert code(await controller.alter_partition(topic_id, 0, 1, 0, 2, [1, 2])) == ErrorCode.FENCED_LEADER_EPOCH


async def test_a_controller_that_is_not_active_refuses(controller: Controller) -> None:
    topic_id, _ = await _partition(controller)
    await controller.stop()
    try:
        await controller.alter_partition(topic_id, 0, 1, 0, 0, [1])
    except KafkaApiError as exc:
        assert exc.code == ErrorCode.NOT_CONTROLLER
    else:
        raise AssertionError("a stopped controller answered")


async def test_a_member_given_with_a_stale_broker_epoch_is_ineligible(controller: Controller) -> None:
    """KIP-903: the leader names the broker epoch each member fetched with; a member that has
    registered again since (a restart, its log possibly lost) is refused."""
    topic_id, _ = await _partition(controller)
    shrunk = await controller.alter_partition(topic_id, 0, 1, 0, 0, [1, 2])
    assert shrunk.error_code == ErrorCode.NONE
    old_epoch = controller.image.brokers[3].broker_epoch
    new_epoch = await controller.register_broker(3, "h3", 9094)  # broker 3 restarted
    assert new_epoch != old_epoch
    leader_epoch = controller.image.brokers[1].broker_epoch
    stale = await controller.alter_partition(topic_id, 0, 1, 0, 1, [1, 2, 3], {1: leader_epoch, 3: old_epoch})
    assert stale.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert controller.image.topics["r"].partitions[0].isr == (1, 2)
    # The current epoch, or none given (-1, as before v3), is accepted.
    current = await controller.alter_partition(topic_id, 0, 1, 0, 1, [1, 2, 3], {1: leader_epoch, 3: new_epoch})
    assert (current.error_code, current.isr) == (ErrorCode.NONE, (1, 2, 3))
    unchecked = await controller.alter_partition(topic_id, 0, 1, 0, 2, [1, 3], {2: -1})
    assert (unchecked.error_code, unchecked.isr) == (ErrorCode.NONE, (1, 3))
