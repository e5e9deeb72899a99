"""What the group coordinator's parts share: configuration, the runtime, the timer, the group maps.

Groups of both protocols share one id space (Kafka's GroupMetadataManager keeps one map): a
classic group and a KIP-848 consumer group never have the same id. The two maps live here, not in
either manager, so each manager can check the other's ids without calling into it. Group ``g``
belongs to partition ``coordinator_partition(image, g, offsets.topic.num.partitions)`` of
__consumer_offsets (Kafka's rule, or 0.1.0's while the cluster's metadata format level is below
the migration's: broker/coordinator/partition_rule.py) and is served while the runtime has that
partition loaded (and, for a group that moved there when the partition rule was fixed, once its
state was taken over: broker/coordinator/rehash.py).

Owned by the handler loop; no locks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.coordinator.partition_rule import coordinator_partition
from odradek.broker.coordinator.runtime import CoordinatorRuntime, PartitionState
from odradek.broker.group.keyed_timer import KeyedTimer
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.group.classic_group import ClassicGroup
    from odradek.controller.image import MetadataImage

OFFSETS_TOPIC = "__consumer_offsets"


class MetadataView(Protocol):
    """The broker's current metadata image (topics and their partitions)."""

    @property
    def image(self) -> MetadataImage: ...


@dataclass(frozen=True)
class GroupConfig:
    """The group.* and offsets.* settings the group coordinator reads."""

    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    load_buffer_size: int = 5 * 1024 * 1024
    compression: int = 0
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    write_timeout_ms: int = 5000  # offsets.commit.timeout.ms: Kafka's timeout of every coordinator write
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5000
    share_max_size: int = 200
    streams_session_timeout_ms: int = 45_000
    streams_heartbeat_interval_ms: int = 5000
    streams_max_size: int = 2**31 - 1
    streams_num_standby_replicas: int = 0
    streams_initial_rebalance_delay_ms: int = 3000
    streams_task_offset_interval_ms: int = 60_000
    streams_acceptable_recovery_lag: int = 10_000
    streams_assignors: tuple[str, ...] = ("sticky",)
    streams_assignment_interval_ms: int = 1000
    streams_rack_aware_assignment_tags: tuple[str, ...] = ()

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> GroupConfig:
        return cls(
            num_partitions=cfg["offsets.topic.num.partitions"],
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            max_group_size=cfg["group.max.size"],
            offsets_retention_ms=cfg.offsets_retention_ms,
            retention_check_interval_ms=cfg["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=cfg["offset.metadata.max.bytes"],
            load_buffer_size=cfg["offsets.load.buffer.size"],
            compression=cfg["offsets.topic.compression.codec"],
            consumer_session_timeout_ms=cfg["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=cfg["group.consumer.heartbeat.interval.ms"],
            consumer_max_size=cfg["group.consumer.max.size"],
            consumer_assignors=tuple(cfg["group.consumer.assignors"]),
            write_timeout_ms=cfg["offsets.commit.timeout.ms"],
            share_session_timeout_ms=cfg["group.share.session.timeout.ms"],
            share_heartbeat_interval_ms=cfg["group.share.heartbeat.interval.ms"],
            share_max_size=cfg["group.share.max.size"],
            streams_session_timeout_ms=cfg["group.streams.session.timeout.ms"],
            streams_heartbeat_interval_ms=cfg["group.streams.heartbeat.interval.ms"],
            streams_max_size=cfg["group.streams.max.size"],
            streams_num_standby_replicas=cfg["group.streams.num.standby.replicas"],
            streams_initial_rebalance_delay_ms=cfg["group.streams.initial.rebalance.delay.ms"],
            streams_task_offset_interval_ms=cfg["group.streams.task.offset.interval.ms"],
            streams_acceptable_recovery_lag=cfg["group.streams.acceptable.recovery.lag"],
            streams_assignors=tuple(cfg["group.streams.assignors"]),
            streams_assignment_interval_ms=cfg["group.streams.assignment.interval.ms"],
            streams_rack_aware_assignment_tags=tuple(cfg["group.streams.rack.aware.assignment.tags"] or ()),
        )


@dataclass
class GroupContext:
    """The shared parts; built by odradek.broker.group.coordinator.GroupCoordinator."""

    config: GroupConfig
    # The group modules import this one, so it imports none of theirs (issue 29's import rings): the
    # runtime is the coordinator's CoordinatorRuntime[GroupShard], and each group map below is
    # typed where its manager takes it (ConsumerGroupManager.groups, StreamsGroupManager.groups).
    runtime: CoordinatorRuntime[Any]
    timer: KeyedTimer
    metadata: MetadataView
    time_ms: Callable[[], int]
    classic_groups: dict[str, ClassicGroup] = field(default_factory=dict)
    consumer_groups: dict[str, Any] = field(default_factory=dict)
    share_groups: dict[str, Any] = field(default_factory=dict)  # KIP-932 (broker/group/share_group.py)
    streams_groups: dict[str, Any] = field(default_factory=dict)  # KIP-1071 (streams_group.py)
    # (partition, group) -> the group moved into the partition and its state is not here yet
    # (broker/coordinator/migration.py); None: nothing moves.
    moving: Callable[[int, str], bool] | None = None

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(self.metadata.image, group_id, self.config.num_partitions)

    def check_coordinator(self, group_id: str | None) -> int:
        """Kafka's coordinator checks, in its order; the group's partition, or KafkaApiError."""
        if not self.runtime.active:
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group_id is None:
            raise KafkaApiError(ErrorCode.INVALID_GROUP_ID)
        partition = self.partition_for(group_id)
        self.runtime.check(partition)
        if self.moving is not None and self.moving(partition, group_id):
            raise KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return partition

    def is_active(self, partition: int) -> bool:
        return self.runtime.state(partition) is PartitionState.ACTIVE
