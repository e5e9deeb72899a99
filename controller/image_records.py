"""A metadata image as the records that rebuild it (what a snapshot holds), and the change between two images.

``image_records(image)`` is Kafka's ``MetadataImage.write(ImageWriter)``: every piece of state the
image holds, written as the records whose replay (``odradek.controller.image.apply``, in order, on an empty
image) gives an equal image. Piece by piece, from ``odradek.controller.image.MetadataImage``:

- ``features``: one FeatureLevelRecord per finalized feature, first (a reader learns the store's
  format level before anything else);
- ``controller_id`` / ``controller_epoch``: one LeaderChangeRecord (none if no controller ever ran);
- ``brokers``: one RegisterBrokerRecord each (it carries the broker epoch, the incarnation, every
  endpoint, the fenced flag and the feature ranges it reads);
- ``broker_configs``: one ConfigRecord (BROKER) per key, "" being the cluster-wide default;
- ``client_metrics``: one ConfigRecord (CLIENT_METRICS) per key of each subscription, in the image's order;
- ``group_configs``: one ConfigRecord (GROUP) per key of each group, in the image's order;
- ``topics``: per topic a TopicRecord (id, internal flag), its ConfigRecords (TOPIC), then one
  PartitionRecord per partition carrying the whole ``PartitionState`` (leader and partition epochs,
  replicas, ISR, ongoing reassignment, offline replicas);
- ``acls``: each AccessControlEntryRecord as stored; ``scram_credentials``: each
  UserScramCredentialRecord as stored; ``client_quotas``: one ClientQuotaRecord per entity and key.

Not records: ``cluster_id`` (meta.properties / etcd's cluster id key, set by whoever loads the
image) and ``offset`` (the snapshot's end offset minus one, set by ``load_snapshot``). Producer-id
blocks are not in the image (a file per node, or etcd's counter key).
Adding state to the image means adding it here: ``tests/unit/controller/test_image_records.py``
round-trips an image holding one of everything and fails when a field is not written.

``image_delta(old, new)`` says what differs between two images in ``MetadataDelta`` terms, for a
reader that replaces its image from a snapshot instead of applying records (a broker that fell
behind the log's start): its listeners then see what they would have seen from the records.

Pure functions; the image they read must not change while they run (the controller calls them on
its loop, under its write lock).
"""

from __future__ import annotations

from collections.abc import Iterable

from odradek.controller.image import MetadataDelta, MetadataImage, apply
from odradek.controller.records import (
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    LeaderChangeRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)


def image_records(image: MetadataImage) -> list[MetadataRecord]:
    """The records whose replay on an empty image rebuilds ``image`` (module docstring: what each is)."""
    out: list[MetadataRecord] = [FeatureLevelRecord(name, level) for name, level in sorted(image.features.items())]
    if image.controller_id >= 0:
        out.append(LeaderChangeRecord(image.controller_id, image.controller_epoch))
    for broker_id in sorted(image.brokers):
        b = image.brokers[broker_id]
        out.append(RegisterBrokerRecord(
            broker_id=b.node_id, broker_epoch=b.broker_epoch, incarnation_id=b.incarnation_id, host=b.host,
            port=b.port, listener_name=b.listener_name, security_protocol=b.security_protocol, rack=b.rack,
            fenced=b.fenced, endpoints=b.endpoints, features=b.features))
    for resource in sorted(image.broker_configs):
        for key, value in sorted(image.broker_configs[resource].items()):
            out.append(ConfigRecord(ConfigResourceType.BROKER, resource, key, value))
    for subscription, values in image.client_metrics.items():
        for key, value in sorted(values.items()):
            out.append(ConfigRecord(ConfigResourceType.CLIENT_METRICS, subscription, key, value))
    for group, values in image.group_configs.items():
        for key, value in sorted(values.items()):
            out.append(ConfigRecord(ConfigResourceType.GROUP, group, key, value))
    for name in sorted(image.topics):
        topic = image.topics[name]
        out.append(TopicRecord(topic.name, topic.topic_id, topic.is_internal))
        for key, value in sorted(topic.configs.items()):
            out.append(ConfigRecord(ConfigResourceType.TOPIC, name, key, value))
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            out.append(PartitionRecord(
                partition_id=p.partition, topic_id=topic.topic_id, replicas=p.replicas, isr=p.isr, leader=p.leader,
                leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                removing_replicas=p.removing_replicas, adding_replicas=p.adding_replicas,
                offline_replicas=p.offline_replicas))
    out.extend(image.acls[acl_id] for acl_id in sorted(image.acls))
    out.extend(image.scram_credentials[key] for key in sorted(image.scram_credentials))
    for entity in sorted(image.client_quotas, key=_entity_order):
        for key, quota in sorted(image.client_quotas[entity].items()):
            out.append(ClientQuotaRecord(entity, key, quota))
    return out


def _entity_order(entity: tuple[tuple[str, str | None], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((etype, "" if name is None else "\0" + name) for etype, name in entity)


def load_snapshot(image: MetadataImage, records: Iterable[MetadataRecord], end_offset: int) -> MetadataDelta:
    """Apply a snapshot's records to ``image`` (empty but for its cluster id) and set its offset to the
    snapshot's: the image then stands exactly where the log did at ``end_offset``."""
    delta = MetadataDelta()
    for record in records:
        apply(image, record, delta)
    image.offset = end_offset - 1
    return delta


def image_delta(old: MetadataImage, new: MetadataImage) -> MetadataDelta:
    """What a listener must learn when ``new`` replaces ``old`` (``records``: none, it came from no records;
    the flags and sets are filled as ``apply`` fills them)."""
    delta = MetadataDelta()
    for name, topic in old.topics.items():
        now = new.topics.get(name)
        if now is None or now.topic_id != topic.topic_id:
            delta.deleted_topics[name] = topic
    for name, topic in new.topics.items():
        before = old.topics.get(name)
        if before is None or before.topic_id != topic.topic_id:
            delta.created_topics.add(name)
            delta.changed_partitions |= {(name, index) for index in topic.partitions}
            if topic.configs:
                delta.changed_topic_configs.add(name)
            continue
        if before.configs != topic.configs:
            delta.changed_topic_configs.add(name)
        for index, state in topic.partitions.items():
            if before.partitions.get(index) != state:
                delta.changed_partitions.add((name, index))
    for resource in set(old.broker_configs) | set(new.broker_configs):
        if old.broker_configs.get(resource) != new.broker_configs.get(resource):
            delta.changed_broker_configs.add(resource)
    for subscription in set(old.client_metrics) | set(new.client_metrics):
        if old.client_metrics.get(subscription) != new.client_metrics.get(subscription):
            delta.changed_client_metrics.add(subscription)
    for group in set(old.group_configs) | set(new.group_configs):
        if old.group_configs.get(group) != new.group_configs.get(group):
            delta.changed_group_configs.add(group)
    for broker_id in set(old.brokers) | set(new.brokers):
        if old.brokers.get(broker_id) != new.brokers.get(broker_id):
            delta.changed_brokers.add(broker_id)
    delta.controller_changed = (old.controller_id, old.controller_epoch) != (new.controller_id, new.controller_epoch)
    delta.acls_changed = old.acls != new.acls
    delta.client_quotas_changed = old.client_quotas != new.client_quotas
    delta.features_changed = old.features != new.features
    return delta
