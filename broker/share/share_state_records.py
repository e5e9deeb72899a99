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
            ShareUpdateValue  snapshot_epoch, leader_epoch, start_offset (-1: unchanged), state_batches

A snapshot is the whole state of one share-partition; an update carries only the batches that
changed since the snapshot of the same snapshot epoch. Odradek writes snapshots only (each write is
the whole in-flight window); it reads both, so a log Kafka's share coordinator wrote replays. A
null value is a tombstone (the state was deleted).

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


def encode_key(key: StateKey) -> bytes:
    group_id, topic_id, partition = key
    return _SHORT.pack(SNAPSHOT) + _codec("ShareSnapshotKey").encode(
        {"group_id": group_id, "topic_id": topic_id, "partition": partition})


def encode_snapshot(key: StateKey, state: ShareState) -> tuple[bytes, bytes]:
    k = encode_key(key)
    v = _SHORT.pack(0) + _codec("ShareSnapshotValue").encode({
        "snapshot_epoch": state.snapshot_epoch, "state_epoch": state.state_epoch,
        "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
        "delivery_complete_count": -1, "create_timestamp": state.create_timestamp,
        "write_timestamp": state.write_timestamp,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                          for f, la, s, c in state.batches]})
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
    update's batches replace the offsets they cover; batches below the start offset go)."""
    if body["start_offset"] >= 0:
        state.start_offset = body["start_offset"]
    state.leader_epoch = body["leader_epoch"]
    updates = batches_of(body)
    out: list[StateBatch] = []
    for f, la, s, c in state.batches:
        pieces = [(f, la)]
        for uf, ul, _, _ in updates:
            nxt = []
            for pf, pl in pieces:
                if ul < pf or uf > pl:
                    nxt.append((pf, pl))
                    continue
                if pf < uf:
                    nxt.append((pf, uf - 1))
                if pl > ul:
                    nxt.append((ul + 1, pl))
            pieces = nxt
        out.extend((pf, pl, s, c) for pf, pl in pieces)
    out.extend(updates)
    out = [(max(f, state.start_offset), la, s, c) for f, la, s, c in sorted(out) if la >= state.start_offset]
    state.batches = out
