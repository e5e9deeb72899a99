"""Replica placement for new partitions (CreateTopics, CreatePartitions): which brokers host each
replica, leader first. Kafka 4.4's KRaft placer, StripedReplicaPlacer, rule for rule.

Goals, most important first: a partition's replicas on as many racks as there are (distinct racks
whenever there are at least as many racks as replicas), replicas and leaders spread evenly over the
brokers, unfenced brokers before fenced ones. Constraints (placement fails otherwise): no broker twice
in a partition, an unfenced leader.

1. Racks. Brokers are grouped by ``broker.rack``. The brokers with no rack form one group of their own
   (Kafka's ``Optional.empty()``), which sorts before every named rack; ``""`` is a named rack. A mixed
   cluster is therefore placed as if "no rack" were one more rack. The racks are sorted by name (Java's
   String order: UTF-16 code units); each keeps its unfenced and its fenced brokers, each list sorted
   by id.
2. Turns. Every list (the racks, and each rack's two broker lists) hands out its members in turn from
   a random starting point, drawn once when the placement starts. Each partition is one round: it
   starts one rack further than the previous partition did, and every broker list starts one broker
   further and may hand each broker out once in that round.
3. One partition. The leader is the next unfenced broker of the starting rack, or of the first rack
   after it that has one left this round. The followers come from the racks in turn from the starting
   rack, one broker per rack per pass, the leader's rack left out of the first pass; within a rack the
   unfenced brokers come first and the fenced ones only when those are used up.
4. Reshuffle. After as many partitions as there are unfenced brokers (when more than one), the rack
   order and each rack's broker lists are shuffled and the rounds count from 0 again, so that long
   runs do not repeat the same replica sets. As in Kafka, a list whose round number is still 0 from
   before the shuffle is not reset (it may sit this round out).

Randomness. Every random draw is a ``java.util.Random`` draw (controller/java_random.py) made in
Kafka's order: the racks' lists get their starting points in Java HashMap order of the rack names, the
rack list last; shuffles take the rack list first, then each rack (fenced list, then unfenced) in that
HashMap order. The brokers are read in the order of Kafka's broker HashMap (by id, see
``_java_hash_map_order``), which only decides the HashMap order of rack names that share a bucket. So
for the same seed and brokers these placements are Kafka's (tests/unit/controller/
test_placement_kafka.py compares them with Kafka 4.4's class). The controller seeds it unpredictably,
as Kafka's ``new Random()``.

Which brokers: every registered broker, fenced or not (Kafka also leaves out brokers in controlled
shutdown and brokers whose log dirs are all cordoned; Odradek's image tracks neither).

Errors are Kafka's InvalidReplicationFactorException messages; the caller prefixes them with
"Unable to replicate the partition <rf> time(s): ".

Not thread-safe (the Random): one owner, the controller under its write lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from odradek.controller.java_hashing import hash_map_order, string_hash
from odradek.controller.java_random import JavaRandom


class PlacementError(ValueError):
    """Placement is impossible; ``str(e)`` is Kafka's message."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker new replicas may go to (Kafka's UsableBroker); ``rack`` None: no ``broker.rack``."""

    node_id: int
    rack: str | None
    fenced: bool


class StripedReplicaPlacer:
    """Places the partitions of one request at a time; keeps only its Random between requests."""

    def __init__(self, random: JavaRandom | None = None) -> None:
        self._random = random if random is not None else JavaRandom.unseeded()

    def place(self, num_partitions: int, replication_factor: int,
              brokers: Iterable[UsableBroker]) -> list[tuple[int, ...]]:
        """``num_partitions`` replica lists, leader first. ``brokers`` in registration order."""
        racks = _RackList(self._random, brokers)
        if replication_factor <= 0:
            raise PlacementError(
                f"Invalid replication factor {replication_factor}: the replication factor must be positive."
            )
        if racks.num_unfenced == 0:
            raise PlacementError("All brokers are currently fenced, or have all their log directories cordoned.")
        if replication_factor > racks.num_brokers:
            raise PlacementError(
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{racks.num_brokers} broker(s) are registered or some brokers have all their log directories "
                "cordoned."
            )
        return [racks.place(replication_factor) for _ in range(num_partitions)]


class _Turns:
    """Brokers handed out in turn, each at most once per round (Kafka's BrokerList)."""

    __slots__ = ("ids", "handed_out", "start", "round")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.handed_out = 0  # this round
        self.start = 0
        self.round = 0

    def initialize(self, random: JavaRandom) -> None:
        if self.ids:
            self.ids.sort()
            self.start = random.next_int(len(self.ids))

    def next(self, round_: int) -> int | None:
        """The next broker of ``round_``; None once every broker had its turn in it."""
        if not self.ids:
            return None
        if round_ != self.round:
            # A new round starts one broker further, so leaders and followers move on.
            self.round = round_
            self.handed_out = 0
            self.start = (self.start + 1) % len(self.ids)
        if self.handed_out >= len(self.ids):
            return None
        broker = self.ids[(self.start + self.handed_out) % len(self.ids)]
        self.handed_out += 1
        return broker


class _Rack:
    __slots__ = ("unfenced", "fenced")

    def __init__(self) -> None:
        self.unfenced = _Turns()
        self.fenced = _Turns()

    def next(self, round_: int) -> int | None:
        """Unfenced brokers first; a fenced one only when none is left this round."""
        broker = self.unfenced.next(round_)
        return broker if broker is not None else self.fenced.next(round_)


class _RackList:
    """One request's racks (Kafka's RackList): made afresh per request from the current brokers."""

    def __init__(self, random: JavaRandom, brokers: Iterable[UsableBroker]) -> None:
        self._random = random
        self._racks: dict[str | None, _Rack] = {}
        self.num_brokers = 0
        self.num_unfenced = 0
        for broker in _java_hash_map_order(list(brokers), lambda b: b.node_id):
            rack = self._racks.setdefault(broker.rack, _Rack())
            (rack.fenced if broker.fenced else rack.unfenced).ids.append(broker.node_id)
            self.num_brokers += 1
            self.num_unfenced += not broker.fenced
        # Kafka keeps the racks in a HashMap: its order is the order of the random draws.
        self._hash_order = [self._racks[name] for name in
                            _java_hash_map_order(list(self._racks), _optional_string_hash)]
        for rack in self._hash_order:
            rack.fenced.initialize(random)
            rack.unfenced.initialize(random)
        self._names: list[str | None] = sorted(self._racks, key=_optional_string_order)
        self._offset = random.next_int(len(self._names)) if self._names else 0
        self._round = 0

    def place(self, replication_factor: int) -> tuple[int, ...]:
        if self._round == self.num_unfenced and self.num_unfenced > 1:
            self._shuffle()
            self._round = 0
        count = len(self._names)
        if self._offset == count:
            self._offset = 0
        # The leader: the first unfenced broker from the starting rack on. A round always has one:
        # at least one unfenced list took part in a round after the last shuffle, so it starts anew.
        leader_index = self._offset
        while True:
            leader = self._racks[self._names[leader_index]].unfenced.next(self._round)
            if leader is not None:
                break
            leader_index = (leader_index + 1) % count
        replicas = [leader]
        index = self._offset
        skip: int | None = leader_index  # the leader's rack sits out the first pass only
        misses = 0
        while len(replicas) < replication_factor:
            broker = None
            if index == skip:
                skip = None
            else:
                broker = self._racks[self._names[index]].next(self._round)
            index = (index + 1) % count
            if broker is None:
                misses += 1
                if misses > 2 * count:
                    # Every list is spent for this round (Kafka would loop here for ever): refuse.
                    raise PlacementError(f"The target replication factor of {replication_factor} cannot be "
                                         f"reached because only {len(replicas)} broker(s) are usable.")
            else:
                misses = 0
                replicas.append(broker)
        self._round += 1
        self._offset += 1
        return tuple(replicas)

    def _shuffle(self) -> None:
        self._random.shuffle(self._names)
        for rack in self._hash_order:
            self._random.shuffle(rack.fenced.ids)
            self._random.shuffle(rack.unfenced.ids)


T = TypeVar("T")


def _optional_string_hash(name: str | None) -> int:
    """Optional<String>.hashCode: 0 when empty."""
    return 0 if name is None else string_hash(name)


def _optional_string_order(name: str | None) -> tuple[int, bytes]:
    """Kafka's OptionalStringComparator: empty first, then String.compareTo (UTF-16 code units)."""
    return (0, b"") if name is None else (1, name.encode("utf-16-be", "surrogatepass"))


def _java_hash_map_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """The iteration order of a java.util.HashMap made with the default capacity (16, doubled past
    3/4 full) into which ``items`` were put in this order (controller/java_hashing.py). Not
    reproduced: a map sized by earlier, since removed, entries."""
    capacity = 16
    while len(items) > capacity * 3 // 4:
        capacity *= 2
    return hash_map_order(items, hash_of, capacity)
