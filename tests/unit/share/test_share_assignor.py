"""The share groups' ``simple`` assignor (broker/group/share_assignor.py) against Kafka 4.4's
SimpleHomogeneousAssignmentBuilder rules: each partition shared by ceil(members / partitions)
members, member i's count ceil(p*(i+1)) - ceil(p*i) with p = sharing * partitions / members."""

from __future__ import annotations

import uuid

from odradek.broker.group import share_assignor

T, U = uuid.UUID(int=1), uuid.UUID(int=2)


def counts(result: dict) -> list[int]:
    return [sum(len(ps) for ps in result[m].values()) for m in sorted(result)]


def holders(result: dict, topic: uuid.UUID) -> dict[int, int]:
    out: dict[int, int] = {}
    for a in result.values():
        for p in a.get(topic, ()):
            out[p] = out.get(p, 0) + 1
    return out


def test_three_members_two_partitions_share_each_partition_twice() -> None:
    subs = {m: frozenset({T}) for m in "abc"}
    result = share_assignor.assign(subs, {T: 2}, {})
    assert counts(result) == [2, 1, 1]  # Kafka's quotas: ceil(4/3)=2, ceil(8/3)-2=1, 4-3=1
    assert holders(result, T) == {0: 2, 1: 2}


def test_fewer_members_than_partitions_split_them_once() -> None:
    result = share_assignor.assign({m: frozenset({T}) for m in "ab"}, {T: 5}, {})
    assert counts(result) == [3, 2] and holders(result, T) == {p: 1 for p in range(5)}


def test_sticky_within_balance() -> None:
    subs = {m: frozenset({T}) for m in "ab"}
    first = share_assignor.assign(subs, {T: 4}, {})
    again = share_assignor.assign({**subs, "c": frozenset({T})}, {T: 4}, first)
    # Every partition still has one holder; what a and b keep is what they had.
    assert holders(again, T) == {p: 1 for p in range(4)}
    for m in "ab":
        assert again[m][T] <= first[m][T]


def test_heterogeneous_subscriptions_spread_each_topic_over_its_subscribers() -> None:
    subs = {"a": frozenset({T}), "b": frozenset({T, U}), "c": frozenset({U})}
    result = share_assignor.assign(subs, {T: 2, U: 1}, {})
    assert holders(result, T) == {0: 1, 1: 1} and holders(result, U) == {0: 2}
    assert U not in result["a"] and T not in result["c"]


def test_unknown_topics_and_no_members() -> None:
    assert share_assignor.assign({"a": frozenset({T})}, {}, {}) == {"a": {}}
    assert share_assignor.assign({}, {T: 3}, {}) == {}
