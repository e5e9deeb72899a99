"""Server-side partition assignors for KIP-848 consumer groups: ``uniform`` and ``range``.

The group coordinator (not a client) computes each member's *target assignment* whenever the
group epoch moves. An assignor sees, per member, its instance id, the topic ids it subscribes to
and its current target assignment, plus each subscribed topic's partition count, and returns
every member's new target. Members with equal subscriptions make a *homogeneous* group.

``uniform`` (Kafka's UniformAssignor): balance first, then stickiness.
  - Homogeneous (Kafka's UniformHomogeneousAssignmentBuilder, same algorithm): every member may
    hold ``total // members`` partitions, the first ``total % members`` members (in member-id
    order) one more. Each member keeps its current partitions up to that quota; what exceeds it,
    what belongs to unsubscribed or vanished topics and what nobody holds is handed, in
    topic/partition order, to the members below quota.
  - Heterogeneous (our own algorithm with Kafka's goals, not its code): keep each member's
    partitions of topics it still subscribes to; give each free partition to the subscribed
    member with the fewest partitions; then move partitions from a member to a subscribed member
    holding at least two fewer until no such move exists. Sizes of members able to take each
    other's partitions thus differ by at most one.

``range`` (Kafka's RangeAssignor): members sorted (static members first by instance id, then
dynamic ones by member id); for each topic, member ``i`` of the ``n`` subscribers gets the ``i``-th
contiguous range, the first ``partitions % n`` ranges one partition longer. Co-partitioned topics
(same partition count, same subscribers) therefore give each member the same partition numbers
of every topic, which joins across topics rely on. Not sticky, as Kafka's.

Pure functions on plain data; any thread. ``PartitionAssignorError`` if a subscribed topic has no
partition count (the coordinator answers UNKNOWN_SERVER_ERROR, as Kafka).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, frozenset[int]]


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of one member."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    assignment: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    instance_id: str | None = None


def is_homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    subs = {m.subscribed_topic_ids for m in members.values()}
    return len(subs) <= 1


def _freeze(raw: dict[uuid.UUID, set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in raw.items() if ps}


def _count(members: Mapping[str, MemberSpec], partition_counts: Mapping[uuid.UUID, int],
           topic_id: uuid.UUID) -> int:
    n = partition_counts.get(topic_id, -1)
    if n < 0:
        raise PartitionAssignorError(f"members are subscribed to topic {topic_id} which has no metadata")
    return n


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec],
               partition_counts: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        if is_homogeneous(members):
            return self._homogeneous(members, partition_counts)
        return self._heterogeneous(members, partition_counts)

    @staticmethod
    def _homogeneous(members: Mapping[str, MemberSpec],
                     partition_counts: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        member_ids = sorted(members)
        topics = sorted(next(iter(members.values())).subscribed_topic_ids)
        if not topics:
            return {m: {} for m in member_ids}
        held: set[tuple[uuid.UUID, int]] = set()
        for spec in members.values():
            for t, ps in spec.assignment.items():
                held.update((t, p) for p in ps)
        unassigned: list[tuple[uuid.UUID, int]] = []
        total = 0
        for t in topics:
            n = _count(members, partition_counts, t)
            unassigned.extend((t, p) for p in range(n) if (t, p) not in held)
            total += n
        min_quota, extra = divmod(total, len(member_ids))
        result: dict[str, dict[uuid.UUID, set[int]]] = {}
        unfilled: list[tuple[str, int]] = []
        for member_id in member_ids:
            quota = min_quota
            if extra > 0:
                quota += 1
                extra -= 1
            kept: dict[uuid.UUID, set[int]] = {}
            for t, ps in sorted(members[member_id].assignment.items()):
                if t not in partition_counts or t not in members[member_id].subscribed_topic_ids:
                    continue  # unsubscribed or vanished topic: dropped
                n = partition_counts[t]
                for p in sorted(ps):
                    if p >= n:
                        continue
                    if quota > 0:
                        kept.setdefault(t, set()).add(p)
                        quota -= 1
                    else:
                        unassigned.append((t, p))
            if quota > 0:
                unfilled.append((member_id, quota))
            result[member_id] = kept
        i = 0
        for member_id, quota in unfilled:
            target = result[member_id]
            while quota > 0 and i < len(unassigned):
                t, p = unassigned[i]
                target.setdefault(t, set()).add(p)
                quota -= 1
                i += 1
        if i < len(unassigned):
            raise PartitionAssignorError("partitions were left unassigned")
        return {m: _freeze(a) for m, a in result.items()}

    @staticmethod
    def _heterogeneous(members: Mapping[str, MemberSpec],
                       partition_counts: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        member_ids = sorted(members)
        subscribers: dict[uuid.UUID, list[str]] = {}
        for m in member_ids:
            for t in members[m].subscribed_topic_ids:
                _count(members, partition_counts, t)
                subscribers.setdefault(t, []).append(m)
        owner: dict[tuple[uuid.UUID, int], str] = {}
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in member_ids}
        size = dict.fromkeys(member_ids, 0)
        # 1. Stickiness: keep what is still subscribed and still exists (first claimant wins).
        for m in member_ids:
            spec = members[m]
            for t, ps in sorted(spec.assignment.items()):
                if t not in spec.subscribed_topic_ids:
                    continue
                for p in sorted(ps):
                    if p < partition_counts[t] and (t, p) not in owner:
                        owner[(t, p)] = m
                        result[m].setdefault(t, set()).add(p)
                        size[m] += 1
        # 2. Free partitions, topics with the fewest subscribers first (they have the fewest takers).
        for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
            for p in range(partition_counts[t]):
                if (t, p) in owner:
                    continue
                m = min(subscribers[t], key=lambda x: (size[x], x))
                owner[(t, p)] = m
                result[m].setdefault(t, set()).add(p)
                size[m] += 1
        # 3. Balance: move one partition at a time from a fuller member to a subscriber holding
        # at least two fewer; each move lowers the sum of squared sizes, so this terminates.
        moved = True
        while moved:
            moved = False
            for src in sorted(member_ids, key=lambda x: (-size[x], x)):
                for t in sorted(result[src]):
                    takers = [m for m in subscribers[t] if size[m] + 1 < size[src]]
                    if not takers or not result[src].get(t):
                        continue
                    dst = min(takers, key=lambda x: (size[x], x))
                    p = max(result[src][t])
                    result[src][t].discard(p)
                    result[dst].setdefault(t, set()).add(p)
                    size[src] -= 1
                    size[dst] += 1
                    moved = True
                    break
                if moved:
                    break
        return {m: _freeze(a) for m, a in result.items()}


class RangeAssignor:
    name = "range"

    def assign(self, members: Mapping[str, MemberSpec],
               partition_counts: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        # Static members first, by instance id; then dynamic members by member id (Kafka's order).
        ordered = sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))
        subscribers: dict[uuid.UUID, list[str]] = {}
        for m in ordered:
            for t in members[m].subscribed_topic_ids:
                _count(members, partition_counts, t)
                subscribers.setdefault(t, []).append(m)
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in ordered}
        for t, subs in subscribers.items():
            n = partition_counts[t]
            quota, extra = divmod(n, len(subs))
            start = 0
            for i, m in enumerate(subs):
                end = min(start + quota + (1 if i < extra else 0), n)
                if start < end:
                    result[m][t] = set(range(start, end))
                start = end
        return {m: _freeze(a) for m, a in result.items()}


ASSIGNORS: dict[str, type] = {UniformAssignor.name: UniformAssignor, RangeAssignor.name: RangeAssignor}

# Kafka's group.consumer.assignors default lists class names; both spellings name the same assignor.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignors_from_config(names: list[str]) -> dict[str, UniformAssignor | RangeAssignor]:
    """group.consumer.assignors → name -> assignor, in order (the first is the default).

    Unknown names raise ValueError: a broker configured with an assignor it cannot run must not start.
    """
    out: dict[str, UniformAssignor | RangeAssignor] = {}
    for raw in names:
        name = _CLASS_NAMES.get(raw.strip(), raw.strip())
        if name not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {raw!r}; known: uniform, range")
        out.setdefault(name, ASSIGNORS[name]())
    if not out:
        raise ValueError("group.consumer.assignors is empty")
    return out
