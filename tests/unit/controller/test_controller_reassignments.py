"""Partition reassignment (KIP-455) on one process: start, complete on ISR growth, change, cancel,
errors, and the records' compatibility with logs written before the reassignment fields."""

from __future__ import annotations

import json

from odradek.controller import Controller, CreatableTopic
from odradek.controller.records import PartitionChangeRecord, record_from_dict, record_to_dict
from odradek.controller.requests import ReassignmentTarget, ReplicaAssignment
from odradek.protocol.errors import ErrorCode


async def _setup(controller: Controller, *replicas: int) -> None:
    await controller.register_broker(2, "h2", 9093)
    await controller.register_broker(3, "h3", 9094)
    (r,) = await controller.create_topics([CreatableTopic("r", assignments=[ReplicaAssignment(0, replicas)])])
    assert r.error_code == ErrorCode.NONE


def _part(controller: Controller):
    return controller.image.topics["r"].partitions[0]


async def _grow_isr(controller: Controller, isr: tuple[int, ...]) -> None:
    """What alter_partition does when a follower catches up: the ISR change, then the hook."""
    topic_id = controller.image.topics["r"].topic_id
    async with controller._write_lock:
        await controller._commit([PartitionChangeRecord(0, topic_id, isr=isr)])
        done = controller.replication.maybe_complete_reassignment(topic_id, 0)
        if done is not None:
            await controller._commit([done])


async def test_reassignment_completes_when_the_isr_catches_up(controller: Controller) -> None:
    await _setup(controller, 1, 2)
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, (3, 2))])
    assert r.error_code == ErrorCode.NONE and r.error_message is None
    p = _part(controller)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader) == ((3, 2, 1), (3,), (1,), (1, 2), 1)
    (ongoing,) = await controller.list_partition_reassignments()
    assert (ongoing.topic, ongoing.replicas, ongoing.adding_replicas, ongoing.removing_replicas) == \
        ("r", (3, 2, 1), (3,), (1,))
    assert await controller.list_partition_reassignments([("r", 0), ("r", 5), ("x", 0)]) == [ongoing]

    await _grow_isr(controller, (1, 2, 3))
    p = _part(controller)
    # Replicas become the target, the removed leader leaves the ISR and leadership moves.
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ((3, 2), (), (), (2, 3))
    assert p.leader == 3 and p.leader_epoch == 1
    assert await controller.list_partition_reassignments() == []


async def test_reorder_and_shrink_complete_at_once(controller: Controller) -> None:
    await _setup(controller, 1, 2)
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, (2, 1))])
    assert r.error_code == ErrorCode.NONE
    p = _part(controller)
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((2, 1), (1, 2), 1, False)
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, (2,))])
    p = _part(controller)
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((2,), (2,), 2, False)
    # The same assignment again: nothing to do, still success.
    epoch = p.partition_epoch
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, (2,))])
    assert r.error_code == ErrorCode.NONE and _part(controller).partition_epoch == epoch


async def test_cancel_reverts_and_errors(controller: Controller) -> None:
    await _setup(controller, 1)
    results = await controller.alter_partition_reassignments([
        ReassignmentTarget("r", 0, None),
        ReassignmentTarget("r", 9, (1,)),
        ReassignmentTarget("nope", 0, (1,)),
        ReassignmentTarget("r", 0, ()),
        ReassignmentTarget("r", 0, (1, 1)),
        ReassignmentTarget("r", 0, (7,)),
    ])
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition r:9."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 1 more than once."),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 7, but no such broker is registered."),
    ]
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, (2, 3))])
    p = _part(controller)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((2, 3, 1), (2, 3), (1,))
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("r", 0, None)])
    assert r.error_code == ErrorCode.NONE
    p = _part(controller)
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1,), (1,), 1, False)


async def test_reassignment_state_survives_replay(tmp_path, new_controller) -> None:
    c = new_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    await _setup(c, 1)
    await c.alter_partition_reassignments([ReassignmentTarget("r", 0, (2,))])
    before = _part(c)
    await c.stop()
    c2 = new_controller(tmp_path)
    await c2.start()
    assert _part(c2) == before and before.adding_replicas == (2,)
    await c2.stop()


def test_old_partition_change_records_still_read() -> None:
    record = PartitionChangeRecord(0, __import__("uuid").uuid4(), isr=(1,))
    data = record_to_dict(record)
    del data["adding_replicas"], data["removing_replicas"]  # as written before they existed
    back = record_from_dict(json.loads(json.dumps(data)))
    assert back == record and back.adding_replicas is None and back.removing_replicas is None
