"""The share-partition state machine (broker/share/share_partition.py) against KIP-932's rules:
Available -> Acquired -> Acknowledged / Archived / Available, delivery counts, the delivery count
limit, acquisition locks, the SPSO, and the in-flight bound."""

from __future__ import annotations

import pytest

from odradek.broker.share.share_partition import (
    InvalidAcknowledgement,
    InvalidRecordState,
    RecordState,
    SharePartition,
)

ACCEPT, RELEASE, REJECT, RENEW, GAP = 1, 2, 3, 4, 0
LOCK = 1000


def fresh(limit: int = 5, max_in_flight: int = 2000, start: int = 0) -> SharePartition:
    return SharePartition("g", "t", 0, start, limit, max_in_flight)


def states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [(r.first, r.last, r.state, r.delivery_count, r.member_id) for r in sp.ranges]


def test_acquire_accept_moves_the_start_offset() -> None:
    sp = fresh()
    assert sp.acquire("m", [(0, 4), (5, 9)], 500, 0, LOCK) == [(0, 9, 1)]
    assert sp.fetch_offset() == 10
    sp.acknowledge("m", [(0, 9, [ACCEPT])], 0, LOCK)
    assert (sp.start_offset, sp.next_offset, sp.ranges) == (10, 10, [])


def test_release_redelivers_with_a_higher_count_and_the_limit_archives() -> None:
    sp = fresh(limit=2)
    sp.acquire("a", [(0, 2)], 500, 0, LOCK)
    sp.acknowledge("a", [(0, 2, [RELEASE])], 0, LOCK)
    assert sp.fetch_offset() == 0
    assert sp.acquire("b", [(0, 2)], 500, 0, LOCK) == [(0, 2, 2)]
    sp.acknowledge("b", [(0, 2, [RELEASE])], 0, LOCK)  # the second delivery was the last
    assert sp.ranges == [] and sp.start_offset == 3


def test_per_offset_types_split_a_batch() -> None:
    sp = fresh()
    sp.acquire("m", [(0, 4)], 500, 0, LOCK)
    sp.acknowledge("m", [(0, 4, [ACCEPT, REJECT, RELEASE, ACCEPT, GAP])], 0, LOCK)
    assert states(sp) == [(2, 2, RecordState.AVAILABLE, 1, None), (3, 3, RecordState.ACKNOWLEDGED, 1, None),
                          (4, 4, RecordState.ARCHIVED, 1, None)]
    assert sp.start_offset == 2
    # Only 2 is acquirable again; the rest of the batch is not delivered twice.
    assert sp.acquire("m", [(0, 4)], 500, 0, LOCK) == [(2, 2, 2)]


def test_only_the_holder_acknowledges_and_a_refusal_applies_nothing() -> None:
    sp = fresh()
    sp.acquire("a", [(0, 4)], 500, 0, LOCK)
    sp.acquire("b", [(5, 9)], 500, 0, LOCK)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", [(0, 4, [ACCEPT]), (5, 5, [ACCEPT])], 0, LOCK)
    assert states(sp) == [(0, 4, RecordState.ACQUIRED, 1, "a"), (5, 9, RecordState.ACQUIRED, 1, "b")]
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", [(10, 12, [ACCEPT])], 0, LOCK)  # never delivered
    for bad in ([(3, 1, [ACCEPT])], [(0, 4, [ACCEPT, ACCEPT])], [(0, 4, [9])]):
        with pytest.raises(InvalidAcknowledgement):
            sp.acknowledge("a", bad, 0, LOCK)


def test_locks_expire_and_renew_extends_them() -> None:
    sp = fresh()
    sp.acquire("m", [(0, 1), (2, 3)], 500, 0, LOCK)
    sp.acknowledge("m", [(0, 1, [RENEW])], 600, LOCK)
    assert sp.expire_locks(999) == 0
    assert sp.expire_locks(1000) == 2  # 2-3 expired; 0-1 renewed until 1600
    assert states(sp)[0] == (0, 1, RecordState.ACQUIRED, 1, "m")
    assert sp.expire_locks(1600) == 2
    assert sp.acquire("n", [(0, 1), (2, 3)], 500, 2000, LOCK) == [(0, 3, 2)]


def test_renew_refused_where_disabled_applies_nothing() -> None:
    sp = fresh()
    sp.acquire("m", [(0, 1), (2, 3)], 500, 0, LOCK)
    with pytest.raises(InvalidRecordState, match="Renewing acquisition locks is not enabled for the group."):
        sp.acknowledge("m", [(0, 1, [ACCEPT]), (2, 3, [RENEW])], 600, LOCK, renew_enabled=False)
    assert states(sp) == [(0, 3, RecordState.ACQUIRED, 1, "m")]  # not even the ACCEPT before it
    assert sp.expire_locks(1000) == 4  # no lock was renewed


def test_release_member_gives_back_only_its_records() -> None:
    sp = fresh()
    sp.acquire("a", [(0, 4)], 500, 0, LOCK)
    sp.acquire("b", [(5, 9)], 500, 0, LOCK)
    assert sp.release_member("a") == 5
    assert states(sp) == [(0, 4, RecordState.AVAILABLE, 1, None), (5, 9, RecordState.ACQUIRED, 1, "b")]


def test_max_in_flight_bounds_new_records_not_redelivery() -> None:
    sp = fresh(max_in_flight=10)
    assert sp.acquire("m", [(0, 9), (10, 19)], 500, 0, LOCK) == [(0, 9, 1)]
    assert sp.fetch_offset() is None
    sp.acknowledge("m", [(0, 4, [RELEASE])], 0, LOCK)
    assert sp.fetch_offset() == 0
    assert sp.acquire("m", [(0, 9), (10, 19)], 500, 0, LOCK) == [(0, 4, 2)]
    sp.acknowledge("m", [(0, 9, [ACCEPT])], 0, LOCK)
    assert sp.fetch_offset() == 10


def test_record_limit_mode_cuts_batches() -> None:
    sp = fresh()
    assert sp.acquire("m", [(0, 9)], 3, 0, LOCK, strict=True) == [(0, 2, 1)]
    assert sp.acquire("m", [(0, 9)], 500, 0, LOCK) == [(3, 9, 1)]


def test_the_start_offset_follows_the_log_start() -> None:
    sp = fresh()
    sp.acquire("m", [(0, 9)], 500, 0, LOCK)
    sp.reset_start(6)
    assert (sp.start_offset, states(sp)) == (6, [(6, 9, RecordState.ACQUIRED, 1, "m")])
