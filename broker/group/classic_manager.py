"""The classic group protocol (Kafka 4.0's GroupMetadataManager, classic half): JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and the classic side of ListGroups/DeleteGroups.

1. The rebalance protocol, exactly as Kafka 4.0 (see classic_group.py for the states): JoinGroup
   (KIP-394 MEMBER_ID_REQUIRED from v4, KIP-345 static members, the initial rebalance delay for
   Empty groups, group.max.size), SyncGroup, Heartbeat, LeaveGroup. JoinGroup and SyncGroup
   answers that must wait for the rest of the group are asyncio futures completed when the join
   phase or the leader's sync completes.
2. Persistence through the coordinator runtime (write -> await durable -> apply). A JoinGroup
   that creates a group is a write operation: the group's Empty GroupMetadata record (and the
   tombstones of an Empty consumer group it replaces) is appended, and the group exists, and the
   join proceeds, only once it is durable. The group metadata stored when a generation's
   assignment is set, when a static member is replaced, or when a group becomes Empty is a write
   queued behind the current operation; what depends on it (the leader's assignment reaching the
   members, a static member's rejoin answer) runs when it is durable, and a failure is answered
   with Kafka's mapped error. Heartbeat, LeaveGroup, SyncGroup and the timeouts write no records
   themselves (as in Kafka) but still run as operations on the partition's queue, so none of them
   runs between another operation's write and its apply.
3. Timeouts on the broker's timing wheel (keyed_timer.py): each member's session timeout (reset by
   every heartbeat, join and sync), a new member's join timeout (5 minutes, KIP-394), the group's
   join phase (rebalance timeout, or group.initial.rebalance.delay.ms steps for an Empty group) and
   the pending-sync timeout (members that do not SyncGroup within the rebalance timeout are removed).

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorShard,
    CoordinatorWriteError,
    KeyValue,
)
from odradek.broker.group import records as R
from odradek.broker.group.classic_group import ClassicGroup, GroupState
from odradek.broker.group.context import GroupContext
from odradek.broker.group.errors import append_error, write_error
from odradek.broker.group.member import ClassicGroupMember
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.consumer_group import ConsumerGroupManager
    from odradek.protocol.messages import (
        DescribeGroupsResponseDescribedGroup,
        JoinGroupResponse,
        ListedGroup,
        SyncGroupResponse,
    )

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's group.classic... new member join timeout
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
CLASSIC = "classic"


def join_error(code: int, member_id: str = UNKNOWN_MEMBER_ID) -> JoinGroupResponse:
    return {"error_code": code, "generation_id": NO_GENERATION, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(code: int) -> SyncGroupResponse:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}


class ClassicGroupManager:
    """The classic groups of the __consumer_offsets partitions this broker has loaded."""

    def __init__(self, ctx: GroupContext, consumer: ConsumerGroupManager) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.groups = ctx.classic_groups
        self.timer = ctx.timer
        cfg = ctx.config
        self.min_session_timeout_ms = cfg.min_session_timeout_ms
        self.max_session_timeout_ms = cfg.max_session_timeout_ms
        self.initial_rebalance_delay_ms = cfg.initial_rebalance_delay_ms
        self.max_group_size = cfg.max_group_size

    # ==========================================================================================
    # loading and unloading (called by the partition's GroupShard)

    def install_loaded(self, partition: int, group_values: dict[str, dict[str, Any] | None],
                       offsets: R.LoadedOffsets) -> None:
        """Create the loaded groups (and simple groups that have only offsets); arm the members'
        session timeouts."""
        now = self.ctx.time_ms()
        installed: list[ClassicGroup] = []
        for group_id, value in group_values.items():
            if value is not None:
                loaded = self.groups[group_id] = ClassicGroup.from_metadata_value(group_id, partition, value)
                installed.append(loaded)
        for group_id, by_tp in offsets.items():
            live = {tp: om for tp, om in by_tp.items() if om is not None}
            if not live:
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id, partition, current_time_ms=now)
                group.current_state_timestamp = None
            group.offsets.update(live)
        # Only the groups loaded now: a partition taking over moved groups (broker/coordinator/
        # rehash.py) has live members in its other groups, whose timers must not restart.
        for group in installed:
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)

    def unload(self, partition: int, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> None:
        """Drop the partition's groups; waiting joins and syncs answer ``error``."""
        for group_id, group in list(self.groups.items()):
            if group.partition != partition:
                continue
            for member in list(group.members.values()):
                group.complete_join(member, join_error(error, member.member_id))
                member.complete_sync(sync_error(error))
                self.timer.cancel(("heartbeat", group_id, member.member_id))
            for member_id in group.pending_join_members:
                self.timer.cancel(("heartbeat", group_id, member_id))
            self.timer.cancel(("join", group_id))
            self.timer.cancel(("sync", group_id))
            group.transition_to(GroupState.DEAD)
            del self.groups[group_id]

    # ==========================================================================================
    # writes

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes],
                     then: Callable[[ErrorCode], None] | None = None) -> None:
        """Queue the group's metadata (with ``assignment``) as a write; ``then(error)`` runs once it
        is durable (NONE) or has failed (Kafka's mapped error)."""
        records: list[KeyValue] = [(R.group_metadata_key(group.group_id),
                                    R.group_metadata_value(group.metadata_value(assignment)))]
        group_id = group.group_id
        outcome: list[ErrorCode] = []  # ``then`` runs once: a write that timed out may still apply later

        def once(error: ErrorCode) -> None:
            if then is not None and not outcome:
                outcome.append(error)
                then(error)

        def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
            return CoordinatorResult(records, None, lambda: once(ErrorCode.NONE))

        def done(f: asyncio.Future[None]) -> None:
            exc = None if f.cancelled() else f.exception()
            if exc is None:
                return
            log.warning("failed to write metadata of group %s: %s", group_id, exc)
            once(append_error(exc.code) if isinstance(exc, KafkaApiError) else ErrorCode.UNKNOWN_SERVER_ERROR)

        self.ctx.runtime.write(group.partition, op).add_done_callback(done)

    # ==========================================================================================
    # JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        api_version: int,
    ) -> JoinGroupResponse:
        """JoinGroup; the answer (JoinGroupResponse fields) may wait for the join phase to end."""
        future: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
        try:
            if not group_id:
                raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
            partition = self.ctx.check_coordinator(group_id)
            if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
                raise KafkaApiError(ErrorCode.INVALID_SESSION_TIMEOUT)

            def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
                return self._join_op(future, group_id, member_id, group_instance_id, client_id, client_host,
                                     rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                     api_version)

            await self.ctx.runtime.write(partition, op)
        except CoordinatorWriteError as exc:
            if not future.done():
                future.set_result(join_error(append_error(exc.code), member_id))
        except KafkaApiError as exc:
            if not future.done():
                future.set_result(join_error(exc.code, member_id))
        return await future

    def _join_op(self, future: asyncio.Future[JoinGroupResponse], group_id: str, member_id: str, instance_id: str | None,
                 client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]], api_version: int) -> CoordinatorResult[None]:
        """The write operation of a JoinGroup: a new group's records first (Kafka 4.0 records a new
        group at once, an Empty GroupMetadata record), then the join on the applied state."""
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        if group_id in self.ctx.streams_groups or group_id in self.ctx.share_groups:
            # Kafka's classicGroupJoin: a streams or share group of this id refuses a classic
            # member (Kafka converts an Empty streams group; Odradek refuses that too).
            raise KafkaApiError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        # An Empty KIP-848 group of this id gives way (its offsets carry over); a live one refuses.
        replaced = self.consumer.yield_to_classic(group_id, is_unknown)
        if group_id in self.groups or not is_unknown:
            return CoordinatorResult(apply=lambda: self._join(future, group_id, member_id, instance_id, client_id,
                                                              client_host, rebalance_timeout_ms, session_timeout_ms,
                                                              protocol_type, protocols, api_version))
        new_group = ClassicGroup(group_id, self.ctx.partition_for(group_id))
        records: list[KeyValue] = list(replaced.records) if replaced is not None else []
        records.append((R.group_metadata_key(group_id), R.group_metadata_value(new_group.metadata_value({}))))

        def apply() -> None:
            if replaced is not None:
                new_group.offsets.update(replaced.apply())
            self.groups[group_id] = new_group
            self._join(future, group_id, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                       session_timeout_ms, protocol_type, protocols, api_version)

        return CoordinatorResult(records, None, apply)

    def _join(self, future: asyncio.Future[JoinGroupResponse], group_id: str, member_id: str, instance_id: str | None,
              client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
              protocol_type: str, protocols: list[tuple[str, bytes]], api_version: int) -> None:
        if future.done():
            return  # answered already (its write timed out before it was durable): the member retries
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            future.set_result(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        names = [name for name, _ in protocols]
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            future.set_result(join_error(ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            if group.is_in(GroupState.DEAD):
                future.set_result(join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            elif not group.supports_protocols(protocol_type, names):
                future.set_result(join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            else:
                new_id = group.generate_member_id(client_id, instance_id)
                if instance_id is not None:
                    existing = group.static_member_id(instance_id)
                    if existing is not None:
                        self._update_static_member(group, existing, new_id, instance_id, protocols,
                                                   rebalance_timeout_ms, session_timeout_ms, api_version, future)
                    else:
                        self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                                       rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                       protocols, future)
                elif api_version >= 4:
                    # KIP-394: hand out the id first; the member joins again with it.
                    group.add_pending_member(new_id)
                    self._schedule(("heartbeat", group_id, new_id), session_timeout_ms,
                                        lambda: self._expire_heartbeat(group_id, new_id))
                    future.set_result(join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
                else:
                    self._add_member_and_rebalance(group, new_id, None, client_id, client_host,
                                                   rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                   protocols, future)
        else:
            self._join_existing(group, future, member_id, instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)

    def _join_existing(self, group: ClassicGroup, future: asyncio.Future[JoinGroupResponse], member_id: str, instance_id: str | None,
                       client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                       protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        names = [name for name, _ in protocols]
        if group.is_in(GroupState.DEAD):
            future.set_result(join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(protocol_type, names):
            future.set_result(join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if group.is_pending_member(member_id):
            if instance_id is not None:
                future.set_result(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, future)
            return
        try:
            group.validate_member(member_id, instance_id)
        except KafkaApiError as exc:
            future.set_result(join_error(exc.code, member_id))
            return
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              future)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                future.set_result(self._join_response(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, future)
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, future)
            else:
                future.set_result(self._join_response(group, member_id, with_members=False))
        else:
            future.set_result(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < self.max_group_size
        return member_id in group.members or len(group.members) < self.max_group_size

    @staticmethod
    def _join_response(group: ClassicGroup, member_id: str, with_members: bool,
                       skip_assignment: bool = False) -> JoinGroupResponse:
        return {
            "error_code": ErrorCode.NONE,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "skip_assignment": skip_assignment,
            "member_id": member_id,
            "members": group.current_members_for_join() if with_members else [],
        }

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str,
                                  protocols: list[tuple[str, bytes]], future: asyncio.Future[JoinGroupResponse]) -> None:
        member = ClassicGroupMember(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                    session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, future)
        # A new member has NEW_MEMBER_JOIN_TIMEOUT_MS to complete its join (KIP-394).
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, future: asyncio.Future[JoinGroupResponse]) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, future)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(self, group: ClassicGroup, old_id: str, new_id: str, instance_id: str,
                              protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                              session_timeout_ms: int, api_version: int, future: asyncio.Future[JoinGroupResponse]) -> None:
        """A known static member rejoined with an unknown member id (restart within the session
        timeout): the old id is fenced; in a Stable group with unchanged protocols it keeps its
        assignment without a rebalance (KIP-345)."""
        current_leader = group.leader_id
        self.timer.cancel(("heartbeat", group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, future)
        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def stored(error: ErrorCode) -> None:
                    if group.members.get(new_id) is not member or self.groups.get(group.group_id) is not group:
                        return  # the member or group moved on meanwhile (left, fenced, unloaded)
                    if error != ErrorCode.NONE:
                        # Kafka reverts the replacement: the old member id stays valid.
                        group.update_member(member, old_protocols, old_rebalance, old_session, None)
                        self.timer.cancel(("heartbeat", group.group_id, new_id))
                        old = group.replace_static_member(instance_id, new_id, old_id)
                        self._reschedule_heartbeat(group, old)
                        response = join_error(error)
                        response.update({"generation_id": group.generation_id, "protocol_type": group.protocol_type,
                                         "protocol_name": group.protocol_name, "leader": current_leader or ""})
                        if not future.done():
                            future.set_result(response)
                    elif api_version >= 9:
                        is_leader = group.is_leader(new_id)
                        group.complete_join(member, self._join_response(group, new_id, with_members=is_leader,
                                                                        skip_assignment=is_leader))
                    else:
                        response = self._join_response(group, new_id, with_members=False)
                        response["leader"] = current_leader or ""
                        group.complete_join(member, response)

                self._store_group(group, assignment, stored)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    # -- the join phase ------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is not GroupState.EMPTY
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_in(GroupState.EMPTY)
        group_id = group.group_id
        if initial:
            # group.initial.rebalance.delay.ms: wait for more members before the first generation,
            # extending by the delay while members keep arriving, up to the rebalance timeout.
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule(("join", group_id), delay,
                                lambda: self._initial_rebalance_step(group_id, delay, remaining))
        group.transition_to(GroupState.PREPARING_REBALANCE)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._schedule(("join", group_id), group.rebalance_timeout_ms(),
                                    lambda: self._complete_join_by_id(group_id))

    def _initial_rebalance_step(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._schedule(("join", group_id), new_delay,
                                lambda: self._initial_rebalance_step(group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self.timer.cancel(("join", group_id))
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        # Dynamic members that did not rejoin in time are dropped; static ones stay (KIP-345).
        for failed in [m for m in group.not_yet_rejoined_members() if not m.is_static]:
            group.remove(failed.member_id)
            self.timer.cancel(("heartbeat", group_id, failed.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("group %s could not complete rebalance because no members rejoined", group_id)
            self._schedule(("join", group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            self._store_group(group, {})  # a failure is logged; memory stays as Kafka's does
            return
        log.info("group %s: generation %d with %d members (protocol %s)", group_id, group.generation_id,
                 len(group.members), group.protocol_name)
        for member in list(group.members.values()):
            response = self._join_response(group, member.member_id, with_members=group.is_leader(member.member_id))
            group.complete_join(member, response)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._schedule(("sync", group_id), group.rebalance_timeout_ms(),
                            lambda: self._expire_pending_sync(group_id, generation))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            for member_id in list(group.pending_sync_members):
                member = group.members.get(member_id)
                if member is not None:
                    member.complete_sync(sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
                group.remove(member_id)
                self.timer.cancel(("heartbeat", group_id, member_id))
            self._prepare_rebalance(group)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timer.cancel(("sync", group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE) or \
                not group.pending_sync_members:
            self.timer.cancel(("sync", group.group_id))

    # -- heartbeats and member removal ----------------------------------------------------------

    def _schedule(self, key: tuple[str, ...], delay_ms: int, fn: Callable[[], None]) -> None:
        """Arm the group's timeout ``key`` (key[1] is the group id). When it fires, its action runs
        as an operation on the group's partition queue (Kafka's CoordinatorTimer), so it never
        runs between a write and its apply; re-armed meanwhile, the stale action is skipped."""
        partition = self.ctx.partition_for(key[1])

        def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
            if not self.timer.is_scheduled(key):
                fn()
            return CoordinatorResult()

        def fire() -> None:
            if self.ctx.is_active(partition):
                self.ctx.runtime.schedule_write(partition, op, f"run timeout {key!r}")

        self.timer.schedule(key, delay_ms, fire)

    def touch_member(self, group: ClassicGroup, member_id: str) -> None:
        """A request proved the member alive (an OffsetCommit of its generation): push its session out."""
        self._reschedule_heartbeat(group, group.members[member_id])

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember,
                              timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self._schedule(("heartbeat", group_id, member_id),
                            member.session_timeout_ms if timeout_ms is None else timeout_ms,
                            lambda: self._expire_heartbeat(group_id, member_id))

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed (session timeout), removing it", member_id, group_id)
            self._remove_member_and_update(group, member)

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        group.complete_join(member, join_error(ErrorCode.UNKNOWN_MEMBER_ID))
        member.complete_sync(sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for member in group.members.values():
            if member.complete_sync({"error_code": error,
                                     "protocol_type": group.protocol_type if ok else None,
                                     "protocol_name": group.protocol_name if ok else None,
                                     "assignment": member.assignment}):
                self._reschedule_heartbeat(group, member)

    # ==========================================================================================
    # SyncGroup, Heartbeat, LeaveGroup

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncGroupResponse:
        future: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
        try:
            if not group_id:
                raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
            partition = self.ctx.check_coordinator(group_id)

            def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
                self._sync(future, group_id, generation_id, member_id, group_instance_id, protocol_type,
                           protocol_name, assignments)
                return CoordinatorResult()

            await self.ctx.runtime.write(partition, op)
        except KafkaApiError as exc:
            if not future.done():
                future.set_result(sync_error(write_error(exc)))
        return await future

    def _sync(self, future: asyncio.Future[SyncGroupResponse], group_id: str, generation_id: int, member_id: str,
              instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
              assignments: dict[str, bytes]) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        group.validate_member(member_id, instance_id)
        if generation_id != group.generation_id:
            raise KafkaApiError(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            raise KafkaApiError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            raise KafkaApiError(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            self._reschedule_heartbeat(group, member)
            future.set_result({"error_code": ErrorCode.NONE, "protocol_type": group.protocol_type,
                               "protocol_name": group.protocol_name, "assignment": member.assignment})
            return
        # CompletingRebalance: wait for the leader's assignment.
        member.awaiting_sync = future
        self._remove_pending_sync_member(group, member_id)
        if not group.is_leader(member_id):
            return
        assignment = {m: assignments.get(m, b"") for m in group.members}

        def stored(error: ErrorCode) -> None:
            # The generation may have moved on while the write was in flight (Kafka's check too).
            if not (self.groups.get(group_id) is group and group.is_in(GroupState.COMPLETING_REBALANCE)
                    and generation_id == group.generation_id):
                return
            if error != ErrorCode.NONE:
                self._reset_and_propagate_assignment(group, error)
                self._maybe_prepare_rebalance_or_complete_join(group)
                return
            for m in group.members.values():
                m.assignment = assignment.get(m.member_id, b"")
            self._propagate_assignment(group, ErrorCode.NONE)
            group.transition_to(GroupState.STABLE)

        self._store_group(group, assignment, stored)

    def _member_group(self, group_id: str) -> ClassicGroup:
        """The live group a member-level request (Heartbeat, LeaveGroup) addresses, or Kafka's error:
        INVALID_GROUP_ID, the coordinator errors, UNKNOWN_MEMBER_ID for no such group, and
        COORDINATOR_NOT_AVAILABLE for a dead one."""
        if not group_id:
            raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
        self.ctx.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return group

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None) -> ErrorCode:
        """Heartbeat, as an operation on the group's partition queue (it writes no records)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        try:
            partition = self.ctx.check_coordinator(group_id)
            return await self.ctx.runtime.write(partition, lambda shard: CoordinatorResult(
                response=self._heartbeat(group_id, generation_id, member_id, group_instance_id)))
        except KafkaApiError as exc:
            code = write_error(exc)
            # While the group's partition loads (a new coordinator after a failover) Kafka's
            # GroupCoordinatorService answers NONE "blindly": the member's session goes on, and its
            # next heartbeat is checked against the loaded group.
            return ErrorCode.NONE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code

    def _heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        try:
            group = self._member_group(group_id)
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise KafkaApiError(ErrorCode.ILLEGAL_GENERATION)
        except KafkaApiError as exc:
            return ErrorCode(exc.code)
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def leave_group(self, group_id: str,
                          members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup for (member_id, group_instance_id) pairs: (group error, one error per member);
        an operation on the group's partition queue (it writes no records)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        try:
            partition = self.ctx.check_coordinator(group_id)
            return await self.ctx.runtime.write(partition, lambda shard: CoordinatorResult(
                response=self._leave(group_id, members)))
        except KafkaApiError as exc:
            return write_error(exc), []

    def _leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        try:
            group = self._member_group(group_id)
        except KafkaApiError as exc:
            return ErrorCode(exc.code), []
        errors: list[ErrorCode] = []
        left = 0
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                existing = group.static_member_id(instance_id) if instance_id is not None else None
                if existing is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                self._remove_current_member(group, existing)
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timer.cancel(("heartbeat", group_id, member_id))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except KafkaApiError as exc:
                    errors.append(ErrorCode(exc.code))
                    continue
                self._remove_current_member(group, member_id)
            errors.append(ErrorCode.NONE)
            left += 1
        if left:
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.NONE, errors

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self.timer.cancel(("heartbeat", group.group_id, member_id))
        group.complete_join(member, join_error(ErrorCode.UNKNOWN_MEMBER_ID))
        member.complete_sync(sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)


    # ==========================================================================================
    # DescribeGroups, ListGroups, DeleteGroups

    def describe_group(self, group_id: str, api_version: int = 0) -> DescribeGroupsResponseDescribedGroup:
        """One DescribeGroupsResponse group entry. No classic group of that id: state Dead, and from
        v6 GROUP_ID_NOT_FOUND with Kafka's message (KIP-1043), a KIP-848 group's id included."""
        entry: DescribeGroupsResponseDescribedGroup = {"group_id": group_id, "error_code": ErrorCode.NONE, "error_message": None,
                                 "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                                 "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        try:
            self.ctx.check_coordinator(group_id)
        except KafkaApiError as exc:
            entry["error_code"] = exc.code
            entry["group_state"] = ""
            return entry
        group = self.groups.get(group_id)
        if group is None:
            if api_version >= 6:
                entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
                entry["error_message"] = (f"Group {group_id} is not a classic group." if group_id in self.consumer.groups
                                          else f"Group {group_id} not found.")
            return entry
        stable = group.is_in(GroupState.STABLE)
        entry["group_state"] = group.state.value
        entry["protocol_type"] = group.protocol_type or ""
        entry["protocol_data"] = (group.protocol_name or "") if stable else ""
        entry["members"] = [{
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": (m.metadata(group.protocol_name) or b"") if stable else b"",
            "member_assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
        return entry

    def list_groups(self, active_partitions: set[int], states: set[str] | None,
                    types: set[str] | None) -> list[ListedGroup]:
        """ListGroups entries; ``states``/``types`` already lower-cased (None = no filter)."""
        if types is not None and CLASSIC not in types:
            return []
        out: list[ListedGroup] = []
        for group in self.groups.values():
            if group.partition not in active_partitions or group.is_in(GroupState.DEAD):
                continue
            if states is not None and group.state.value.lower() not in states:
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value, "group_type": CLASSIC})
        return out

    def delete_group(self, group_id: str) -> CoordinatorResult[None]:
        """DeleteGroups of a classic group (a write operation): GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP,
        else tombstones for every offset and the group metadata; once durable the group is Dead."""
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND)
        if not group.is_in(GroupState.EMPTY):
            raise KafkaApiError(ErrorCode.NON_EMPTY_GROUP)
        tombstones: list[KeyValue] = [(R.offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
        tombstones.append((R.group_metadata_key(group_id), None))

        def apply() -> None:
            group.offsets.clear()
            group.transition_to(GroupState.DEAD)
            self.timer.cancel(("join", group_id))
            self.timer.cancel(("sync", group_id))
            self.groups.pop(group_id, None)

        return CoordinatorResult(tombstones, None, apply)
