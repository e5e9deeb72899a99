"""The share coordinator's records over time (broker/share/share_state_store.py's ShareStateShard,
share_state_records.overlay) against Kafka 4.4's ShareCoordinatorShard and
ShareCoordinatorOffsetsManager:

- a write is a ShareUpdate of its batches until ``share.coordinator.snapshot.update.records.per.snapshot``
  updates followed the last snapshot, then a ShareSnapshot of the merged state (0: always a snapshot);
- the log is redundant below the oldest latest snapshot of the share-partitions still stored (a
  deleted one counts no more), and a replay from there rebuilds every share-partition's state;
- a share-partition whose last snapshot is older than the cold interval is snapshotted again,
  unless every one already was."""

from __future__ import annotations

import random
import uuid

from odradek.broker.share.share_state_records import (
    ShareState,
    StateBatch,
    StateKey,
    encode_key,
    encode_snapshot,
    overlay,
)
from odradek.broker.share.share_state_store import ShareStateShard, changed_batches, unchanged_dropped

TOPIC = uuid.UUID("f7d65a35-52b9-4a41-93af-be4f9bb54271")
A: StateKey = ("sg", TOPIC, 0)
B: StateKey = ("sg", TOPIC, 1)

Log = list[tuple[int, bytes, bytes | None]]


def write(shard: ShareStateShard, log: Log, key: StateKey, start: int, batches: list[StateBatch],
          now: int = 0) -> str:
    """One write as the store makes it, appended to ``log`` and applied as the runtime does once
    durable; "S" or "U"."""
    offset = len(log)
    if key not in shard.states:
        new = ShareState(start, 0, 0, 0, now, now, overlay([], batches, start))
        log.append((offset, *encode_snapshot(key, new)))
        shard.applied_snapshot(key, new, offset)
        return "S"
    record, new, is_snapshot = shard.state_record(key, 0, start, batches, now)
    log.append((offset, *record))
    if is_snapshot:
        shard.applied_snapshot(key, new, offset)
    else:
        shard.applied_update(key, new)
    return "S" if is_snapshot else "U"


def delete(shard: ShareStateShard, log: Log, key: StateKey) -> None:
    offset = len(log)
    log.append((offset, encode_key(key), None))
    shard.applied_delete(key, offset)


def replay(log: Log, start: int = 0, per_snapshot: int = 3) -> ShareStateShard:
    shard = ShareStateShard(0, per_snapshot)
    for offset, k, v in log[start:]:
        shard.replay(offset, k, v)
    return shard


def test_updates_then_a_snapshot_every_n_updates() -> None:
    shard, log = ShareStateShard(0, 3), []
    kinds = "".join(write(shard, log, A, i, [(i, i, 2, 1), (i + 1, i + 5, 0, 1)]) for i in range(12))
    # Kafka's count: an update adds one, a snapshot resets it once it reached the limit.
    assert kinds == "SUUUSUUUSUUU"
    assert shard.states[A] == replay(log).states[A]
    assert shard.states[A].start_offset == 11 and shard.states[A].batches == [(11, 11, 2, 1), (12, 16, 0, 1)]
    assert [shard.states[A].snapshot_epoch] == [2]


def test_zero_updates_per_snapshot_writes_snapshots_only() -> None:
    shard, log = ShareStateShard(0, 0), []
    assert "".join(write(shard, log, A, i, [(i, i, 2, 1)]) for i in range(4)) == "SSSS"


def test_an_update_carries_only_its_batches_and_the_start_offset_never_moves_back() -> None:
    shard, log = ShareStateShard(0, 500), []
    write(shard, log, A, 0, [(0, 999, 0, 1)])
    record, new, is_snapshot = shard.state_record(A, 0, 0, [(5, 5, 2, 1)], now=1)
    assert not is_snapshot and len(record[1]) < 60  # one batch, not the thousand-offset window
    assert new.batches == [(0, 4, 0, 1), (5, 5, 2, 1), (6, 999, 0, 1)]
    write(shard, log, A, 10, [])
    _, new, _ = shard.state_record(A, 0, 3, [], now=2)
    assert new.start_offset == 10  # Kafka 4.4: max(request, stored)


def test_prune_offset_is_the_oldest_latest_snapshot_and_a_replay_from_it_rebuilds_everything() -> None:
    shard, log = ShareStateShard(0, 3), []
    write(shard, log, A, 0, [(0, 9, 0, 1)])  # 0: A's snapshot
    write(shard, log, B, 0, [(0, 4, 0, 1)])  # 1: B's snapshot
    assert shard.redundant_offset() is None  # offset 0: nothing below it
    for i in range(1, 9):  # A: U U U S U U U S at 2-9
        write(shard, log, A, i, [(i - 1, i - 1, 2, 1)])
    assert shard.redundant_offset() == 1  # B's only snapshot holds the log back
    write(shard, log, B, 2, [(0, 1, 2, 1)])  # 10: an update of B does not move it
    assert shard.redundant_offset() == 1
    delete(shard, log, B)  # 11: B deleted: it holds nothing any more
    assert shard.redundant_offset() == 9  # A's latest snapshot (at 9)
    rebuilt = replay(log, start=9)
    assert rebuilt.states == shard.states and list(rebuilt.states) == [A]
    assert rebuilt.redundant_offset() == 9
    # A replay from further back gives the same state: nothing below the prune offset is needed.
    assert replay(log).states == rebuilt.states


def test_a_key_written_again_after_its_tombstone_pins_from_its_new_snapshot() -> None:
    shard, log = ShareStateShard(0, 3), []
    write(shard, log, A, 0, [(0, 9, 0, 1)])  # 0
    delete(shard, log, A)  # 1
    assert shard.redundant_offset() == 1  # the tombstone counted once, when written
    write(shard, log, B, 0, [])  # 2
    assert shard.redundant_offset() == 2  # A's tombstone and snapshot are needed no more
    write(shard, log, A, 5, [])  # 3: A again, a snapshot
    write(shard, log, B, 0, [(0, 0, 2, 1)])  # 4: B's update
    assert shard.redundant_offset() == 2
    assert replay(log, start=2).states == shard.states


def test_cold_share_partitions_are_snapshotted_again() -> None:
    shard, log = ShareStateShard(0, 500), []
    write(shard, log, A, 0, [(0, 9, 0, 1)], now=1_000)
    write(shard, log, B, 0, [], now=250_000)
    cold = shard.cold_snapshots(now=301_000, interval_ms=300_000)
    assert [(k, s.snapshot_epoch, s.create_timestamp, s.write_timestamp, s.batches) for k, s in cold] == [
        (A, 1, 1_000, 301_000, [(0, 9, 0, 1)])]
    shard.applied_snapshot(A, cold[0][1], 2)
    assert shard.redundant_offset() == 1  # B's snapshot is now the oldest
    # Every share-partition snapshotted so already (create != write): nothing (Kafka's skip).
    shard.applied_snapshot(B, ShareState(0, 0, 0, 1, 250_000, 301_000), 3)
    assert shard.cold_snapshots(now=900_000, interval_ms=300_000) == []


def test_changed_batches_are_those_not_stored_as_they_are_when_they_rebuild_the_state() -> None:
    old = [(0, 4, 2, 1), (5, 9, 0, 1), (10, 19, 0, 1)]
    # 0-4 below the new start offset; 10-19 cut in two, both halves written.
    assert changed_batches(old, [(5, 9, 0, 1), (10, 14, 2, 1), (15, 19, 0, 1)], 5) == [(10, 14, 2, 1),
                                                                                      (15, 19, 0, 1)]
    # 15-19 left the state above the start offset: no update says so - None (a snapshot).
    assert changed_batches(old, [(5, 9, 0, 1), (10, 14, 2, 1)], 5) is None
    # A batch below the start offset: None.
    assert changed_batches(old, [(3, 9, 0, 1)], 5) is None


def test_an_update_from_changed_batches_replays_to_the_written_state() -> None:
    rng = random.Random(31)
    rebuilt = 0
    for i in range(600):
        old = _random_batches(rng)
        if i % 2:  # unrelated states: mostly not rebuildable by an update
            new = _random_batches(rng)
        else:  # some batches acknowledged, archived or redelivered, the start moved past the first
            new = [(f, la, rng.choice([0, 2, 4]), c + 1) if rng.random() < 0.3 else (f, la, s, c)
                   for f, la, s, c in old[1 if old and rng.random() < 0.5 else 0:]]
        start = min([b[0] for b in new], default=0)
        changed = changed_batches(old, new, start)
        if changed is not None:
            assert overlay(old, changed, start) == new, (old, new, start)
            rebuilt += 1
    assert rebuilt > 250


def test_overlay_matches_an_offset_by_offset_model() -> None:
    rng = random.Random(30)
    for _ in range(500):
        base = _random_batches(rng)
        updates = _random_batches(rng)
        start = rng.randrange(0, 40)
        model: dict[int, tuple[int, int]] = {}
        for f, la, s, c in base:
            model.update({o: (s, c) for o in range(f, la + 1)})
        for f, la, s, c in updates:
            model.update({o: (s, c) for o in range(f, la + 1)})
        got = overlay(base, updates, start)
        flat = {o: (s, c) for f, la, s, c in got for o in range(f, la + 1)}
        assert flat == {o: v for o, v in model.items() if o >= start}, (base, updates, start, got)
        assert got == sorted(got) and all(a[1] < b[0] for a, b in zip(got, got[1:], strict=False))


def _random_batches(rng: random.Random) -> list[StateBatch]:
    out, offset = [], rng.randrange(0, 10)
    for _ in range(rng.randrange(0, 6)):
        length = rng.randrange(1, 8)
        out.append((offset, offset + length - 1, rng.choice([0, 2, 4]), rng.randrange(1, 4)))
        offset += length + rng.randrange(0, 4)
    return out


def test_a_write_without_the_batches_the_state_holds_leaves_the_same_state() -> None:
    # What WriteShareGroupState of a whole in-flight window writes: only the batches that differ.
    assert unchanged_dropped([(0, 4, 2, 1), (5, 9, 0, 1)], [(5, 9, 0, 1), (10, 12, 0, 1)]) == [(10, 12, 0, 1)]
    assert unchanged_dropped([(0, 4, 2, 1)], [(0, 4, 2, 1), (3, 6, 4, 1)]) == [(0, 4, 2, 1), (3, 6, 4, 1)]  # overlap
    rng = random.Random(32)
    for _ in range(500):
        old = _random_batches(rng)
        batches = [b for b in old if rng.random() < 0.5] + _random_batches(rng)
        start = rng.randrange(0, 10)
        assert overlay(old, unchanged_dropped(old, batches), start) == overlay(old, batches, start), (old, batches)
