"""``GroupCoordinator``: the group coordinator's entry points, built on the coordinator runtime.

The parts (Kafka 4.0's GroupCoordinatorService over GroupCoordinatorShards):

- the coordinator runtime (broker/coordinator/runtime.py) owns the __consumer_offsets partitions
  this broker leads: loading on leadership, unloading on resignation, Kafka's coordinator errors
  (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE), and the write path
  write -> await durable -> apply, serialized per partition;
- ``shard.GroupShard``: one partition's loader and lifecycle;
- ``classic_manager.ClassicGroupManager``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  DescribeGroups;
- ``consumer_group.ConsumerGroupManager``: KIP-848 ConsumerGroupHeartbeat/Describe;
- ``offset_manager.OffsetManager``: OffsetCommit/Fetch/Delete and expiry;
- ``txn_offsets.TxnOffsetManager``: TxnOffsetCommit's offsets, pending until the transaction's marker;
- ``context.GroupContext``: what they share (config, runtime, timer, metadata, the group maps);
- ``odradek.broker.coordinator.migration.RehashMigrations``: the state of groups that moved to another
  partition when the partition rule was fixed, taken over from the partition that held it
  (broker/coordinator/rehash.py) - once the cluster's metadata format level allows Kafka's rule;
  below it the partitions load as 0.1.0 loads them, and they are loaded again when the level rises
  (``follow_partition_rule``, broker/coordinator/partition_rule.py).

This module wires them and routes the APIs that span both protocols (ListGroups, DeleteGroups).
It receives what it uses: the group config, a PartitionWriter over the replica manager, the
timing wheel, the metadata view and this broker's node id — not the Broker.

After a crash nothing is lost that was acknowledged: an answer that depends on a write is sent
once the write is durable; loading replays the log (the compacted topic keeps the newest record
per key).

Threading: everything runs on the handler loop (requests, timer callbacks, leadership callbacks
from the replica manager). No locks.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.coordinator import partition_rule
from odradek.broker.coordinator.migration import RehashMigrations
from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorRuntime,
    CoordinatorWriteError,
    KeyValue,
    PartitionWriter,
)
from odradek.broker.coordinator.twin_reader import TwinReader
from odradek.broker.group import records as R
from odradek.broker.group.classic_manager import ClassicGroupManager, join_error, sync_error
from odradek.broker.group.consumer_group import ConsumerGroupManager
from odradek.broker.group.context import OFFSETS_TOPIC, GroupConfig, GroupContext, MetadataView
from odradek.broker.group.errors import append_error
from odradek.broker.group.keyed_timer import KeyedTimer
from odradek.broker.group.offset_manager import OffsetManager
from odradek.broker.group.shard import GroupShard
from odradek.broker.group.share_group import ShareGroupManager
from odradek.broker.group.streams_manager import StreamsGroupManager
from odradek.broker.group.txn_offsets import ProducerStates, TxnCommitPartition, TxnOffsetManager
from odradek.broker.runtime.timing_wheel import Timer
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        DescribeGroupsResponseDescribedGroup,
        JoinGroupResponse,
        ListedGroup,
        SyncGroupResponse,
    )

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "client_host", "coordinator_of", "join_error", "sync_error"]

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Classic groups, KIP-848 consumer groups and committed offsets of the __consumer_offsets
    partitions this broker leads."""

    def __init__(self, config: GroupConfig, writer: PartitionWriter, timer: Timer, metadata: MetadataView,
                 node_id: int, time_ms: Callable[[], int] = now_ms, producers: ProducerStates | None = None) -> None:
        self.config = config
        self.metadata = metadata
        self.node_id = node_id
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            OFFSETS_TOPIC, writer, self._new_shard, compression=config.compression,
            load_buffer_size=config.load_buffer_size, time_ms=time_ms, load_summary=self._load_summary,
            write_timeout_ms=config.write_timeout_ms)
        self.timer = KeyedTimer(timer)
        self.ctx = GroupContext(config, self.runtime, self.timer, metadata, time_ms)
        self.consumer = ConsumerGroupManager(self.ctx)
        self.classic = ClassicGroupManager(self.ctx, self.consumer)
        self.offsets = OffsetManager(self.ctx, self.classic, self.consumer)
        self.txn_offsets = TxnOffsetManager(self.ctx, self.classic, self.consumer, producers)
        self.streams = StreamsGroupManager(self.ctx)  # KIP-1071 (broker/group/streams_manager.py)
        self.share = ShareGroupManager(self.ctx, config.share_heartbeat_interval_ms, config.share_session_timeout_ms,
                                       config.share_max_size)
        self.groups = self.ctx.classic_groups  # classic groups by id (KIP-848 ones: consumer.groups)
        self.twin_reader = TwinReader(writer, metadata, node_id, config.load_buffer_size)
        self.migrations: RehashMigrations = RehashMigrations(
            self.runtime, self.twin_reader, lambda: config.num_partitions, self.ctx.partition_for, R.key_group_id,
            self._leader_epoch, self._install_moved)
        self.ctx.moving = self.migrations.blocks
        # The rule the partitions held here were loaded under (partition_rule.follow moves it).
        self.loaded_rule = partition_rule.LoadedRule(metadata, self.runtime, "groups")

    def _load_summary(self) -> str:
        return f": {len(self.ctx.classic_groups) + len(self.ctx.consumer_groups) + len(self.ctx.share_groups)} groups"

    def _new_shard(self, partition: int) -> GroupShard:
        # Under 0.1.0's rule nothing is set aside or migrated: the partition loads as 0.1.0 loads it.
        migrations = self.migrations if partition_rule.kafka_rule(self.metadata.image) else None
        shard = GroupShard(partition, self.classic, self.consumer, self.txn_offsets, migrations)
        shard.on_unload = self.share.unload
        shard.streams = self.streams
        shard.share = self.share
        return shard

    def _leader_epoch(self, partition: int) -> int:
        state = self.metadata.image.partition(OFFSETS_TOPIC, partition)
        return state.leader_epoch if state is not None else 0

    def _install_moved(self, partition: int, records: list[KeyValue], last_offset: int, source_epoch: int) -> None:
        """The moved groups' copied records are durable: load them as the partition's own (a
        loader-only shard: the groups go to the managers, as at a load)."""
        loader = GroupShard(partition, self.classic, self.consumer)
        loader.streams = self.streams
        loader.share = self.share
        for key, value in records:
            loader.replay(last_offset, key, value)
        loader.on_loaded()

    @property
    def active(self) -> bool:
        return self.runtime.active

    @property
    def partitions(self) -> dict[int, str]:
        """__consumer_offsets partition -> "loading" / "active" (what this broker leads)."""
        return {p: state.value for p in range(self.config.num_partitions)
                if (state := self.runtime.state(p)) is not None}

    # ==========================================================================================
    # lifecycle

    async def start(self) -> None:
        """Register for leadership changes and load the partitions this broker already leads."""
        self.loaded_rule.reset()
        led: list[tuple[int, int]] = []
        topic = self.metadata.image.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            led = [(p.partition, p.leader_epoch) for p in topic.partitions.values() if p.leader == self.node_id]
        self.runtime.start(led)
        self.offsets.start()

    async def shutdown(self) -> None:
        self.runtime.shutdown()
        self.migrations.shutdown()
        self.offsets.shutdown()
        self.timer.cancel_all()
        await self.twin_reader.close()

    def follow_partition_rule(self) -> None:
        """The metadata format level moved: if the rule changed, every partition led here loads
        again under the new one (broker/coordinator/partition_rule.py)."""
        self.loaded_rule.follow()

    def partition_for(self, group_id: str) -> int:
        return self.ctx.partition_for(group_id)

    def check_coordinator(self, group_id: str | None) -> None:
        self.ctx.check_coordinator(group_id)

    # ==========================================================================================
    # the classic protocol

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]], api_version: int) -> JoinGroupResponse:
        return await self.classic.join_group(group_id, member_id, group_instance_id, client_id, client_host,
                                             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                             api_version)

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncGroupResponse:
        return await self.classic.sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                             protocol_name, assignments)

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None) -> ErrorCode:
        return await self.classic.heartbeat(group_id, generation_id, member_id, group_instance_id)

    async def leave_group(self, group_id: str,
                          members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return await self.classic.leave_group(group_id, members)

    def describe_group(self, group_id: str) -> DescribeGroupsResponseDescribedGroup:
        return self.classic.describe_group(group_id)

    # ==========================================================================================
    # offsets

    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                             api_version: int, retention_time_ms: int,
                             partitions: list[tuple[str, int, int, int, str | None, int]]) -> list[ErrorCode]:
        return await self.offsets.commit_offsets(group_id, member_id, instance_id, generation_id, api_version,
                                                 retention_time_ms, partitions)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> list[tuple[str, list[tuple[int, Any]]]]:
        return self.offsets.fetch_offsets(group_id, topics, member_id, member_epoch)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 instance_id: str | None, generation_id: int,
                                 partitions: list[TxnCommitPartition], api_version: int = 3) -> list[ErrorCode]:
        return await self.txn_offsets.commit(group_id, producer_id, producer_epoch, member_id, instance_id,
                                             generation_id, partitions, api_version)

    def on_transaction_completed(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """A marker landed on a partition led here (the replica manager's listener)."""
        self.txn_offsets.on_transaction_completed(topic, partition, producer_id, commit)

    async def delete_offsets(self, group_id: str,
                             partitions: list[tuple[str, int]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return await self.offsets.delete_offsets(group_id, partitions)

    async def cleanup_expired_offsets(self, current_time_ms: int | None = None) -> int:
        return await self.offsets.cleanup_expired_offsets(current_time_ms)

    # ==========================================================================================
    # APIs over groups of both protocols

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> tuple[ErrorCode, list[ListedGroup]]:
        """ListGroups; the filters compare case-insensitively, as Kafka's."""
        if not self.runtime.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading() else ErrorCode.NONE
        states_l = {s.lower() for s in states} if states else None
        types_l = {t.lower() for t in types} if types else None
        active = self.runtime.active_partitions()
        return error, (self.classic.list_groups(active, states_l, types_l)
                       + self.consumer.list_groups(active, states_l, types_l)
                       + self.streams.list_groups(active, states_l, types_l)
                       + self.share.list_groups(active, states_l, types_l))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            try:
                partition = self.ctx.check_coordinator(group_id)
                await self.runtime.write(partition, functools.partial(self._delete_group_op, group_id))
                results[group_id] = ErrorCode.NONE
            except CoordinatorWriteError as exc:
                results[group_id] = append_error(exc.code)
            except KafkaApiError as exc:
                results[group_id] = ErrorCode(exc.code)
        return results

    def _delete_group_op(self, group_id: str, shard: GroupShard) -> CoordinatorResult[None]:
        if group_id in self.consumer.groups:
            return self.consumer.delete_group(group_id)  # a KIP-848 group
        if group_id in self.streams.groups:
            return self.streams.delete_group(group_id)  # a KIP-1071 group
        return self.classic.delete_group(group_id)


def coordinator_of(coordinator: GroupCoordinator) -> GroupCoordinator | None:
    """The broker's group coordinator, or None before it is started (→ COORDINATOR_NOT_AVAILABLE)."""
    return coordinator if coordinator.active else None


def client_host(request: ApiRequest[Any]) -> str:
    """Kafka's clientHost: InetAddress.toString() of the peer, e.g. "/127.0.0.1"."""
    peer = request.peer
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


