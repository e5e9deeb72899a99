"""Elections on one process: preferred and unclean ElectLeaders, unclean failover, auto rebalance,
controlled shutdown. Extra brokers are registered records (no processes), as in Kafka's controller
tests; liveness is the fenced flag."""

from __future__ import annotations

import pytest

from odradek.controller import ConfigResourceType, Controller, CreatableTopic
from odradek.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ElectionType,
    ReplicaAssignment,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError

PREFERRED = ElectionType.PREFERRED
UNCLEAN = ElectionType.UNCLEAN


async def _three_brokers(controller: Controller) -> None:
    await controller.register_broker(2, "h2", 9093)
    await controller.register_broker(3, "h3", 9094)


async def _topic(controller: Controller, name: str, *assignments: tuple[int, ...],
                 configs: dict[str, str | None] | None = None) -> None:
    (r,) = await controller.create_topics([CreatableTopic(
        name, assignments=[ReplicaAssignment(i, a) for i, a in enumerate(assignments)], configs=configs or {})])
    assert r.error_code == ErrorCode.NONE, r


async def test_preferred_election(controller: Controller) -> None:
    await _three_brokers(controller)
    await _topic(controller, "p", (2, 1, 3))
    results = await controller.elect_leaders(PREFERRED, [("p", 0), ("p", 7), ("nope", 0)])
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as p-7"),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope"),
    ]
    await controller.fence_broker(2)
    p = controller.image.topics["p"].partitions[0]
    assert p.leader == 1 and p.isr == (1, 3) and p.leader_epoch == 1
    (r,) = await controller.elect_leaders(PREFERRED, [("p", 0)])
    assert (r.error_code, r.error_message) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                               "The preferred leader was not available.")
    # Back, but not in the ISR yet: still not available; once in the ISR it takes over.
    await controller.unfence_broker(2)
    (r,) = await controller.elect_leaders(PREFERRED, [("p", 0)])
    assert r.error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    await controller._commit([_isr_change(controller, "p", 0, (1, 3, 2))])
    (r,) = await controller.elect_leaders(PREFERRED, [("p", 0)])
    assert r.error_code == ErrorCode.NONE and r.error_message is None
    p = controller.image.topics["p"].partitions[0]
    assert p.leader == 2 and p.leader_epoch == 2
    # Every partition (None): partitions needing nothing are left out of the answer.
    assert await controller.elect_leaders(PREFERRED, None) == []


def _isr_change(controller: Controller, topic: str, partition: int, isr: tuple[int, ...]):
    from odradek.controller.records import PartitionChangeRecord

    return PartitionChangeRecord(partition, controller.image.topics[topic].topic_id, isr=isr)


async def test_unclean_election_on_request(controller: Controller) -> None:
    await _three_brokers(controller)
    await _topic(controller, "u", (2, 3))
    await controller._commit([_isr_change(controller, "u", 0, (2,))])
    await controller.fence_broker(2)  # last ISR member: stays in the ISR, partition offline
    p = controller.image.topics["u"].partitions[0]
    assert p.leader == -1 and p.isr == (2,)
    (r,) = await controller.elect_leaders(PREFERRED, [("u", 0)])
    assert r.error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    (r,) = await controller.elect_leaders(UNCLEAN, [("u", 0)])
    assert r.error_code == ErrorCode.NONE
    p = controller.image.topics["u"].partitions[0]
    assert p.leader == 3 and p.isr == (3,) and p.leader_epoch == 2
    (r,) = await controller.elect_leaders(UNCLEAN, [("u", 0)])
    assert r.error_code == ErrorCode.ELECTION_NOT_NEEDED
    with pytest.raises(KafkaApiError) as e:
        await controller.elect_leaders(5, [("u", 0)])
    assert e.value.code == ErrorCode.INVALID_REQUEST


async def test_failover_is_unclean_only_when_enabled(controller: Controller,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    await _three_brokers(controller)
    await _topic(controller, "clean", (2, 3))
    await _topic(controller, "dirty", (2, 3), configs={"unclean.leader.election.enable": "true"})
    for t in ("clean", "dirty"):
        await controller._commit([_isr_change(controller, t, 0, (2,))])
    with caplog.at_level("WARNING", logger="odradek.controller.elections"):
        await controller.fence_broker(2)
    assert controller.image.topics["clean"].partitions[0].leader == -1
    dirty = controller.image.topics["dirty"].partitions[0]
    assert dirty.leader == 3 and dirty.isr == (3,)
    # The possible loss is logged, for the unclean topic only (Kafka's controller says so too).
    assert [r.getMessage() for r in caplog.records] == [
        "Unclean leader election for dirty-0: no ISR member of [2] is live; electing out-of-sync replica 3 "
        "(records it lacks are lost)"]
    # The cluster-wide dynamic default turns it on for every topic without an override.
    await controller.unfence_broker(2)
    await controller.incremental_alter_configs([AlterConfigsResource(
        ConfigResourceType.BROKER, "", [AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, "true")])])
    await _topic(controller, "later", (2, 3))
    await controller._commit([_isr_change(controller, "later", 0, (2,))])
    await controller.fence_broker(2)
    later = controller.image.topics["later"].partitions[0]
    assert later.leader == 3 and later.isr == (3,)


async def test_auto_rebalance(controller: Controller) -> None:
    await _three_brokers(controller)
    await _topic(controller, "b", (2, 1), (2, 3), (1, 2))
    await controller.fence_broker(2)
    await controller.unfence_broker(2)
    for i in (0, 1):
        p = controller.image.topics["b"].partitions[i]
        await controller._commit([_isr_change(controller, "b", i, p.isr + (2,))])
    assert [controller.image.topics["b"].partitions[i].leader for i in range(3)] == [1, 3, 1]
    assert controller.leader_imbalance_check_interval_s() == 300
    controller.auto_leader_rebalance_enable = False
    assert await controller.rebalance_leaders() == [] and controller.leader_imbalance_check_interval_s() == 0
    controller.auto_leader_rebalance_enable = True
    results = await controller.rebalance_leaders()
    assert sorted((r.partition, r.error_code) for r in results) == [(0, ErrorCode.NONE), (1, ErrorCode.NONE)]
    assert [controller.image.topics["b"].partitions[i].leader for i in range(3)] == [2, 2, 1]
    assert await controller.rebalance_leaders() == []


async def test_rebalance_respects_the_threshold(controller: Controller) -> None:
    await _three_brokers(controller)
    await _topic(controller, "t", *[(2, 1)] * 10)
    from odradek.controller.records import PartitionChangeRecord

    # 2 should lead 10 partitions and leads 9: an imbalance of 10 %, not over the default 10 %.
    await controller._commit([PartitionChangeRecord(0, controller.image.topics["t"].topic_id, leader=1)])
    assert await controller.rebalance_leaders() == []
    controller.leader_imbalance_per_broker_percentage = 5
    (r,) = await controller.rebalance_leaders()
    assert (r.topic, r.partition, r.error_code) == ("t", 0, ErrorCode.NONE)


async def test_controlled_shutdown(controller: Controller) -> None:
    await _three_brokers(controller)
    await _topic(controller, "s", (2, 1, 3))
    await _topic(controller, "s2", (3, 2))
    await _topic(controller, "s3", (2,))
    epoch = controller.image.brokers[2].broker_epoch
    with pytest.raises(KafkaApiError) as e:
        await controller.controlled_shutdown(2, epoch + 1)
    assert e.value.code == ErrorCode.STALE_BROKER_EPOCH
    remaining = await controller.controlled_shutdown(2, epoch)
    assert remaining == [("s3", 0)]  # its only ISR member keeps it
    image = controller.image
    s, s2, s3 = (image.topics[t].partitions[0] for t in ("s", "s2", "s3"))
    assert (s.leader, s.isr, s.leader_epoch) == (1, (1, 3), 1)
    assert (s2.leader, s2.isr, s2.leader_epoch) == (3, (3,), 0)
    assert (s3.leader, s3.isr) == (2, (2,))
    # Idempotent: nothing left to move.
    assert await controller.controlled_shutdown(2, epoch) == [("s3", 0)]
    with pytest.raises(KafkaApiError) as e:
        await controller.controlled_shutdown(9, 0)
    assert e.value.code == ErrorCode.BROKER_ID_NOT_REGISTERED


async def test_unclean_setting_precedence(controller: Controller) -> None:
    """Topic override, then the controller node's dynamic config, then the cluster-wide dynamic
    default, then the static broker config."""
    from odradek.controller.elections import unclean_allowed, unclean_default

    await _topic(controller, "plain", (1,))
    await _topic(controller, "off", (1,), configs={"unclean.leader.election.enable": "false"})
    image = controller.image
    plain, off = image.topics["plain"], image.topics["off"]
    assert unclean_default(image, 1, static=True) is True
    assert unclean_allowed(image, off, unclean_default(image, 1, static=True)) is False

    async def set_unclean(resource: str, value: str) -> None:
        (r,) = await controller.incremental_alter_configs([AlterConfigsResource(
            ConfigResourceType.BROKER, resource,
            [AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, value)])])
        assert r.error_code == ErrorCode.NONE

    await set_unclean("", "true")
    assert unclean_allowed(image, plain, unclean_default(image, 1, static=False)) is True
    await set_unclean("1", "false")
    assert unclean_allowed(image, plain, unclean_default(image, 1, static=True)) is False
    assert unclean_default(image, 2, static=False) is True  # another controller node: the cluster default


async def test_rebalance_leaves_reassigning_partitions_alone(controller: Controller) -> None:
    from odradek.controller.requests import ReassignmentTarget

    await _three_brokers(controller)
    await _topic(controller, "m", (2, 1))
    await controller.fence_broker(2)
    await controller.unfence_broker(2)
    await controller._commit([_isr_change(controller, "m", 0, (1, 2))])
    (r,) = await controller.alter_partition_reassignments([ReassignmentTarget("m", 0, (2, 1, 3))])
    assert r.error_code == ErrorCode.NONE and controller.image.topics["m"].partitions[0].is_reassigning
    assert await controller.rebalance_leaders() == []


class _Snapshots:
    """A publisher that keeps, per publication, each broker's fenced flag and partition p-0's leader and ISR."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[int, bool], int, tuple[int, ...]]] = []

    def publish(self, image, delta) -> None:
        p = image.topics["p"].partitions[0]
        self.seen.append(({n: b.fenced for n, b in image.brokers.items()}, p.leader, p.isr))


async def test_a_fence_and_its_leader_moves_are_published_together(controller: Controller) -> None:
    """Kafka's controller writes a fencing and the partition changes it causes in one batch: no
    broker ever sees the broker fenced while it still leads (or is in the ISR of) a partition."""
    await _three_brokers(controller)
    await _topic(controller, "p", (2, 1, 3))
    snapshots = _Snapshots()
    controller.add_publisher(snapshots)
    snapshots.seen.clear()  # the image as it stood when the publisher was added
    await controller.fence_broker(2)
    assert snapshots.seen == [({1: False, 2: True, 3: False}, 1, (1, 3))]
    # Unfencing likewise elects, in the same publication, a leader for what had none.
    await controller.fence_broker(3)
    await controller.fence_broker(1)
    assert controller.image.topics["p"].partitions[0].leader == -1
    snapshots.seen.clear()
    await controller.unfence_broker(1)
    assert snapshots.seen == [({1: False, 2: True, 3: True}, 1, (1,))]
    # A broker registering again (a restart) likewise: live and leading in one publication.
    await controller.fence_broker(1)
    snapshots.seen.clear()
    await controller.register_broker(1, "h1", 9092)
    assert snapshots.seen == [({1: False, 2: True, 3: True}, 1, (1,))]
