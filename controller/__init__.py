"""Cluster metadata and leadership: the controller and its pieces.

Layout (each module opens with its format/behaviour and ownership rules):
- ``lease``          epoch-fenced controller lease (LeaseStore interface, LocalLeaseStore)
- ``metadata_log``   append-only, fsynced, epoch-fenced log of metadata record batches
- ``records``        KRaft-named metadata records and their JSON encoding
- ``image``          MetadataImage (what the broker reads) and ``apply(record)``
- ``controller``     Controller: topic lifecycle, configs, brokers, leader election
- ``requests``       request/result values of the controller's operations
- ``topic_names``, ``topic_configs``, ``placement``, ``meta_properties``: validation and helpers
"""

from controller.controller import Controller
from controller.image import BrokerRegistration, MetadataDelta, MetadataImage, PartitionState, TopicImage
from controller.lease import Lease, LeaseLostError, LeaseStore, LocalLeaseStore
from controller.metadata_log import MetadataLog, StaleControllerEpochError
from controller.records import ConfigResourceType
from controller.requests import (
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
    ReplicaAssignment,
)

__all__ = [
    "AlterConfigOp",
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
    "Lease",
    "LeaseLostError",
    "LeaseStore",
    "LocalLeaseStore",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLog",
    "PartitionState",
    "ReplicaAssignment",
    "StaleControllerEpochError",
    "TopicImage",
]
