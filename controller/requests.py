"""Request and result values of the controller's operations (the shapes of Kafka's admin APIs).

These mirror the fields of CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and
IncrementalAlterConfigs requests/responses that the controller decides on, decoupled from wire
versions: a handler converts its decoded request into these and the results back into a response.
Error codes are ``odradek.protocol.errors.ErrorCode``; messages are Kafka's strings.

Pure data: safe from any thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from odradek.protocol.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)


class ItemError(Exception):
    """One item's failure (a topic, a partition, a config resource), turned into its per-item result
    by the operation that raised it: the controller's managers raise it while they validate."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A manual replica assignment: ``broker_ids[0]`` is the preferred leader."""

    partition_index: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int = -1  # -1: the controller's default_num_partitions
    replication_factor: int = -1  # -1: the controller's default_replication_factor
    assignments: Sequence[ReplicaAssignment] = ()
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    topic_id: uuid.UUID = ZERO_UUID
    num_partitions: int = -1
    replication_factor: int = -1
    # The topic's config overrides (not the broker defaults: the handler merges those in).
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    name: str
    count: int  # the new total number of partitions
    # One replica list per new partition, or None for automatic placement.
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


class AlterConfigOp(IntEnum):
    """Kafka's AlterConfigOp.OpType ids (IncrementalAlterConfigs config_operation)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    op: AlterConfigOp
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int  # odradek.controller.records.ConfigResourceType
    resource_name: str
    # IncrementalAlterConfigs: a sequence of AlterableConfig; legacy AlterConfigs: dict of new values.
    configs: Sequence[AlterableConfig] | dict[str, str | None]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """AlterPartition's answer for one partition (KIP-497): the error, and the partition's state
    after the change (or its current state when nothing changed); -1/() with an error."""

    error_code: ErrorCode = ErrorCode.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ElectionResult:
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


class ElectionType(IntEnum):
    """Kafka's ElectionType ids (ElectLeadersRequest election_type)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ReassignmentTarget:
    """One partition of AlterPartitionReassignments: the target replicas, or None to cancel.
    ``allow_replication_factor_change``: the request's flag (v1's AllowReplicationFactorChange; v0
    allows it)."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None
    allow_replication_factor_change: bool = True


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One in-progress reassignment as ListPartitionReassignments reports it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class FeatureUpgradeType(IntEnum):
    """Kafka's FeatureUpdate.UpgradeType codes (UpdateFeaturesRequest upgrade_type, v1+)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One feature of UpdateFeatures: the level to finalize and how (any other code than
    FeatureUpgradeType's is refused, as Kafka's UNKNOWN type)."""

    feature: str
    max_version_level: int
    upgrade_type: int = FeatureUpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class UpdateFeaturesResult:
    """UpdateFeatures succeeds or fails as a whole (Kafka 4.x): one code and message for every feature."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
