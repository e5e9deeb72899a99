"""The streams-group side of the group coordinator (Kafka 4.4's GroupMetadataManager for streams
groups): StreamsGroupHeartbeat (join, heartbeat, leave, fencing by timers), StreamsGroupDescribe,
and the group's loading, unloading, listing and deletion. The rules it follows - topology, epochs,
reconciliation, persistence - are streams_group.py's theory of operation; the state it changes is
streams_group.StreamsGroup, only through the replay of the records it writes.

Ownership: the handler loop (requests, timer callbacks, partition load/unload). No locks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorShard,
    CoordinatorWriteError,
    KeyValue,
)
from odradek.broker.group import streams_records as SR
from odradek.broker.group.context import GroupContext
from odradek.broker.group.errors import append_error
from odradek.broker.group.group_overrides import group_int, group_list
from odradek.broker.group.records import OffsetAndMetadata, offset_commit_key
from odradek.broker.group.streams_assignor import ASSIGNOR_NAME, AssignmentMember, assign
from odradek.broker.group.streams_group import (
    GROUP_TYPE,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    PROTOCOL_TYPE,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    StreamsGroupState,
    Target,
    Tasks,
    merge_tasks,
    reconcile,
    replay_into,
    streams_error,
)
from odradek.broker.group.streams_topology import (
    ASSIGNMENT_DELAYED,
    MISSING_CLIENT_TAGS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    ConfiguredTopology,
    InternalTopicToCreate,
    StreamsTopology,
    configure,
    metadata_hash,
)
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        EndpointToPartitions,
        ListedGroup,
        Status,
        StreamsGroupDescribeResponseAssignment,
        StreamsGroupDescribeResponseDescribedGroup,
        StreamsGroupDescribeResponseMember,
        StreamsGroupDescribeResponseTopicInfo,
        StreamsGroupDescribeResponseTopology,
        StreamsGroupHeartbeatRequest,
        StreamsGroupHeartbeatRequestTaskIds,
        StreamsGroupHeartbeatRequestTaskOffset,
        StreamsGroupHeartbeatRequestTopology,
        StreamsGroupHeartbeatResponse,
        StreamsGroupHeartbeatResponseTaskIds,
        TopicPartition,
    )

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HeartbeatResult:
    """The response body and the internal topics the handler must create (Kafka's
    StreamsGroupHeartbeatResult)."""

    response: StreamsGroupHeartbeatResponse
    topics_to_create: list[InternalTopicToCreate] = field(default_factory=list)


class _Change:
    def __init__(self) -> None:
        self.records: list[SR.StreamsRecord] = []
        self.after: list[Callable[[], None]] = []


def _task_rows(tasks: Tasks) -> list[StreamsGroupHeartbeatResponseTaskIds]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


def error_response(code: int, message: str | None = None) -> StreamsGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": "",
            "member_epoch": 0, "heartbeat_interval_ms": 0, "acceptable_recovery_lag_legacy": 0,
            "task_offset_interval_ms": 0, "acceptable_recovery_lag": -1, "status": None, "active_tasks": None,
            "standby_tasks": None, "warmup_tasks": None, "topology_description_required": False,
            "endpoint_information_epoch": 0, "partitions_by_user_endpoint": None}


class StreamsGroupManager:
    """StreamsGroupHeartbeat, StreamsGroupDescribe and the streams side of the other group APIs."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.session_timeout_ms = cfg.streams_session_timeout_ms
        self.heartbeat_interval_ms = cfg.streams_heartbeat_interval_ms
        self.max_size = cfg.streams_max_size
        self.num_standby_replicas = cfg.streams_num_standby_replicas
        self.initial_rebalance_delay_ms = cfg.streams_initial_rebalance_delay_ms
        self.task_offset_interval_ms = cfg.streams_task_offset_interval_ms
        self.acceptable_recovery_lag = cfg.streams_acceptable_recovery_lag
        self.assignment_interval_ms = cfg.streams_assignment_interval_ms
        self.rack_aware_assignment_tags = list(cfg.streams_rack_aware_assignment_tags)
        # group.streams.assignors: the first is the default; sticky is Kafka's only built-in one.
        self.assignor_name = cfg.streams_assignors[0] if cfg.streams_assignors else ASSIGNOR_NAME
        self.groups: dict[str, StreamsGroup] = ctx.streams_groups
        self.timer = ctx.timer

    # ==========================================================================================
    # StreamsGroupHeartbeat

    async def heartbeat(self, version: int, req: StreamsGroupHeartbeatRequest, client_id: str,
                        client_host: str) -> HeartbeatResult:
        try:
            self.validate(req)
            partition = self.ctx.check_coordinator(req["group_id"])

            def op(shard: CoordinatorShard) -> CoordinatorResult[HeartbeatResult]:
                change = _Change()
                if req["member_epoch"] in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    result = self._leave(req, change)
                else:
                    result = self._heartbeat(version, req, client_id, client_host, change)
                return self._result(req["group_id"], change, result)

            return await self.ctx.runtime.write(partition, op)
        except CoordinatorWriteError as exc:
            return HeartbeatResult(error_response(append_error(exc.code)))
        except KafkaApiError as exc:
            return HeartbeatResult(error_response(exc.code, exc.message or None))

    @staticmethod
    def validate(req: StreamsGroupHeartbeatRequest) -> None:
        """Kafka 4.4's throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures and
        throwIfStreamsGroupHeartbeatRequestIsInvalid (GroupCoordinatorService), in their order."""
        def invalid(msg: str) -> KafkaApiError:
            return streams_error(ErrorCode.INVALID_REQUEST, msg)

        topology = req["topology"]
        if topology is not None:
            for s in topology["subtopologies"] or ():
                if s["source_topic_regex"]:
                    raise invalid("Regular expressions for source topics are not supported yet.")
        if req["member_id"] == "":
            raise invalid("MemberId can't be empty.")
        if req["group_id"] == "":
            raise invalid("GroupId can't be empty.")
        if req["instance_id"] == "":
            raise invalid("InstanceId can't be empty.")
        if req["rack_id"] == "":
            raise invalid("RackId can't be empty.")
        epoch = req["member_epoch"]
        if epoch == 0:
            if req["rebalance_timeout_ms"] == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            for rows, label in ((req["active_tasks"], "ActiveTasks"), (req["standby_tasks"], "StandbyTasks"),
                                (req["warmup_tasks"], "WarmupTasks")):
                if rows is None or rows:  # Kafka's throwIfNotEmptyCollection: null too
                    raise invalid(f"{label} must be empty when (re-)joining.")
            if topology is None:
                raise invalid("Topology must be non-null when (re-)joining.")
            _validate_topology(topology)
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req["instance_id"] is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
        kinds = (req["active_tasks"], req["standby_tasks"], req["warmup_tasks"])
        if any(k is not None for k in kinds) and any(k is None for k in kinds):
            raise invalid("If one task-type is non-null, all must be non-null.")
        if epoch != 0 and topology is not None:
            raise invalid("Topology can only be provided when (re-)joining.")

    def _streams_group(self, group_id: str, create: bool) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        ctx = self.ctx
        if group_id in ctx.classic_groups or group_id in ctx.consumer_groups or \
                group_id in getattr(ctx, "share_groups", {}):
            raise streams_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if not create:
            raise streams_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        return StreamsGroup(group_id, ctx.partition_for(group_id))

    def _heartbeat(self, version: int, req: StreamsGroupHeartbeatRequest, client_id: str, client_host: str,
                   change: _Change) -> HeartbeatResult:
        group_id: str = req["group_id"]
        member_id: str = req["member_id"]
        epoch: int = req["member_epoch"]
        instance_id: str | None = req["instance_id"]
        joining = epoch == 0
        group = self._streams_group(group_id, joining)
        was_empty = not group.members
        records = change.records
        statuses: list[Status] = []
        owned = self._owned(req)
        if joining and not (instance_id is not None and instance_id in group.static_members) and \
                len(group.members) >= self.max_size and member_id not in group.members:
            raise streams_error(ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The streams group has reached its maximum capacity of {self.max_size} members.")
        replaced: StreamsGroupMember | None = None
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID,
                                f"Member {member_id} is not a member of group {group_id}.")
                member = StreamsGroupMember(member_id)
                log.info("streams group %s: member %s joins", group_id, member_id)
            else:
                self._check_epoch(member, epoch, owned)
        else:
            member, replaced = self._static_member(group, member_id, epoch, instance_id, joining, owned, records)

        # 1. The member's metadata.
        endpoint = req["user_endpoint"]
        new_endpoint = None if endpoint is None else (endpoint["host"], endpoint["port"])
        tags = req["client_tags"]
        updated = dataclasses.replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=req["rack_id"] if req["rack_id"] is not None else member.rack_id,
            rebalance_timeout_ms=(req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] != -1
                                  else member.rebalance_timeout_ms),
            topology_epoch=req["topology"]["epoch"] if req["topology"] is not None else member.topology_epoch,
            client_id=client_id, client_host=client_host,
            process_id=req["process_id"] if req["process_id"] is not None else member.process_id,
            client_tags=(frozenset((t["key"], t["value"]) for t in tags) if tags is not None
                         else member.client_tags),
            user_endpoint=new_endpoint if joining or endpoint is not None else member.user_endpoint)
        bump = False
        if not updated.metadata_equal(member) or replaced is not None:
            records.append(SR.member_metadata_record(group_id, updated))
            bump = instance_id is None or updated.epoch_relevant() != member.epoch_relevant()

        # 2. The topology (rule 1).
        topology = self._maybe_update_topology(group, member_id, req["topology"], records)
        if group.topology is not None and updated.topology_epoch < group.topology.epoch:
            statuses.append({"status_code": STALE_TOPOLOGY, "status_detail":
                             f"The member's topology epoch {updated.topology_epoch} is behind the group's "
                             f"topology epoch {group.topology.epoch}."})
        image = self.ctx.metadata.image
        hash_now = metadata_hash(topology, functools.partial(_topic_state, image))
        configured = group.configured
        if configured is None or configured.epoch != topology.epoch or hash_now != group.metadata_hash:
            configured = configure(topology, functools.partial(_partition_count, image))
            if group_id in self.groups:
                group.configured = configured
        if hash_now != group.metadata_hash:
            bump = True
        validated_epoch = topology.epoch if configured.ready else -1
        if configured.ready and configured.tasks is not None:
            for rows in (req["active_tasks"], req["standby_tasks"], req["warmup_tasks"]):
                _check_tasks(configured.tasks, rows)
        if validated_epoch != group.validated_topology_epoch:
            bump = True
        configs = {"num.standby.replicas": str(self._standby_replicas(group_id))}
        tag_keys = self._rack_aware_assignment_tags(group_id)
        if tag_keys:  # as Kafka's streamsGroupAssignmentConfigs: a change of them is a new group epoch
            configs["rack.aware.assignment.tags"] = ",".join(tag_keys)
        if configs != group.assignment_configs:
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append(SR.group_metadata_record(group_id, group_epoch, hash_now, validated_epoch, configs))
            log.info("streams group %s: epoch %d (topology epoch %d %s)", group_id, group_epoch, topology.epoch,
                     "ready" if configured.ready else "not ready")

        # 3. The target assignment (rule 2), unless the initial delay holds it back.
        delay_key = ("sg-initial", group_id)
        delay = group_int(self.ctx.metadata, group_id, "streams.initial.rebalance.delay.ms",
                          self.initial_rebalance_delay_ms)
        if was_empty and delay > 0 and not self.timer.is_scheduled(delay_key):
            change.after.append(lambda: self.timer.schedule(delay_key, delay,
                                                             lambda: self._delayed_assignment(group_id)))
            delayed = True
        else:
            delayed = self.timer.is_scheduled(delay_key)
        members_now = dict(group.members)
        if replaced is not None:
            members_now.pop(replaced.member_id, None)
        members_now[updated.member_id] = updated
        if delayed:
            statuses.append({"status_code": ASSIGNMENT_DELAYED,
                             "status_detail": "Assignment delayed due to the configured initial rebalance delay."})
            target_epoch = group.assignment_epoch
            target = self._target_for(group, updated.member_id, replaced)
        elif group_epoch > group.assignment_epoch and not self._may_assign(group):
            statuses.append({"status_code": ASSIGNMENT_DELAYED,
                             "status_detail": "Assignment delayed due to the configured assignment interval."})
            target_epoch = group.assignment_epoch
            target = self._target_for(group, updated.member_id, replaced)
        elif group_epoch > group.assignment_epoch:
            targets = self._compute_targets(group, members_now, configured)
            for mid, t in targets.items():
                if group.target.get(mid) != t or mid == updated.member_id and replaced is not None:
                    records.append(SR.target_assignment_record(group_id, mid, t.active, t.standby, t.warmup))
            records.append(SR.target_assignment_metadata_record(group_id, group_epoch, self.ctx.time_ms()))
            target_epoch, target = group_epoch, targets[updated.member_id]
        else:
            target_epoch = group.assignment_epoch
            target = self._target_for(group, updated.member_id, replaced)

        # 4. Reconcile the member (rule 3).
        before = updated
        if not updated.is_reconciled_to(target_epoch):
            updated = reconcile(updated, target_epoch, target, group.owners, owned)
        if updated != before or (replaced is not None and updated.member_epoch != before.member_epoch):
            records.append(SR.current_assignment_record(group_id, updated))
            key = ("sg-rebalance", group_id, updated.member_id)
            if updated.state == MemberState.UNREVOKED_TASKS:
                m_epoch, timeout, mid = updated.member_epoch, max(updated.rebalance_timeout_ms, 0), updated.member_id
                change.after.append(lambda: self.timer.schedule(
                    key, timeout, lambda: self._fence_by_timer(group_id, mid, "its rebalance timeout expired",
                                                               m_epoch)))
            else:
                change.after.append(lambda: self.timer.cancel(key))
        mid = updated.member_id
        change.after.append(lambda: self._schedule_session_timeout(group_id, mid))
        if req["shutdown_application"]:
            change.after.append(lambda: self._request_shutdown(group_id, mid))
        if req["task_offsets"] is not None or req["task_end_offsets"] is not None:
            offsets, ends = req["task_offsets"], req["task_end_offsets"]
            change.after.append(lambda: self._note_task_offsets(group_id, mid, offsets, ends))

        # 5. The response.
        changed = updated.assigned() != member.assigned()
        response: StreamsGroupHeartbeatResponse = {
            "throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "member_id": mid,
            "member_epoch": updated.member_epoch,
            "heartbeat_interval_ms": group_int(self.ctx.metadata, group_id, "streams.heartbeat.interval.ms",
                                               self.heartbeat_interval_ms),
            "acceptable_recovery_lag_legacy": min(self.acceptable_recovery_lag, 2**31 - 1),
            "task_offset_interval_ms": self.task_offset_interval_ms,
            "acceptable_recovery_lag": self.acceptable_recovery_lag,
            "status": statuses, "active_tasks": None, "standby_tasks": None, "warmup_tasks": None,
            "topology_description_required": False,
            "endpoint_information_epoch": group.endpoint_information_epoch, "partitions_by_user_endpoint": None}
        if joining or changed:
            response["active_tasks"] = _task_rows(updated.active)
            response["standby_tasks"] = _task_rows(updated.standby)
            response["warmup_tasks"] = _task_rows(updated.warmup)
        endpoint_changed = updated.user_endpoint != member.user_endpoint
        bump_endpoints = endpoint_changed or (changed and updated.user_endpoint is not None)
        member_endpoint_epoch = req["endpoint_information_epoch"]
        change.after.append(lambda: self._after_endpoints(group_id, bump_endpoints))
        next_endpoint_epoch = group.endpoint_information_epoch + (1 if bump_endpoints else 0)
        response["endpoint_information_epoch"] = next_endpoint_epoch
        if next_endpoint_epoch != member_endpoint_epoch:
            response["partitions_by_user_endpoint"] = self._partitions_by_endpoint(members_now, updated, configured)
        if configured.status is not None:
            statuses.append({"status_code": configured.status[0], "status_detail": configured.status[1]})
        requester = group.shutdown_requested_by or (mid if req["shutdown_application"] else None)
        if requester is not None:
            statuses.append({"status_code": SHUTDOWN_APPLICATION, "status_detail":
                             f"Streams group member {requester} encountered a fatal error and requested a "
                             "shutdown for the entire application."})
        # Last, as Kafka: the configured tag keys the member has not sent (its earlier tags count when a
        # heartbeat sends none). Only to v1+ clients: v0 ones (Kafka < 4.4) throw on a status they
        # do not know (KAFKA-20744). Kafka 4.4's sticky assignor does not read the tags; the status
        # only tells the application to set client.tag.<key>.
        missing = [k for k in tag_keys if k not in {key for key, _ in updated.client_tags}]
        if version >= 1 and missing:
            statuses.append({"status_code": MISSING_CLIENT_TAGS, "status_detail":
                             "Missing required client tags for rack-aware standby assignment: "
                             f"[{', '.join(missing)}]. Configure them via 'client.tag.<tagKey>' in your "
                             "Streams config."})
        return HeartbeatResult(response, list(configured.to_create))

    def _maybe_update_topology(self, group: StreamsGroup, member_id: str, wire: StreamsGroupHeartbeatRequestTopology | None,
                               records: list[SR.StreamsRecord]) -> StreamsTopology:
        if wire is not None:
            sent = StreamsTopology.from_wire(wire)
            if group.topology is None:
                log.info("streams group %s: member %s initialized the topology with epoch %d", group.group_id,
                         member_id, sent.epoch)
                records.append(SR.topology_record(group.group_id, sent.record_value()))
                return sent
            if group.topology.epoch > sent.epoch:
                return group.topology
            if group.topology != sent:
                raise streams_error(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
            return group.topology
        if group.topology is not None:
            return group.topology
        raise streams_error(ErrorCode.INVALID_REQUEST, "Topology must be non-null when (re-)joining.")

    @staticmethod
    def _owned(req: StreamsGroupHeartbeatRequest) -> Tasks | None:
        rows = (req["active_tasks"], req["standby_tasks"], req["warmup_tasks"])
        if any(r is None for r in rows):
            return None
        out: Tasks = {}
        for r in rows:
            out = merge_tasks(out, SR.tasks_from(r))
        return out

    @staticmethod
    def _check_epoch(member: StreamsGroupMember, received: int, owned: Tasks | None) -> None:
        """Kafka's throwIfStreamsGroupMemberEpochIsInvalid."""
        if received == 0:
            return
        if received > member.member_epoch:
            raise streams_error(ErrorCode.FENCED_MEMBER_EPOCH,
                        f"The streams group member has a greater member epoch ({received}) than the one known by "
                        f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                        "partitions and rejoin.")
        if received < member.member_epoch:
            assigned = merge_tasks(merge_tasks(member.active, member.standby), member.warmup)
            subset = owned is not None and all(ps <= assigned.get(s, frozenset()) for s, ps in owned.items())
            if received != member.previous_member_epoch or not subset:
                raise streams_error(ErrorCode.FENCED_MEMBER_EPOCH,
                            f"The streams group member has a smaller member epoch ({received}) than the one known "
                            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                            "partitions and rejoin.")

    def _static_member(self, group: StreamsGroup, member_id: str, epoch: int, instance_id: str, joining: bool,
                       owned: Tasks | None, records: list[SR.StreamsRecord]
                       ) -> tuple[StreamsGroupMember, StreamsGroupMember | None]:
        """Kafka's getOrMaybeCreateStaticStreamsGroupMember: (the member, the one it replaces)."""
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return StreamsGroupMember(member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise streams_error(ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {member_id} with instance id {instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.")
            # Kafka's replaceStreamsMember: the old member's records go, the new one takes its target.
            g = group.group_id
            records += [SR.tombstone(SR.CURRENT_MEMBER_ASSIGNMENT, g, existing.member_id),
                        SR.tombstone(SR.TARGET_ASSIGNMENT_MEMBER, g, existing.member_id),
                        SR.tombstone(SR.MEMBER_METADATA, g, existing.member_id)]
            target = group.target.get(existing.member_id, Target())
            records.append(SR.target_assignment_record(g, member_id, target.active, target.standby, target.warmup))
            log.info("streams group %s: static member %s replaces %s (instance %s)", g, member_id,
                     existing.member_id, instance_id)
            return dataclasses.replace(existing, member_id=member_id, member_epoch=0,
                                       previous_member_epoch=0), existing
        if existing is None:
            raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise streams_error(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                        f"was fenced by member {existing.member_id}.")
        self._check_epoch(existing, epoch, owned)
        return existing, None

    def _may_assign(self, group: StreamsGroup) -> bool:
        """Kafka's canComputeNextTargetAssignment: never assigned (timestamp 0), no interval, or the
        interval since the last target is over. The interval is the group's
        streams.assignment.interval.ms, else the broker's (Kafka's streamsGroupAssignmentIntervalMs)."""
        last = group.assignment_timestamp_ms
        interval = group_int(self.ctx.metadata, group.group_id, "streams.assignment.interval.ms",
                             self.assignment_interval_ms)
        return last == 0 or interval == 0 or self.ctx.time_ms() >= last + interval

    def _target_for(self, group: StreamsGroup, member_id: str, replaced: StreamsGroupMember | None) -> Target:
        if member_id in group.target:
            return group.target[member_id]
        if replaced is not None:
            return group.target.get(replaced.member_id, Target())
        return Target()

    def _compute_targets(self, group: StreamsGroup, members: dict[str, StreamsGroupMember],
                         configured: ConfiguredTopology) -> dict[str, Target]:
        if not configured.ready or configured.tasks is None or group.topology is None and configured.tasks is None:
            return {mid: Target() for mid in members}
        topology = group.topology
        stateful = set()
        if topology is not None:
            stateful = {s.subtopology_id for s in topology.subtopologies if s.state_changelog_topics}
        else:
            stateful = set(configured.tasks)
        specs = []
        for m in members.values():
            offsets = group.task_offsets.get(m.member_id, ({}, {}))[0]
            specs.append(AssignmentMember(m.member_id, m.process_id, merge_tasks(m.active, m.active_revoking),
                                          merge_tasks(m.standby, m.standby_revoking), offsets))
        result = assign(specs, configured.tasks, stateful, self._standby_replicas(group.group_id))
        return {mid: Target(t.active, t.standby, {}) for mid, t in result.items()}

    def _partitions_by_endpoint(self, members: dict[str, StreamsGroupMember], updated: StreamsGroupMember,
                                configured: ConfiguredTopology) -> list[EndpointToPartitions]:
        """Kafka's buildEndpointToPartitions: one entry per member with a user endpoint."""
        out: list[EndpointToPartitions] = []
        inputs = configured.source_partitions
        for m in sorted(members.values(), key=lambda m: m.member_id):
            if m.user_endpoint is None:
                continue

            def partitions(tasks: Tasks) -> list[TopicPartition]:
                by_topic: dict[str, set[int]] = {}
                for s, ps in tasks.items():
                    for topic in inputs.get(s, ()):
                        by_topic.setdefault(topic, set()).update(ps)
                return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]

            out.append({"user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                        "active_partitions": partitions(m.active),
                        "standby_partitions": partitions(merge_tasks(m.standby, m.warmup))})
        return out

    def _after_endpoints(self, group_id: str, bump: bool) -> None:
        group = self.groups.get(group_id)
        if group is not None and bump:
            group.endpoint_information_epoch += 1

    def _request_shutdown(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.shutdown_requested_by is None:
            log.info("streams group %s: member %s requested the shutdown of the application", group_id, member_id)
            group.shutdown_requested_by = member_id

    def _note_task_offsets(self, group_id: str, member_id: str,
                           offsets: list[StreamsGroupHeartbeatRequestTaskOffset] | None,
                           ends: list[StreamsGroupHeartbeatRequestTaskOffset] | None) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        cur, cur_end = group.task_offsets.get(member_id, ({}, {}))
        if offsets is not None:
            cur = {(o["subtopology_id"], o["partition"]): o["offset"] for o in offsets}
        if ends is not None:
            cur_end = {(o["subtopology_id"], o["partition"]): o["offset"] for o in ends}
        group.task_offsets[member_id] = (cur, cur_end)

    # -- leaving and fencing -------------------------------------------------------------------

    def _leave(self, req: StreamsGroupHeartbeatRequest, change: _Change) -> HeartbeatResult:
        group_id, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        instance_id = req["instance_id"]
        group = self._streams_group(group_id, False)
        if req["shutdown_application"]:
            change.after.append(lambda: self._request_shutdown(group_id, member_id))
        response = error_response(ErrorCode.NONE)
        response.update({"member_id": member_id, "member_epoch": epoch, "status": []})
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        else:
            found = group.static_member(instance_id)
            if found is None:
                raise streams_error(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if found.member_id != member_id:
                raise streams_error(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                            f"{instance_id} was fenced by member {found.member_id}.")
            member = found
            if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                              active_revoking={}, standby_revoking={}, warmup_revoking={})
                change.records.append(SR.current_assignment_record(group_id, leaving))
                log.info("streams group %s: static member %s (instance %s) left temporarily", group_id, member_id,
                         instance_id)
                response["member_epoch"] = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                return HeartbeatResult(response)
        log.info("streams group %s: member %s left", group_id, member_id)
        self._fence(group, member, change)
        return HeartbeatResult(response)

    def _fence(self, group: StreamsGroup, member: StreamsGroupMember, change: _Change) -> None:
        """Kafka's streamsGroupFenceMember."""
        g, mid = group.group_id, member.member_id
        change.records += [SR.tombstone(SR.CURRENT_MEMBER_ASSIGNMENT, g, mid),
                           SR.tombstone(SR.TARGET_ASSIGNMENT_MEMBER, g, mid), SR.tombstone(SR.MEMBER_METADATA, g, mid)]
        epoch = group.group_epoch + 1
        change.records.append(SR.group_metadata_record(g, epoch, group.metadata_hash, group.validated_topology_epoch,
                                                       group.assignment_configs))
        if len(group.members) == 1:
            change.records.append(SR.target_assignment_metadata_record(g, epoch))
        change.after.append(lambda: self._cancel_timers(g, mid))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(("sg-session", group_id, member_id))
        self.timer.cancel(("sg-rebalance", group_id, member_id))
        group = self.groups.get(group_id)
        if group is not None:
            group.task_offsets.pop(member_id, None)

    def _standby_replicas(self, group_id: str) -> int:
        return group_int(self.ctx.metadata, group_id, "streams.num.standby.replicas", self.num_standby_replicas)

    def _rack_aware_assignment_tags(self, group_id: str) -> list[str]:
        return group_list(self.ctx.metadata, group_id, "streams.rack.aware.assignment.tags",
                          self.rack_aware_assignment_tags)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        timeout = group_int(self.ctx.metadata, group_id, "streams.session.timeout.ms", self.session_timeout_ms)
        self.timer.schedule(("sg-session", group_id, member_id), timeout,
                            lambda: self._fence_by_timer(group_id, member_id, "the member session expired", None))

    def _fence_by_timer(self, group_id: str, member_id: str, reason: str, only_at_epoch: int | None) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or not self.ctx.is_active(group.partition):
            return

        def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
            current = self.groups.get(group_id)
            now = current.members.get(member_id) if current is not None else None
            if current is None or now is None or (only_at_epoch is not None and now.member_epoch != only_at_epoch):
                return CoordinatorResult()
            log.info("streams group %s: member %s fenced because %s", group_id, member_id, reason)
            change = _Change()
            self._fence(current, now, change)
            return self._result(group_id, change, None)

        def done(f: Any) -> None:
            exc = None if f.cancelled() else f.exception()
            if exc is not None and self.ctx.is_active(group.partition):
                log.warning("streams group %s: could not fence %s: %s", group_id, member_id, exc)
                self._schedule_session_timeout(group_id, member_id)

        self.ctx.runtime.write(group.partition, op).add_done_callback(done)

    def _delayed_assignment(self, group_id: str) -> None:
        """Kafka's computeDelayedTargetAssignment: the initial delay is over; assign if a heartbeat
        did not already."""
        group = self.groups.get(group_id)
        if group is None or not self.ctx.is_active(group.partition):
            return

        def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
            current = self.groups.get(group_id)
            if current is None or current.group_epoch <= current.assignment_epoch or current.topology is None:
                return CoordinatorResult()
            configured = current.configured or configure(
                current.topology, functools.partial(_partition_count, self.ctx.metadata.image))
            change = _Change()
            targets = self._compute_targets(current, dict(current.members), configured)
            for mid, t in targets.items():
                if current.target.get(mid) != t:
                    change.records.append(SR.target_assignment_record(group_id, mid, t.active, t.standby, t.warmup))
            change.records.append(SR.target_assignment_metadata_record(group_id, current.group_epoch,
                                                                       self.ctx.time_ms()))
            return self._result(group_id, change, None)

        self.ctx.runtime.write(group.partition, op)

    # -- writing (rule 4) ----------------------------------------------------------------------

    def _result(self, group_id: str, change: _Change, response: Any) -> CoordinatorResult[Any]:
        """The write operation's result: once the records are durable, replay them and run the
        after-actions."""
        pairs: list[KeyValue] = [r.encode() for r in change.records]

        def apply() -> None:
            self.apply(change.records)
            for fn in change.after:
                fn()

        return CoordinatorResult(pairs, response, apply)

    def apply(self, records: Iterable[SR.StreamsRecord]) -> None:
        for rec in records:
            replay_into(self.groups, rec, self.ctx.partition_for(rec.group_id))

    # ==========================================================================================
    # StreamsGroupDescribe

    def describe(self, group_id: str, version: int) -> StreamsGroupDescribeResponseDescribedGroup:
        entry: StreamsGroupDescribeResponseDescribedGroup = {
            "error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "topology": None, "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED, "topology_description": None,
            "topology_description_status": 0, "assignor_name": None}
        try:
            self.ctx.check_coordinator(group_id)
        except KafkaApiError as exc:
            entry["error_code"] = exc.code
            return entry
        group = self.groups.get(group_id)
        if group is None:
            other = group_id in self.ctx.classic_groups or group_id in self.ctx.consumer_groups or \
                group_id in getattr(self.ctx, "share_groups", {})
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            entry["error_message"] = (f"Group {group_id} is not a streams group." if other
                                      else f"Group {group_id} not found.")
            return entry
        entry.update({"group_state": group.state.value, "group_epoch": group.group_epoch,
                      "assignment_epoch": group.assignment_epoch, "assignor_name": self.assignor_name,
                      "topology": self._describe_topology(group)})
        members: list[StreamsGroupDescribeResponseMember] = []
        for m in group.members.values():
            target = group.target.get(m.member_id)
            offsets, ends = group.task_offsets.get(m.member_id, ({}, {}))

            def assignment(active: Tasks, standby: Tasks, warmup: Tasks) -> StreamsGroupDescribeResponseAssignment:
                return {"active_tasks": _task_rows(active), "standby_tasks": _task_rows(standby),
                        "warmup_tasks": _task_rows(warmup)}

            members.append({
                "member_id": m.member_id, "member_epoch": m.member_epoch, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
                "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                "user_endpoint": None if m.user_endpoint is None else {"host": m.user_endpoint[0],
                                                                       "port": m.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags)],
                "task_offsets": [{"subtopology_id": s, "partition": p, "offset": o}
                                 for (s, p), o in sorted(offsets.items())],
                "task_end_offsets": [{"subtopology_id": s, "partition": p, "offset": o}
                                     for (s, p), o in sorted(ends.items())],
                "assignment": assignment(m.active, m.standby, m.warmup),
                "target_assignment": (assignment(target.active, target.standby, target.warmup)
                                      if target is not None else assignment({}, {}, {})),
                "is_classic": False})
        entry["members"] = members
        return entry

    def _describe_topology(self, group: StreamsGroup) -> StreamsGroupDescribeResponseTopology | None:
        """Kafka's asDescribedGroup: the configured topology when ready (decided partition counts),
        else the one the member sent (its counts, 0 for "decide")."""
        topology = group.topology
        if topology is None:
            return None
        configured = group.configured
        image = self.ctx.metadata.image

        def info(t: Any) -> StreamsGroupDescribeResponseTopicInfo:
            partitions = t.partitions
            if configured is not None and configured.ready:
                partitions = _partition_count(image, t.name) or partitions
            return {"name": t.name, "partitions": partitions, "replication_factor": t.replication_factor,
                    "topic_configs": [{"key": k, "value": v} for k, v in t.configs]}

        return {"epoch": topology.epoch, "subtopologies": [{
            "subtopology_id": s.subtopology_id, "source_topics": sorted(s.source_topics),
            "repartition_sink_topics": sorted(s.repartition_sink_topics),
            "state_changelog_topics": sorted((info(t) for t in s.state_changelog_topics), key=lambda r: r["name"]),
            "repartition_source_topics": sorted((info(t) for t in s.repartition_source_topics),
                                                key=lambda r: r["name"]),
        } for s in topology.subtopologies]}

    # ==========================================================================================
    # hooks for GroupCoordinator: loading, unloading, ListGroups, DeleteGroups

    def unload(self, partition: int) -> None:
        for group_id, group in list(self.groups.items()):
            if group.partition == partition:
                for member_id in group.members:
                    self._cancel_timers(group_id, member_id)
                self.timer.cancel(("sg-initial", group_id))
                group.deleted = True
                del self.groups[group_id]

    def install_loaded(self, partition: int, loaded: dict[str, StreamsGroup],
                       offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata | None]]) -> None:
        for group_id, group in loaded.items():
            if group.deleted:
                continue
            by_tp = offsets.pop(group_id, {})
            group.offsets.update({tp: om for tp, om in by_tp.items() if om is not None})
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_session_timeout(group_id, member.member_id)
                if member.state == MemberState.UNREVOKED_TASKS:
                    mid, m_epoch = member.member_id, member.member_epoch
                    self.timer.schedule(("sg-rebalance", group_id, mid), max(member.rebalance_timeout_ms, 0),
                                        functools.partial(self._fence_by_timer, group_id, mid,
                                                          "its rebalance timeout expired", m_epoch))

    def list_groups(self, active_partitions: set[int], states: set[str] | None,
                    types: set[str] | None) -> list[ListedGroup]:
        if types is not None and GROUP_TYPE not in types:
            return []
        out: list[ListedGroup] = []
        for group in self.groups.values():
            if group.partition not in active_partitions:
                continue
            state = group.state.value
            if states is not None and state.lower() not in states and \
                    not (state == "NotReady" and "not_ready" in states):
                continue
            out.append({"group_id": group.group_id, "protocol_type": PROTOCOL_TYPE, "group_state": state,
                        "group_type": GROUP_TYPE})
        return out

    def delete_group(self, group_id: str) -> CoordinatorResult[None]:
        group = self.groups[group_id]
        if group.state is not StreamsGroupState.EMPTY:
            raise streams_error(ErrorCode.NON_EMPTY_GROUP, "")
        pairs: list[KeyValue] = [(offset_commit_key(group_id, t, p), None) for t, p in group.offsets]
        pairs += [r.encode() for r in group.tombstones()]

        def apply() -> None:
            self.timer.cancel(("sg-initial", group_id))
            group.offsets.clear()
            group.deleted = True
            if self.groups.get(group_id) is group:
                del self.groups[group_id]

        return CoordinatorResult(pairs, None, apply)


def _partition_count(image: Any, topic: str) -> int | None:
    t = image.topics.get(topic)
    return None if t is None else len(t.partitions)


def _topic_state(image: Any, topic: str) -> tuple[object, int] | None:
    t = image.topics.get(topic)
    return None if t is None else (t.topic_id, len(t.partitions))


def _check_tasks(tasks: dict[str, int], rows: list[StreamsGroupHeartbeatRequestTaskIds] | None) -> None:
    """Kafka's throwIfRequestContainsInvalidTasks."""
    for row in rows or ():
        s = row["subtopology_id"]
        if s not in tasks:
            raise streams_error(ErrorCode.INVALID_REQUEST, f"Subtopology {s} does not exist in the topology.")
        for p in row["partitions"]:
            if not 0 <= p < tasks[s]:
                raise streams_error(ErrorCode.INVALID_REQUEST, f"Task {p} for subtopology {s} is invalid. Number of tasks "
                            f"for this subtopology: {tasks[s]}")


def _validate_topology(topology: StreamsGroupHeartbeatRequestTopology) -> None:
    """Kafka's GroupCoordinatorService.throwIfInvalidTopology (STREAMS_INVALID_TOPOLOGY)."""
    for s in topology["subtopologies"] or ():
        for t in s["state_changelog_topics"] or ():
            if t["partitions"] != 0:
                raise streams_error(ErrorCode.STREAMS_INVALID_TOPOLOGY, f"Changelog topic {t['name']} must have an "
                            f"undefined partition count, but it is set to {t['partitions']}.")
