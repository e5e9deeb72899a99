"""The group coordinator for classic groups (Kafka 4.0's GroupMetadataManager + OffsetMetadataManager).

What it does:

1. Ownership. Group ``g`` belongs to partition ``partition_for(g, offsets.topic.num.partitions)``
   of ``__consumer_offsets``; this broker coordinates ``g`` while it leads that partition. On
   becoming leader the partition is *loaded* (its records replayed from the log start); until
   then requests for its groups get COORDINATOR_LOAD_IN_PROGRESS. Groups of partitions this
   broker does not lead get NOT_COORDINATOR; before start / after shutdown,
   COORDINATOR_NOT_AVAILABLE. On resignation the partition's groups are dropped (waiting joins and
   syncs answer NOT_COORDINATOR) — the new leader loads them from the log.
2. Persistence. Every change a restart must see is a record appended to the group's partition
   through ``replica_manager.append_internal`` *before* it takes effect or is acknowledged:
   offset commits (OffsetCommitKey/Value), group metadata when a generation's assignment is
   stored, when a group becomes Empty, when a new group is created (GroupMetadataKey/Value), and
   tombstones (null values) for deleted offsets and groups. A failed append changes nothing in
   memory and is answered with Kafka's mapped error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE...).
   Since appends are synchronous on the handler loop, no other request interleaves between the
   append and the in-memory update: memory always equals the replay of the log.
3. The classic rebalance protocol, exactly as Kafka 4.0 (see classic_group.py for the states):
   JoinGroup (KIP-394 MEMBER_ID_REQUIRED from v4, KIP-345 static members, the initial rebalance
   delay for Empty groups, group.max.size), SyncGroup, Heartbeat, LeaveGroup. JoinGroup and
   SyncGroup answers that must wait for the rest of the group are asyncio futures completed when
   the join phase or the leader's sync completes.
4. Timeouts on the broker's timing wheel (keyed_timer.py): each member's session timeout (reset by
   every heartbeat, join and sync), a new member's join timeout (5 minutes, KIP-394), the group's
   join phase (rebalance timeout, or group.initial.rebalance.delay.ms steps for an Empty group) and
   the pending-sync timeout (members that do not SyncGroup within the rebalance timeout are removed).
5. Offset expiry every offsets.retention.check.interval.ms: offsets of Empty groups
   offsets.retention.minutes after the group became Empty (simple groups: after the commit;
   Stable consumer groups: offsets of topics no member subscribes to), or at an explicit expire
   timestamp; tombstones are written, and an Empty group left without offsets is deleted too.

After a crash nothing is lost that was acknowledged: a commit's answer is sent after its append;
loading replays the log (the compacted topic keeps the newest record per key).

Threading: everything runs on the handler loop (requests, timer callbacks, leadership callbacks
from the replica manager). No locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from broker.group import records as R
from broker.group.classic_group import ClassicGroup, GroupState, now_ms
from broker.group.consumer_group import ConsumerGroupLoader, ConsumerGroupManager
from broker.group.hashing import partition_for
from broker.group.keyed_timer import KeyedTimer
from broker.group.member import ClassicGroupMember
from protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from protocol.errors import ErrorCode, KafkaApiError
from protocol.records import Record, encode_batch, iter_batches

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's group.classic... new member join timeout
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
_INT64_MAX = 2**63 - 1
CLASSIC = "classic"

_LOADING = "loading"
_ACTIVE = "active"


def _append_error(code: int) -> ErrorCode:
    """Kafka's appendGroupMetadataErrorToResponseError: what a failed coordinator write answers."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode(code)


def _commit_append_error(code: int) -> ErrorCode:
    """Kafka's OffsetMetadataManager mapping for a failed offset commit write."""
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return _append_error(code)


def join_error(code: int, member_id: str = UNKNOWN_MEMBER_ID) -> dict[str, Any]:
    return {"error_code": code, "generation_id": NO_GENERATION, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(code: int) -> dict[str, Any]:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}


class GroupCoordinator:
    """Classic groups and committed offsets of the __consumer_offsets partitions this broker leads."""

    def __init__(self, broker: Any, timer: Any = None) -> None:
        self.broker = broker
        cfg = broker.config
        self.num_partitions: int = cfg["offsets.topic.num.partitions"]
        self.min_session_timeout_ms: int = cfg["group.min.session.timeout.ms"]
        self.max_session_timeout_ms: int = cfg["group.max.session.timeout.ms"]
        self.initial_rebalance_delay_ms: int = cfg["group.initial.rebalance.delay.ms"]
        self.max_group_size: int = cfg["group.max.size"]
        self.offsets_retention_ms: int = cfg.offsets_retention_ms
        self.retention_check_interval_ms: int = cfg["offsets.retention.check.interval.ms"]
        self.offset_metadata_max_bytes: int = cfg["offset.metadata.max.bytes"]
        self.load_buffer_size: int = cfg["offsets.load.buffer.size"]
        self.compression: int = cfg["offsets.topic.compression.codec"]
        self.timer = KeyedTimer(timer if timer is not None else broker.timer)
        self.groups: dict[str, ClassicGroup] = {}
        self.partitions: dict[int, str] = {}  # __consumer_offsets partition -> _LOADING / _ACTIVE
        self.active = False
        self._load_tasks: dict[int, asyncio.Task] = {}
        # One INFO line per burst of loads (start-up loads every partition: 50 lines otherwise).
        self._loads_since: float | None = None
        self._loads_done = 0
        self.consumer = ConsumerGroupManager(self)  # KIP-848 groups, beside the classic ones

    # ==========================================================================================
    # lifecycle and partition ownership

    async def start(self) -> None:
        """Register for leadership changes and load the partitions this broker already leads."""
        rm = self.broker.replica_manager
        rm.on_become_leader(self.on_become_leader)
        rm.on_resign(self.on_resign)
        self.active = True
        # Partitions whose leadership was decided before we registered (start-up).
        topic = self.broker.metadata.image.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            for p in topic.partitions.values():
                if p.leader == self.broker.node_id and p.partition not in self.partitions:
                    self.on_become_leader(OFFSETS_TOPIC, p.partition, p.leader_epoch)
        self._schedule_retention()

    async def shutdown(self) -> None:
        self.active = False
        for task in self._load_tasks.values():
            task.cancel()
        for p in list(self.partitions):
            self._unload(p, ErrorCode.NOT_COORDINATOR)
        self.timer.cancel_all()

    def on_become_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC or not self.active:
            return
        self.partitions[partition] = _LOADING
        if self._loads_since is None:
            self._loads_since = time.monotonic()
        old = self._load_tasks.pop(partition, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._load(partition))
        self._load_tasks[partition] = task
        task.add_done_callback(lambda t, p=partition: self._load_done(p, t))

    def on_resign(self, topic: str, partition: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self._unload(partition, ErrorCode.NOT_COORDINATOR)

    def _load_done(self, partition: int, task: asyncio.Task) -> None:
        if self._load_tasks.get(partition) is task:
            del self._load_tasks[partition]
        if not task.cancelled() and task.exception() is not None:
            log.error("loading %s-%d failed", OFFSETS_TOPIC, partition, exc_info=task.exception())
            self.partitions.pop(partition, None)

    async def _load(self, partition: int) -> None:
        """Replay the partition: the newest record per key wins; tombstones delete."""
        rm = self.broker.replica_manager
        offset = rm.log_start_offset(OFFSETS_TOPIC, partition)
        end = rm.log_end_offset(OFFSETS_TOPIC, partition)
        group_values: dict[str, dict | None] = {}
        cg_loader = ConsumerGroupLoader(partition)
        offsets: dict[str, dict[tuple[str, int], R.OffsetAndMetadata | None]] = {}
        while offset < end:
            data = rm.read_internal(OFFSETS_TOPIC, partition, offset, self.load_buffer_size)
            if not data:
                break
            for batch in iter_batches(data):
                if batch.is_control or batch.is_transactional:
                    # Transactional offset commits (TxnOffsetCommit) arrive with the transaction
                    # coordinator; until then there are none to apply.
                    offset = batch.next_offset
                    continue
                for rec in batch.records:
                    if not cg_loader.replay(rec.key, rec.value):  # KIP-848 records go to their loader
                        self._replay(rec, group_values, offsets)
                offset = batch.next_offset
            await asyncio.sleep(0)  # let other requests through while a big partition loads
        if self.partitions.get(partition) != _LOADING:
            return  # resigned meanwhile
        self.consumer.install_loaded(partition, cg_loader.groups, offsets)  # takes its groups' offsets
        now = now_ms()
        for group_id, value in group_values.items():
            if value is None:
                continue
            self.groups[group_id] = ClassicGroup.from_metadata_value(group_id, partition, value)
        for group_id, by_tp in offsets.items():
            live = {tp: om for tp, om in by_tp.items() if om is not None}
            if not live:
                continue
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = ClassicGroup(group_id, partition, current_time_ms=now)
                group.current_state_timestamp = None
            group.offsets.update(live)
        for group in self.groups.values():
            if group.partition == partition:
                for member in group.members.values():
                    self._reschedule_heartbeat(group, member)
        self.partitions[partition] = _ACTIVE
        log.debug("loaded %s-%d: %d groups", OFFSETS_TOPIC, partition,
                  sum(1 for g in self.groups.values() if g.partition == partition))
        self._loads_done += 1
        if _LOADING not in self.partitions.values():
            started = self._loads_since if self._loads_since is not None else time.monotonic()
            log.info("loaded %d %s partition%s: %d groups in %.0f ms", self._loads_done, OFFSETS_TOPIC,
                     "" if self._loads_done == 1 else "s", len(self.groups), (time.monotonic() - started) * 1000)
            self._loads_since, self._loads_done = None, 0

    @staticmethod
    def _replay(rec: Record, group_values: dict, offsets: dict) -> None:
        try:
            key = R.decode_key(rec.key)
            if isinstance(key, R.OffsetKey):
                om = None if rec.value is None else R.decode_offset_value(rec.value)
                offsets.setdefault(key.group, {})[(key.topic, key.partition)] = om
            elif isinstance(key, R.GroupKey):
                group_values[key.group] = None if rec.value is None else R.decode_group_value(rec.value)
        except R.CorruptRecordError as exc:
            # Kafka fails the whole load; one unreadable record should not cost every group of the
            # partition its offsets, so we log and skip it.
            log.error("skipping unreadable %s record at offset %s: %s", OFFSETS_TOPIC, rec.offset, exc)

    def _unload(self, partition: int, error: ErrorCode) -> None:
        self.partitions.pop(partition, None)
        self.consumer.unload(partition)
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
    # validation and writes

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def check_coordinator(self, group_id: str | None) -> None:
        """Kafka's coordinator checks, in its order; raises KafkaApiError."""
        if not self.active:
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group_id is None:
            raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
        state = self.partitions.get(self.partition_for(group_id))
        if state == _LOADING:
            raise KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if state != _ACTIVE:
            raise KafkaApiError(ErrorCode.NOT_COORDINATOR)

    def _append(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Append key/value records as one v2 batch; KafkaApiError (the raw storage error) on failure."""
        now = now_ms()
        batch = encode_batch([Record(timestamp=now, key=k, value=v) for k, v in records],
                             compression=self.compression)
        self.broker.replica_manager.append_internal(OFFSETS_TOPIC, partition, batch)

    def _store_group(self, group: ClassicGroup, assignment: dict[str, bytes]) -> ErrorCode:
        try:
            self._append(group.partition, [(R.group_metadata_key(group.group_id),
                                            R.group_metadata_value(group.metadata_value(assignment)))])
        except KafkaApiError as exc:
            log.warning("failed to write metadata of group %s: %s", group.group_id, exc)
            return _append_error(exc.code)
        return ErrorCode.NONE

    def _get_or_create(self, group_id: str, create: bool) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = ClassicGroup(group_id, self.partition_for(group_id))
        return group

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
    ) -> dict[str, Any]:
        """JoinGroup; the answer (JoinGroupResponse fields) may wait for the join phase to end."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            if not group_id:
                raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
            self.check_coordinator(group_id)
            if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
                raise KafkaApiError(ErrorCode.INVALID_SESSION_TIMEOUT)
            self._join(future, group_id, member_id, group_instance_id, client_id, client_host,
                       rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, api_version)
        except KafkaApiError as exc:
            if not future.done():
                future.set_result(join_error(exc.code, member_id))
        return await future

    def _join(self, future: asyncio.Future, group_id: str, member_id: str, instance_id: str | None,
              client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
              protocol_type: str, protocols: list[tuple[str, bytes]], api_version: int) -> None:
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        # An Empty KIP-848 group of this id gives way (its offsets carry over); a live one refuses.
        carried = self.consumer.yield_to_classic(group_id, is_unknown)
        is_new_group = group_id not in self.groups
        group = self._get_or_create(group_id, is_unknown)
        if group is not None and carried:
            group.offsets.update(carried)
        if group is None:
            future.set_result(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        if is_new_group:
            # Kafka 4.0 records a new group at once (an Empty GroupMetadata record).
            error = self._store_group(group, {})
            if error != ErrorCode.NONE:
                del self.groups[group_id]
                future.set_result(join_error(error, member_id))
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
                    self.timer.schedule(("heartbeat", group_id, new_id), session_timeout_ms,
                                        lambda: self._expire_heartbeat(group_id, new_id))
                    future.set_result(join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
                else:
                    self._add_member_and_rebalance(group, new_id, None, client_id, client_host,
                                                   rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                   protocols, future)
        else:
            self._join_existing(group, future, member_id, instance_id, client_id, client_host,
                                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)

    def _join_existing(self, group: ClassicGroup, future: asyncio.Future, member_id: str, instance_id: str | None,
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
                       skip_assignment: bool = False) -> dict[str, Any]:
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
                                  protocols: list[tuple[str, bytes]], future: asyncio.Future) -> None:
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
                                     session_timeout_ms: int, future: asyncio.Future) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, future)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(self, group: ClassicGroup, old_id: str, new_id: str, instance_id: str,
                              protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                              session_timeout_ms: int, api_version: int, future: asyncio.Future) -> None:
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
                error = self._store_group(group, assignment)
                if error != ErrorCode.NONE:
                    group.update_member(member, old_protocols, old_rebalance, old_session, None)
                    self.timer.cancel(("heartbeat", group.group_id, new_id))
                    old = group.replace_static_member(instance_id, new_id, old_id)
                    self._reschedule_heartbeat(group, old)
                    response = join_error(error)
                    response.update(generation_id=group.generation_id, protocol_type=group.protocol_type,
                                    protocol_name=group.protocol_name, leader=current_leader or "")
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
            self.timer.schedule(("join", group_id), delay,
                                lambda: self._initial_rebalance_step(group_id, delay, remaining))
        group.transition_to(GroupState.PREPARING_REBALANCE)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self.timer.schedule(("join", group_id), group.rebalance_timeout_ms(),
                                    lambda: self._complete_join_by_id(group_id))

    def _initial_rebalance_step(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(("join", group_id), new_delay,
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
            self.timer.schedule(("join", group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            self._store_group(group, {})
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
        self.timer.schedule(("sync", group_id), group.rebalance_timeout_ms(),
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

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember,
                              timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.timer.schedule(("heartbeat", group_id, member_id),
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
                         assignments: dict[str, bytes]) -> dict[str, Any]:
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            if not group_id:
                raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
            self.check_coordinator(group_id)
            self._sync(future, group_id, generation_id, member_id, group_instance_id, protocol_type,
                       protocol_name, assignments)
        except KafkaApiError as exc:
            if not future.done():
                future.set_result(sync_error(exc.code))
        return await future

    def _sync(self, future: asyncio.Future, group_id: str, generation_id: int, member_id: str,
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
        error = self._store_group(group, assignment)
        if not (group.is_in(GroupState.COMPLETING_REBALANCE) and generation_id == group.generation_id):
            return
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment(group, error)
            self._maybe_prepare_rebalance_or_complete_join(group)
            return
        for m in group.members.values():
            m.assignment = assignment[m.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE)

    def _member_group(self, group_id: str) -> ClassicGroup:
        """The live group a member-level request (Heartbeat, LeaveGroup) addresses, or Kafka's error:
        INVALID_GROUP_ID, the coordinator errors, UNKNOWN_MEMBER_ID for no such group, and
        COORDINATOR_NOT_AVAILABLE for a dead one."""
        if not group_id:
            raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return group

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
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

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup for (member_id, group_instance_id) pairs: (group error, one error per member)."""
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
    # offsets

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       api_version: int, retention_time_ms: int,
                       partitions: list[tuple[str, int, int, int, str | None, int]]) -> list[ErrorCode]:
        """OffsetCommit: (topic, partition, offset, leader_epoch, metadata, commit_timestamp) each.

        Returns one error per partition, in order. Only partitions of existing topics with
        metadata within offset.metadata.max.bytes are written; the answer comes after the append.
        """
        try:
            self.check_coordinator(group_id)
            group = self.groups.get(group_id)
            created = False
            cgroup = self.consumer.groups.get(group_id)
            if cgroup is not None:
                # A KIP-848 group: generation_id_or_member_epoch is the member epoch.
                cgroup.validate_offset_commit(member_id, generation_id, api_version)
                group = cgroup
            elif group is None:
                if generation_id >= 0:
                    raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION)
                # A "simple" group: offsets only, no group management (admin client, assign()).
                group = self._get_or_create(group_id, True)
                assert group is not None
                group.current_state_timestamp = None
                created = True
            if cgroup is None:
                self._validate_offset_commit(group, member_id, instance_id, generation_id)
        except KafkaApiError as exc:
            return [ErrorCode(exc.code)] * len(partitions)
        image = self.broker.metadata.image
        now = now_ms()
        errors: list[ErrorCode] = []
        to_write: list[tuple[tuple[str, int], R.OffsetAndMetadata]] = []
        for topic, partition, offset, leader_epoch, metadata, commit_ts in partitions:
            t = image.topics.get(topic)
            if t is None or partition not in t.partitions:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode("utf-8")) > self.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                commit_at = commit_ts if commit_ts >= 0 else now
                # An explicit retention near 2**63 (OffsetCommit v2-v4) would push the expire
                # timestamp past int64, which the __consumer_offsets record cannot hold: cap it.
                expire_at = min(commit_at + retention_time_ms, _INT64_MAX) if retention_time_ms >= 0 else -1
                to_write.append(((topic, partition),
                                 R.OffsetAndMetadata(offset, leader_epoch, metadata or "", commit_at, expire_at)))
                errors.append(ErrorCode.NONE)
        if to_write:
            try:
                self._append(group.partition, [(R.offset_commit_key(group_id, t, p), R.offset_commit_value(om))
                                               for (t, p), om in to_write])
            except KafkaApiError as exc:
                if created and not group.offsets:
                    del self.groups[group_id]
                err = _commit_append_error(exc.code)
                return [err if e == ErrorCode.NONE else e for e in errors]
            for tp, om in to_write:
                group.offsets[tp] = om
        elif created:
            del self.groups[group_id]
        if generation_id >= 0 and member_id in group.members and group.is_in(GroupState.STABLE):
            self._reschedule_heartbeat(group, group.members[member_id])
        return errors

    @staticmethod
    def _validate_offset_commit(group: ClassicGroup, member_id: str, instance_id: str | None,
                                generation_id: int) -> None:
        if group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return
        if generation_id >= 0 or member_id or instance_id is not None:
            group.validate_member(member_id, instance_id)
            if generation_id != group.generation_id:
                raise KafkaApiError(ErrorCode.ILLEGAL_GENERATION)
        elif not group.is_in(GroupState.EMPTY):
            raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            raise KafkaApiError(ErrorCode.REBALANCE_IN_PROGRESS)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> list[tuple[str, list[tuple[int, R.OffsetAndMetadata | None]]]]:
        """OffsetFetch: committed offsets of the given partitions (None: all); raises group errors.

        ``member_id``/``member_epoch`` (v9) are checked against KIP-848 groups only, as Kafka.
        """
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            cgroup.validate_offset_fetch(member_id, member_epoch)
            group = cgroup
        offsets = {} if group is None or group.is_in(GroupState.DEAD) else group.offsets
        if topics is None:
            by_topic: dict[str, list[tuple[int, R.OffsetAndMetadata | None]]] = {}
            for (t, p), om in sorted(offsets.items()):
                by_topic.setdefault(t, []).append((p, om))
            return list(by_topic.items())
        return [(t, [(p, offsets.get((t, p))) for p in parts]) for t, parts in topics]

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete (KIP-496): only offsets of topics the group does not consume."""
        try:
            self.check_coordinator(group_id)
            # A KIP-848 group answers is_in / is_subscribed_to_topic / offsets like a classic one here.
            group = self.groups.get(group_id) or self.consumer.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND)
            if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE) \
                    and not group.uses_consumer_protocol():
                raise KafkaApiError(ErrorCode.NON_EMPTY_GROUP)
        except KafkaApiError as exc:
            return ErrorCode(exc.code), []
        image = self.broker.metadata.image
        errors: list[ErrorCode] = []
        doomed: list[tuple[str, int]] = []
        for topic, partition in partitions:
            if topic not in image.topics:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif not group.is_in(GroupState.EMPTY) and group.is_subscribed_to_topic(topic):
                errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                errors.append(ErrorCode.NONE)
                if (topic, partition) in group.offsets:
                    doomed.append((topic, partition))
        if doomed:
            try:
                self._append(group.partition, [(R.offset_commit_key(group_id, t, p), None) for t, p in doomed])
            except KafkaApiError as exc:
                return _append_error(exc.code), []
            for tp in doomed:
                group.offsets.pop(tp, None)
        return ErrorCode.NONE, errors

    # ==========================================================================================
    # DescribeGroups, ListGroups, DeleteGroups

    def describe_group(self, group_id: str) -> dict[str, Any]:
        """One DescribeGroupsResponse group entry."""
        entry: dict[str, Any] = {"group_id": group_id, "error_code": ErrorCode.NONE, "group_state": "Dead",
                                 "protocol_type": "", "protocol_data": "", "members": [],
                                 "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        try:
            self.check_coordinator(group_id)
        except KafkaApiError as exc:
            entry["error_code"] = exc.code
            entry["group_state"] = ""
            return entry
        group = self.groups.get(group_id)
        if group is None:
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

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> tuple[ErrorCode, list[dict]]:
        """ListGroups; the filters compare case-insensitively, as Kafka's."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if _LOADING in self.partitions.values() else ErrorCode.NONE
        states_l = {s.lower() for s in states} if states else None
        types_l = {t.lower() for t in types} if types else None
        out = []
        for group in self.groups.values():
            if self.partitions.get(group.partition) != _ACTIVE or group.is_in(GroupState.DEAD):
                continue
            if states_l is not None and group.state.value.lower() not in states_l:
                continue
            if types_l is not None and CLASSIC not in types_l:
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value, "group_type": CLASSIC})
        active = {p for p, state in self.partitions.items() if state == _ACTIVE}
        out += self.consumer.list_groups(active, states_l, types_l)
        return error, out

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            try:
                self.check_coordinator(group_id)
                if group_id in self.consumer.groups:
                    self.consumer.delete_group(group_id)  # a KIP-848 group
                    results[group_id] = ErrorCode.NONE
                    continue
                group = self.groups.get(group_id)
                if group is None or group.is_in(GroupState.DEAD):
                    raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND)
                if not group.is_in(GroupState.EMPTY):
                    raise KafkaApiError(ErrorCode.NON_EMPTY_GROUP)
                self._delete_group(group)
                results[group_id] = ErrorCode.NONE
            except KafkaApiError as exc:
                results[group_id] = ErrorCode(exc.code)
        return results

    def _delete_group(self, group: ClassicGroup) -> None:
        """Tombstones for every offset and the group metadata, then the group is Dead."""
        tombstones = [(R.offset_commit_key(group.group_id, t, p), None) for t, p in group.offsets]
        tombstones.append((R.group_metadata_key(group.group_id), None))
        try:
            self._append(group.partition, tombstones)
        except KafkaApiError as exc:
            raise KafkaApiError(_append_error(exc.code)) from None
        group.offsets.clear()
        group.transition_to(GroupState.DEAD)
        self.timer.cancel(("join", group.group_id))
        self.timer.cancel(("sync", group.group_id))
        del self.groups[group.group_id]

    # ==========================================================================================
    # offset expiry

    def _schedule_retention(self) -> None:
        self.timer.schedule(("retention",), self.retention_check_interval_ms, self._retention_tick)

    def _retention_tick(self) -> None:
        try:
            self.cleanup_expired_offsets()
        finally:
            if self.active:
                self._schedule_retention()

    def cleanup_expired_offsets(self, current_time_ms: int | None = None) -> int:
        """Expire offsets as Kafka 4.0's ClassicGroup.offsetExpirationCondition; returns how many."""
        now = now_ms() if current_time_ms is None else current_time_ms
        expired_total = 0
        for group in list(self.groups.values()):
            if self.partitions.get(group.partition) != _ACTIVE:
                continue
            base = self._expiration_base(group)
            if base is None:
                continue
            expired = []
            for tp, om in group.offsets.items():
                if group.is_in(GroupState.STABLE) and group.is_subscribed_to_topic(tp[0]):
                    continue
                if om.expire_timestamp_ms >= 0:
                    if now >= om.expire_timestamp_ms:
                        expired.append(tp)
                elif now - base(om) >= self.offsets_retention_ms:
                    expired.append(tp)
            records = [(R.offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            delete_group = group.is_in(GroupState.EMPTY) and len(expired) == len(group.offsets)
            if delete_group:
                records.append((R.group_metadata_key(group.group_id), None))
            if not records:
                continue
            try:
                self._append(group.partition, records)
            except KafkaApiError as exc:
                log.warning("could not expire offsets of group %s: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            expired_total += len(expired)
            if delete_group:
                group.transition_to(GroupState.DEAD)
                del self.groups[group.group_id]
        active = {p for p, state in self.partitions.items() if state == _ACTIVE}
        expired_total += self.consumer.cleanup_expired_offsets(now, self.offsets_retention_ms, active)
        return expired_total

    @staticmethod
    def _expiration_base(group: ClassicGroup) -> Any:
        if group.protocol_type is None:
            return lambda om: om.commit_timestamp_ms  # simple group
        if group.is_in(GroupState.EMPTY):
            ts = group.current_state_timestamp
            return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp_ms)
        if group.is_in(GroupState.STABLE) and group.uses_consumer_protocol() and group.subscribed_topics is not None:
            return lambda om: om.commit_timestamp_ms
        return None


def coordinator_of(request: Any) -> GroupCoordinator | None:
    """The broker's group coordinator, or None before it is wired/started (→ COORDINATOR_NOT_AVAILABLE)."""
    coordinator = getattr(request.broker, "group_coordinator", None)
    return coordinator if coordinator is not None and coordinator.active else None


def client_host(request: Any) -> str:
    """Kafka's clientHost: InetAddress.toString() of the peer, e.g. "/127.0.0.1"."""
    peer = getattr(request.conn, "peer", "?")
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host
