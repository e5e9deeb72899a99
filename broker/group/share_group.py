"""Share groups (KIP-932): members, epochs and assignments on the group coordinator (Kafka 4.4's
ShareGroup, ShareGroupMember and the share-group half of GroupMetadataManager).

Theory of operation:

1. A share group's members do not own partitions, so there is no revocation: a member is handed
   its target assignment at once and its member epoch is the group epoch that assignment was
   computed for. The *group epoch* moves when a member joins or leaves, changes its subscription,
   or a subscribed topic's partition count changes (checked on every heartbeat); the ``simple``
   assignor (share_assignor.py) then recomputes every member's target.
2. Heartbeats: epoch 0 joins (the member id is the client's, required from v1, as Kafka 4.4),
   -1 leaves; any other epoch must be the member's (FENCED_MEMBER_EPOCH otherwise; a member the
   group does not know is UNKNOWN_MEMBER_ID). A member that stops heartbeating for
   ``group.share.session.timeout.ms`` is removed. The answer carries the assignment when the
   member's epoch moved or the request was a full one (it named its subscription).
3. Groups of every protocol share one id space: a heartbeat on an id held by a classic or
   consumer group is GROUP_ID_NOT_FOUND ("Group x is not a share group."), as Kafka.
4. Durable as Kafka's: a change is written to the group's __consumer_offsets partition as Kafka
   4.4's share-group records (share_group_records.py) and only once durable swapped into memory.
   A write operation computes the change on a copy of the group, diffs it against the group in
   memory (``records_of_change``: only what moved is written, so most heartbeats write nothing)
   and the runtime's ``apply`` installs the copy; loading the partition on a new coordinator
   replays the records (``ShareGroupLoader``), so a killed coordinator's successor still knows
   the group, its members (their session timeouts restart) and the topics it has
   share-partitions for (the state-partition metadata record). Records in flight are kept by the
   share-partitions on the partition leaders, not here (broker/share/).

Group states (Kafka's ShareGroup.ShareGroupState): Empty, Stable, Dead.

Ownership: the handler loop (requests, timer callbacks). No locks.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinator.runtime import CoordinatorResult, CoordinatorWriteError
from odradek.broker.group import share_assignor
from odradek.broker.group import share_group_records as SGR
from odradek.broker.group.consumer_group_records import assignment_from
from odradek.broker.group.context import GroupContext
from odradek.broker.group.errors import append_error
from odradek.broker.group.group_overrides import group_int
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        ListedGroup,
        ShareGroupDescribeResponseDescribedGroup,
        ShareGroupHeartbeatResponse,
        ShareGroupHeartbeatResponseAssignment,
    )

GROUP_TYPE = "share"
LEAVE_GROUP_MEMBER_EPOCH = -1

log = logging.getLogger(__name__)


@dataclass
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assignment: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    # (topic id, partition count) of every subscribed topic when the epoch last moved.
    subscribed_metadata: tuple[tuple[uuid.UUID, int], ...] = ()

    @property
    def state(self) -> str:
        return "Empty" if not self.members else "Stable"


class ShareGroupManager:
    """ShareGroupHeartbeat and ShareGroupDescribe over the share groups of the partitions led here."""

    def __init__(self, ctx: GroupContext, heartbeat_interval_ms: int, session_timeout_ms: int, max_size: int) -> None:
        self.ctx = ctx
        self.groups: dict[str, ShareGroup] = ctx.share_groups
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.max_size = max_size

    # ------------------------------------------------------------------------------------------
    # heartbeat

    async def heartbeat(self, body: Mapping[str, Any], client_id: str,
                        client_host: str) -> ShareGroupHeartbeatResponse:
        """One ShareGroupHeartbeat, answered once its records (if any) are durable and applied;
        KafkaApiError for an error answer."""
        group_id = body["group_id"]
        _validate(body)
        partition = self.ctx.check_coordinator(group_id)
        try:
            return await self.ctx.runtime.write(
                partition, functools.partial(self._heartbeat_op, body, client_id, client_host))
        except CoordinatorWriteError as exc:
            raise KafkaApiError(append_error(exc.code)) from None

    def _heartbeat_op(self, body: Mapping[str, Any], client_id: str, client_host: str,
                      shard: object) -> CoordinatorResult[ShareGroupHeartbeatResponse]:
        group_id, member_id, epoch = body["group_id"], body["member_id"], body["member_epoch"]
        if self._other_protocol(group_id):
            raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        old = self.groups.get(group_id)
        group = copy.deepcopy(old)  # changed here, installed by the result's apply once durable
        changed = False  # membership, a subscription or a subscribed topic's partitions: the epoch moves once
        if epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or member_id not in group.members:
                raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID,
                                    f"Member {member_id} is not a member of group {group_id}.")
            self._remove_member(group, member_id)
            return self._result(old, group, self._response(group_id, member_id, LEAVE_GROUP_MEMBER_EPOCH, None),
                                lambda: self.ctx.timer.cancel(("sg-session", group_id, member_id)))
        if group is None:
            if epoch != 0:
                raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            group = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None:
            if epoch != 0:
                raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID,
                                    f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self.max_size:
                raise KafkaApiError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                    f"The share group has reached its maximum capacity of {self.max_size} members.")
            member = group.members[member_id] = ShareGroupMember(member_id)
            changed = True
        elif epoch != member.member_epoch and epoch != 0:
            raise KafkaApiError(ErrorCode.FENCED_MEMBER_EPOCH,
                                f"The share group member has a smaller member epoch ({epoch}) than the one known "
                                f"by the group coordinator ({member.member_epoch}).")
        names = body.get("subscribed_topic_names")
        if names is not None and frozenset(names) != member.subscribed_topic_names:
            member.subscribed_topic_names = frozenset(names)
            changed = True
        if body.get("rack_id") is not None:
            member.rack_id = body["rack_id"]
        member.client_id, member.client_host = client_id, client_host
        metadata = self._subscribed_metadata(group)
        if metadata != group.subscribed_metadata:
            group.subscribed_metadata = metadata
            changed = True
        if changed:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            self._assign(group, dict(metadata))
        previous_epoch = epoch
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        full = epoch == 0 or names is not None
        assignment = self._assignment(member) if full or member.member_epoch != previous_epoch else None
        return self._result(old, group, self._response(group_id, member_id, member.member_epoch, assignment),
                            lambda: self._schedule_session_timeout(group_id, member_id))

    def _result(self, old: ShareGroup | None, new: ShareGroup | None, response: Any,
                after: Callable[[], None] | None = None) -> CoordinatorResult[Any]:
        """The write operation's result: the records of what changed from ``old`` to ``new``; once
        durable, ``new`` replaces the group in memory (None: the group is gone) and ``after`` runs."""
        group_id = (new or old).group_id  # type: ignore[union-attr]
        records = records_of_change(group_id, old, new, self._topic_names())

        def apply() -> None:
            if new is None:
                self.groups.pop(group_id, None)
            else:
                self.groups[group_id] = new
            if after is not None:
                after()

        return CoordinatorResult([r.encode() for r in records], response, apply)

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return {t.topic_id: t.name for t in self.ctx.metadata.image.topics.values()}

    def _other_protocol(self, group_id: str) -> bool:
        """The id is held by a classic, consumer or streams group (one id space, as Kafka's)."""
        return (group_id in self.ctx.classic_groups or group_id in self.ctx.consumer_groups
                or group_id in self.ctx.streams_groups)

    def _subscribed_metadata(self, group: ShareGroup) -> tuple[tuple[uuid.UUID, int], ...]:
        image = self.ctx.metadata.image
        names = set().union(*(m.subscribed_topic_names for m in group.members.values()))
        found = []
        for name in names:
            topic = image.topics.get(name)
            if topic is not None and not topic.is_internal:
                found.append((topic.topic_id, len(topic.partitions)))
        return tuple(sorted(found))

    def _assign(self, group: ShareGroup, partition_counts: dict[uuid.UUID, int]) -> None:
        image = self.ctx.metadata.image
        ids = {t.name: t.topic_id for t in image.topics.values()}
        subscriptions = {m.member_id: frozenset(ids[n] for n in m.subscribed_topic_names if n in ids)
                         for m in group.members.values()}
        targets = share_assignor.assign(subscriptions, partition_counts,
                                        {m.member_id: m.assignment for m in group.members.values()})
        for member_id, target in targets.items():
            group.members[member_id].assignment = target
        group.assignment_epoch = group.group_epoch

    def _remove_member(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        if group.members:
            # Each member takes the new epoch and assignment on its next heartbeat.
            self._assign(group, dict(self._subscribed_metadata(group)))
        else:
            group.assignment_epoch = group.group_epoch

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        def expire() -> None:
            if member_id in getattr(self.groups.get(group_id), "members", {}):
                self.ctx.runtime.schedule_write(self.ctx.partition_for(group_id),
                                                functools.partial(self._expire_op, group_id, member_id),
                                                f"remove share group {group_id}'s expired member {member_id}")
        timeout = group_int(self.ctx.metadata, group_id, "share.session.timeout.ms", self.session_timeout_ms)
        self.ctx.timer.schedule(("sg-session", group_id, member_id), timeout, expire)

    def _expire_op(self, group_id: str, member_id: str, shard: object) -> CoordinatorResult[None]:
        old = self.groups.get(group_id)
        if old is None or member_id not in old.members:
            return CoordinatorResult([], None)
        group = copy.deepcopy(old)
        self._remove_member(group, member_id)
        return self._result(old, group, None)

    def delete_group_op(self, group_id: str, shard: object) -> CoordinatorResult[None]:
        """DeleteGroups of an empty share group (a write operation): the group's tombstones; once
        durable it is gone (its share state is the share coordinator's, deleted by the caller)."""
        old = self.groups.get(group_id)
        if old is None:
            raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if old.members:
            raise KafkaApiError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        return self._result(old, None, None)

    def _assignment(self, member: ShareGroupMember) -> ShareGroupHeartbeatResponseAssignment:
        return {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                     for t, ps in sorted(member.assignment.items())]}

    def _response(self, group_id: str, member_id: str, epoch: int,
                  assignment: ShareGroupHeartbeatResponseAssignment | None) -> ShareGroupHeartbeatResponse:
        interval = group_int(self.ctx.metadata, group_id, "share.heartbeat.interval.ms", self.heartbeat_interval_ms)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "member_id": member_id,
                "member_epoch": epoch, "heartbeat_interval_ms": interval, "assignment": assignment}

    # ------------------------------------------------------------------------------------------
    # describe, list

    def describe(self, group_id: str) -> ShareGroupDescribeResponseDescribedGroup:
        entry: ShareGroupDescribeResponseDescribedGroup = {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
                                 "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                                 "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        try:
            self.ctx.check_coordinator(group_id)
        except KafkaApiError as exc:
            entry["error_code"] = exc.code
            return entry
        group = self.groups.get(group_id)
        if group is None:
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            entry["error_message"] = (f"Group {group_id} is not a share group."
                                      if self._other_protocol(group_id) else f"Group {group_id} not found.")
            return entry
        names = {t.topic_id: t.name for t in self.ctx.metadata.image.topics.values()}
        entry["group_state"], entry["group_epoch"] = group.state, group.group_epoch
        entry["assignment_epoch"], entry["assignor_name"] = group.assignment_epoch, share_assignor.NAME
        entry["members"] = [{
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topic_names": sorted(m.subscribed_topic_names),
            "assignment": {"topic_partitions": [{"topic_id": t, "topic_name": names[t], "partitions": sorted(ps)}
                                                for t, ps in sorted(m.assignment.items()) if t in names]},
        } for m in group.members.values()]
        return entry

    def list_groups(self, active_partitions: set[int], states: set[str] | None,
                    types: set[str] | None) -> list[ListedGroup]:
        """ListGroups entries; ``states``/``types`` already lower-cased (None = no filter)."""
        if types is not None and GROUP_TYPE not in types:
            return []
        return [{"group_id": g.group_id, "protocol_type": "share", "group_state": g.state, "group_type": GROUP_TYPE}
                for g in self.groups.values()
                if self.ctx.partition_for(g.group_id) in active_partitions
                and (states is None or g.state.lower() in states)]

    def install_loaded(self, loaded: dict[str, ShareGroup]) -> None:
        """After a partition's replay: take its share groups and start every member's session
        timeout afresh (Kafka's onLoaded)."""
        for group_id, group in loaded.items():
            self.groups[group_id] = group
            for member_id in group.members:
                self._schedule_session_timeout(group_id, member_id)

    def unload(self, partition: int) -> None:
        """The coordinator partition moved away: its share groups are no longer served here."""
        for group_id in [g for g in self.groups if self.ctx.partition_for(g) == partition]:
            for member_id in self.groups[group_id].members:
                self.ctx.timer.cancel(("sg-session", group_id, member_id))
            del self.groups[group_id]


def metadata_hash(subscribed: tuple[tuple[uuid.UUID, int], ...]) -> int:
    """ShareGroupMetadataValue.metadata_hash: a 64-bit digest of the subscribed topics and their
    partition counts. Kafka hashes these (and racks) with its own function; only equality matters
    (a change of the subscribed topics' metadata), so ours is a different, stable digest."""
    digest = hashlib.sha256(b"".join(tid.bytes + n.to_bytes(4, "big") for tid, n in subscribed)).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def records_of_change(group_id: str, old: ShareGroup | None, new: ShareGroup | None,
                      topic_names: Mapping[uuid.UUID, str]) -> list[SGR.ShareRecord]:
    """The records that turn ``old`` into ``new`` (None: no group), in Kafka's order: removed
    members' tombstones; member metadata, group epoch, target assignments, assignment epoch,
    current assignments, state-partition metadata; a deleted group's own tombstones last."""
    recs: list[SGR.ShareRecord] = []
    before = old.members if old is not None else {}
    after = new.members if new is not None else {}
    for member_id in before:
        if member_id not in after:
            recs += [SGR.tombstone(SGR.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id),
                     SGR.tombstone(SGR.TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
                     SGR.tombstone(SGR.MEMBER_METADATA, group_id, member_id)]
    if new is None:
        if old is not None:
            recs += [SGR.tombstone(SGR.TARGET_ASSIGNMENT_METADATA, group_id),
                     SGR.tombstone(SGR.STATE_PARTITION_METADATA, group_id),
                     SGR.tombstone(SGR.GROUP_METADATA, group_id)]
        return recs
    for member_id, m in after.items():
        o = before.get(member_id)
        if o is None or (o.rack_id, o.client_id, o.client_host, o.subscribed_topic_names) != (
                m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names):
            recs.append(SGR.member_metadata_record(group_id, m))
    if old is None or (old.group_epoch, old.subscribed_metadata) != (new.group_epoch, new.subscribed_metadata):
        recs.append(SGR.group_metadata_record(group_id, new.group_epoch, metadata_hash(new.subscribed_metadata)))
    for member_id, m in after.items():
        o = before.get(member_id)
        if o is None or o.assignment != m.assignment:
            recs.append(SGR.target_assignment_record(group_id, member_id, m.assignment))
    if old is None or old.assignment_epoch != new.assignment_epoch:
        recs.append(SGR.target_assignment_metadata_record(group_id, new.assignment_epoch))
    for member_id, m in after.items():
        o = before.get(member_id)
        if o is None or (o.member_epoch, o.previous_member_epoch, o.assignment) != (
                m.member_epoch, m.previous_member_epoch, m.assignment):
            recs.append(SGR.current_assignment_record(group_id, m))
    if old is None or old.subscribed_metadata != new.subscribed_metadata:
        recs.append(SGR.state_partition_metadata_record(
            group_id, [(tid, topic_names[tid], n) for tid, n in new.subscribed_metadata if tid in topic_names]))
    return recs


def replay_into(groups: dict[str, ShareGroup], rec: SGR.ShareRecord) -> None:
    """Replay one share-group record into a group map: the group is made on its first record and
    dropped by its group-metadata tombstone, a member made on its first record and dropped by its
    member-metadata tombstone."""
    group = groups.get(rec.group_id)
    if group is None:
        if rec.value is None:
            return
        group = groups[rec.group_id] = ShareGroup(rec.group_id)
    v = rec.value
    if rec.kind == SGR.GROUP_METADATA:
        if v is None:
            del groups[rec.group_id]
        else:
            group.group_epoch = v["epoch"]
    elif rec.kind == SGR.TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = 0 if v is None else v["assignment_epoch"]
    elif rec.kind == SGR.STATE_PARTITION_METADATA:
        group.subscribed_metadata = () if v is None else tuple(sorted(
            (t["topic_id"], len(t["partitions"])) for t in v["initialized_topics"]))
    elif rec.member_id is not None:
        member = group.members.get(rec.member_id)
        if v is None:
            if rec.kind == SGR.MEMBER_METADATA:
                group.members.pop(rec.member_id, None)
            elif member is not None and rec.kind == SGR.TARGET_ASSIGNMENT_MEMBER:
                member.assignment = {}
            return
        if member is None:
            member = group.members[rec.member_id] = ShareGroupMember(rec.member_id)
        if rec.kind == SGR.MEMBER_METADATA:
            member.rack_id, member.client_id, member.client_host = v["rack_id"], v["client_id"], v["client_host"]
            member.subscribed_topic_names = frozenset(v["subscribed_topic_names"])
        elif rec.kind == SGR.TARGET_ASSIGNMENT_MEMBER:
            member.assignment = assignment_from(v["topic_partitions"])
        elif rec.kind == SGR.CURRENT_MEMBER_ASSIGNMENT:
            member.member_epoch, member.previous_member_epoch = v["member_epoch"], v["previous_member_epoch"]


class ShareGroupLoader:
    """Collects one __consumer_offsets partition's share-group records while it is replayed."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.groups: dict[str, ShareGroup] = {}

    def replay(self, key: bytes | None, value: bytes | None) -> bool:
        """Replay the record if it is a share-group record; False if it is not one."""
        if not SGR.is_share_group_key(key):
            return False
        try:
            replay_into(self.groups, SGR.decode(key, value))
        except SGR.CorruptShareGroupRecord as exc:
            log.error("skipping unreadable share-group record in __consumer_offsets-%d: %s", self.partition, exc)
        return True


def _validate(body: Mapping[str, Any]) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid: INVALID_REQUEST with its messages."""
    if not body["group_id"]:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if body.get("rack_id") == "":
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    epoch = body["member_epoch"]
    if not body["member_id"]:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if epoch == 0:
        if not body.get("subscribed_topic_names"):
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is {epoch}, but must be greater than or equal to -1.")
