"""The streams-group records of ``__consumer_offsets`` (KIP-1071, Kafka 4.4's formats).

A key is an int16 record type followed by the key message at version 0; a value is an int16
version (0) followed by the value message (flexible). The messages are Kafka 4.4's
group-coordinator ``StreamsGroup*.json`` (protocol/coordinator_schema_data.py)::

    type 17  StreamsGroupMetadataKey                 group_id            value: epoch, metadata_hash,
                                                                           tagged: validated_topology_epoch,
                                                                           last_assignment_configs, ...
    type 19  StreamsGroupMemberMetadataKey           group_id, member_id value: instance_id, rack_id, client_id,
                                                                           client_host, rebalance_timeout_ms,
                                                                           topology_epoch, process_id,
                                                                           user_endpoint, client_tags
    type 20  StreamsGroupTargetAssignmentMetadataKey group_id            value: assignment_epoch
    type 21  StreamsGroupTargetAssignmentMemberKey   group_id, member_id value: active/standby/warmup tasks
    type 22  StreamsGroupCurrentMemberAssignmentKey  group_id, member_id value: member_epoch, previous_member_epoch,
                                                                           state, active/standby/warmup tasks and
                                                                           those pending revocation
    type 23  StreamsGroupTopologyKey                 group_id            value: epoch, subtopologies

(Type 18, StreamsGroupPartitionMetadata, was Kafka 4.0's and is gone from 4.4: the metadata hash in
type 17 replaced it.) A null value is a tombstone. Removing a member writes tombstones for its
current assignment, target assignment and metadata, in that order; deleting a group adds the
target-assignment-metadata, topology and group-metadata tombstones (Kafka's
StreamsCoordinatorRecordHelpers order). Tasks are ``dict[subtopology_id, frozenset[partition]]``.

Pure functions; any thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.broker.group.group_record_framing import GroupRecordFraming

GROUP_METADATA = 17
MEMBER_METADATA = 19
TARGET_ASSIGNMENT_METADATA = 20
TARGET_ASSIGNMENT_MEMBER = 21
CURRENT_MEMBER_ASSIGNMENT = 22
TOPOLOGY = 23

_NAMES: dict[int, str] = {
    GROUP_METADATA: "StreamsGroupMetadata",
    MEMBER_METADATA: "StreamsGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "StreamsGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "StreamsGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "StreamsGroupCurrentMemberAssignment",
    TOPOLOGY: "StreamsGroupTopology",
}
KEY_TYPES = frozenset(_NAMES)
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

Tasks = dict[str, frozenset[int]]


class CorruptStreamsGroupRecord(ValueError):
    """A streams-group key or value that does not parse."""


_FRAMING = GroupRecordFraming("streams-group", _NAMES, _PER_MEMBER, CorruptStreamsGroupRecord)


@dataclass(slots=True)
class StreamsRecord:
    """One streams-group record: ``kind`` is its record type; ``value`` None means tombstone."""

    kind: int
    group_id: str
    member_id: str | None = None
    value: dict[str, Any] | None = None

    def encode(self) -> tuple[bytes, bytes | None]:
        return _FRAMING.encode(self.kind, self.group_id, self.member_id, self.value)


def is_streams_group_key(key: bytes | None) -> bool:
    return _FRAMING.is_key(key)


def decode(key: bytes | None, value: bytes | None) -> StreamsRecord:
    return StreamsRecord(*_FRAMING.decode(key, value))


# -- builders (Kafka's StreamsCoordinatorRecordHelpers) -------------------------------------------

def task_rows(tasks: Tasks) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


def tasks_from(rows: Sequence[Mapping[str, Any]] | None) -> Tasks:
    out: dict[str, frozenset[int]] = {}
    for row in rows or ():
        if row["partitions"]:
            out[row["subtopology_id"]] = out.get(row["subtopology_id"], frozenset()) | frozenset(row["partitions"])
    return out


def group_metadata_record(group_id: str, epoch: int, metadata_hash: int, validated_topology_epoch: int,
                          assignment_configs: dict[str, str]) -> StreamsRecord:
    return StreamsRecord(GROUP_METADATA, group_id, None, {
        "epoch": epoch, "metadata_hash": metadata_hash, "validated_topology_epoch": validated_topology_epoch,
        "last_assignment_configs": [{"key": k, "value": v} for k, v in sorted(assignment_configs.items())],
        "stored_description_topology_epoch": -1, "failed_description_topology_epoch": -1})


def member_metadata_record(group_id: str, member: Any) -> StreamsRecord:
    """``member``: a streams_group.StreamsGroupMember."""
    endpoint = member.user_endpoint
    return StreamsRecord(MEMBER_METADATA, group_id, member.member_id, {
        "instance_id": member.instance_id, "rack_id": member.rack_id, "client_id": member.client_id,
        "client_host": member.client_host, "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "topology_epoch": member.topology_epoch, "process_id": member.process_id,
        "user_endpoint": None if endpoint is None else {"host": endpoint[0], "port": endpoint[1]},
        "client_tags": [{"key": k, "value": v} for k, v in sorted(member.client_tags)]})


def target_assignment_record(group_id: str, member_id: str, active: Tasks, standby: Tasks,
                             warmup: Tasks) -> StreamsRecord:
    return StreamsRecord(TARGET_ASSIGNMENT_MEMBER, group_id, member_id, {
        "active_tasks": task_rows(active), "standby_tasks": task_rows(standby), "warmup_tasks": task_rows(warmup)})


def target_assignment_metadata_record(group_id: str, epoch: int, timestamp_ms: int = 0) -> StreamsRecord:
    return StreamsRecord(TARGET_ASSIGNMENT_METADATA, group_id, None,
                         {"assignment_epoch": epoch, "assignment_timestamp": timestamp_ms})


def current_assignment_record(group_id: str, member: Any) -> StreamsRecord:
    return StreamsRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, {
        "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_member_epoch,
        "state": int(member.state),
        "active_tasks": task_rows(member.active), "standby_tasks": task_rows(member.standby),
        "warmup_tasks": task_rows(member.warmup),
        "active_tasks_pending_revocation": task_rows(member.active_revoking),
        "standby_tasks_pending_revocation": task_rows(member.standby_revoking),
        "warmup_tasks_pending_revocation": task_rows(member.warmup_revoking)})


def topology_record(group_id: str, topology: dict[str, Any]) -> StreamsRecord:
    """``topology``: the StreamsGroupTopologyValue body (streams_topology.StreamsTopology.record_value)."""
    return StreamsRecord(TOPOLOGY, group_id, None, topology)


def tombstone(kind: int, group_id: str, member_id: str | None = None) -> StreamsRecord:
    return StreamsRecord(kind, group_id, member_id)
