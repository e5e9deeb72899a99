"""broker/coordinator/rehash.py's pure parts: which partition a moved id came from, and the markers'
bytes as its docstring specifies them."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.broker.coordinator.hashing import legacy_partition_for, partition_for
from odradek.broker.coordinator.rehash import (
    MIGRATED_KEY,
    SWITCHED_KEY,
    Markers,
    migrated_record,
    switched_record,
    twin_partition,
)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 10, 48, 50, 64, 100, 128])
def test_every_moved_id_came_from_its_new_partitions_twin(n: int) -> None:
    """For any id the old rule placed on another partition than Kafka's, that partition is the twin
    of Kafka's; and twins pair up (each is the other's)."""
    rng = random.Random(n)
    for _ in range(3000):
        key = "".join(rng.choice("abcdefgh-_.\u00e9\u4e2d\U0001F600") for _ in range(rng.randint(1, 16)))
        new, old = partition_for(key, n), legacy_partition_for(key, n)
        assert old in (new, twin_partition(new, n)), key
    for p in range(n):
        assert twin_partition(twin_partition(p, n), n) == p


def test_twins_of_kafkas_default_partition_count() -> None:
    assert [twin_partition(p, 50) for p in (0, 1, 24, 47, 48, 49)] == [48, 47, 24, 1, 0, 49]
    assert [p for p in range(50) if twin_partition(p, 50) == p] == [24, 49]  # nothing moves in or out
    assert [twin_partition(p, 64) for p in (0, 1, 32, 63)] == [0, 63, 32, 1]
    assert all(twin_partition(p, 2) == p for p in range(2)) and twin_partition(0, 1) == 0


def test_marker_bytes() -> None:
    key_version = struct.pack(">h", 32767)
    assert SWITCHED_KEY == key_version + struct.pack(">h", 16) + b"odradek.switched"
    assert MIGRATED_KEY == key_version + struct.pack(">h", 16) + b"odradek.migrated"
    assert switched_record(9) == (SWITCHED_KEY, struct.pack(">hi", 0, 9))
    assert migrated_record(48, 50, 7) == (MIGRATED_KEY, struct.pack(">hiii", 0, 48, 50, 7))
    m = Markers()
    m.read(*switched_record(9))
    m.read(MIGRATED_KEY, migrated_record(48, 50, 7)[1] + b"later version's field")
    assert (m.switched, m.switched_epoch, m.migrated, m.migrated_from, m.source_epoch) == (True, 9, True, 48, 7)
    bad = Markers()
    bad.read(SWITCHED_KEY, b"\x00")
    assert not bad.switched
