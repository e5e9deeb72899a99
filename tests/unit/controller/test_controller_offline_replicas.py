"""Replicas in failed log dirs (KIP-858's directory failure, reported with a broker's registration):
``Controller.set_offline_replicas`` marks them offline, takes them out of ISRs and leaderships, and
brings them back when their broker no longer reports them. The registration value carries them."""

from __future__ import annotations

import json
import uuid

from odradek.broker.cluster.registration import decode_registration, encode_registration
from odradek.broker.metadata.broker_registration import BrokerEndpoint
from odradek.controller import Controller, CreatableTopic
from odradek.controller.records import NO_LEADER, PartitionChangeRecord, record_from_dict, record_to_dict
from odradek.controller.requests import ReplicaAssignment
from odradek.protocol.errors import ErrorCode


async def _topic(controller: Controller, name: str, *assignments: tuple[int, ...]) -> uuid.UUID:
    await controller.register_broker(2, "h2", 9093)
    await controller.register_broker(3, "h3", 9094)
    (r,) = await controller.create_topics([CreatableTopic(
        name, assignments=[ReplicaAssignment(i, a) for i, a in enumerate(assignments)])])
    assert r.error_code == ErrorCode.NONE, r
    return controller.image.topics[name].topic_id


async def test_an_offline_replica_leaves_the_isr_and_its_leadership_and_comes_back(controller: Controller) -> None:
    tid = await _topic(controller, "t", (1, 2, 3), (2, 3, 1))
    await controller.set_offline_replicas(1, {(tid, 0), (tid, 1)})
    p0, p1 = (controller.image.topics["t"].partitions[i] for i in (0, 1))
    # It led t-0: the next ISR member leads, in a new epoch; as a follower of t-1 it just leaves the ISR.
    assert (p0.leader, p0.leader_epoch, p0.isr, p0.offline_replicas) == (2, 1, (2, 3), (1,))
    assert (p1.leader, p1.leader_epoch, p1.isr, p1.offline_replicas) == (2, 0, (2, 3), (1,))
    # The same report again changes nothing.
    epoch = p0.partition_epoch
    await controller.set_offline_replicas(1, {(tid, 0), (tid, 1)})
    assert controller.image.topics["t"].partitions[0].partition_epoch == epoch
    # An offline replica never leads, even when everyone else goes: the partition has no leader.
    await controller.fence_broker(2)
    await controller.fence_broker(3)
    p0 = controller.image.topics["t"].partitions[0]
    assert p0.leader == NO_LEADER and p0.isr == (3,)
    # Reported healthy again (its broker restarted with the dir fixed): online, no ISR change.
    await controller.unfence_broker(3)
    await controller.set_offline_replicas(1, {(tid, 1)})
    p0, p1 = (controller.image.topics["t"].partitions[i] for i in (0, 1))
    assert p0.offline_replicas == () and p0.leader == 3 and p0.isr == (3,)
    assert p1.offline_replicas == (1,)


async def test_the_last_isr_member_offline_keeps_the_isr_and_leaves_the_partition_leaderless(
        controller: Controller) -> None:
    tid = await _topic(controller, "t", (3, 1, 2))
    await controller.fence_broker(1)
    await controller.fence_broker(2)
    assert controller.image.topics["t"].partitions[0].isr == (3,)
    await controller.set_offline_replicas(3, {(tid, 0)})
    p = controller.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.offline_replicas) == (NO_LEADER, (3,), (3,))  # no data lost by shrinking
    await controller.set_offline_replicas(3, set())
    p = controller.image.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.offline_replicas) == (3, (3,), ())


def test_offline_replicas_survive_the_record_and_registration_encodings() -> None:
    tid = uuid.uuid4()
    record = PartitionChangeRecord(0, tid, offline_replicas=(3,))
    assert record_from_dict(json.loads(json.dumps(record_to_dict(record)))) == record
    older = {"type": "PartitionChangeRecord", "partition_id": 0, "topic_id": tid.hex}
    assert record_from_dict(older) == PartitionChangeRecord(0, tid, offline_replicas=None)  # unchanged
    endpoint = BrokerEndpoint("h", 9092, "PLAINTEXT", None, (("PLAINTEXT", "h", 9092),))
    value = encode_registration(2, endpoint, uuid.uuid4(), [(tid, 1), (tid, 0)])
    assert decode_registration(value)["offline_replicas"] == {(tid, 0), (tid, 1)}
    old = json.loads(encode_registration(2, endpoint, uuid.uuid4()))
    del old["offline_replicas"]  # a broker of the version before
    assert decode_registration(json.dumps(old).encode())["offline_replicas"] == frozenset()


async def test_an_offline_replica_is_not_taken_back_into_the_isr(controller: Controller) -> None:
    """Kafka's ineligibleReplicasForIsr: a leader's AlterPartition naming a replica its broker
    reported in a failed log dir is refused with INELIGIBLE_REPLICA."""
    tid = await _topic(controller, "o", (2, 1, 3))
    await controller.set_offline_replicas(3, {(tid, 0)})
    p = controller.image.topics["o"].partitions[0]
    assert (p.leader, p.isr) == (2, (2, 1))
    refused = await controller.alter_partition(tid, 0, 2, p.leader_epoch, p.partition_epoch, [2, 1, 3])
    assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA
    await controller.set_offline_replicas(3, set())  # its dir is back
    p = controller.image.topics["o"].partitions[0]
    accepted = await controller.alter_partition(tid, 0, 2, p.leader_epoch, p.partition_epoch, [2, 1, 3])
    assert (accepted.error_code, accepted.isr) == (ErrorCode.NONE, (2, 1, 3))
