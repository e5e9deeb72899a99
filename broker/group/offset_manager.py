"""Committed offsets (Kafka 4.0's OffsetMetadataManager): OffsetCommit, OffsetFetch, OffsetDelete
and offset expiry, for groups of both protocols.

1. Persistence through the coordinator runtime (write -> await durable -> apply): a commit is
   validated and its OffsetCommitKey/Value records computed against the applied state; the
   offsets change in memory, and the answer is sent, only once the records are durable. A failed
   append changes nothing and is answered with Kafka's mapped error. A commit to an unknown group
   with no generation creates a "simple" group (offsets only: admin client, assign()) when it is
   applied. OffsetDelete writes tombstones the same way.
2. Offset expiry every offsets.retention.check.interval.ms: offsets of Empty groups
   offsets.retention.minutes after the group became Empty (simple groups: after the commit;
   Stable consumer groups: offsets of topics no member subscribes to), or at an explicit expire
   timestamp; tombstones are written, and an Empty group left without offsets is deleted too.
   One write operation per group, on the group's partition.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
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
from odradek.broker.group.errors import append_error, commit_append_error
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.classic_manager import ClassicGroupManager
    from odradek.broker.group.consumer_group import ConsumerGroupManager

log = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1

CommitPartition = tuple[str, int, int, int, "str | None", int]  # topic, partition, offset, epoch, metadata, ts


class OffsetManager:
    """OffsetCommit/Fetch/Delete and expiry over the groups in the shared id space."""

    def __init__(self, ctx: GroupContext, classic: ClassicGroupManager, consumer: ConsumerGroupManager) -> None:
        self.ctx = ctx
        self.classic = classic
        self.consumer = consumer
        self.offsets_retention_ms = ctx.config.offsets_retention_ms
        self.retention_check_interval_ms = ctx.config.retention_check_interval_ms
        self.offset_metadata_max_bytes = ctx.config.offset_metadata_max_bytes
        self._expiry: asyncio.Task[int] | None = None

    # ==========================================================================================
    # OffsetCommit

    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                             api_version: int, retention_time_ms: int,
                             partitions: list[CommitPartition]) -> list[ErrorCode]:
        """OffsetCommit: (topic, partition, offset, leader_epoch, metadata, commit_timestamp) each.

        Returns one error per partition, in order. Only partitions of existing topics with
        metadata within offset.metadata.max.bytes are written; the answer comes once durable.
        """
        errors: list[ErrorCode] = []
        try:
            partition = self.ctx.check_coordinator(group_id)

            def op(shard: CoordinatorShard) -> CoordinatorResult[None]:
                return self._commit_op(group_id, member_id, instance_id, generation_id, api_version,
                                       retention_time_ms, partitions, errors)

            await self.ctx.runtime.write(partition, op)
        except CoordinatorWriteError as exc:
            err = commit_append_error(exc.code)
            if len(errors) != len(partitions):
                # It timed out waiting in the partition's queue: the operation never ran, so no
                # partition was validated. Kafka answers every partition with the mapped error.
                return [err] * len(partitions)
            return [err if e == ErrorCode.NONE else e for e in errors]
        except KafkaApiError as exc:
            return [ErrorCode(exc.code)] * len(partitions)
        return errors

    def _commit_op(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                   api_version: int, retention_time_ms: int, partitions: list[CommitPartition],
                   errors: list[ErrorCode]) -> CoordinatorResult[None]:
        """Validate against the applied state, fill ``errors``, compute the records."""
        group: Any = self.classic.groups.get(group_id)
        create = False
        # A KIP-848 or KIP-1071 (streams) group: generation_id_or_member_epoch is the member epoch.
        cgroup = self.consumer.groups.get(group_id) or self.ctx.streams_groups.get(group_id)
        if cgroup is not None:
            cgroup.validate_offset_commit(member_id, generation_id, api_version)
            group = cgroup
        elif group is None:
            if generation_id >= 0:
                raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION)
            create = True  # a "simple" group, created when the commit is applied
        else:
            validate_classic_offset_commit(group, member_id, instance_id, generation_id)
        image = self.ctx.metadata.image
        now = self.ctx.time_ms()
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
        records: list[KeyValue] = [(R.offset_commit_key(group_id, t, p), R.offset_commit_value(om))
                                   for (t, p), om in to_write]

        def apply(record_offset: int) -> None:
            target = group
            if create:
                if not to_write:
                    return
                target = self.classic.groups.get(group_id)
                if target is None:
                    target = self.classic.groups[group_id] = ClassicGroup(group_id, self.ctx.partition_for(group_id),
                                                                         current_time_ms=self.ctx.time_ms())
                    target.current_state_timestamp = None
            for tp, om in to_write:
                om.record_offset = record_offset
                target.offsets[tp] = om
            if (cgroup is None and not create and generation_id >= 0 and member_id in target.members
                    and target.is_in(GroupState.STABLE)):
                self.classic.touch_member(target, member_id)

        return CoordinatorResult(records, None, apply_at=apply)

    # ==========================================================================================
    # OffsetFetch

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> list[tuple[str, list[tuple[int, R.OffsetAndMetadata | None]]]]:
        """OffsetFetch: committed offsets of the given partitions (None: all); raises group errors.

        A read of the applied state. ``member_id``/``member_epoch`` (v9) are checked against
        KIP-848 groups only, as Kafka.
        """
        self.ctx.check_coordinator(group_id)
        group: Any = self.classic.groups.get(group_id)
        cgroup = self.consumer.groups.get(group_id) or self.ctx.streams_groups.get(group_id)
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

    # ==========================================================================================
    # OffsetDelete

    async def delete_offsets(self, group_id: str,
                             partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete (KIP-496): only offsets of topics the group does not consume. An empty
        group id is INVALID_GROUP_ID once the coordinator is active (Kafka's
        GroupCoordinatorService.deleteOffsets checks it before looking the group up)."""
        errors: list[ErrorCode] = []
        try:
            if self.ctx.runtime.active and not group_id:
                return ErrorCode.INVALID_GROUP_ID, []
            partition = self.ctx.check_coordinator(group_id)
            await self.ctx.runtime.write(partition, lambda shard: self._delete_op(group_id, partitions, errors))
        except CoordinatorWriteError as exc:
            return append_error(exc.code), []
        except KafkaApiError as exc:
            return ErrorCode(exc.code), []
        return ErrorCode.NONE, errors

    def _delete_op(self, group_id: str, partitions: list[tuple[str, int]],
                   errors: list[ErrorCode]) -> CoordinatorResult[None]:
        # A KIP-848 group answers is_in / is_subscribed_to_topic / offsets like a classic one here.
        group: Any = (self.classic.groups.get(group_id) or self.consumer.groups.get(group_id)
                      or self.ctx.streams_groups.get(group_id))
        if group is None or group.is_in(GroupState.DEAD):
            raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND)
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE) \
                and not group.uses_consumer_protocol():
            raise KafkaApiError(ErrorCode.NON_EMPTY_GROUP)
        image = self.ctx.metadata.image
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

        def apply() -> None:
            for tp in doomed:
                group.offsets.pop(tp, None)

        return CoordinatorResult([(R.offset_commit_key(group_id, t, p), None) for t, p in doomed], None, apply)

    # ==========================================================================================
    # expiry

    def start(self) -> None:
        self._schedule_retention()

    def shutdown(self) -> None:
        self.ctx.timer.cancel(("retention",))
        if self._expiry is not None:
            self._expiry.cancel()

    def _schedule_retention(self) -> None:
        self.ctx.timer.schedule(("retention",), self.retention_check_interval_ms, self._retention_tick)

    def _retention_tick(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self.cleanup_expired_offsets())
        if self.ctx.runtime.active:
            self._schedule_retention()

    async def cleanup_expired_offsets(self, current_time_ms: int | None = None) -> int:
        """Expire offsets as Kafka 4.0's offsetExpirationCondition; returns how many expired."""
        now = self.ctx.time_ms() if current_time_ms is None else current_time_ms
        writes: list[tuple[str, asyncio.Future[int]]] = []
        for group_id, group in list(self.classic.groups.items()) + list(self.consumer.groups.items()):
            if not self.ctx.is_active(group.partition):
                continue
            writes.append((group_id, self.ctx.runtime.write(group.partition,
                                                            functools.partial(self._expire_op, group_id, now))))
        total = 0
        for group_id, future in writes:
            try:
                total += await future
            except KafkaApiError as exc:
                log.warning("could not expire offsets of group %s: %s", group_id, exc)
        return total

    def _expire_op(self, group_id: str, now: int, shard: CoordinatorShard) -> CoordinatorResult[int]:
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            return self._expire_classic(classic, now)
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            return self.consumer.expire_offsets(cgroup, now, self.offsets_retention_ms)
        return CoordinatorResult(response=0)

    def _expire_classic(self, group: ClassicGroup, now: int) -> CoordinatorResult[int]:
        base = _expiration_base(group)
        if base is None:
            return CoordinatorResult(response=0)
        expired = []
        for tp, om in group.offsets.items():
            if group.is_in(GroupState.STABLE) and group.is_subscribed_to_topic(tp[0]):
                continue
            if om.expire_timestamp_ms >= 0:
                if now >= om.expire_timestamp_ms:
                    expired.append(tp)
            elif now - base(om) >= self.offsets_retention_ms:
                expired.append(tp)
        records: list[KeyValue] = [(R.offset_commit_key(group.group_id, t, p), None) for t, p in expired]
        delete_group = group.is_in(GroupState.EMPTY) and len(expired) == len(group.offsets)
        if delete_group:
            records.append((R.group_metadata_key(group.group_id), None))

        def apply() -> None:
            for tp in expired:
                group.offsets.pop(tp, None)
            if delete_group:
                group.transition_to(GroupState.DEAD)
                self.classic.groups.pop(group.group_id, None)

        return CoordinatorResult(records, len(expired), apply if records else None)


def validate_classic_offset_commit(group: ClassicGroup, member_id: str, instance_id: str | None,
                                   generation_id: int) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit."""
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


def _expiration_base(group: ClassicGroup) -> Callable[[R.OffsetAndMetadata], int] | None:
    """From when a classic group's offsets age (None: they do not expire now)."""
    if group.protocol_type is None:
        return lambda om: om.commit_timestamp_ms  # simple group
    if group.is_in(GroupState.EMPTY):
        ts = group.current_state_timestamp
        return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp_ms)
    if group.is_in(GroupState.STABLE) and group.uses_consumer_protocol() and group.subscribed_topics is not None:
        return lambda om: om.commit_timestamp_ms
    return None
