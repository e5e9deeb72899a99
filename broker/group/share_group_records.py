"""The share-group records of ``__consumer_offsets`` (KIP-932, Kafka 4.4's formats).

A key is an int16 record type followed by the key message at version 0; a value is an int16
version (0) followed by the value message (flexible). The messages are Kafka 4.4's
group-coordinator ``ShareGroup*.json`` (protocol/coordinator_schema_data.py)::

    type 10  ShareGroupMemberMetadataKey             group_id, member_id value: rack_id, client_id, client_host,
                                                                           subscribed_topic_names
    type 11  ShareGroupMetadataKey                   group_id            value: epoch, metadata_hash
    type 12  ShareGroupTargetAssignmentMetadataKey   group_id            value: assignment_epoch,
                                                                           tagged: assignment_timestamp
    type 13  ShareGroupTargetAssignmentMemberKey     group_id, member_id value: topic_partitions[topic_id, partitions]
    type 14  ShareGroupCurrentMemberAssignmentKey    group_id, member_id value: member_epoch, previous_member_epoch,
                                                                           state, assigned_partitions
    type 15  ShareGroupStatePartitionMetadataKey     group_id            value: initializing_topics,
                                                                           initialized_topics, deleting_topics

(Type 9, ShareGroupPartitionMetadata, was Kafka 4.0's and is gone from 4.4: the metadata hash in
type 11 replaced it.) A null value is a tombstone. Removing a member writes tombstones for its
current assignment, target assignment and metadata, in that order; deleting a group adds the
target-assignment-metadata, state-partition-metadata and group-metadata tombstones.
Assignments are ``dict[uuid.UUID, frozenset[int]]``.

Pure functions; any thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

# The (topic id, partitions) rows of an assignment are the consumer-group records' (Kafka's
# TopicPartitions struct, the same in both).
from odradek.broker.group.consumer_group_records import topic_partitions
from odradek.broker.group.group_record_framing import GroupRecordFraming

MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15

_NAMES: dict[int, str] = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_METADATA: "ShareGroupMetadata",
    TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
KEY_TYPES = frozenset(_NAMES)
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
# Kafka's MemberState.STABLE: a share-group member takes its assignment at once (no revocation).
MEMBER_STATE_STABLE = 0

Assignment = dict[uuid.UUID, frozenset[int]]


class CorruptShareGroupRecord(ValueError):
    """A share-group key or value that does not parse."""


_FRAMING = GroupRecordFraming("share-group", _NAMES, _PER_MEMBER, CorruptShareGroupRecord)


@dataclass(slots=True)
class ShareRecord:
    """One share-group record: ``kind`` is its record type; ``value`` None means tombstone."""

    kind: int
    group_id: str
    member_id: str | None = None
    value: dict[str, Any] | None = None

    def encode(self) -> tuple[bytes, bytes | None]:
        return _FRAMING.encode(self.kind, self.group_id, self.member_id, self.value)


def is_share_group_key(key: bytes | None) -> bool:
    return _FRAMING.is_key(key)


def decode(key: bytes | None, value: bytes | None) -> ShareRecord:
    return ShareRecord(*_FRAMING.decode(key, value))


# -- builders (Kafka's GroupCoordinatorRecordHelpers.newShareGroup*) ------------------------------

def member_metadata_record(group_id: str, member: Any) -> ShareRecord:
    """``member``: a share_group.ShareGroupMember."""
    return ShareRecord(MEMBER_METADATA, group_id, member.member_id, {
        "rack_id": member.rack_id, "client_id": member.client_id, "client_host": member.client_host,
        "subscribed_topic_names": sorted(member.subscribed_topic_names)})


def group_metadata_record(group_id: str, epoch: int, metadata_hash: int) -> ShareRecord:
    return ShareRecord(GROUP_METADATA, group_id, None, {"epoch": epoch, "metadata_hash": metadata_hash})


def target_assignment_record(group_id: str, member_id: str, assignment: Assignment) -> ShareRecord:
    return ShareRecord(TARGET_ASSIGNMENT_MEMBER, group_id, member_id,
                       {"topic_partitions": topic_partitions(assignment)})


def target_assignment_metadata_record(group_id: str, epoch: int, timestamp_ms: int = 0) -> ShareRecord:
    return ShareRecord(TARGET_ASSIGNMENT_METADATA, group_id, None,
                       {"assignment_epoch": epoch, "assignment_timestamp": timestamp_ms})


def current_assignment_record(group_id: str, member: Any) -> ShareRecord:
    return ShareRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, {
        "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_member_epoch,
        "state": MEMBER_STATE_STABLE, "assigned_partitions": topic_partitions(member.assignment)})


def state_partition_metadata_record(group_id: str, initialized: list[tuple[uuid.UUID, str, int]]) -> ShareRecord:
    """``initialized``: (topic id, topic name, partition count) of each topic whose share-partitions
    the group has (every partition of it)."""
    return ShareRecord(STATE_PARTITION_METADATA, group_id, None, {
        "initializing_topics": [],
        "initialized_topics": [{"topic_id": tid, "topic_name": name, "partitions": list(range(n))}
                               for tid, name, n in sorted(initialized)],
        "deleting_topics": []})


def tombstone(kind: int, group_id: str, member_id: str | None = None) -> ShareRecord:
    return ShareRecord(kind, group_id, member_id)
