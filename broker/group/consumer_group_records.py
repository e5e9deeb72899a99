"""The KIP-848 consumer-group records of ``__consumer_offsets`` (Kafka 4.0's formats).

Every key and value starts with an int16 version which, for keys, also names the record type
(Kafka's GroupCoordinatorRecordSerde); the body is the message of that version from
group-coordinator/src/main/resources/common/message/*.json::

    key 3  ConsumerGroupMetadataKey                 group_id            value: epoch (the group epoch)
    key 4  ConsumerGroupPartitionMetadataKey        group_id            value: topics[topic_id, topic_name,
                                                                          num_partitions, partition_metadata]
    key 5  ConsumerGroupMemberMetadataKey           group_id, member_id value: instance_id, rack_id, client_id,
                                                                          client_host, subscribed_topic_names,
                                                                          subscribed_topic_regex,
                                                                          rebalance_timeout_ms, server_assignor
    key 6  ConsumerGroupTargetAssignmentMetadataKey group_id            value: assignment_epoch
    key 7  ConsumerGroupTargetAssignmentMemberKey   group_id, member_id value: topic_partitions[topic_id, partitions]
    key 8  ConsumerGroupCurrentMemberAssignmentKey  group_id, member_id value: member_epoch, previous_member_epoch,
                                                                          state, assigned_partitions,
                                                                          partitions_pending_revocation

Values are version 0 and flexible. A null value is a tombstone. A group is written as a set of
these records; replaying them in log order (consumer_group.ConsumerGroup.replay) rebuilds it.
Removing a member writes, in this order, tombstones for its current assignment, its target
assignment and its metadata; deleting a group adds the target-assignment-epoch, partition
metadata and group-epoch tombstones (Kafka's order, which its replay checks).

Here a record is a ``CgRecord``: the decoded key fields plus the value dict (None = tombstone),
so the coordinator can both encode it for the log and replay it into memory. Assignments are
``dict[uuid.UUID, frozenset[int]]``. Pure functions; any thread.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.protocol.codec import MessageCodec
from odradek.protocol.coordinator_schema_data import MESSAGES
from odradek.protocol.primitives import DecodeError

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

KEY_VERSIONS = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))

_NAMES: dict[int, str] = {
    GROUP_METADATA: "ConsumerGroupMetadata",
    PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

_VERSION = struct.Struct(">h")
_codecs: dict[tuple[str, int], MessageCodec] = {}

Assignment = dict[uuid.UUID, frozenset[int]]


class CorruptConsumerGroupRecord(ValueError):
    """A KIP-848 key or value that does not parse."""


def _codec(name: str, version: int) -> MessageCodec:
    c = _codecs.get((name, version))
    if c is None:
        c = _codecs[(name, version)] = MessageCodec(name, version, MESSAGES)
    return c


@dataclass(slots=True)
class CgRecord:
    """One KIP-848 record: ``kind`` is its key version; ``value`` None means tombstone."""

    kind: int
    group_id: str
    member_id: str | None = None
    value: dict[str, Any] | None = None

    def key_bytes(self) -> bytes:
        name = _NAMES[self.kind] + "Key"
        body: dict[str, Any] = {"group_id": self.group_id}
        if self.kind in _PER_MEMBER:
            body["member_id"] = self.member_id
        return _VERSION.pack(self.kind) + _codec(name, self.kind).encode(body)

    def value_bytes(self) -> bytes | None:
        if self.value is None:
            return None
        name = _NAMES[self.kind] + "Value"
        return _VERSION.pack(VALUE_VERSION) + _codec(name, VALUE_VERSION).encode(self.value)

    def encode(self) -> tuple[bytes, bytes | None]:
        return self.key_bytes(), self.value_bytes()


def is_consumer_group_key(key: bytes | None) -> bool:
    """Whether a __consumer_offsets key is one of the KIP-848 records above."""
    return key is not None and len(key) >= 2 and _VERSION.unpack_from(key, 0)[0] in KEY_VERSIONS


def decode(key: bytes | None, value: bytes | None) -> CgRecord:
    """A stored record back into a CgRecord; CorruptConsumerGroupRecord if it does not parse."""
    if key is None or len(key) < 2:
        raise CorruptConsumerGroupRecord("key shorter than its version")
    (kind,) = _VERSION.unpack_from(key, 0)
    if kind not in KEY_VERSIONS:
        raise CorruptConsumerGroupRecord(f"key version {kind} is not a consumer-group record")
    try:
        k, _ = _codec(_NAMES[kind] + "Key", kind).decode(key, 2)
        body = None
        if value is not None:
            if len(value) < 2:
                raise CorruptConsumerGroupRecord("value shorter than its version")
            (vv,) = _VERSION.unpack_from(value, 0)
            lo, hi = MESSAGES[_NAMES[kind] + "Value"]["valid"]
            # Newer value versions only add tagged fields; read them with the newest version we know.
            if vv < lo:
                raise CorruptConsumerGroupRecord(f"{_NAMES[kind]}Value has no version {vv}")
            body, _ = _codec(_NAMES[kind] + "Value", min(vv, hi)).decode(value, 2)
    except DecodeError as exc:
        raise CorruptConsumerGroupRecord(str(exc)) from None
    return CgRecord(kind, k["group_id"], k.get("member_id"), body)


# -- builders (Kafka's GroupCoordinatorRecordHelpers) -------------------------------------------

def topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items()) if ps]


def assignment_from(rows: list[dict[str, Any]] | None) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for row in rows or ():
        if row["partitions"]:
            out[row["topic_id"]] = out.get(row["topic_id"], frozenset()) | frozenset(row["partitions"])
    return out


def group_epoch_record(group_id: str, epoch: int | None) -> CgRecord:
    return CgRecord(GROUP_METADATA, group_id, None, None if epoch is None else {"epoch": epoch})


def subscription_metadata_record(group_id: str, topics: dict[str, tuple[uuid.UUID, int]] | None) -> CgRecord:
    """``topics``: subscribed topic name -> (topic id, partition count); None = tombstone."""
    if topics is None:
        return CgRecord(PARTITION_METADATA, group_id)
    return CgRecord(PARTITION_METADATA, group_id, None, {"topics": [
        {"topic_id": tid, "topic_name": name, "num_partitions": n, "partition_metadata": []}
        for name, (tid, n) in sorted(topics.items())]})


def member_metadata_record(group_id: str, member: Any) -> CgRecord:
    """``member``: a consumer_group.ConsumerGroupMember."""
    return CgRecord(MEMBER_METADATA, group_id, member.member_id, {
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": sorted(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "server_assignor": member.server_assignor,
        "classic_member_metadata": None,
    })


def member_metadata_tombstone(group_id: str, member_id: str) -> CgRecord:
    return CgRecord(MEMBER_METADATA, group_id, member_id)


def target_assignment_record(group_id: str, member_id: str, assignment: Assignment) -> CgRecord:
    return CgRecord(TARGET_ASSIGNMENT_MEMBER, group_id, member_id,
                    {"topic_partitions": topic_partitions(assignment)})


def target_assignment_tombstone(group_id: str, member_id: str) -> CgRecord:
    return CgRecord(TARGET_ASSIGNMENT_MEMBER, group_id, member_id)


def target_assignment_epoch_record(group_id: str, epoch: int | None) -> CgRecord:
    return CgRecord(TARGET_ASSIGNMENT_METADATA, group_id, None,
                    None if epoch is None else {"assignment_epoch": epoch})


def current_assignment_record(group_id: str, member: Any) -> CgRecord:
    return CgRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, {
        "member_epoch": member.member_epoch,
        "previous_member_epoch": member.previous_member_epoch,
        "state": member.state,
        "assigned_partitions": topic_partitions(member.assigned_partitions),
        "partitions_pending_revocation": topic_partitions(member.partitions_pending_revocation),
    })


def current_assignment_tombstone(group_id: str, member_id: str) -> CgRecord:
    return CgRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)
