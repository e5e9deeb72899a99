"""Partition reassignment (KIP-455, as KRaft's ReplicationControlManager runs it): the records.

Pure functions over the image; the ``Controller`` validates, calls them under its write lock and
commits what they return.

A reassignment to ``target`` replicas goes through three stages:
1. One PartitionChangeRecord sets ``replicas`` to target + the current replicas not in the target
   (``removing``), with ``adding`` = target - current. The new replicas start following.
2. The leader's AlterPartition requests grow the ISR as the new replicas catch up.
3. When the ISR (without the removing replicas, and never empty) holds every target replica, one
   record completes it: replicas become the target, the removed ones leave the ISR, adding/removing
   are cleared, and the leader moves (first live ISR member in target order) if it was removed.
Stages 1-3 collapse into one record when the ISR already qualifies (e.g. a reorder or a shrink).

Cancelling (null target replicas) reverts to the original replicas: the adding replicas leave the
replica list and the ISR; if that would empty the ISR, every original replica goes back in it, which
is an unclean step allowed only with ``unclean.leader.election.enable`` (Kafka's
PartitionReassignmentRevert).
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.controller.elections import clean_leader, unclean_allowed, unclean_leader
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.controller.records import NO_LEADER, PartitionChangeRecord
from odradek.controller.requests import OngoingReassignment
from odradek.protocol.errors import ErrorCode

NO_REASSIGNMENT_IN_PROGRESS_MESSAGE = "No partition reassignment is in progress."


class ReassignmentError(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _leader_for(image: MetadataImage, p: PartitionState, replicas: Sequence[int], isr: Sequence[int],
                unclean: bool) -> int:
    """The current leader if it stays in ``isr``, else a new one from ``isr`` (unclean if allowed)."""
    if p.leader in isr:
        return p.leader
    leader = clean_leader(image, replicas, isr)
    if leader == NO_LEADER and unclean:
        leader = unclean_leader(image, replicas)
    return leader


def _change(p: PartitionState, topic: TopicImage, replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
            adding: tuple[int, ...], removing: tuple[int, ...]) -> PartitionChangeRecord | None:
    if (replicas, isr, leader, adding, removing) == (p.replicas, p.isr, p.leader, p.adding_replicas,
                                                     p.removing_replicas):
        return None
    return PartitionChangeRecord(
        p.partition, topic.topic_id,
        leader=leader,
        isr=None if isr == p.isr else isr,
        replicas=None if replicas == p.replicas else replicas,
        adding_replicas=None if adding == p.adding_replicas else adding,
        removing_replicas=None if removing == p.removing_replicas else removing,
    )


def _completed(replicas: tuple[int, ...], isr: tuple[int, ...], adding: tuple[int, ...],
               removing: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, isr) once the reassignment can complete with ``isr``; None while it cannot
    (Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment)."""
    if not adding and not removing:
        return None
    new_isr = tuple(b for b in isr if b not in removing)
    new_replicas = tuple(b for b in replicas if b not in removing)
    if not new_isr or not new_replicas:
        return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def check_replication_factor_unchanged(p: PartitionState, target: Sequence[int]) -> None:
    """AlterPartitionReassignments v1 with allow_replication_factor_change false: INVALID_REPLICATION_FACTOR
    when ``target`` has another size than the partition's replica set, which during a reassignment
    is its own target (the replicas without the removing ones), as Kafka's
    validatePartitionReplicationFactorUnchanged counts it."""
    current = len(set(p.replicas) - set(p.removing_replicas))
    if current != len(target):
        raise ReassignmentError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"The replication factor is changed from {current} to {len(target)}")


def start_or_change(image: MetadataImage, topic: TopicImage, p: PartitionState, target: tuple[int, ...],
                    default_unclean: bool) -> PartitionChangeRecord | None:
    """The record moving ``p`` towards ``target`` (already validated); None if nothing changes.

    The current replica list is the base, so changing an ongoing reassignment works from its
    merged list, as Kafka does.
    """
    current = p.replicas
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    replicas = tuple(target) + removing
    isr = p.isr
    done = _completed(replicas, isr, adding, removing)
    if done is not None:
        replicas, isr = done
        adding = removing = ()
    leader = _leader_for(image, p, replicas, isr, unclean_allowed(image, topic, default_unclean))
    return _change(p, topic, replicas, isr, leader, adding, removing)


def maybe_complete(image: MetadataImage, topic: TopicImage, p: PartitionState, isr: tuple[int, ...] | None,
                   default_unclean: bool) -> PartitionChangeRecord | None:
    """The record completing ``p``'s reassignment once its ISR (``isr``, or the image's) qualifies."""
    if not p.is_reassigning:
        return None
    isr = p.isr if isr is None else isr
    done = _completed(p.replicas, isr, p.adding_replicas, p.removing_replicas)
    if done is None:
        return None
    replicas, new_isr = done
    leader = _leader_for(image, p, replicas, new_isr, unclean_allowed(image, topic, default_unclean))
    return _change(p, topic, replicas, new_isr, leader, (), ())


def cancel(image: MetadataImage, topic: TopicImage, p: PartitionState, default_unclean: bool) -> PartitionChangeRecord:
    """The record reverting ``p`` to its original replicas; raises ReassignmentError if none is ongoing."""
    if not p.is_reassigning:
        raise ReassignmentError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE)
    adding = set(p.adding_replicas)
    replicas = tuple(b for b in p.replicas if b not in adding)
    isr = tuple(b for b in p.isr if b not in adding)
    unclean = unclean_allowed(image, topic, default_unclean)
    if not isr:
        if not unclean:
            raise ReassignmentError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unable to revert partition assignment for {topic.name}:{p.partition} "
                                    "because it would require an unclean leader election.")
        isr = replicas
    leader = _leader_for(image, p, replicas, isr, unclean)
    change = _change(p, topic, replicas, isr, leader, (), ())
    assert change is not None  # adding/removing were not empty
    return change


def ongoing(topic: TopicImage, p: PartitionState) -> OngoingReassignment | None:
    if not p.is_reassigning:
        return None
    return OngoingReassignment(topic.name, p.partition, p.replicas, p.adding_replicas, p.removing_replicas)
