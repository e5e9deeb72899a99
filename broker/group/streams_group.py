"""KIP-1071 streams groups: members, topology, tasks, epochs and reconciliation (Kafka 4.4's
StreamsGroup, StreamsGroupMember, streams/CurrentAssignmentBuilder and the streams half of
GroupMetadataManager).

Theory of operation (the consumer protocol's rules, consumer_group.py, with tasks for partitions):

1. The first member to join sends the application's topology; the group keeps it (a
   StreamsGroupTopology record) and configures it against the metadata image
   (streams_topology.configure): source topics must exist, internal topics get their partition
   counts and are created by the broker that answered the heartbeat. A topology that is not ready
   answers a status (MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, INCORRECTLY_PARTITIONED_TOPICS)
   and assigns no task. A member joining with a topology equal to the group's, or with an older
   epoch (it gets STALE_TOPOLOGY), is taken; another topology at the same or a newer epoch is
   INVALID_REQUEST ("Topology updates are not supported yet."), as Kafka 4.4.
2. Epochs. The *group epoch* moves when a member joins, leaves or changes what the assignment
   depends on (process, rack, client tags, topology epoch), when the metadata of the group's topics
   changes (a hash of their ids and partition counts), when the topology becomes (un)ready, and when
   ``num.standby.replicas`` changes. A heartbeat that finds the group epoch ahead of the assignment
   epoch runs the sticky task assignor (streams_assignor.py) for every member. A new group waits
   ``group.streams.initial.rebalance.delay.ms`` before its first assignment (ASSIGNMENT_DELAYED),
   so the application's other instances can join first; after that, a new target is computed at
   most once per ``group.streams.assignment.interval.ms`` from the last one's timestamp (a heartbeat
   inside the interval answers ASSIGNMENT_DELAYED and keeps the old target; one after it assigns).
3. Reconciliation (``reconcile``, Kafka's CurrentAssignmentBuilder): tasks in a member's assignment
   but not in its target are pending revocation - the member keeps its epoch in UNREVOKED_TASKS
   until a heartbeat's owned tasks no longer include them (or its rebalance timeout fences it).
   A target task is handed over only when it is free: an active task while any member still owns
   it as active (or this member's process holds it as standby or warm-up); a standby or warm-up
   task while this member's process holds it in any role. Otherwise the member waits in
   UNRELEASED_TASKS. So an active task never has two owners.
4. Fencing, leaving, static members and persistence as in consumer_group.py (rules 3-4): memory is
   the replay of the log; timers are armed after the write.
5. Streams groups share the id space of classic, consumer and share groups: a heartbeat for an id
   another kind of group holds is GROUP_ID_NOT_FOUND ("Group g is not a streams group.").
   (Kafka replaces an Empty classic group; here it is refused too.)

Committed offsets: Kafka Streams commits with OffsetCommit v9+ and, under exactly-once,
TxnOffsetCommit with the member epoch; both are checked against the member as Kafka's
StreamsGroup.validateOffsetCommit does (offset_manager.py, txn_offsets.py).

Warm-up tasks: none are assigned, as in Kafka 4.4.0, whose assignment refinement step
(AssignmentRefiner.refine, the place where a warm-up replica would restore state before its active
task moves) returns the assignor's target unchanged; ``task_offsets`` are kept, shown by describe
and rank standby candidates in the assignor. Topology descriptions (KIP-1331): Kafka 4.4 keeps them
only in a StreamsGroupTopologyDescriptionPlugin, unset by default, and Odradek serves that default
(streams_topology_descriptions.py): no heartbeat asks for one, StreamsGroupTopologyDescriptionUpdate
is UNSUPPORTED_VERSION, describe says NOT_STORED. Client tags are kept and described; the assignor
does not read them (Kafka 4.4.0's sticky assignor does not either), and a v1 member lacking a
configured rack-aware tag key is told MISSING_CLIENT_TAGS (streams_manager.py).

Not implemented (Kafka 4.4 has them): a topology description plugin, source-topic regular
expressions (INVALID_REQUEST, as Kafka 4.4), offset expiry of streams groups. Per-group configs
(resource type 32, ``streams.*``) are read at each use through group_overrides.py.

Ownership: the handler loop (requests, timer callbacks, partition load/unload). No locks.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.group import streams_records as SR
from odradek.broker.group.classic_group import GroupState
from odradek.broker.group.records import OffsetAndMetadata
from odradek.broker.group.streams_topology import ConfiguredTopology, StreamsTopology
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
GROUP_TYPE = "streams"
PROTOCOL_TYPE = "streams"

Tasks = dict[str, frozenset[int]]
EMPTY: Tasks = {}


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState (the byte in StreamsGroupCurrentMemberAssignmentValue.state)."""

    STABLE = 1
    UNREVOKED_TASKS = 2
    UNRELEASED_TASKS = 3
    UNKNOWN = 127


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def streams_error(code: ErrorCode, message: str) -> KafkaApiError:
    return KafkaApiError(code, message)


def merge_tasks(a: Tasks, b: Tasks) -> Tasks:
    out = dict(a)
    for s, ps in b.items():
        out[s] = out.get(s, frozenset()) | ps
    return {s: ps for s, ps in out.items() if ps}


def _contains_any(owned: Tasks | None, tasks: Tasks) -> bool:
    if owned is None:
        return True
    return any(owned.get(s, frozenset()) & ps for s, ps in tasks.items())


@dataclass(frozen=True, slots=True)
class StreamsGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: frozenset[tuple[str, str]] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    active_revoking: Tasks = field(default_factory=dict)
    standby_revoking: Tasks = field(default_factory=dict)
    warmup_revoking: Tasks = field(default_factory=dict)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == assignment_epoch

    def with_epoch(self, epoch: int, **changes: Any) -> StreamsGroupMember:
        return dataclasses.replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch, **changes)

    def assigned(self) -> tuple[Tasks, Tasks, Tasks]:
        return self.active, self.standby, self.warmup

    def metadata_equal(self, other: StreamsGroupMember) -> bool:
        def meta(m: StreamsGroupMember) -> tuple[object, ...]:
            return (m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.topology_epoch,
                    m.process_id, m.user_endpoint, m.client_tags)
        return meta(self) == meta(other)

    def epoch_relevant(self) -> tuple[object, ...]:
        """Kafka's hasEpochRelevantMemberConfigChanged: what a static member may change without a
        new assignment (anything else)."""
        return (self.topology_epoch, self.rack_id, self.client_tags, self.process_id)


@dataclass(frozen=True, slots=True)
class Target:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)


def reconcile(member: StreamsGroupMember, target_epoch: int, target: Target, owners: _Owners,
              owned: Tasks | None) -> StreamsGroupMember:
    """Kafka's streams CurrentAssignmentBuilder.build (rule 3); ``owned``: the union of the owned
    active, standby and warm-up tasks the heartbeat reported (None: not reported)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, owners, owned)
        return member
    if member.state == MemberState.UNREVOKED_TASKS:
        revoking = merge_tasks(merge_tasks(member.active_revoking, member.standby_revoking), member.warmup_revoking)
        if owned is None or _contains_any(owned, revoking):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owners, owned)
    if member.state == MemberState.UNRELEASED_TASKS:
        return _next(member, member.member_epoch, target_epoch, target, owners, owned)
    if owned is None or owned:
        raise streams_error(ErrorCode.FENCED_MEMBER_EPOCH, "The streams group member is in a unknown state. "
                    "The member must abandon all its tasks and rejoin.")
    return _next(member, target_epoch, target_epoch, target, owners, owned)


def _difference(current: Tasks, target: Tasks, unreleased: Callable[[str, int], bool]
                ) -> tuple[Tasks, Tasks, Tasks, bool]:
    keep: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    add: dict[str, frozenset[int]] = {}
    held = False
    for s in set(current) | set(target):
        cur, tgt = current.get(s, frozenset()), target.get(s, frozenset())
        k = cur & tgt
        new = tgt - k
        free = frozenset(p for p in new if not unreleased(s, p))
        held |= free != new
        if k:
            keep[s] = k
        if cur - k:
            revoke[s] = cur - k
        if free:
            add[s] = free
    return keep, revoke, add, held


def _next(member: StreamsGroupMember, member_epoch: int, target_epoch: int, target: Target, owners: _Owners,
          owned: Tasks | None) -> StreamsGroupMember:
    proc = member.process_id

    def active_held(s: str, p: int) -> bool:
        return owners.active.get((s, p)) is not None or proc in owners.standby.get((s, p), ()) \
            or proc in owners.warmup.get((s, p), ())

    def other_held(s: str, p: int) -> bool:
        return owners.active.get((s, p)) == proc or proc in owners.standby.get((s, p), ()) \
            or proc in owners.warmup.get((s, p), ())

    a_keep, a_rev, a_add, a_held = _difference(member.active, target.active, active_held)
    s_keep, s_rev, s_add, s_held = _difference(member.standby, target.standby, other_held)
    w_keep, w_rev, w_add, w_held = _difference(member.warmup, target.warmup, other_held)
    revoking = merge_tasks(merge_tasks(a_rev, s_rev), w_rev)
    held = a_held or s_held or w_held
    if revoking and (owned is None or _contains_any(owned, revoking)):
        return member.with_epoch(member_epoch, state=MemberState.UNREVOKED_TASKS, active=a_keep, standby=s_keep,
                                 warmup=w_keep, active_revoking=a_rev, standby_revoking=s_rev, warmup_revoking=w_rev)
    state = MemberState.UNRELEASED_TASKS if held else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, active=merge_tasks(a_keep, a_add), standby=merge_tasks(s_keep, s_add),
                             warmup=merge_tasks(w_keep, w_add), active_revoking={}, standby_revoking={}, warmup_revoking={})


@dataclass(slots=True)
class _Owners:
    """Which process holds each task now (assigned or pending revocation), as Kafka's StreamsGroup
    keeps currentActiveTaskToProcessId and the standby/warm-up process sets."""

    active: dict[tuple[str, int], str] = field(default_factory=dict)
    standby: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    warmup: dict[tuple[str, int], set[str]] = field(default_factory=dict)

    def change(self, member: StreamsGroupMember, add: bool) -> None:
        proc = member.process_id
        for tasks in (member.active, member.active_revoking):
            for s, ps in tasks.items():
                for p in ps:
                    if add:
                        self.active[(s, p)] = proc
                    elif self.active.get((s, p)) == proc:
                        del self.active[(s, p)]
        for owners, tasks_list in ((self.standby, (member.standby, member.standby_revoking)),
                                   (self.warmup, (member.warmup, member.warmup_revoking))):
            for tasks in tasks_list:
                for s, ps in tasks.items():
                    for p in ps:
                        if add:
                            owners.setdefault((s, p), set()).add(proc)
                        else:
                            procs = owners.get((s, p))
                            if procs is not None:
                                procs.discard(proc)
                                if not procs:
                                    del owners[(s, p)]


class StreamsGroup:
    """A streams group's state, changed only by ``replay`` of its records (rule 4)."""

    def __init__(self, group_id: str, partition: int) -> None:
        self.group_id = group_id
        self.partition = partition
        # Kafka 4.4's StreamsGroup starts at group epoch 1: its first member's heartbeat writes epoch 2.
        self.group_epoch = 1
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        self.assignment_configs: dict[str, str] = {}
        # Kafka 4.4's TargetAssignmentMetadata.INITIAL: a new group's (empty) target is at epoch 1,
        # so its first member reconciles to epoch 1 while the first assignment waits.
        self.assignment_epoch = 1
        # When the target was last computed (TargetAssignmentMetadata's timestamp; 0 = never):
        # group.streams.assignment.interval.ms counts from it.
        self.assignment_timestamp_ms = 0
        self.members: dict[str, StreamsGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, Target] = {}
        self.topology: StreamsTopology | None = None
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.owners = _Owners()
        self.deleted = False
        # Not persisted (as in Kafka): derived from the image, or held while the group lives here.
        self.configured: ConfiguredTopology | None = None
        self.shutdown_requested_by: str | None = None
        self.endpoint_information_epoch = 0
        self.task_offsets: dict[str, tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]] = {}

    @property
    def state(self) -> StreamsGroupState:
        if self.deleted:
            return StreamsGroupState.DEAD
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def is_in(self, *states: Any) -> bool:
        """Answers the offset code, which asks with classic GroupStates."""
        for s in states:
            if s is GroupState.EMPTY and self.state is StreamsGroupState.EMPTY:
                return True
            if s is GroupState.DEAD and self.deleted:
                return True
        return False

    def uses_consumer_protocol(self) -> bool:
        return False

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.topology is not None and topic in self.topology.source_topics()

    def static_member(self, instance_id: str) -> StreamsGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    # -- offsets (Kafka's StreamsGroup.validateOffsetCommit / validateOffsetFetch) ----------------

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int,
                               transactional: bool = False) -> None:
        if member_epoch < 0 and not self.members:
            return
        if transactional and member_epoch == -1 and member_id == "":
            return
        member = self.members.get(member_id)
        if member is None:
            raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}.")
        if not transactional and api_version < 9:
            raise streams_error(ErrorCode.UNSUPPORTED_VERSION,
                        "OffsetCommit version 9 or above must be used by members using the streams group protocol")
        if member_epoch != member.member_epoch:
            # Kafka 4.4 also takes an older epoch for tasks assigned since it; Kafka Streams commits
            # at its current epoch, so only the exact one is taken here.
            raise streams_error(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match "
                        f"the expected member epoch {member.member_epoch}.")

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        member = self.members.get(member_id or "")
        if member is None:
            raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch != member.member_epoch:
            raise streams_error(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match "
                        f"the expected member epoch {member.member_epoch}.")

    # -- replay (rule 4) ---------------------------------------------------------------------------

    def replay(self, rec: SR.StreamsRecord) -> None:
        v = rec.value
        mid = rec.member_id or ""
        if rec.kind == SR.GROUP_METADATA:
            if v is None:
                self.deleted = True
                return
            self.group_epoch = v["epoch"]
            self.metadata_hash = v["metadata_hash"]
            self.validated_topology_epoch = v["validated_topology_epoch"]
            self.assignment_configs = {c["key"]: c["value"] for c in v["last_assignment_configs"] or ()}
        elif rec.kind == SR.TOPOLOGY:
            self.topology = None if v is None else StreamsTopology.from_wire(v)
            self.configured = None
        elif rec.kind == SR.TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = -1 if v is None else v["assignment_epoch"]
            self.assignment_timestamp_ms = 0 if v is None else v["assignment_timestamp"]
        elif rec.kind == SR.TARGET_ASSIGNMENT_MEMBER:
            if v is None:
                self.target.pop(mid, None)
            else:
                self.target[mid] = Target(SR.tasks_from(v["active_tasks"]), SR.tasks_from(v["standby_tasks"]),
                                          SR.tasks_from(v["warmup_tasks"]))
        elif rec.kind == SR.MEMBER_METADATA:
            old = self.members.get(mid)
            if v is None:
                if old is not None:
                    self._set_member(old, None)
                return
            base = old if old is not None else StreamsGroupMember(mid, previous_member_epoch=-1)
            endpoint = v["user_endpoint"]
            self._set_member(old, dataclasses.replace(
                base, instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
                client_host=v["client_host"], rebalance_timeout_ms=v["rebalance_timeout_ms"],
                topology_epoch=v["topology_epoch"], process_id=v["process_id"],
                user_endpoint=None if endpoint is None else (endpoint["host"], endpoint["port"]),
                client_tags=frozenset((t["key"], t["value"]) for t in v["client_tags"] or ())))
        elif rec.kind == SR.CURRENT_MEMBER_ASSIGNMENT:
            old = self.members.get(mid)
            if v is None:
                if old is not None:
                    self._set_member(old, dataclasses.replace(
                        old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        active={}, standby={}, warmup={}, active_revoking={}, standby_revoking={},
                        warmup_revoking={}))
                return
            base = old if old is not None else StreamsGroupMember(mid)
            try:
                state = MemberState(v["state"])
            except ValueError:
                state = MemberState.UNKNOWN
            self._set_member(old, dataclasses.replace(
                base, member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"], state=state,
                active=SR.tasks_from(v["active_tasks"]), standby=SR.tasks_from(v["standby_tasks"]),
                warmup=SR.tasks_from(v["warmup_tasks"]),
                active_revoking=SR.tasks_from(v["active_tasks_pending_revocation"]),
                standby_revoking=SR.tasks_from(v["standby_tasks_pending_revocation"]),
                warmup_revoking=SR.tasks_from(v["warmup_tasks_pending_revocation"])))

    def _set_member(self, old: StreamsGroupMember | None, new: StreamsGroupMember | None) -> None:
        if old is not None:
            self.owners.change(old, add=False)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
            del self.members[old.member_id]
        if new is not None:
            self.members[new.member_id] = new
            if new.instance_id is not None:
                self.static_members[new.instance_id] = new.member_id
            self.owners.change(new, add=True)
        if not self.members:
            self.shutdown_requested_by = None  # Kafka clears it when the group empties

    def tombstones(self) -> list[SR.StreamsRecord]:
        g = self.group_id
        out = [SR.tombstone(SR.CURRENT_MEMBER_ASSIGNMENT, g, m) for m in self.members]
        out += [SR.tombstone(SR.TARGET_ASSIGNMENT_MEMBER, g, m) for m in self.members]
        out.append(SR.tombstone(SR.TARGET_ASSIGNMENT_METADATA, g))
        out += [SR.tombstone(SR.MEMBER_METADATA, g, m) for m in self.members]
        out.append(SR.tombstone(SR.TOPOLOGY, g))
        out.append(SR.tombstone(SR.GROUP_METADATA, g))
        return out


def replay_into(groups: dict[str, StreamsGroup], rec: SR.StreamsRecord, partition: int) -> None:
    group = groups.get(rec.group_id)
    if group is None:
        if rec.value is None:
            return
        group = groups[rec.group_id] = StreamsGroup(rec.group_id, partition)
    group.replay(rec)
    if group.deleted:
        del groups[rec.group_id]


class StreamsGroupLoader:
    """Collects one __consumer_offsets partition's streams-group records while it is replayed."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.groups: dict[str, StreamsGroup] = {}

    def replay(self, key: bytes | None, value: bytes | None) -> bool:
        if not SR.is_streams_group_key(key):
            return False
        try:
            replay_into(self.groups, SR.decode(key, value), self.partition)
        except SR.CorruptStreamsGroupRecord as exc:
            log.error("skipping unreadable streams-group record in __consumer_offsets-%d: %s", self.partition, exc)
        return True
