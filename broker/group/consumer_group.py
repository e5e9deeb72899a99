"""KIP-848 consumer groups: members, epochs, reconciliation (Kafka 4.0's ConsumerGroup,
ConsumerGroupMember, CurrentAssignmentBuilder and the consumer-group half of GroupMetadataManager).

Theory of operation (numbered as the rules a reader must check):

1. Three epochs. The *group epoch* moves whenever the group's membership or subscriptions (or the
   partition counts of subscribed topics) change. The *assignment epoch* is the group epoch the
   current *target assignment* was computed for; a heartbeat that finds ``group_epoch >
   assignment_epoch`` runs the server-side assignor (assignors.py) for every member. Each member
   has a *member epoch*: the assignment epoch it has reconciled to.
2. Reconciliation (``reconcile``, Kafka's CurrentAssignmentBuilder), per member and heartbeat:
   partitions in the member's assignment but not in its target are *pending revocation* — the
   member keeps its epoch and state UNREVOKED_PARTITIONS until a heartbeat's owned partitions no
   longer include any of them (or its rebalance timeout fences it). Partitions in its target are
   given to it only when no other member still holds them (``partition_epochs``); otherwise the
   member waits in UNRELEASED_PARTITIONS. So a partition never has two owners: it is handed on
   only after the previous owner acknowledged its revocation.
3. Fencing. A heartbeat whose epoch is newer than the member's, or older and not the previous
   epoch with a subset of the assignment (a lost response), is FENCED_MEMBER_EPOCH; the member
   rejoins with epoch 0. Leaving (epoch -1), a session timeout
   (``group.consumer.session.timeout.ms`` since the last heartbeat) or a rebalance timeout
   (revocation not acknowledged within the member's rebalance timeout) removes the member and
   bumps the group epoch. A static member (instance id) leaving with epoch -2 keeps its
   assignment and is replaced by the next member with that instance id (UNRELEASED_INSTANCE_ID
   while the old one has not left).
4. Persistence, as Kafka: every change is a write operation on the coordinator runtime. It is
   computed as consumer_group_records (without touching memory), appended to the group's
   __consumer_offsets partition, and only once durable *replayed* into memory with the same
   ``ConsumerGroup.replay`` that loads a partition after a restart. Memory is therefore always the
   replay of the log; a failed append changes nothing. Timers are armed after a durable append.
5. Groups of both protocols share one id space (``GroupContext.classic_groups`` and
   ``GroupContext.consumer_groups``). A heartbeat joining an id held by an Empty classic
   group replaces it (GroupMetadata tombstone, offsets carried over); a non-empty classic group
   answers GROUP_ID_NOT_FOUND. A classic JoinGroup on an Empty consumer group replaces it the other
   way; on a non-empty one it is INCONSISTENT_GROUP_PROTOCOL. Online upgrade/downgrade of
   non-empty groups (members of both protocols in one group) is not implemented.
6. Subscriptions by regular expression (v1 ``subscribed_topic_regex``) use Python's ``re`` with
   full-match semantics (Kafka uses RE2/J; the common syntax agrees) and are resolved against the
   metadata image on every heartbeat rather than asynchronously; internal topics never match.

Group states (Kafka's ConsumerGroupState): Empty (no members), Assigning (group epoch ahead of
the assignment epoch), Reconciling (some member not yet at the assignment epoch), Stable.

Ownership: the handler loop (requests, timer callbacks, partition load/unload). No locks.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorShard,
    CoordinatorWriteError,
    KeyValue,
)
from odradek.broker.group import consumer_group_records as CR
from odradek.broker.group.assignors import MemberSpec, PartitionAssignorError, assignors_from_config
from odradek.broker.group.classic_group import GroupState
from odradek.broker.group.context import GroupContext
from odradek.broker.group.errors import append_error
from odradek.broker.group.group_overrides import group_int
from odradek.broker.group.records import OffsetAndMetadata, group_metadata_key, offset_commit_key
from odradek.broker.runtime.client_regex import ClientRegex, ClientRegexError, compile_client_regex
from odradek.controller.meta_properties import new_kafka_uuid, uuid_to_base64
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        ConsumerGroupDescribeResponseAssignment,
        ConsumerGroupDescribeResponseDescribedGroup,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatRequestTopicPartitions,
        ConsumerGroupHeartbeatResponse,
        ConsumerGroupHeartbeatResponseAssignment,
        ListedGroup,
    )

log = logging.getLogger(__name__)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
PROTOCOL_TYPE = "consumer"
GROUP_TYPE = "consumer"
MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe's MemberType (-1 unknown, 0 classic, 1 consumer)

T = TypeVar("T")

Assignment = dict[uuid.UUID, frozenset[int]]
Owned = list[tuple[uuid.UUID, list[int]]] | None


class MemberState(enum.IntEnum):
    """Kafka's MemberState (the byte stored in ConsumerGroupCurrentMemberAssignmentValue.state)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def _fail(code: ErrorCode, message: str) -> KafkaApiError:
    exc = KafkaApiError(code, message)
    return exc


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member; immutable, so 'changed' is a plain ``!=`` (Kafka compares members the same way)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == assignment_epoch

    def with_epoch(self, epoch: int, **changes: Any) -> ConsumerGroupMember:
        """Kafka's Builder.updateMemberEpoch: the old epoch becomes the previous one."""
        return dataclasses.replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch, **changes)


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    """Whether the owned partitions reported by the member include any of ``partitions``.

    Without a report (null owned partitions) the member is assumed to still own them.
    """
    if owned is None:
        return True
    return any(p in partitions.get(t, ()) for t, ps in owned for p in ps)


def _is_subset(owned: Owned, assignment: Assignment) -> bool:
    if owned is None:
        return False
    return all(t in assignment and set(ps) <= assignment[t] for t, ps in owned)


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              current_partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned) -> ConsumerGroupMember:
    """Kafka's CurrentAssignmentBuilder.build: the member's next state towards the target (rule 2)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target, current_partition_epoch, owned)
        return member
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, current_partition_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, current_partition_epoch, owned)
    # UNKNOWN: written by a newer coordinator; start the member over.
    if owned is None or owned:
        raise _fail(ErrorCode.FENCED_MEMBER_EPOCH,
                    "The consumer group member is in a unknown state. The member must abandon all its "
                    "partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, current_partition_epoch, owned)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
                     current_partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned) -> ConsumerGroupMember:
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    for t in set(target) | set(member.assigned_partitions):
        tgt = target.get(t, frozenset())
        cur = member.assigned_partitions.get(t, frozenset())
        keep = cur & tgt
        gone = cur - keep
        new = tgt - keep
        free = frozenset(p for p in new if current_partition_epoch(t, p) == -1)
        if free != new:
            unreleased = True
        if keep:
            assigned[t] = keep
        if gone:
            revoking[t] = gone
        if free:
            pending[t] = free
    if revoking and _owns_any(owned, revoking):
        # Revoke first: the member stays at its epoch until it acknowledges (rule 2).
        return member.with_epoch(member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned_partitions=assigned, partitions_pending_revocation=revoking)
    for t, ps in pending.items():
        assigned[t] = assigned.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned_partitions=assigned,
                             partitions_pending_revocation={})


class ConsumerGroup:
    """A KIP-848 group's state, changed only by ``replay`` of its records (rule 4)."""

    def __init__(self, group_id: str, partition: int) -> None:
        self.group_id = group_id
        self.partition = partition  # of __consumer_offsets
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}  # name -> (id, partitions)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.deleted = False

    # -- derived state -------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_in(self, *states: Any) -> bool:
        """Answers the classic coordinator's offset code, which asks with classic GroupStates."""
        for s in states:
            if s is GroupState.EMPTY and self.state is ConsumerGroupState.EMPTY:
                return True
            if s is GroupState.DEAD and self.deleted:
                return True
            if s is self.state:
                return True
        return False

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_for(self, member_id: str, instance_id: str | None) -> Assignment:
        """Kafka's targetAssignment(memberId, instanceId): a replacing static member inherits."""
        if member_id in self.target_assignment:
            return self.target_assignment[member_id]
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                return self.target_assignment.get(previous, {})
        return {}

    def preferred_assignor(self, default: str, replace: tuple[ConsumerGroupMember | None,
                                                              ConsumerGroupMember | None] = (None, None)) -> str:
        """The server assignor most members ask for (the default if none asks)."""
        counts: dict[str, int] = {}
        old, new = replace
        for m in self.members.values():
            if old is not None and m.member_id == old.member_id:
                continue
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if new is not None and new.server_assignor:
            counts[new.server_assignor] = counts.get(new.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda n: counts[n])

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscription_metadata or any(
            topic in m.subscribed_topic_names for m in self.members.values())

    # -- offsets (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch) ---------------

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int) -> None:
        if member_epoch < 0 and not self.members:
            return  # admin client or a consumer without group management, on an empty group
        member = self.members.get(member_id)
        if member is None:
            raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}.")
        if api_version < 9:
            raise _fail(ErrorCode.UNSUPPORTED_VERSION,
                        "OffsetCommit version 9 or above must be used by members using the modern group protocol")
        if member_epoch != member.member_epoch:
            raise _fail(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match "
                        f"the expected member epoch {member.member_epoch}.")

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        member = self.members.get(member_id or "")
        if member is None:
            raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch != member.member_epoch:
            raise _fail(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match "
                        f"the expected member epoch {member.member_epoch}.")

    # -- replay (rule 4): the only place state changes -----------------------------------------

    def replay(self, rec: CR.CgRecord) -> None:
        v = rec.value
        if rec.kind == CR.GROUP_METADATA:
            if v is not None:
                self.group_epoch = v["epoch"]
            else:
                self.deleted = True
        elif rec.kind == CR.PARTITION_METADATA:
            self.subscription_metadata = {} if v is None else {
                t["topic_name"]: (t["topic_id"], t["num_partitions"]) for t in v["topics"]}
        elif rec.kind == CR.MEMBER_METADATA:
            member_id = rec.member_id or ""
            old = self.members.get(member_id)
            if v is None:
                if old is not None:
                    self._set_member(old, None)
                return
            base = old if old is not None else ConsumerGroupMember(member_id)
            self._set_member(old, dataclasses.replace(
                base, instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
                client_host=v["client_host"], subscribed_topic_names=frozenset(v["subscribed_topic_names"]),
                subscribed_topic_regex=v["subscribed_topic_regex"], rebalance_timeout_ms=v["rebalance_timeout_ms"],
                server_assignor=v["server_assignor"]))
        elif rec.kind == CR.TARGET_ASSIGNMENT_MEMBER:
            if v is None:
                self.target_assignment.pop(rec.member_id or "", None)
            else:
                self.target_assignment[rec.member_id or ""] = CR.assignment_from(v["topic_partitions"])
        elif rec.kind == CR.TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = -1 if v is None else v["assignment_epoch"]
        elif rec.kind == CR.CURRENT_MEMBER_ASSIGNMENT:
            member_id = rec.member_id or ""
            old = self.members.get(member_id)
            if v is None:
                if old is not None:
                    self._set_member(old, dataclasses.replace(
                        old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned_partitions={}, partitions_pending_revocation={}))
                return
            base = old if old is not None else ConsumerGroupMember(member_id)
            try:
                state = MemberState(v["state"])
            except ValueError:
                state = MemberState.UNKNOWN
            self._set_member(old, dataclasses.replace(
                base, member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"], state=state,
                assigned_partitions=CR.assignment_from(v["assigned_partitions"]),
                partitions_pending_revocation=CR.assignment_from(v["partitions_pending_revocation"])))

    def _set_member(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None) -> None:
        if old is not None:
            for assignment in (old.assigned_partitions, old.partitions_pending_revocation):
                for t, ps in assignment.items():
                    for p in ps:
                        if self.partition_epochs.get((t, p)) == old.member_epoch:
                            del self.partition_epochs[(t, p)]
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
            del self.members[old.member_id]
        if new is not None:
            self.members[new.member_id] = new
            if new.instance_id is not None:
                self.static_members[new.instance_id] = new.member_id
            for assignment in (new.assigned_partitions, new.partitions_pending_revocation):
                for t, ps in assignment.items():
                    for p in ps:
                        self.partition_epochs[(t, p)] = new.member_epoch

    def tombstones(self) -> list[CR.CgRecord]:
        """Kafka's createGroupTombstoneRecords, in its order."""
        g = self.group_id
        out = [CR.current_assignment_tombstone(g, m) for m in self.members]
        out += [CR.target_assignment_tombstone(g, m) for m in self.members]
        out.append(CR.target_assignment_epoch_record(g, None))
        out += [CR.member_metadata_tombstone(g, m) for m in self.members]
        out.append(CR.subscription_metadata_record(g, None))
        out.append(CR.group_epoch_record(g, None))
        return out


def generate_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe base64 without padding,
    never the zero id and never starting with "-" (which command-line tools would take for an
    option)."""
    return uuid_to_base64(new_kafka_uuid())


def _error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


def _response_assignment(assignment: Assignment) -> ConsumerGroupHeartbeatResponseAssignment:
    return {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items())]}


class _Change:
    """Records to append and what to do once they are in the log (arm or cancel timers)."""

    def __init__(self) -> None:
        self.records: list[CR.CgRecord] = []
        self.classic_tombstone: str | None = None  # group id of an Empty classic group being replaced
        self.after: list[Callable[[], None]] = []


class ConsumerGroupReplacement:
    """An Empty consumer group giving way to a classic JoinGroup (rule 5): its tombstones, and
    ``apply`` (once they are durable) deleting it and returning the offsets to carry over."""

    def __init__(self, records: list[KeyValue], apply: Callable[[], dict[tuple[str, int], OffsetAndMetadata]]) -> None:
        self.records = records
        self.apply = apply


class ConsumerGroupManager:
    """ConsumerGroupHeartbeat, ConsumerGroupDescribe and the KIP-848 side of the other group APIs."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.session_timeout_ms = cfg.consumer_session_timeout_ms
        self.heartbeat_interval_ms = cfg.consumer_heartbeat_interval_ms
        self.max_size = cfg.consumer_max_size
        self.assignors = assignors_from_config(list(cfg.consumer_assignors))
        self.default_assignor = next(iter(self.assignors))
        self.groups: dict[str, ConsumerGroup] = ctx.consumer_groups
        self.timer = ctx.timer
        self._regex_cache: dict[str, ClientRegex] = {}

    # ==========================================================================================
    # ConsumerGroupHeartbeat

    async def heartbeat(self, version: int, req: ConsumerGroupHeartbeatRequest, client_id: str,
                        client_host: str) -> ConsumerGroupHeartbeatResponse:
        """One ConsumerGroupHeartbeat; returns the response body (errors included) once its
        records are durable and applied."""
        try:
            partition = self.ctx.check_coordinator(req["group_id"])
            self._validate(version, req)

            def op(shard: CoordinatorShard) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
                change = _Change()
                if req["member_epoch"] in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    response = self._leave(req, change)
                else:
                    response = self._heartbeat(version, req, client_id, client_host, change)
                return self._result(req["group_id"], change, response)

            return await self.ctx.runtime.write(partition, op)
        except CoordinatorWriteError as exc:
            return _error(append_error(exc.code), None)
        except KafkaApiError as exc:
            return _error(exc.code, exc.message or None)

    def _validate(self, version: int, req: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR...)."""
        def invalid(msg: str) -> KafkaApiError:
            return _fail(ErrorCode.INVALID_REQUEST, msg)

        if req["group_id"] == "":
            raise invalid("GroupId can't be empty.")
        if req["instance_id"] == "":
            raise invalid("InstanceId can't be empty.")
        if req["rack_id"] == "":
            raise invalid("RackId can't be empty.")
        epoch = req["member_epoch"]
        regex = req.get("subscribed_topic_regex")
        if version >= 1 and req["member_id"] == "":
            # KIP-1082: from v1 the client generates its member id.
            raise invalid("MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if req["member_id"] == "":
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if req["rebalance_timeout_ms"] == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req["topic_partitions"] is None or req["topic_partitions"]:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not req["subscribed_topic_names"] and not regex:
                raise invalid("SubscribedTopicNames must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req["member_id"] == "":
                raise invalid("MemberId can't be empty.")
            if req["instance_id"] is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        assignor = req["server_assignor"]
        if assignor is not None and assignor not in self.assignors:
            raise _fail(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                        f"Supported assignors: {', '.join(self.assignors)}.")
        if regex is not None:
            self._compile(regex)

    def _compile(self, regex: str) -> ClientRegex:
        """RE2, as Kafka's RE2/J: linear time, whatever a client sends (broker/runtime/client_regex.py)."""
        pattern = self._regex_cache.get(regex)
        if pattern is None:
            try:
                pattern = compile_client_regex(regex)
            except ClientRegexError as exc:
                raise _fail(ErrorCode.INVALID_REGULAR_EXPRESSION,
                            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None
            if len(self._regex_cache) > 1000:
                self._regex_cache.clear()
            self._regex_cache[regex] = pattern
        return pattern

    def _get_or_create(self, group_id: str, create: bool, change: _Change) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.ctx.streams_groups or group_id in self.ctx.share_groups:  # one id space (Kafka's getOrMaybeCreateConsumerGroup)
            raise _fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.ctx.classic_groups.get(group_id)
        if classic is not None:
            if not (create and classic.is_in(GroupState.EMPTY)):
                raise _fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            change.classic_tombstone = group_id  # rule 5: an Empty classic group gives way
        elif not create:
            raise _fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id, self.ctx.partition_for(group_id))

    def _heartbeat(self, version: int, req: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str,
                   change: _Change) -> ConsumerGroupHeartbeatResponse:
        group_id = req["group_id"]
        member_id: str = req["member_id"]
        epoch: int = req["member_epoch"]
        instance_id: str | None = req["instance_id"]
        owned = self._owned(req["topic_partitions"])
        create = epoch == 0
        group = self._get_or_create(group_id, create, change)
        if len(group.members) >= self.max_size and (member_id == "" or member_id not in group.members):
            raise _fail(ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The consumer group has reached its maximum capacity of {self.max_size} members.")
        if member_id == "":
            member_id = generate_member_id()
        records = change.records
        if instance_id is None:
            member = self._dynamic_member(group, member_id, epoch, owned, create)
        else:
            member = self._static_member(group, member_id, epoch, instance_id, owned, create, records)

        # 1. The member's new subscription; the group epoch moves if the group's subscriptions do.
        updated = dataclasses.replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=req["rack_id"] if req["rack_id"] is not None else member.rack_id,
            rebalance_timeout_ms=(req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=req["server_assignor"] if req["server_assignor"] is not None else member.server_assignor,
            subscribed_topic_names=(frozenset(req["subscribed_topic_names"])
                                    if req["subscribed_topic_names"] is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(req.get("subscribed_topic_regex")
                                    if req.get("subscribed_topic_regex") is not None else member.subscribed_topic_regex),
            client_id=client_id, client_host=client_host)
        bump = False
        if updated != member:
            records.append(CR.member_metadata_record(group_id, updated))
            bump = (updated.subscribed_topic_names != member.subscribed_topic_names
                    or updated.subscribed_topic_regex != member.subscribed_topic_regex)
        replaced = group.static_members.get(updated.instance_id) if updated.instance_id is not None else None
        if replaced == updated.member_id:
            replaced = None
        metadata = self._subscription_metadata(group, updated, replaced)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(CR.subscription_metadata_record(group_id, metadata))
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append(CR.group_epoch_record(group_id, group_epoch))
            log.info("group %s: epoch %d", group_id, group_epoch)

        # 2. A new target assignment when the group epoch is ahead of it.
        if group_epoch > group.assignment_epoch:
            target = self._update_target(group, group_epoch, member, updated, replaced, metadata, records)
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_for(updated.member_id, updated.instance_id)

        # 3. Reconcile the member towards its target.
        before = updated
        if not updated.is_reconciled_to(target_epoch):
            updated = reconcile(updated, target_epoch, target, group.current_partition_epoch, owned)
            if updated != before:
                records.append(CR.current_assignment_record(group_id, updated))
                key = ("cg-rebalance", group_id, updated.member_id)
                if updated.state == MemberState.UNREVOKED_PARTITIONS:
                    m_epoch, timeout = updated.member_epoch, max(updated.rebalance_timeout_ms, 0)
                    mid = updated.member_id
                    change.after.append(lambda: self.timer.schedule(
                        key, timeout, lambda: self._rebalance_timeout(group_id, mid, m_epoch)))
                else:
                    change.after.append(lambda: self.timer.cancel(key))
        mid = updated.member_id
        change.after.append(lambda: self._schedule_session_timeout(group_id, mid))
        response: ConsumerGroupHeartbeatResponse = {
            "throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "member_id": updated.member_id, "member_epoch": updated.member_epoch,
            "heartbeat_interval_ms": group_int(self.ctx.metadata, group_id, "consumer.heartbeat.interval.ms",
                                               self.heartbeat_interval_ms), "assignment": None}
        full = epoch == 0 or (req["rebalance_timeout_ms"] != -1 and req["subscribed_topic_names"] is not None
                              and req["topic_partitions"] is not None)
        if full or updated.assigned_partitions != member.assigned_partitions:
            response["assignment"] = _response_assignment(updated.assigned_partitions)
        return response

    @staticmethod
    def _owned(rows: list[ConsumerGroupHeartbeatRequestTopicPartitions] | None) -> Owned:
        if rows is None:
            return None
        return [(r["topic_id"], list(r["partitions"])) for r in rows]

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned: Owned) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid (rule 3)."""
        if received > member.member_epoch:
            raise _fail(ErrorCode.FENCED_MEMBER_EPOCH,
                        f"The consumer group member has a greater member epoch ({received}) than the one known "
                        f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                        "partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch or not _is_subset(owned, member.assigned_partitions)):
            raise _fail(ErrorCode.FENCED_MEMBER_EPOCH,
                        f"The consumer group member has a smaller member epoch ({received}) than the one known "
                        f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                        "partitions and rejoin.")

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, epoch: int, owned: Owned,
                        create: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not create:
                raise _fail(ErrorCode.UNKNOWN_MEMBER_ID,
                            f"Member {member_id} is not a member of group {group.group_id}.")
            member = ConsumerGroupMember(member_id)
        self._check_epoch(member, epoch, owned)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, epoch: int, instance_id: str, owned: Owned,
                       create: bool, records: list[CR.CgRecord]) -> ConsumerGroupMember:
        existing = group.static_member(instance_id)
        if create:
            if existing is None:
                member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                self._check_epoch(member, epoch, owned)
                return member
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _fail(ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {member_id} with instance id {instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.")
            # The returning instance takes over the departed member's assignment without a rebalance.
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            g = group.group_id
            records += [CR.current_assignment_tombstone(g, existing.member_id),
                        CR.target_assignment_tombstone(g, existing.member_id),
                        CR.member_metadata_tombstone(g, existing.member_id),
                        CR.member_metadata_record(g, new),
                        CR.target_assignment_record(g, member_id, group.target_assignment.get(existing.member_id, {})),
                        CR.current_assignment_record(g, new)]
            return new
        if existing is None:
            raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _fail(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                        f"was fenced by member {existing.member_id}.")
        self._check_epoch(existing, epoch, owned)
        return existing

    def _member_topics(self, member: ConsumerGroupMember, image: Any) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = self._compile(member.subscribed_topic_regex)
            topics.update(name for name, t in image.topics.items()
                          if not t.is_internal and pattern.fullmatch(name))
        return topics

    def _subscription_metadata(self, group: ConsumerGroup, updated: ConsumerGroupMember | None,
                               removed: str | None, leaving: str | None = None) -> dict[str, tuple[uuid.UUID, int]]:
        """Subscribed topic -> (id, partition count) for the group with ``updated`` in place of its
        old self, without the member ids ``removed`` / ``leaving``; only topics that exist."""
        image = self.ctx.metadata.image
        names: set[str] = set()
        for m in group.members.values():
            if m.member_id in (removed, leaving) or (updated is not None and m.member_id == updated.member_id):
                continue
            names |= self._member_topics(m, image)
        if updated is not None:
            names |= self._member_topics(updated, image)
        out = {}
        for name in names:
            t = image.topics.get(name)
            if t is not None:
                out[name] = (t.topic_id, len(t.partitions))
        return out

    def _update_target(self, group: ConsumerGroup, group_epoch: int, member: ConsumerGroupMember,
                       updated: ConsumerGroupMember, replaced: str | None,
                       metadata: dict[str, tuple[uuid.UUID, int]], records: list[CR.CgRecord]) -> Assignment:
        """Kafka's updateTargetAssignment + TargetAssignmentBuilder: records for changed targets."""
        name = group.preferred_assignor(self.default_assignor, (member, updated))
        assignor = self.assignors.get(name) or self.assignors[self.default_assignor]
        image = self.ctx.metadata.image
        ids = {n: tid for n, (tid, _) in metadata.items()}

        def spec(m: ConsumerGroupMember, assignment: Assignment) -> MemberSpec:
            subscribed = frozenset(ids[n] for n in self._member_topics(m, image) if n in ids)
            return MemberSpec(subscribed, assignment, m.instance_id)

        specs = {mid: spec(m, group.target_assignment.get(mid, {})) for mid, m in group.members.items()}
        specs[updated.member_id] = spec(updated, group.target_for(updated.member_id, updated.instance_id))
        if replaced is not None:
            specs.pop(replaced, None)
        try:
            new = assignor.assign(specs, {tid: n for tid, n in metadata.values()})
        except PartitionAssignorError as exc:
            msg = f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}"
            log.error("group %s: %s", group.group_id, msg)
            raise _fail(ErrorCode.UNKNOWN_SERVER_ERROR, msg) from None
        for mid in specs:
            target = new.get(mid, {})
            if target != group.target_assignment.get(mid):
                records.append(CR.target_assignment_record(group.group_id, mid, target))
        records.append(CR.target_assignment_epoch_record(group.group_id, group_epoch))
        log.info("group %s: target assignment for epoch %d computed with %s", group.group_id, group_epoch, name)
        return new.get(updated.member_id, {})

    # -- leaving and fencing ----------------------------------------------------------------------

    def _leave(self, req: ConsumerGroupHeartbeatRequest, change: _Change) -> ConsumerGroupHeartbeatResponse:
        group_id, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        instance_id = req["instance_id"]
        group = self.groups.get(group_id)
        if group is None:
            kind = "consumer group" if group_id not in self.ctx.classic_groups else "group, not a consumer group,"
            raise _fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer {kind} {group_id} not found.")
        response: ConsumerGroupHeartbeatResponse = {
            "throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": 0, "assignment": None}
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise _fail(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                            f"{instance_id} was fenced by member {member.member_id}.")
            if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # A static member leaving "for now" keeps its assignment until its session expires.
                leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                              partitions_pending_revocation={})
                change.records.append(CR.current_assignment_record(group_id, leaving))
                log.info("group %s: static member %s (instance %s) left temporarily", group_id, member_id,
                         instance_id)
                return response
        log.info("group %s: member %s left", group_id, member.member_id)
        self._fence(group, member, change)
        return response

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember, change: _Change) -> None:
        """Kafka's consumerGroupFenceMember: remove the member, bump the group epoch."""
        g, mid = group.group_id, member.member_id
        change.records += [CR.current_assignment_tombstone(g, mid), CR.target_assignment_tombstone(g, mid),
                           CR.member_metadata_tombstone(g, mid)]
        metadata = self._subscription_metadata(group, None, None, leaving=mid)
        if metadata != group.subscription_metadata:
            change.records.append(CR.subscription_metadata_record(g, metadata))
        change.records.append(CR.group_epoch_record(g, group.group_epoch + 1))
        change.after.append(lambda: self._cancel_timers(g, mid))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(("cg-session", group_id, member_id))
        self.timer.cancel(("cg-rebalance", group_id, member_id))

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        timeout = group_int(self.ctx.metadata, group_id, "consumer.session.timeout.ms", self.session_timeout_ms)
        self.timer.schedule(("cg-session", group_id, member_id), timeout,
                            lambda: self._fence_by_timer(group_id, member_id, "the member session expired", None))

    def _rebalance_timeout(self, group_id: str, member_id: str, member_epoch: int) -> None:
        self._fence_by_timer(group_id, member_id, f"it failed to transition from epoch {member_epoch} within "
                             "its rebalance timeout", member_epoch)

    def _fence_by_timer(self, group_id: str, member_id: str, reason: str, only_at_epoch: int | None) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return
        if only_at_epoch is not None and member.member_epoch != only_at_epoch:
            return
        if not self.ctx.is_active(group.partition):
            return

        def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
            # Computed when its turn comes: the member may be gone or moved on by then.
            current = self.groups.get(group_id)
            now = current.members.get(member_id) if current is not None else None
            if current is None or now is None or (only_at_epoch is not None and now.member_epoch != only_at_epoch):
                return CoordinatorResult()
            log.info("group %s: member %s fenced because %s", group_id, member_id, reason)
            change = _Change()
            self._fence(current, now, change)
            return self._result(group_id, change, None)

        def done(f: Any) -> None:
            exc = None if f.cancelled() else f.exception()
            if exc is not None and self.ctx.is_active(group.partition):
                # The write failed (e.g. leadership moving); try again one session later.
                log.warning("group %s: could not fence %s: %s", group_id, member_id, exc)
                self._schedule_session_timeout(group_id, member_id)

        self.ctx.runtime.write(group.partition, op).add_done_callback(done)

    # -- writing (rule 4) -------------------------------------------------------------------------

    def _result(self, group_id: str, change: _Change, response: T) -> CoordinatorResult[T]:
        """The write operation's result: the change's records; once durable, replay them and run
        its after-actions."""
        pairs: list[KeyValue] = []
        if change.classic_tombstone is not None:
            pairs.append((group_metadata_key(change.classic_tombstone), None))
        pairs += [r.encode() for r in change.records]

        def apply() -> None:
            carried: dict[tuple[str, int], OffsetAndMetadata] = {}
            if change.classic_tombstone is not None:
                classic = self.ctx.classic_groups.pop(change.classic_tombstone)
                classic.transition_to(GroupState.DEAD)
                carried = classic.offsets
            self.apply(change.records)
            group = self.groups.get(group_id)
            if group is not None and carried:
                group.offsets.update(carried)
            for fn in change.after:
                fn()

        return CoordinatorResult(pairs, response, apply)

    def apply(self, records: Iterable[CR.CgRecord]) -> None:
        for rec in records:
            replay_into(self.groups, rec, self.ctx.partition_for(rec.group_id))

    # ==========================================================================================
    # ConsumerGroupDescribe

    def describe(self, group_id: str) -> ConsumerGroupDescribeResponseDescribedGroup:
        entry: ConsumerGroupDescribeResponseDescribedGroup = {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
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
            entry["error_message"] = (f"Group {group_id} is not a consumer group." if group_id in self.ctx.classic_groups
                                      else f"Group {group_id} not found.")
            return entry
        topics_by_id = {t.topic_id: t.name for t in self.ctx.metadata.image.topics.values()}

        def described(assignment: Assignment) -> ConsumerGroupDescribeResponseAssignment:
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": topics_by_id[t], "partitions": sorted(ps)}
                for t, ps in sorted(assignment.items()) if t in topics_by_id]}

        entry.update({"group_state": group.state.value, "group_epoch": group.group_epoch,
                      "assignment_epoch": group.assignment_epoch,
                      "assignor_name": group.preferred_assignor(self.default_assignor)})
        entry["members"] = [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": sorted(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": described(m.assigned_partitions),
            "target_assignment": described(group.target_assignment.get(m.member_id, {})),
            # ConsumerGroupDescribe v1 (KIP-1099): 0 for a member speaking the classic protocol, 1
            # for the consumer protocol. Every member here is a consumer-protocol one: a classic
            # JoinGroup never joins a consumer group (it replaces an Empty one, else is refused).
            "member_type": MEMBER_TYPE_CONSUMER,
        } for m in group.members.values()]
        return entry

    # ==========================================================================================
    # hooks for GroupCoordinator: loading, unloading, ListGroups, DeleteGroups, JoinGroup, expiry

    def unload(self, partition: int) -> None:
        for group_id, group in list(self.groups.items()):
            if group.partition == partition:
                for member_id in group.members:
                    self._cancel_timers(group_id, member_id)
                group.deleted = True
                del self.groups[group_id]

    def install_loaded(self, partition: int, loaded: dict[str, ConsumerGroup],
                       offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata | None]]) -> None:
        """After a partition's replay: take the groups and their offsets (removed from ``offsets``)
        and start every member's session timeout afresh, plus the rebalance timeout of members
        still revoking (Kafka's onLoaded)."""
        for group_id, group in loaded.items():
            if group.deleted:
                continue
            by_tp = offsets.pop(group_id, {})
            group.offsets.update({tp: om for tp, om in by_tp.items() if om is not None})
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_session_timeout(group_id, member.member_id)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    self.timer.schedule(("cg-rebalance", group_id, member.member_id),
                                        max(member.rebalance_timeout_ms, 0),
                                        functools.partial(self._rebalance_timeout, group_id, member.member_id,
                                                          member.member_epoch))

    def list_groups(self, active_partitions: set[int], states: set[str] | None,
                    types: set[str] | None) -> list[ListedGroup]:
        """ListGroups entries; ``states``/``types`` already lower-cased (None = no filter)."""
        if types is not None and GROUP_TYPE not in types:
            return []
        out: list[ListedGroup] = []
        for group in self.groups.values():
            if group.partition not in active_partitions:
                continue
            state = group.state.value
            if states is not None and state.lower() not in states:
                continue
            out.append({"group_id": group.group_id, "protocol_type": PROTOCOL_TYPE, "group_state": state,
                        "group_type": GROUP_TYPE})
        return out

    def delete_group(self, group_id: str) -> CoordinatorResult[None]:
        """DeleteGroups of a consumer group (a write operation): NON_EMPTY_GROUP unless Empty;
        tombstones for everything."""
        group = self.groups[group_id]
        if group.state is not ConsumerGroupState.EMPTY:
            raise _fail(ErrorCode.NON_EMPTY_GROUP, "")
        records, apply = self._deletion(group, list(group.offsets))
        return CoordinatorResult(records, None, apply)

    def _deletion(self, group: ConsumerGroup, offsets: list[tuple[str, int]]
                  ) -> tuple[list[KeyValue], Callable[[], None]]:
        """Tombstones for ``offsets`` and the whole group, and the in-memory deletion."""
        pairs: list[KeyValue] = [(offset_commit_key(group.group_id, t, p), None) for t, p in offsets]
        pairs += [r.encode() for r in group.tombstones()]

        def apply() -> None:
            for member_id in group.members:
                self._cancel_timers(group.group_id, member_id)
            group.offsets.clear()
            group.deleted = True
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

        return pairs, apply

    def yield_to_classic(self, group_id: str, is_new_member: bool) -> ConsumerGroupReplacement | None:
        """A classic JoinGroup for ``group_id`` (rule 5): None if no consumer group has the id; the
        replacement (tombstones, then deletion carrying its offsets over) if an Empty one does;
        else raises."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.state is not ConsumerGroupState.EMPTY:
            raise _fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                        f"Group {group_id} is a consumer group using the consumer protocol.")
        if not is_new_member:
            raise _fail(ErrorCode.UNKNOWN_MEMBER_ID, "")
        records, delete = self._deletion(group, [])

        def apply() -> dict[tuple[str, int], OffsetAndMetadata]:
            offsets = dict(group.offsets)
            delete()
            return offsets

        return ConsumerGroupReplacement(records, apply)

    def expire_offsets(self, group: ConsumerGroup, now: int, retention_ms: int) -> CoordinatorResult[int]:
        """Kafka's offset expiry for a consumer group (a write operation): offsets of topics the
        group does not subscribe to, ``retention_ms`` after their commit (or at their explicit
        expiry); an Empty group left without offsets is deleted. The response: how many expired."""
        expired = []
        for (topic, p), om in group.offsets.items():
            if group.is_subscribed_to_topic(topic):
                continue
            if (om.expire_timestamp_ms >= 0 and now >= om.expire_timestamp_ms) or \
                    (om.expire_timestamp_ms < 0 and now - om.commit_timestamp_ms >= retention_ms):
                expired.append((topic, p))
        if group.state is ConsumerGroupState.EMPTY and len(expired) == len(group.offsets):
            records, apply = self._deletion(group, expired)
            return CoordinatorResult(records, len(expired), apply)
        if not expired:
            return CoordinatorResult(response=0)

        def drop() -> None:
            for tp in expired:
                group.offsets.pop(tp, None)

        return CoordinatorResult([(offset_commit_key(group.group_id, t, p), None) for t, p in expired],
                                 len(expired), drop)


def replay_into(groups: dict[str, ConsumerGroup], rec: CR.CgRecord, partition: int) -> None:
    """Replay one record into a group map (creating the group on its first record, dropping it on
    its group-epoch tombstone): used by both the write path and partition loading."""
    group = groups.get(rec.group_id)
    if group is None:
        if rec.value is None:
            return  # a tombstone for a group we do not have
        group = groups[rec.group_id] = ConsumerGroup(rec.group_id, partition)
    group.replay(rec)
    if group.deleted:
        del groups[rec.group_id]


class ConsumerGroupLoader:
    """Collects one __consumer_offsets partition's KIP-848 records while it is replayed."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.groups: dict[str, ConsumerGroup] = {}

    def replay(self, key: bytes | None, value: bytes | None) -> bool:
        """Replay the record if it is a consumer-group record; False if it is not one."""
        if not CR.is_consumer_group_key(key):
            return False
        try:
            replay_into(self.groups, CR.decode(key, value), self.partition)
        except CR.CorruptConsumerGroupRecord as exc:
            log.error("skipping unreadable consumer-group record in __consumer_offsets-%d: %s", self.partition, exc)
        return True
