"""Replica placement (controller/placement.py) by the rules of Kafka 4.4's StripedReplicaPlacer: its class
comment's goals and algorithm, its error messages (the strings in kafka-metadata-4.4.0.jar), and what
the controller does with it for CreateTopics and CreatePartitions. Exact placements for given seeds are
compared with Kafka's own class in test_placement_kafka.py; here the expectations are the rules, checked
over many seeds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

import pytest

from odradek.controller import CreatableTopic, CreatePartitionsTopic
from odradek.controller.java_random import JavaRandom
from odradek.controller.placement import PlacementError, StripedReplicaPlacer, UsableBroker
from odradek.protocol.errors import ErrorCode
from tests.unit.controller.conftest import make_controller

SEEDS = range(40)


def brokers(racks: dict[int, str | None], fenced: Collection[int] = ()) -> list[UsableBroker]:
    return [UsableBroker(node, rack, node in fenced) for node, rack in racks.items()]


def place(seed: int, partitions: int, rf: int, usable: list[UsableBroker]) -> list[tuple[int, ...]]:
    return StripedReplicaPlacer(JavaRandom(seed)).place(partitions, rf, usable)


# Six brokers, two per rack: the shape of the integration test's cluster.
SIX = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


@pytest.mark.parametrize("seed", SEEDS)
def test_replicas_of_a_partition_on_distinct_racks(seed: int) -> None:
    for rf in (1, 2, 3):
        for replicas in place(seed, 30, rf, brokers(SIX)):
            assert len({SIX[b] for b in replicas}) == rf, replicas


@pytest.mark.parametrize("seed", SEEDS)
def test_more_replicas_than_racks_cover_every_rack(seed: int) -> None:
    """RF above the rack count: every rack gets a replica, no broker twice (the rack goal first)."""
    for rf in (4, 5, 6):
        for replicas in place(seed, 30, rf, brokers(SIX)):
            assert len(set(replicas)) == rf and {SIX[b] for b in replicas} == {"a", "b", "c"}
            per_rack = Counter(SIX[b] for b in replicas)
            assert max(per_rack.values()) - min(per_rack.values()) <= 1, replicas


@pytest.mark.parametrize("seed", SEEDS)
def test_one_round_of_partitions_spreads_leaders_and_replicas_over_every_broker(seed: int) -> None:
    """As many partitions as unfenced brokers, RF = racks: each partition starts one rack further and
    every rack's list one broker further, so each broker leads one partition and holds RF replicas."""
    placed = place(seed, 6, 3, brokers(SIX))
    assert sorted(r[0] for r in placed) == [1, 2, 3, 4, 5, 6]
    assert Counter(b for r in placed for b in r) == {b: 3 for b in SIX}


@pytest.mark.parametrize("seed", SEEDS)
def test_leaders_spread_over_the_racks(seed: int) -> None:
    """Consecutive partitions start on consecutive racks (sorted by name), so with RF below the rack
    count the leaders still go round the racks evenly."""
    placed = place(seed, 6, 2, brokers(SIX))
    leader_racks = [SIX[r[0]] for r in placed]
    assert Counter(leader_racks) == {"a": 2, "b": 2, "c": 2}
    order = ["a", "b", "c"]
    first = order.index(leader_racks[0])
    assert leader_racks == [order[(first + p) % 3] for p in range(6)]


@pytest.mark.parametrize("seed", SEEDS)
def test_striped_rack_pattern(seed: int) -> None:
    """The class comment's example: racks A, B, C of three brokers each, RF 3: partition p's replicas
    come from the racks in sorted order starting one rack further than partition p - 1's."""
    racks = {n: "ABC"[(n - 1) // 3] for n in range(1, 10)}
    placed = place(seed, 9, 3, brokers(racks))
    first = "ABC".index(racks[placed[0][0]])
    for p, replicas in enumerate(placed):
        assert [racks[b] for b in replicas] == ["ABC"[(first + p + i) % 3] for i in range(3)], placed


@pytest.mark.parametrize("seed", SEEDS)
def test_brokers_without_a_rack_are_one_rack_of_their_own(seed: int) -> None:
    """Kafka's Optional.empty(): in a mixed cluster the brokers with no broker.rack are one more rack,
    so with two "racks" and RF 2 the lone broker of rack "a" is in every partition."""
    mixed = {1: None, 2: None, 3: None, 4: "a"}
    for replicas in place(seed, 12, 2, brokers(mixed)):
        assert 4 in replicas and len({mixed[b] for b in replicas}) == 2
    # No racks at all: one group, the brokers taken in turn.
    none = {1: None, 2: None, 3: None, 4: None}
    placed = place(seed, 4, 2, brokers(none))
    assert sorted(r[0] for r in placed) == [1, 2, 3, 4]


@pytest.mark.parametrize("seed", SEEDS)
def test_empty_rack_name_is_a_rack_apart_from_no_rack(seed: int) -> None:
    racks = {1: None, 2: None, 3: "", 4: ""}
    for replicas in place(seed, 8, 2, brokers(racks)):
        assert {racks[b] for b in replicas} == {None, ""}


@pytest.mark.parametrize("seed", SEEDS)
def test_no_rack_sorts_before_named_racks(seed: int) -> None:
    """Kafka's OptionalStringComparator: empty first, then String.compareTo, which compares UTF-16 code
    units: U+1F600 (D83D DE00) sorts before U+FF21, where Python's code point order has it after."""
    racks = {1: "\uff21", 2: "\U0001f600", 3: None, 4: "b"}
    order = [None, "b", "\U0001f600", "\uff21"]
    placed = place(seed, 4, 1, brokers(racks))
    first = order.index(racks[placed[0][0]])
    assert [racks[r[0]] for r in placed] == [order[(first + p) % 4] for p in range(4)]


@pytest.mark.parametrize("seed", SEEDS)
def test_fenced_brokers_only_when_needed_and_never_leaders(seed: int) -> None:
    racks = dict.fromkeys(range(1, 7))  # one rack (none): the fenced-last rule alone
    usable = brokers(racks, fenced={5, 6})
    for replicas in place(seed, 12, 4, usable):
        assert not {5, 6} & set(replicas)
    for rf, fenced_count in ((5, 1), (6, 2)):
        for replicas in place(seed, 12, rf, usable):
            assert replicas[0] not in {5, 6} and len({5, 6} & set(replicas)) == fenced_count, replicas


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fenced_leaderless_rack_still_gets_replicas(seed: int) -> None:
    """Rack goal before the fenced goal: rack "c" has only a fenced broker; RF 3 puts a replica there
    (never the leader) rather than a second one in "a" or "b"."""
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    for replicas in place(seed, 10, 3, brokers(racks, fenced={5})):
        assert replicas[0] != 5 and 5 in replicas and {racks[b] for b in replicas} == {"a", "b", "c"}


def test_same_seed_same_placements() -> None:
    assert place(7, 20, 3, brokers(SIX)) == place(7, 20, 3, brokers(SIX))
    assert len({tuple(place(seed, 20, 3, brokers(SIX))) for seed in SEEDS}) > 1  # the start is random


def test_registration_order_does_not_matter() -> None:
    """Kafka reads the brokers from a HashMap by id and sorts each rack's lists."""
    forward = brokers(SIX)
    assert place(3, 20, 2, forward) == place(3, 20, 2, list(reversed(forward)))


@pytest.mark.parametrize(("rf", "usable", "message"), [
    (0, brokers({1: None}), "Invalid replication factor 0: the replication factor must be positive."),
    (-1, brokers({1: None}), "Invalid replication factor -1: the replication factor must be positive."),
    (1, [], "All brokers are currently fenced, or have all their log directories cordoned."),
    (1, brokers({1: "a", 2: "b"}, fenced={1, 2}),
     "All brokers are currently fenced, or have all their log directories cordoned."),
    (4, brokers({1: "a", 2: "b", 3: "b"}, fenced={3}),
     "The target replication factor of 4 cannot be reached because only 3 broker(s) are registered or some "
     "brokers have all their log directories cordoned."),
])
def test_kafka_errors(rf: int, usable: list[UsableBroker], message: str) -> None:
    with pytest.raises(PlacementError) as e:
        place(1, 3, rf, usable)
    assert str(e.value) == message


# --- the controller: CreateTopics and CreatePartitions place by rack ---------------------------------


async def _rack_controller(tmp_path: Path, racks: dict[int, str | None], seed: int | None = None):
    placer = None if seed is None else StripedReplicaPlacer(JavaRandom(seed))
    c = make_controller(tmp_path, replica_placer=placer)
    await c.start(host="h1", port=9092, rack=racks[1])
    for node, rack in racks.items():
        if node != 1:
            await c.register_broker(node, f"h{node}", 9091 + node, rack)
    return c


async def test_controller_places_topics_and_new_partitions_on_distinct_racks(tmp_path: Path) -> None:
    c = await _rack_controller(tmp_path, SIX)
    try:
        (r3, r2) = await c.create_topics([CreatableTopic("t3", 6, 3), CreatableTopic("t2", 6, 2)])
        assert (r3.error_code, r2.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
        (grown,) = await c.create_partitions([CreatePartitionsTopic("t3", 12)])
        assert grown.error_code == ErrorCode.NONE
        for name, rf in (("t3", 3), ("t2", 2)):
            for p in c.image.topics[name].partitions.values():
                assert len({SIX[b] for b in p.replicas}) == rf, (name, p)
                assert p.leader == p.replicas[0] and p.isr == p.replicas
        t3 = c.image.topics["t3"].partitions
        # Each request is one round: every broker leads one of its six partitions.
        assert sorted(t3[i].leader for i in range(6)) == [1, 2, 3, 4, 5, 6]
        assert sorted(t3[i].leader for i in range(6, 12)) == [1, 2, 3, 4, 5, 6]
    finally:
        await c.stop()


async def test_controller_never_leads_with_a_fenced_broker(tmp_path: Path) -> None:
    c = await _rack_controller(tmp_path, {1: "a", 2: "b", 3: "c"})
    try:
        await c.fence_broker(3)
        (r,) = await c.create_topics([CreatableTopic("f", 6, 3)])
        assert r.error_code == ErrorCode.NONE
        for p in c.image.topics["f"].partitions.values():
            assert 3 in p.replicas and p.leader != 3 and 3 not in p.isr
        await c.fence_broker(2)
        await c.fence_broker(1)
        (r,) = await c.create_topics([CreatableTopic("g", 1, 1)])
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 1 time(s): All brokers are "
            "currently fenced, or have all their log directories cordoned.")
        assert "g" not in c.image.topics
    finally:
        await c.stop()
