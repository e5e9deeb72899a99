"""Cluster metadata and leadership: the controller and its pieces.

Layout (each module opens with its format/behaviour and ownership rules):
- ``lease``          epoch-fenced controller lease (async LeaseStore interface, LocalLeaseStore)
- ``log_store``      where committed metadata lives (async MetadataLogStore, LocalMetadataLogStore)
- ``metadata_log``   the local store's file: append-only, fsynced, epoch-fenced metadata batches
- ``metadata_snapshot`` the snapshot format (versioned, chunked) and its checkpoint files
- ``etcd_log_store`` the etcd store: batches, snapshots and their compaction as etcd keys
- ``publisher``      MetadataPublisher: how each committed (image, delta) leaves the controller
- ``records``        KRaft-named metadata records and their JSON encoding
- ``image``          MetadataImage (what the broker reads) and ``apply(record)``
- ``image_records``  an image as the records a snapshot holds; the delta between two images
- ``controller``     Controller: the dispatcher - lease, commit path, snapshots; each operation's
                     records decided by a manager below, committed here as one batch
- ``replication_control`` topics, partitions, ISRs, leaders, reassignments (Kafka's ReplicationControlManager)
- ``cluster_control`` broker registrations and fencing (Kafka's ClusterControlManager)
- ``configuration_control`` config overrides (Kafka's ConfigurationControlManager)
- ``acls``, ``client_quotas``, ``scram_credentials``, ``feature_updates``: the other managers' records
- ``elections``      leader election rules: clean/unclean/preferred, auto rebalance, controlled shutdown
- ``reassignments``  partition reassignment records (KIP-455): start, complete, cancel
- ``requests``       request/result values of the controller's operations
- ``topic_names``, ``topic_configs``, ``placement``, ``partition_limits``, ``meta_properties``: validation and helpers
"""

from odradek.controller.controller import Controller
from odradek.controller.image import (
    BrokerRegistration,
    MetadataDelta,
    MetadataImage,
    PartitionState,
    TopicImage,
)
from odradek.controller.lease import Lease, LeaseLostError, LeaseStore, LocalLeaseStore
from odradek.controller.log_store import AppendResult, LocalMetadataLogStore, MetadataLogStore
from odradek.controller.metadata_log import MetadataLog, StaleControllerEpochError
from odradek.controller.publisher import MetadataPublisher
from odradek.controller.records import ConfigResourceType
from odradek.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    ElectionType,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
    ReplicaAssignment,
)

__all__ = [
    "AlterConfigOp",
    "AppendResult",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "AlterableConfig",
    "BrokerRegistration",
    "ConfigResourceType",
    "CreatableTopic",
    "CreatePartitionsResult",
    "CreatePartitionsTopic",
    "CreateTopicResult",
    "Controller",
    "DeleteTopicResult",
    "ElectionResult",
    "ElectionType",
    "Lease",
    "LeaseLostError",
    "LeaseStore",
    "LocalLeaseStore",
    "LocalMetadataLogStore",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLog",
    "MetadataLogStore",
    "MetadataPublisher",
    "OngoingReassignment",
    "PartitionState",
    "ReassignmentResult",
    "ReassignmentTarget",
    "ReplicaAssignment",
    "StaleControllerEpochError",
    "TopicImage",
]
