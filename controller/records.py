"""Metadata records: the changes the controller writes to the metadata log, named after KRaft's.

Each class mirrors one of Kafka's ``metadata/src/main/resources/common/metadata/*.json`` records
(fields in snake_case), trimmed to what Odradek uses today. A controller operation produces a list
of records; the metadata log stores them as one atomic batch and ``odradek.controller.image`` applies them
in order to rebuild the ``MetadataImage``. Records are immutable values; they hold no behaviour.

Encoding (used by the metadata log's JSON payload): ``record_to_dict`` gives
``{"type": "<ClassName>", <field>: <value>, ...}`` with UUIDs as their canonical hex string and
sequences as JSON arrays; ``record_from_dict`` reverses it and ignores fields it does not know, so a
newer writer that adds a field can still be read by this code (fields are only ever added, with
defaults, never renamed - the same rule Kafka's versioned records follow).

Special values kept from Kafka:
- ``PartitionChangeRecord.leader``: ``LEADER_NO_CHANGE`` (-2) leaves the leader alone, ``NO_LEADER``
  (-1) means the partition is offline.
- ``PartitionChangeRecord.isr`` / ``replicas`` / ``removing_replicas`` / ``adding_replicas`` /
  ``offline_replicas`` of ``None`` mean "unchanged" (older logs lack the last three: unchanged, as
  Kafka's version 0 record).
- ``ConfigRecord.value`` of ``None`` deletes the key.
- ``AccessControlEntryRecord.id`` names one ACL; ``RemoveAccessControlEntryRecord`` removes it
  (``odradek.controller.acls`` builds both).

Pure data: safe to use from any thread.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

NO_LEADER = -1
LEADER_NO_CHANGE = -2


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids (the ``resource_type`` of ConfigRecord and the admin APIs)."""

    TOPIC = 2
    BROKER = 4
    CLIENT_METRICS = 16  # a client metrics subscription (odradek.controller.client_metrics_configs)
    GROUP = 32  # a group's config overrides (odradek.controller.group_configs)


@dataclass(frozen=True, slots=True)
class LeaderChangeRecord:
    """A controller took over with ``controller_epoch``; written first by every new controller.

    KRaft writes a LeaderChangeMessage control record when a new leader is elected. Writing it here
    raises the newest epoch in the log at once, so a deposed controller is fenced even before the new
    one changes anything.
    """

    leader_id: int
    controller_epoch: int


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    listener_name: str = "PLAINTEXT"
    security_protocol: int = 0  # Kafka's SecurityProtocol id: 0 = PLAINTEXT
    rack: str | None = None
    fenced: bool = False
    # Every advertised listener as (listener name, host, port); host/port above are the
    # inter-broker listener's. Empty in records written before listeners were kept.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # (feature, min level, max level) the broker's release reads (Kafka's BrokerRegistrationRecord
    # features); empty from 0.1.0, which reads odradek.metadata.format level 1 only
    # (odradek.controller.metadata_format).
    features: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    """Kafka's FeatureLevelRecord: the finalized level of one feature, cluster-wide (level 0 removes
    it). ``odradek.controller.metadata_format`` says what the ``odradek.metadata.format`` levels allow."""

    name: str
    feature_level: int


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """Fence or unfence a broker (KRaft's BrokerRegistrationChangeRecord, fenced flag only)."""

    broker_id: int
    broker_epoch: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    # Odradek extension: Kafka derives internal-ness from the name; we record it so that
    # create_internal_topic can mark topics such as __consumer_offsets explicitly.
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    partition_id: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # Replicas in failed log dirs (see PartitionChangeRecord.offline_replicas); written by snapshots,
    # so a partition's offline replicas survive one. Absent in older records: none.
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    partition_id: int
    topic_id: uuid.UUID
    leader: int = LEADER_NO_CHANGE
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    # A reassignment's state (KIP-455); None = unchanged, () = none in progress.
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    # Replicas whose log dir failed on their broker (KIP-858's offline directories, kept per
    # partition: Odradek records no directory assignments); None = unchanged.
    offline_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """One ACL (Kafka's AccessControlEntryRecord); codes as in ``odradek.protocol.acl_types``."""

    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    id: uuid.UUID


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """Kafka's UserScramCredentialRecord: one user's SCRAM credential for one mechanism (1 =
    SCRAM-SHA-256, 2 = SCRAM-SHA-512), derived from the password by the client and the controller
    (broker/security/sasl/scram_formatter.py); replaces any earlier one for the same pair. The
    byte fields are base64 in the log's JSON and hidden from repr."""

    name: str
    mechanism: int
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """One quota key of one entity (Kafka's ClientQuotaRecord): ``entity`` is (type, name) pairs,
    type "user" / "client-id" / "ip", name None for the type's default; ``remove`` deletes the key."""

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float = 0.0
    remove: bool = False


MetadataRecord = (
    LeaderChangeRecord
    | FeatureLevelRecord
    | RegisterBrokerRecord
    | UnregisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ClientQuotaRecord
)

RECORD_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        LeaderChangeRecord,
        FeatureLevelRecord,
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        BrokerRegistrationChangeRecord,
        TopicRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        ConfigRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        UserScramCredentialRecord,
        RemoveUserScramCredentialRecord,
        ClientQuotaRecord,
    )
}

_UUID_FIELDS = frozenset({"topic_id", "incarnation_id", "id"})
_BYTES_FIELDS = frozenset({"salt", "stored_key", "server_key"})
_INT_LIST_FIELDS = frozenset({"replicas", "isr", "removing_replicas", "adding_replicas", "offline_replicas"})
_FIELD_NAMES: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in fields(cls)) for cls in RECORD_TYPES.values()
}


class UnknownRecordTypeError(ValueError):
    """The log holds a record type this code does not know (written by a newer version)."""


def record_to_dict(record: MetadataRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(record).__name__}
    for name in _FIELD_NAMES[type(record)]:
        value = getattr(record, name)
        if isinstance(value, uuid.UUID):
            value = value.hex
        elif isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def record_from_dict(data: dict[str, Any]) -> MetadataRecord:
    type_name = data.get("type")
    cls = RECORD_TYPES.get(type_name)  # type: ignore[arg-type]
    if cls is None:
        raise UnknownRecordTypeError(f"unknown metadata record type {type_name!r}")
    known = _FIELD_NAMES[cls]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            continue
        if key in _UUID_FIELDS:
            value = uuid.UUID(hex=value)
        elif key in _BYTES_FIELDS:
            value = base64.b64decode(value)
        elif key in _INT_LIST_FIELDS and value is not None:
            value = tuple(value)
        elif key == "entity":
            value = tuple((str(etype), None if name is None else str(name)) for etype, name in value)
        elif key == "endpoints" and value is not None:
            value = tuple((str(name), str(host), int(port)) for name, host, port in value)
        elif key == "features" and value is not None:
            value = tuple((str(name), int(low), int(high)) for name, low, high in value)
        kwargs[key] = value
    return cls(**kwargs)
