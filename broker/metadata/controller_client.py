"""The broker's only door to the controller: ``ControllerClient`` and what crosses it.

Handlers and broker components send every metadata change through a ``ControllerClient`` (Kafka:
the broker forwards CreateTopics, DeleteTopics, CreatePartitions, (Incremental)AlterConfigs,
ElectLeaders, UpdateFeatures and the reassignment APIs to the active controller; a broker sends its leaders' ISR
changes (AlterPartition) there too; a controlled shutdown goes through etcd, as KRaft's goes through
the broker heartbeat: see broker/cluster/cluster_node.py); they read metadata from
``odradek.broker.metadata.broker_metadata``'s image, never from the controller. The methods are async because a remote
controller answers over the network. ``LocalControllerClient`` calls the controller running in this
process; ``odradek.broker.metadata.forwarding_controller_client`` sends the same calls to a remote controller and
returns the same results, so no handler changes.

This module also carries the values that cross the seam (``odradek.controller.requests``: requests and
per-item results with Kafka's error codes and messages) and the rules a handler applies before
forwarding, as the controller would (topic-name validity, the partitions-per-request bound), so
that no handler imports the ``controller`` package.

Ownership: the handler loop; a client holds no state of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

from odradek.controller.acls import AclCreateResult, AclDeleteResult
from odradek.controller.client_quotas import ClientQuotaAlteration, ClientQuotaAlterationResult
from odradek.controller.controller import Controller
from odradek.controller.partition_limits import MAX_PARTITIONS_PER_BATCH
from odradek.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    ElectionType,
    FeatureUpdate,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
    ReplicaAssignment,
    UpdateFeaturesResult,
)
from odradek.controller.scram_credentials import ScramAlterResult, ScramUpsertion
from odradek.controller.topic_names import invalid_topic_reason
from odradek.protocol.acl_types import AclBinding, AclBindingFilter

__all__ = [
    "AclCreateResult",
    "AclDeleteResult",
    "MAX_PARTITIONS_PER_BATCH",
    "AlterConfigOp",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "AlterPartitionResult",
    "AlterableConfig",
    "ClientQuotaAlteration",
    "ClientQuotaAlterationResult",
    "CreatableTopic",
    "CreatePartitionsResult",
    "CreatePartitionsTopic",
    "CreateTopicResult",
    "ControllerClient",
    "DeleteTopicResult",
    "ElectionResult",
    "ElectionType",
    "FeatureUpdate",
    "LocalControllerClient",
    "OngoingReassignment",
    "ReassignmentResult",
    "ReassignmentTarget",
    "ReplicaAssignment",
    "ScramAlterResult",
    "ScramUpsertion",
    "UpdateFeaturesResult",
    "invalid_topic_reason",
    "is_forwarded",
]

# The client id prefix of requests one broker forwards to the controller node
# (odradek.broker.metadata.forwarding_controller_client): the receiving handlers skip the broker-side preprocessing
# the sending broker already did (Kafka marks them by wrapping them in an EnvelopeRequest).
FORWARDING_CLIENT_ID_PREFIX = "odradek-forwarding"


def is_forwarded(client_id: str | None) -> bool:
    """True for a request another broker forwarded to this (controller) node."""
    return client_id is not None and client_id.startswith(FORWARDING_CLIENT_ID_PREFIX)


class ControllerClient(Protocol):
    """The controller operations a broker asks for; results per item, Kafka's codes and messages.

    A call may raise ``KafkaApiError``: NOT_CONTROLLER when no controller can take it (lost lease,
    fenced epoch), TOPIC_DELETION_DISABLED from ``delete_topics``; per-item failures are results.
    """

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]: ...

    async def create_internal_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicResult: ...

    async def delete_topics(
        self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]: ...

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]: ...

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]: ...

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]: ...

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        """AlterUserScramCredentials: per-user results, Kafka's codes (controller/scram_credentials.py)."""
        ...

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        """AlterClientQuotas: per-entity results (controller/client_quotas.py)."""
        ...

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        """ElectLeaders: PREFERRED or UNCLEAN elections; ``partitions`` None = every partition."""
        ...

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool = False
    ) -> UpdateFeaturesResult:
        """UpdateFeatures: one result for the whole request (controller/feature_updates.py)."""
        ...

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]: ...

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]: ...

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None = None, *, listener_name: str = "PLAINTEXT",
        endpoints: Sequence[tuple[str, str, int]] = (),
    ) -> int:
        """Register (or re-register) a broker's endpoint (and every advertised listener's); returns its
        broker epoch."""
        ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """CreateAcls: one result per binding (INVALID_REQUEST for a binding Kafka refuses)."""
        ...

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: per filter, the ACLs it removed."""
        ...

    async def alter_partition(
        self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int, partition_epoch: int,
        new_isr: Sequence[int], broker_epochs: Mapping[int, int] | None = None,
    ) -> AlterPartitionResult:
        """A leader's ISR change (AlterPartition, KIP-497); the result carries Kafka's error codes.
        ``broker_epochs`` holds the broker epoch each ISR member fetched with (KIP-903); a member
        missing from it is not checked (-1 on the wire)."""
        ...


class LocalControllerClient:
    """``ControllerClient`` for the controller in this process: each call is the controller's own."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        return await self._controller.create_topics(topics, validate_only)

    async def create_internal_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicResult:
        return await self._controller.create_internal_topic(name, num_partitions, replication_factor, configs)

    async def delete_topics(
        self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]:
        return await self._controller.delete_topics(names, topic_ids)

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        return await self._controller.create_partitions(topics, validate_only)

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        return await self._controller.alter_configs(resources, validate_only)

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        return await self._controller.incremental_alter_configs(resources, validate_only)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        return await self._controller.alter_user_scram_credentials(deletions, upsertions)

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        return await self._controller.alter_client_quotas(alterations, validate_only)

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None = None, *, listener_name: str = "PLAINTEXT",
        endpoints: Sequence[tuple[str, str, int]] = (),
    ) -> int:
        return await self._controller.register_broker(node_id, host, port, rack, listener_name=listener_name,
                                                      endpoints=endpoints)

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        return await self._controller.elect_leaders(election_type, partitions)

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool = False
    ) -> UpdateFeaturesResult:
        return await self._controller.update_features(updates, validate_only)

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]:
        return await self._controller.alter_partition_reassignments(targets)

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        return await self._controller.list_partition_reassignments(partitions)

    async def alter_partition(
        self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int, partition_epoch: int,
        new_isr: Sequence[int], broker_epochs: Mapping[int, int] | None = None,
    ) -> AlterPartitionResult:
        return await self._controller.alter_partition(topic_id, partition, leader_id, leader_epoch,
                                                      partition_epoch, new_isr, broker_epochs)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        return await self._controller.create_acls(bindings)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        return await self._controller.delete_acls(filters)
