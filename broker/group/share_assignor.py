"""The share-group assignor ``simple`` (Kafka 4.4's SimpleAssignor): which members of a share group
fetch from which partitions.

A share group's members do not own partitions: several members may fetch from one partition and
the share-partition on its leader hands each record to one of them (broker/share/). The assignor
only spreads the fetching. Kafka's rules, which this module keeps (our code, Kafka's goals):

- Sharing: every subscribed partition is assigned to ``ceil(members / partitions)`` members (its
  *desired sharing*), so with more members than partitions each partition has several fetchers
  and with fewer every partition still has one.
- Balance first: member ``i`` (of ``m``, in member-id order) may hold
  ``ceil(p * (i + 1)) - ceil(p * i)`` assignments, ``p = sharing * partitions / m``, so counts
  differ by at most one.
- Stickiness second: a member keeps what it held, within its quota and the partition's sharing,
  before anything new is handed out.
- Heterogeneous groups (members subscribe to different topics): each topic is spread over its own
  subscribers by the same rules.

Pure functions on plain data; any thread.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

NAME = "simple"

Assignment = dict[uuid.UUID, frozenset[int]]


def assign(subscriptions: Mapping[str, frozenset[uuid.UUID]], partition_counts: Mapping[uuid.UUID, int],
           current: Mapping[str, Mapping[uuid.UUID, frozenset[int]]]) -> dict[str, Assignment]:
    """Each member's target assignment; ``partition_counts`` names every subscribed topic that
    exists (others are left out), ``current`` the members' present assignments."""
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    if len({subs for subs in subscriptions.values()}) <= 1:
        groups = [(sorted(subscriptions), sorted(t for t in next(iter(subscriptions.values()), frozenset())
                                                 if t in partition_counts))]
    else:
        groups = []
        for topic in sorted(partition_counts):
            members = sorted(m for m, subs in subscriptions.items() if topic in subs)
            if members:
                groups.append((members, [topic]))
    for members, topics in groups:
        partitions = [(t, p) for t in topics for p in range(partition_counts[t])]
        for member, tps in _spread(members, partitions, current).items():
            for t, p in tps:
                result[member].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in result.items()}


def _spread(members: list[str], partitions: list[tuple[uuid.UUID, int]],
            current: Mapping[str, Mapping[uuid.UUID, frozenset[int]]]) -> dict[str, list[tuple[uuid.UUID, int]]]:
    out: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    if not members or not partitions:
        return out
    sharing = -(-len(members) // len(partitions))
    precise = sharing * len(partitions) / len(members)
    quota = {m: math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i, m in enumerate(members)}
    holders: dict[tuple[uuid.UUID, int], set[str]] = {tp: set() for tp in partitions}
    # Stickiness: what each member held, while its quota and the partition's sharing allow.
    for m in members:
        for t, ps in sorted(current.get(m, {}).items()):
            for p in sorted(ps):
                tp = (t, p)
                if tp in holders and len(out[m]) < quota[m] and len(holders[tp]) < sharing:
                    holders[tp].add(m)
                    out[m].append(tp)
    # Then every partition short of its sharing goes to the member furthest below its quota that
    # does not hold it yet (ties: member-id order).
    for tp in partitions:
        while len(holders[tp]) < sharing:
            candidates = [m for m in members if m not in holders[tp] and len(out[m]) < quota[m]]
            if not candidates:
                candidates = [m for m in members if m not in holders[tp]]
                if not candidates:
                    break
            chosen = min(candidates, key=lambda m: (len(out[m]) - quota[m], members.index(m)))
            holders[tp].add(chosen)
            out[chosen].append(tp)
    return out
