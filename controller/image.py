"""The metadata image: cluster id, brokers, topics, partitions and configs, as the broker reads them.

The image is the result of applying every record of the metadata log in order (``apply``). It is the
single source the broker consults for Metadata responses, leader checks and topic configs.

Rules (Kafka's, from MetadataDelta / TopicsDelta / PartitionRegistration.merge):
1. TopicRecord adds a topic with no partitions; PartitionRecords then add them. A topic's id is
   assigned once by the controller (random UUIDv4, never the zero UUID) and kept forever.
2. PartitionChangeRecord bumps ``partition_epoch`` on every change and ``leader_epoch`` whenever the
   leader changes (``leader`` of -2 means "unchanged"). Leader epochs therefore never go backwards,
   which the Java client relies on.
3. RemoveTopicRecord drops the topic, its partitions and its config overrides.
4. UserScramCredentialRecord sets one (user, mechanism)'s SCRAM credential,
   RemoveUserScramCredentialRecord drops it (``MetadataImage.scram_credentials``).
5. ConfigRecord sets (value) or deletes (``None``) one key of a topic, broker or client metrics
   resource; topic config overrides live on ``TopicImage.configs``, broker ones in
   ``MetadataImage.broker_configs`` (resource name "" = cluster default), client metrics
   subscriptions (KIP-714) in ``MetadataImage.client_metrics`` (a subscription left without keys is
   dropped, as Kafka's ClientMetricsManager drops it), group configs in ``MetadataImage.group_configs``
   (a group left without keys is dropped).
5. AccessControlEntryRecord adds an ACL under its id, RemoveAccessControlEntryRecord drops it
   (``delta.acls_changed``).
6. ClientQuotaRecord sets or removes one quota key of an entity in ``client_quotas`` (an entity
   left without keys is dropped), as Kafka's ClientQuotaImage.
7. FeatureLevelRecord finalizes one feature's level in ``features`` (level 0 drops it); a level of
   ``odradek.metadata.format`` this release cannot read raises ``UnsupportedMetadataFormatError``
   (odradek.controller.metadata_format).

``apply`` returns a ``MetadataDelta`` describing what the record changed, so subscribers (the broker's
log manager) can create or delete local logs and reload configs without diffing images.

Ownership: the image is mutated only by the controller, on the asyncio loop thread that owns it, and
only by ``apply``. Readers on the same loop (request handlers) read attributes directly - cheap, and
consistent between awaits. Readers on other threads must not hold references across changes.
``PartitionState`` and ``BrokerRegistration`` are immutable and replaced on change, so a reference
taken by a handler stays self-consistent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from odradek.controller import metadata_format
from odradek.controller.records import (
    LEADER_NO_CHANGE,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    LeaderChangeRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)

ZERO_UUID = uuid.UUID(int=0)


class MetadataApplyError(Exception):
    """A record does not fit the image (e.g. a partition of an unknown topic): the log is inconsistent."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    listener_name: str = "PLAINTEXT"
    security_protocol: int = 0
    broker_epoch: int = 0
    incarnation_id: uuid.UUID = ZERO_UUID
    fenced: bool = False
    # (listener name, host, port) of every advertised listener; empty: only host/port above.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # (feature, min level, max level) its release reads; empty: a 0.1.0 broker.
    features: tuple[tuple[str, int, int], ...] = ()

    def endpoint_for(self, listener: str) -> tuple[str, int] | None:
        """Where a client that came in on ``listener`` reaches this broker (Kafka answers Metadata
        with the endpoint of the listener the request arrived on); None if it has no such listener."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    # An ongoing reassignment (KIP-455): ``replicas`` is then target + removing.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    is_internal: bool = False


@dataclass(slots=True)
class MetadataDelta:
    """What applying one or more records changed. Topics are keyed by name."""

    records: list[MetadataRecord] = field(default_factory=list)
    created_topics: set[str] = field(default_factory=set)
    # Deleted topics with their last image, so the broker knows the id and partitions to remove.
    deleted_topics: dict[str, TopicImage] = field(default_factory=dict)
    changed_partitions: set[tuple[str, int]] = field(default_factory=set)
    changed_topic_configs: set[str] = field(default_factory=set)
    changed_broker_configs: set[str] = field(default_factory=set)
    changed_client_metrics: set[str] = field(default_factory=set)
    changed_group_configs: set[str] = field(default_factory=set)
    changed_brokers: set[int] = field(default_factory=set)
    controller_changed: bool = False
    acls_changed: bool = False
    client_quotas_changed: bool = False
    features_changed: bool = False

    def merge(self, other: MetadataDelta) -> None:
        self.records.extend(other.records)
        self.created_topics |= other.created_topics
        self.deleted_topics.update(other.deleted_topics)
        self.changed_partitions |= other.changed_partitions
        self.changed_topic_configs |= other.changed_topic_configs
        self.changed_broker_configs |= other.changed_broker_configs
        self.changed_client_metrics |= other.changed_client_metrics
        self.changed_group_configs |= other.changed_group_configs
        self.changed_brokers |= other.changed_brokers
        self.controller_changed |= other.controller_changed
        self.acls_changed |= other.acls_changed
        self.client_quotas_changed |= other.client_quotas_changed
        self.features_changed |= other.features_changed

    def is_empty(self) -> bool:
        return not self.records


@dataclass(slots=True)
class MetadataImage:
    cluster_id: str = ""
    controller_id: int = -1
    controller_epoch: int = -1
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicImage] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Client metrics subscriptions (CLIENT_METRICS ConfigRecords): name -> key -> value, in the
    # order they were first created (ListConfigResources and the subscription ids follow it).
    client_metrics: dict[str, dict[str, str]] = field(default_factory=dict)
    # Group config overrides (GROUP ConfigRecords): group id -> key -> value, in the order first set
    # (ListConfigResources lists them so).
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Every ACL by its id (AccessControlEntryRecord); the broker's authorizer indexes them.
    acls: dict[uuid.UUID, AccessControlEntryRecord] = field(default_factory=dict)
    # SCRAM credentials by (user name, mechanism type): SASL/SCRAM on every broker reads them here.
    scram_credentials: dict[tuple[str, int], UserScramCredentialRecord] = field(default_factory=dict)
    # Client quotas: entity (sorted (type, name-or-None) pairs) -> key -> value.
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = field(default_factory=dict)
    # Finalized feature levels (FeatureLevelRecord): name -> level.
    features: dict[str, int] = field(default_factory=dict)
    # Offset of the last applied record (-1: nothing applied).
    offset: int = -1

    @property
    def metadata_format(self) -> int:
        """The store's ``odradek.metadata.format`` level (1 for a log 0.1.0 wrote: it has no record of it)."""
        return self.features.get(metadata_format.FEATURE, metadata_format.UNVERSIONED)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def live_broker_ids(self) -> list[int]:
        return sorted(b.node_id for b in self.brokers.values() if not b.fenced)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)


def _topic_for(image: MetadataImage, topic_id: uuid.UUID, what: str) -> TopicImage:
    topic = image.topics_by_id.get(topic_id)
    if topic is None:
        raise MetadataApplyError(f"{what} for unknown topic id {topic_id}")
    return topic


def apply(image: MetadataImage, record: MetadataRecord, delta: MetadataDelta | None = None) -> MetadataDelta:
    """Apply one record to ``image`` in place and return (or extend) the delta describing it."""
    if delta is None:
        delta = MetadataDelta()
    delta.records.append(record)
    match record:
        case TopicRecord(name=name, topic_id=topic_id, is_internal=is_internal):
            if topic_id == ZERO_UUID:
                raise MetadataApplyError(f"TopicRecord for {name!r} has the zero topic id")
            if name in image.topics or topic_id in image.topics_by_id:
                raise MetadataApplyError(f"duplicate TopicRecord for {name!r} ({topic_id})")
            topic = TopicImage(name=name, topic_id=topic_id, is_internal=is_internal)
            image.topics[name] = topic
            image.topics_by_id[topic_id] = topic
            delta.created_topics.add(name)
            delta.deleted_topics.pop(name, None)
        case PartitionRecord():
            topic = _topic_for(image, record.topic_id, "PartitionRecord")
            topic.partitions[record.partition_id] = PartitionState(
                partition=record.partition_id,
                leader=record.leader,
                leader_epoch=record.leader_epoch,
                partition_epoch=record.partition_epoch,
                replicas=record.replicas,
                isr=record.isr,
                adding_replicas=record.adding_replicas,
                removing_replicas=record.removing_replicas,
                offline_replicas=record.offline_replicas,
            )
            delta.changed_partitions.add((topic.name, record.partition_id))
        case PartitionChangeRecord():
            topic = _topic_for(image, record.topic_id, "PartitionChangeRecord")
            old = topic.partitions.get(record.partition_id)
            if old is None:
                raise MetadataApplyError(
                    f"PartitionChangeRecord for unknown partition {topic.name}-{record.partition_id}"
                )
            leader, leader_epoch = old.leader, old.leader_epoch
            if record.leader != LEADER_NO_CHANGE and record.leader != old.leader:
                leader, leader_epoch = record.leader, old.leader_epoch + 1
            topic.partitions[record.partition_id] = replace(
                old,
                leader=leader,
                leader_epoch=leader_epoch,
                partition_epoch=old.partition_epoch + 1,
                isr=old.isr if record.isr is None else record.isr,
                replicas=old.replicas if record.replicas is None else record.replicas,
                adding_replicas=old.adding_replicas if record.adding_replicas is None else record.adding_replicas,
                removing_replicas=old.removing_replicas if record.removing_replicas is None
                else record.removing_replicas,
                offline_replicas=old.offline_replicas if record.offline_replicas is None
                else record.offline_replicas,
            )
            delta.changed_partitions.add((topic.name, record.partition_id))
        case RemoveTopicRecord(topic_id=topic_id):
            topic = _topic_for(image, topic_id, "RemoveTopicRecord")
            del image.topics[topic.name]
            del image.topics_by_id[topic_id]
            if topic.name in delta.created_topics:
                delta.created_topics.discard(topic.name)
            delta.deleted_topics[topic.name] = topic
            delta.changed_partitions = {tp for tp in delta.changed_partitions if tp[0] != topic.name}
            delta.changed_topic_configs.discard(topic.name)
        case ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value):
            if rtype == ConfigResourceType.TOPIC:
                configured = image.topics.get(rname)
                if configured is None:
                    raise MetadataApplyError(f"ConfigRecord for unknown topic {rname!r}")
                target = configured.configs
                delta.changed_topic_configs.add(rname)
            elif rtype == ConfigResourceType.BROKER:
                target = image.broker_configs.setdefault(rname, {})
                delta.changed_broker_configs.add(rname)
            elif rtype == ConfigResourceType.CLIENT_METRICS:
                target = image.client_metrics.setdefault(rname, {})
                delta.changed_client_metrics.add(rname)
            elif rtype == ConfigResourceType.GROUP:
                target = image.group_configs.setdefault(rname, {})
                delta.changed_group_configs.add(rname)
            else:
                raise MetadataApplyError(f"ConfigRecord for unsupported resource type {rtype}")
            if value is None:
                target.pop(key, None)
                if not target and rtype == ConfigResourceType.BROKER:
                    # No entry for a broker without overrides, as in a replay of a snapshot, which
                    # writes none for it (Kafka's ConfigurationsImage drops empty resources too).
                    del image.broker_configs[rname]
                if not target and rtype == ConfigResourceType.CLIENT_METRICS:
                    del image.client_metrics[rname]
                if not target and rtype == ConfigResourceType.GROUP:
                    del image.group_configs[rname]
            else:
                target[key] = value
        case ClientQuotaRecord(entity=entity, key=key, value=value, remove=remove):
            entity = tuple(sorted(entity, key=lambda pair: pair[0]))
            if remove:
                values = image.client_quotas.get(entity)
                if values is not None:
                    values.pop(key, None)
                    if not values:
                        del image.client_quotas[entity]
            else:
                image.client_quotas.setdefault(entity, {})[key] = value
            delta.client_quotas_changed = True
        case RegisterBrokerRecord():
            image.brokers[record.broker_id] = BrokerRegistration(
                node_id=record.broker_id,
                host=record.host,
                port=record.port,
                rack=record.rack,
                listener_name=record.listener_name,
                security_protocol=record.security_protocol,
                broker_epoch=record.broker_epoch,
                incarnation_id=record.incarnation_id,
                fenced=record.fenced,
                endpoints=record.endpoints,
                features=record.features,
            )
            delta.changed_brokers.add(record.broker_id)
        case UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker_epoch):
            current = image.brokers.get(broker_id)
            if current is not None and current.broker_epoch == broker_epoch:
                del image.brokers[broker_id]
                delta.changed_brokers.add(broker_id)
        case BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, fenced=fenced):
            current = image.brokers.get(broker_id)
            if current is None or current.broker_epoch != broker_epoch:
                raise MetadataApplyError(f"registration change for unknown broker {broker_id}/{broker_epoch}")
            image.brokers[broker_id] = replace(current, fenced=fenced)
            delta.changed_brokers.add(broker_id)
        case AccessControlEntryRecord():
            image.acls[record.id] = record
            delta.acls_changed = True
        case RemoveAccessControlEntryRecord(id=acl_id):
            if image.acls.pop(acl_id, None) is None:
                raise MetadataApplyError(f"RemoveAccessControlEntryRecord for unknown ACL {acl_id}")
            delta.acls_changed = True
        case UserScramCredentialRecord(name=name, mechanism=mechanism):
            image.scram_credentials[(name, mechanism)] = record
        case RemoveUserScramCredentialRecord(name=name, mechanism=mechanism):
            image.scram_credentials.pop((name, mechanism), None)
        case FeatureLevelRecord(name=name, feature_level=level):
            if name == metadata_format.FEATURE:
                metadata_format.check_supported(level)
            if level == 0:
                image.features.pop(name, None)
            else:
                image.features[name] = level
            delta.features_changed = True
        case LeaderChangeRecord(leader_id=leader_id, controller_epoch=epoch):
            image.controller_id = leader_id
            image.controller_epoch = epoch
            delta.controller_changed = True
        case _:
            raise MetadataApplyError(f"cannot apply {type(record).__name__}")
    image.offset += 1
    return delta
