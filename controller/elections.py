"""Leader election rules: which replica leads a partition, and the records that change it.

Pure functions over a ``MetadataImage``; the ``Controller`` calls them under its write lock and
commits the records they return. The rules are Kafka's (KRaft's PartitionChangeBuilder and
ReplicationControlManager):

- A replica is *live* when its broker is registered and not fenced.
- Clean election: the first replica, in assignment order, that is live and in the ISR.
- Unclean election (``unclean.leader.election.enable``, or ElectLeaders UNCLEAN): when no ISR member
  is live, the first live replica leads and the ISR becomes just that replica (data the old ISR had
  and it lacks is lost - the price of availability).
- Preferred election: ``replicas[0]`` leads if it is live and in the ISR.
- Automatic rebalance (``auto.leader.rebalance.enable``): per preferred leader, the share of its
  partitions led by another broker; over ``leader.imbalance.per.broker.percentage`` its partitions
  get preferred elections (Kafka's checkAndTriggerAutoLeaderRebalance).
- A replica in a failed log dir (its broker reports it, KIP-858) is offline: it leaves the ISR
  (never emptying it), never leads, and is online again when its broker no longer reports it.
- Controlled shutdown: every partition the broker leads moves to another live ISR member; the broker
  leaves every ISR it is in unless it is the last member; a partition with no other ISR member keeps
  it as leader and is reported back as remaining.

Every record changing a leader makes ``odradek.controller.image`` bump the leader epoch.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence, Set
from dataclasses import replace

from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.controller.records import NO_LEADER, PartitionChangeRecord
from odradek.controller.requests import ElectionResult, ElectionType
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"

# Kafka's default messages of the exceptions behind these codes (ApiError(Errors.X) carries them).
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE = "The preferred leader was not available."
ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE = "Eligible topic partition leaders are not available."


def is_live(image: MetadataImage, node_id: int) -> bool:
    broker = image.brokers.get(node_id)
    return broker is not None and not broker.fenced


def clean_leader(image: MetadataImage, replicas: Sequence[int], isr: Sequence[int]) -> int:
    """First replica (preferred order) that is in the ISR and live; NO_LEADER if none."""
    in_sync = set(isr)
    for replica in replicas:
        if replica in in_sync and is_live(image, replica):
            return replica
    return NO_LEADER


def unclean_leader(image: MetadataImage, replicas: Sequence[int]) -> int:
    """First live replica, in sync or not; NO_LEADER if none."""
    for replica in replicas:
        if is_live(image, replica):
            return replica
    return NO_LEADER


def unclean_default(image: MetadataImage, controller_node_id: int, static: bool) -> bool:
    """``unclean.leader.election.enable`` below topic level, as Kafka's controller reads it: the
    controller node's dynamic config, else the cluster-wide dynamic default, else its static config."""
    for resource in (str(controller_node_id), ""):
        raw = image.broker_configs.get(resource, {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if raw is not None:
            return _true(raw)
    return static


def unclean_allowed(image: MetadataImage, topic: TopicImage, default: bool) -> bool:
    """``unclean.leader.election.enable`` for ``topic``: its override, else ``default``
    (``unclean_default``)."""
    raw = topic.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
    return default if raw is None else _true(raw)


def _true(raw: str) -> bool:
    return raw.strip().lower() == "true"


def _elect(image: MetadataImage, topic: TopicImage, p: PartitionState, isr: tuple[int, ...],
           unclean: bool) -> PartitionChangeRecord | None:
    """The change making a live leader out of ``isr`` (unclean if allowed and needed); None if
    nothing changes."""
    # A replica in a failed log dir cannot serve, however live its broker (KIP-858).
    replicas = [r for r in p.replicas if r not in p.offline_replicas] if p.offline_replicas else p.replicas
    leader = clean_leader(image, replicas, isr)
    if leader == NO_LEADER and unclean:
        leader = unclean_leader(image, replicas)
        if leader != NO_LEADER:
            # Kafka's controller says so too: whatever the old ISR had beyond this replica's log is gone.
            log.warning("Unclean leader election for %s-%d: no ISR member of %s is live; electing "
                        "out-of-sync replica %d (records it lacks are lost)", topic.name, p.partition,
                        list(isr), leader)
            isr = (leader,)
    if leader == p.leader and isr == p.isr:
        return None
    return PartitionChangeRecord(p.partition, topic.topic_id, leader=leader,
                                 isr=None if isr == p.isr else isr)


def failover_records(image: MetadataImage, node_id: int, default_unclean: bool) -> list[PartitionChangeRecord]:
    """``node_id`` was just fenced: drop it from ISRs (never emptying one) and move its leaderships."""
    records: list[PartitionChangeRecord] = []
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if node_id != p.leader and node_id not in p.isr:
                continue
            # Kafka keeps the last ISR member even when it is fenced (no data loss by shrinking
            # below it); the leader then becomes NO_LEADER unless an unclean election may run.
            isr = tuple(b for b in p.isr if b != node_id) or p.isr
            change = _elect(image, topic, p, isr, unclean_allowed(image, topic, default_unclean))
            if change is not None:
                records.append(change)
    return records


def offline_replica_records(image: MetadataImage, node_id: int, offline: Set[tuple[uuid.UUID, int]],
                            default_unclean: bool) -> list[PartitionChangeRecord]:
    """Broker ``node_id`` holds the replicas ``offline`` ((topic id, partition)) in failed log dirs
    (KRaft's handleDirectoriesOffline): each one is marked offline, leaves the ISR (never emptying
    it) and loses its leadership to another ISR member; a replica of it marked offline but no longer
    reported (the broker restarted with the dir healthy) is online again, and leads a partition
    left without a leader if it may."""
    records: list[PartitionChangeRecord] = []
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if node_id not in p.replicas:
                continue
            now_offline = (topic.topic_id, p.partition) in offline
            if now_offline == (node_id in p.offline_replicas):
                continue
            unclean = unclean_allowed(image, topic, default_unclean)
            if now_offline:
                marked = replace(p, offline_replicas=(*p.offline_replicas, node_id))
                isr = tuple(b for b in p.isr if b != node_id) or p.isr
                change = _elect(image, topic, marked, isr, unclean)
            else:
                marked = replace(p, offline_replicas=tuple(r for r in p.offline_replicas if r != node_id))
                leaderless = p.leader == NO_LEADER or not is_live(image, p.leader)
                change = _elect(image, topic, marked, p.isr, unclean) if leaderless else None
            if change is None:
                change = PartitionChangeRecord(p.partition, topic.topic_id)
            records.append(replace(change, offline_replicas=marked.offline_replicas))
    return records


def offline_election_records(image: MetadataImage, partitions: Iterable[tuple[TopicImage, PartitionState]],
                             default_unclean: bool) -> list[PartitionChangeRecord]:
    """Leaders for partitions whose leader is missing or not live (after a broker (re)joins)."""
    records: list[PartitionChangeRecord] = []
    for topic, p in partitions:
        if p.leader != NO_LEADER and is_live(image, p.leader):
            continue
        change = _elect(image, topic, p, p.isr, unclean_allowed(image, topic, default_unclean))
        if change is not None and change.leader != p.leader:
            records.append(change)
    return records


def elect_leader(image: MetadataImage, topic_name: str, partition: int, election_type: int,
                 ) -> tuple[ElectionResult, PartitionChangeRecord | None]:
    """One partition of ElectLeaders (Kafka's ReplicationControlManager.electLeader)."""
    topic = image.topics.get(topic_name)
    if topic is None:
        return ElectionResult(topic_name, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"No such topic as {topic_name}"), None
    p = topic.partitions.get(partition)
    if p is None:
        return ElectionResult(topic_name, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"No such partition as {topic_name}-{partition}"), None
    if election_type == ElectionType.PREFERRED:
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if p.leader == preferred:
            return ElectionResult(topic_name, partition, ErrorCode.ELECTION_NOT_NEEDED,
                                  ELECTION_NOT_NEEDED_MESSAGE), None
        if preferred in p.isr and is_live(image, preferred):
            return ElectionResult(topic_name, partition), PartitionChangeRecord(partition, topic.topic_id,
                                                                                leader=preferred)
        return ElectionResult(topic_name, partition, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                              PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE), None
    # UNCLEAN: needed only when the partition has no leader (a fenced leader is replaced at once).
    if p.leader != NO_LEADER and is_live(image, p.leader):
        return ElectionResult(topic_name, partition, ErrorCode.ELECTION_NOT_NEEDED,
                              ELECTION_NOT_NEEDED_MESSAGE), None
    change = _elect(image, topic, p, p.isr, unclean=True)
    if change is None or change.leader == NO_LEADER:
        return ElectionResult(topic_name, partition, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                              ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE), None
    return ElectionResult(topic_name, partition), change


def imbalanced_partitions(image: MetadataImage, percentage: int) -> list[tuple[str, int]]:
    """Partitions to give back to their preferred leader (Kafka's auto leader rebalance check).

    Per live preferred leader: imbalance = partitions it should lead but does not / partitions it
    should lead. Over ``percentage`` %, each of its partitions not led by it, whose preferred
    leader is in the ISR and which is not being reassigned, is returned.
    """
    should_lead: dict[int, list[tuple[str, int, bool]]] = {}
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if not p.replicas:
                continue
            preferred = p.replicas[0]
            should_lead.setdefault(preferred, []).append((topic.name, p.partition, p.leader == preferred))
    out: list[tuple[str, int]] = []
    for broker, parts in sorted(should_lead.items()):
        if not is_live(image, broker):
            continue
        not_led = [(t, i) for t, i, led in parts if not led]
        if not not_led or len(not_led) * 100 <= percentage * len(parts):
            continue
        for t, i in not_led:
            state = image.topics[t].partitions[i]
            # A partition being reassigned is left alone: its completion may move the leader anyway.
            if broker in state.isr and not state.is_reassigning:
                out.append((t, i))
    return out


def controlled_shutdown_records(image: MetadataImage, node_id: int
                                ) -> tuple[list[PartitionChangeRecord], list[tuple[str, int]]]:
    """Records moving ``node_id`` out of leaderships and ISRs, and the partitions it keeps leading.

    The broker is treated as gone: a new leader is the first other live ISR member. Where it is the
    only ISR member it stays leader (and in the ISR): Kafka never shrinks an ISR to nothing, and a
    clean leader cannot be found.
    """
    records: list[PartitionChangeRecord] = []
    remaining: list[tuple[str, int]] = []
    for topic in image.topics.values():
        for p in topic.partitions.values():
            if node_id != p.leader and node_id not in p.isr:
                continue
            others = tuple(b for b in p.isr if b != node_id)
            if not others:
                if p.leader == node_id:
                    remaining.append((topic.name, p.partition))
                continue
            leader = p.leader
            if p.leader == node_id:
                leader = NO_LEADER
                for replica in p.replicas:
                    if replica in others and replica != node_id and is_live(image, replica):
                        leader = replica
                        break
                if leader == NO_LEADER:
                    # No other live ISR member: it keeps leading rather than take the partition offline.
                    remaining.append((topic.name, p.partition))
                    continue
            records.append(PartitionChangeRecord(p.partition, topic.topic_id, leader=leader, isr=others))
    return records, remaining
