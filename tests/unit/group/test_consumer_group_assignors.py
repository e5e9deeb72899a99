"""The server-side assignors: balance, stickiness (uniform), ranges across co-partitioned topics (range)."""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.group.assignors import (
    MemberSpec,
    PartitionAssignorError,
    RangeAssignor,
    UniformAssignor,
    assignors_from_config,
)

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def sizes(result: dict) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def owners(result: dict) -> dict[tuple, str]:
    out: dict[tuple, str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{(t, p)} assigned twice"
                out[(t, p)] = m
    return out


def test_uniform_homogeneous_balances_and_covers_everything() -> None:
    members = {f"m{i}": MemberSpec(frozenset({T1, T2})) for i in range(3)}
    result = UniformAssignor().assign(members, {T1: 5, T2: 3})
    assert sorted(sizes(result).values()) == [2, 3, 3]
    assert len(owners(result)) == 8


def test_uniform_homogeneous_is_sticky_when_a_member_joins() -> None:
    first = UniformAssignor().assign({"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1}))}, {T1: 6})
    specs = {m: MemberSpec(frozenset({T1}), a) for m, a in first.items()}
    specs["c"] = MemberSpec(frozenset({T1}))
    second = UniformAssignor().assign(specs, {T1: 6})
    assert sizes(second) == {"a": 2, "b": 2, "c": 2}
    # a and b only lose partitions; nothing moves between them.
    for m in ("a", "b"):
        assert second[m][T1] <= first[m][T1]
    assert len(owners(second)) == 6


def test_uniform_drops_vanished_partitions_and_unsubscribed_topics() -> None:
    specs = {"a": MemberSpec(frozenset({T1}), {T1: frozenset({0, 1, 7}), T2: frozenset({0})}),
             "b": MemberSpec(frozenset({T1}), {})}
    result = UniformAssignor().assign(specs, {T1: 4})
    assert set(owners(result)) == {(T1, p) for p in range(4)}
    assert T2 not in result["a"]


def test_uniform_heterogeneous_respects_subscriptions_and_balances() -> None:
    specs = {"a": MemberSpec(frozenset({T1, T2})), "b": MemberSpec(frozenset({T1})), "c": MemberSpec(frozenset({T2, T3}))}
    result = UniformAssignor().assign(specs, {T1: 4, T2: 4, T3: 1})
    o = owners(result)
    assert len(o) == 9
    for (t, _p), m in o.items():
        assert t in specs[m].subscribed_topic_ids
    s = sizes(result)
    assert max(s.values()) - min(s.values()) <= 1


def test_uniform_heterogeneous_is_sticky() -> None:
    specs = {"a": MemberSpec(frozenset({T1, T2}), {T1: frozenset({0, 1}), T2: frozenset({0})}),
             "b": MemberSpec(frozenset({T1}), {T1: frozenset({2})})}
    result = UniformAssignor().assign(specs, {T1: 3, T2: 1})
    # a held 3 and b 1: one T1 partition of a moves to b; everything else stays where it was.
    assert sizes(result) == {"a": 2, "b": 2}
    assert result["a"][T2] == {0} and 2 in result["b"][T1]
    assert len(result["a"][T1] & {0, 1}) == 1


def test_range_gives_co_partitioned_topics_the_same_partitions() -> None:
    specs = {"b": MemberSpec(frozenset({T1, T2})), "a": MemberSpec(frozenset({T1, T2}))}
    result = RangeAssignor().assign(specs, {T1: 5, T2: 5})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}


def test_range_orders_static_members_first() -> None:
    specs = {"a": MemberSpec(frozenset({T1})), "z": MemberSpec(frozenset({T1}), instance_id="i1")}
    result = RangeAssignor().assign(specs, {T1: 2})
    assert result["z"] == {T1: frozenset({0})} and result["a"] == {T1: frozenset({1})}


def test_range_heterogeneous_counts_subscribers_per_topic() -> None:
    specs = {"a": MemberSpec(frozenset({T1, T2})), "b": MemberSpec(frozenset({T1}))}
    result = RangeAssignor().assign(specs, {T1: 4, T2: 3})
    assert result["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({2, 3})}


def test_more_members_than_partitions_leaves_some_empty() -> None:
    specs = {f"m{i}": MemberSpec(frozenset({T1})) for i in range(4)}
    for assignor in (UniformAssignor(), RangeAssignor()):
        result = assignor.assign(specs, {T1: 2})
        assert sorted(sizes(result).values()) == [0, 0, 1, 1]


def test_unknown_topic_is_an_assignor_error() -> None:
    with pytest.raises(PartitionAssignorError):
        UniformAssignor().assign({"a": MemberSpec(frozenset({T1}))}, {})
    with pytest.raises(PartitionAssignorError):
        RangeAssignor().assign({"a": MemberSpec(frozenset({T1}))}, {})


def test_config_names() -> None:
    assert list(assignors_from_config(["uniform", "range"])) == ["uniform", "range"]
    assert list(assignors_from_config(["org.apache.kafka.coordinator.group.assignor.RangeAssignor"])) == ["range"]
    with pytest.raises(ValueError):
        assignors_from_config(["sticky"])
