"""The records of ``__share_group_state`` (KIP-932's share coordinator, Kafka 4.4's formats).

A key is an int16 record type followed by the key message at version 0; a value is an int16
version (0) followed by the value message (flexible). The messages are Kafka 4.4's
share-coordinator ``Share*.json`` (protocol/share_coordinator_schema_data.py)::

    type 0  ShareSnapshotKey  group_id, topic_id, partition
            ShareSnapshotValue snapshot_epoch, state_epoch, leader_epoch, start_offset,
                               create_timestamp, write_timestamp,
                               state_batches [first_offset, last_offset, delivery_state, delivery_count],
                               tagged: delivery_complete_count (-1: unknown)
    type 1  ShareUpdateKey    group_id, topic_id, partition
            ShareUpdateValue  snapshot_epoch, leader_epoch, start_offset (-1: unchanged), state_batches,
                               tagged: delivery_complete_count

``delivery_complete_count`` (KIP-1226) is how many offsets from the start offset on are
Acknowledged or Archived, as the share-partition's leader counted them when it wrote; the group
coordinator's lag is the partition's latest offset less the start offset and this count. An update
replaces the state's count with its own (Kafka's ShareCoordinatorShard.merge).

A snapshot is the whole state of one share-partition; an update carries only the batches a write
changed, to be merged into the snapshot of the same snapshot epoch and the updates after it (the
update's batches replace the offsets they cover; its start offset, -1 for unchanged, prunes what
lies below it). The share coordinator writes updates and a snapshot every
``share.coordinator.snapshot.update.records.per.snapshot`` of them (broker/share/share_state_store.py),
as Kafka's ShareCoordinatorShard. A null value is a tombstone (the state was deleted).

Delivery states in a batch are Kafka's: 0 Available, 2 Acknowledged, 4 Archived (Acquired is never
written: a record in flight is written Available with the delivery count it was acquired with).

Pure functions; any thread.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.codec import MessageCodec
from odradek.protocol.primitives import DecodeError
from odradek.protocol.share_coordinator_schema_data import MESSAGES

SNAPSHOT = 0
UPDATE = 1
_NAMES = {SNAPSHOT: "ShareSnapshot", UPDATE: "ShareUpdate"}

_SHORT = struct.Struct(">h")
_codecs: dict[str, MessageCodec] = {}

StateBatch = tuple[int, int, int, int]  # (first offset, last offset, delivery state, delivery count)
StateKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


class CorruptShareStateRecord(ValueError):
    """A __share_group_state key or value that does not parse."""


def _codec(name: str) -> MessageCodec:
    c = _codecs.get(name)
    if c is None:
        c = _codecs[name] = MessageCodec(name, 0, MESSAGES)
    return c


@dataclass(slots=True)
class ShareState:
    """The durable state of one share-partition (what a ShareSnapshot holds)."""

    start_offset: int
    state_epoch: int = 0
    leader_epoch: int = 0
    snapshot_epoch: int = 0
    create_timestamp: int = 0
    write_timestamp: int = 0
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1  # -1: unknown (a state from before KIP-1226, or never initialized)


def delivery_complete_count(start_offset: int, batches: list[StateBatch]) -> int:
    """Offsets at or above ``start_offset`` that ``batches`` hold Acknowledged (2) or Archived (4):
    what Kafka's SharePartition counts in its deliveryCompleteCount and writes with that start offset."""
    return sum(last - max(first, start_offset) + 1 for first, last, state, _ in batches
               if state in (2, 4) and last >= start_offset)


def encode_key(key: StateKey) -> bytes:
    group_id, topic_id, partition = key
    return _SHORT.pack(SNAPSHOT) + _codec("ShareSnapshotKey").encode(
        {"group_id": group_id, "topic_id": topic_id, "partition": partition})


def encode_snapshot(key: StateKey, state: ShareState) -> tuple[bytes, bytes]:
    k = encode_key(key)
    v = _SHORT.pack(0) + _codec("ShareSnapshotValue").encode({
        "snapshot_epoch": state.snapshot_epoch, "state_epoch": state.state_epoch,
        "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
        "delivery_complete_count": state.delivery_complete_count, "create_timestamp": state.create_timestamp,
        "write_timestamp": state.write_timestamp,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                          for f, la, s, c in state.batches]})
    return k, v


def encode_update(key: StateKey, snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  batches: list[StateBatch], delivery_complete_count: int = -1) -> tuple[bytes, bytes]:
    group_id, topic_id, partition = key
    k = _SHORT.pack(UPDATE) + _codec("ShareUpdateKey").encode(
        {"group_id": group_id, "topic_id": topic_id, "partition": partition})
    v = _SHORT.pack(0) + _codec("ShareUpdateValue").encode({
        "snapshot_epoch": snapshot_epoch, "leader_epoch": leader_epoch, "start_offset": start_offset,
        "delivery_complete_count": delivery_complete_count,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                          for f, la, s, c in batches]})
    return k, v


def decode(key: bytes | None, value: bytes | None) -> tuple[int, StateKey, dict[str, Any] | None]:
    """(record type, share-partition key, value body or None for a tombstone)."""
    if key is None or len(key) < 2:
        raise CorruptShareStateRecord("key shorter than its type")
    (kind,) = _SHORT.unpack_from(key, 0)
    if kind not in _NAMES:
        raise CorruptShareStateRecord(f"key type {kind} is not a share-state record")
    try:
        k, _ = _codec(_NAMES[kind] + "Key").decode(key, 2)
        body = None
        if value is not None:
            if len(value) < 2:
                raise CorruptShareStateRecord("value shorter than its version")
            # A newer value version only adds tagged fields: read it as version 0 (Kafka's rule).
            body, _ = _codec(_NAMES[kind] + "Value").decode(value, 2)
    except DecodeError as exc:
        raise CorruptShareStateRecord(str(exc)) from None
    return kind, (k["group_id"], k["topic_id"], k["partition"]), body


def batches_of(body: dict[str, Any]) -> list[StateBatch]:
    return [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
            for b in body["state_batches"]]


def merge_update(state: ShareState, body: dict[str, Any]) -> None:
    """Apply a ShareUpdate to the snapshot it follows (Kafka's ShareCoordinatorShard merge: the
    update's batches replace the offsets they cover; batches below the start offset go; a start
    offset or leader epoch of -1 leaves the state's; the update's delivery-complete count is the state's
    from now on)."""
    state.delivery_complete_count = body["delivery_complete_count"]
    if body["start_offset"] >= 0:
        state.start_offset = body["start_offset"]
    if body["leader_epoch"] >= 0:
        state.leader_epoch = body["leader_epoch"]
    state.batches = overlay(state.batches, batches_of(body), state.start_offset)


def overlay(base: list[StateBatch], updates: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """``base`` (sorted, disjoint) with ``updates`` laid over it - an update's offsets take its
    delivery state and count - and everything below ``start_offset`` cut off. One pass over both:
    an acknowledgement's update meets a window of thousands of batches on every write."""
    ups = sorted(updates)
    # Overlapping updates (never sent by Odradek's share-partitions): the earlier offset's wins.
    clean: list[StateBatch] = []
    for f, la, s, c in ups:
        if clean and f <= clean[-1][1]:
            f = clean[-1][1] + 1
            if f > la:
                continue
        clean.append((f, la, s, c))
    out: list[StateBatch] = []
    j = 0
    for f, la, s, c in base:
        cur = f
        while j < len(clean) and clean[j][1] < cur:
            j += 1
        k = j
        while cur <= la:
            if k >= len(clean) or clean[k][0] > la:
                out.append((cur, la, s, c))
                break
            uf, ul = clean[k][0], clean[k][1]
            if uf > cur:
                out.append((cur, uf - 1, s, c))
            cur = max(cur, ul + 1)
            k += 1
    out.extend(clean)
    out.sort()  # two sorted runs: linear
    return [(max(f, start_offset), la, s, c) for f, la, s, c in out if la >= start_offset]
