"""A metadata image written as snapshot records and replayed gives the same image; the delta between two images.

The image under test is built the way the controller builds one, by applying the records it writes
(registrations, fencing, configs, topic creation and deletion, leader and ISR changes, a
reassignment, offline replicas, ACLs, SCRAM credentials, client quotas, client metrics subscriptions). ``test_every_field_is_exercised``
checks that image holds a non-default value in every field of every part of the image, so a field
added to the image but not to ``image_records`` fails the round trip.
"""

from __future__ import annotations

import dataclasses
import uuid

from odradek.controller.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage, apply
from odradek.controller.image_records import image_delta, image_records, load_snapshot
from odradek.controller.records import (
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

TOPIC, BROKER, CLIENT_METRICS = ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.CLIENT_METRICS
GROUP = ConfigResourceType.GROUP
ORDERS, INTERNAL, GONE = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
KEPT_ACL, DROPPED_ACL = uuid.uuid4(), uuid.uuid4()
INCARNATIONS = [uuid.uuid4() for _ in range(4)]


def _history() -> list[MetadataRecord]:
    """Records as a controller's log would hold them, overwrites and removals included."""
    return [
        LeaderChangeRecord(1, 1),
        FeatureLevelRecord("odradek.metadata.format", 1),
        FeatureLevelRecord("odradek.metadata.format", 2),
        FeatureLevelRecord("gone.feature", 3),
        FeatureLevelRecord("gone.feature", 0),  # level 0 removes it
        RegisterBrokerRecord(1, 0, INCARNATIONS[0], "h1", 9092, features=(("odradek.metadata.format", 1, 2),)),
        RegisterBrokerRecord(2, 1, INCARNATIONS[1], "h2", 9093, listener_name="INTERNAL", security_protocol=1,
                             rack="r2", endpoints=(("INTERNAL", "h2", 9093), ("EXTERNAL", "e2", 19093))),
        RegisterBrokerRecord(3, 2, INCARNATIONS[2], "h3", 9094, rack="r3"),
        UnregisterBrokerRecord(3, 2),
        RegisterBrokerRecord(3, 7, INCARNATIONS[3], "h3b", 9095),
        BrokerRegistrationChangeRecord(3, 7, fenced=True),
        ConfigRecord(BROKER, "", "log.retention.ms", "1000"),
        ConfigRecord(BROKER, "2", "log.cleaner.threads", "2"),
        ConfigRecord(BROKER, "1", "num.io.threads", "4"),
        ConfigRecord(BROKER, "1", "num.io.threads", None),  # broker 1 has no override left
        # Subscriptions keep the order they were created in (not sorted): "zz" first.
        ConfigRecord(CLIENT_METRICS, "zz", "metrics", "org.apache.kafka.producer."),
        ConfigRecord(CLIENT_METRICS, "zz", "interval.ms", "1000"),
        ConfigRecord(CLIENT_METRICS, "gone-sub", "metrics", "*"),
        ConfigRecord(CLIENT_METRICS, "aa", "match", "client_id=a.*"),
        ConfigRecord(CLIENT_METRICS, "gone-sub", "metrics", None),  # no key left: the subscription goes
        ConfigRecord(GROUP, "queue", "share.record.lock.duration.ms", "15000"),
        ConfigRecord(GROUP, "gone-group", "share.delivery.count.limit", "3"),
        ConfigRecord(GROUP, "app", "streams.num.standby.replicas", "1"),
        ConfigRecord(GROUP, "gone-group", "share.delivery.count.limit", None),  # no key left: the group's entry goes
        TopicRecord("orders", ORDERS),
        ConfigRecord(TOPIC, "orders", "retention.ms", "5"),
        ConfigRecord(TOPIC, "orders", "cleanup.policy", "compact"),
        ConfigRecord(TOPIC, "orders", "retention.ms", None),
        PartitionRecord(0, ORDERS, (1, 2), (1, 2), leader=1),
        PartitionRecord(1, ORDERS, (2, 1), (2, 1), leader=2),
        PartitionRecord(2, ORDERS, (1, 2), (1, 2), leader=1),
        PartitionChangeRecord(0, ORDERS, leader=2, isr=(2,)),  # leader epoch 1, partition epoch 1
        PartitionChangeRecord(0, ORDERS, isr=(2, 1)),  # partition epoch 2
        PartitionChangeRecord(1, ORDERS, replicas=(2, 1, 3), adding_replicas=(3,), removing_replicas=(1,)),
        PartitionChangeRecord(2, ORDERS, leader=2, isr=(2,), offline_replicas=(1,)),
        TopicRecord("__consumer_offsets", INTERNAL, is_internal=True),
        PartitionRecord(0, INTERNAL, (1,), (1,), leader=1),
        TopicRecord("gone", GONE),
        PartitionRecord(0, GONE, (1,), (1,), leader=1),
        RemoveTopicRecord(GONE),
        AccessControlEntryRecord(KEPT_ACL, 2, "orders", 3, "User:alice", "*", 3, 3),
        AccessControlEntryRecord(DROPPED_ACL, 2, "orders", 3, "User:bob", "*", 3, 3),
        RemoveAccessControlEntryRecord(DROPPED_ACL),
        UserScramCredentialRecord("alice", 1, b"salt", b"stored", b"server", 4096),
        UserScramCredentialRecord("bob", 2, b"s2", b"st2", b"se2", 8192),
        RemoveUserScramCredentialRecord("bob", 2),
        ClientQuotaRecord((("user", "alice"), ("client-id", None)), "producer_byte_rate", 1024.0),
        ClientQuotaRecord((("user", None),), "consumer_byte_rate", 2048.0),
        ClientQuotaRecord((("user", None),), "request_percentage", 50.0),
        ClientQuotaRecord((("user", None),), "request_percentage", remove=True),
        ClientQuotaRecord((("ip", "10.0.0.1"),), "connection_creation_rate", 5.0),
        LeaderChangeRecord(2, 3),
    ]


def _image(records: list[MetadataRecord], cluster_id: str = "c1") -> MetadataImage:
    image = MetadataImage(cluster_id=cluster_id)
    for record in records:
        apply(image, record)
    return image


def _replayed(image: MetadataImage) -> MetadataImage:
    rebuilt = MetadataImage(cluster_id=image.cluster_id)
    load_snapshot(rebuilt, image_records(image), image.offset + 1)
    return rebuilt


def test_snapshot_records_rebuild_an_equal_image() -> None:
    image = _image(_history())
    rebuilt = _replayed(image)
    assert rebuilt == image
    assert rebuilt.offset == len(_history()) - 1  # where the log stood, not the snapshot's record count
    # The topic index points at the same topics as the name index, as apply builds it.
    assert all(rebuilt.topics_by_id[t.topic_id] is t for t in rebuilt.topics.values())
    # And the snapshot of the rebuilt image is the same snapshot (a second generation loses nothing).
    assert image_records(rebuilt) == image_records(image)


def test_every_field_is_exercised() -> None:
    """Each field of each image part holds a non-default value somewhere in the test image, so the
    round trip above would notice a field that ``image_records`` does not write."""
    image = _image(_history())
    parts: list[tuple[type, list[object]]] = [
        (MetadataImage, [image]),
        (BrokerRegistration, list(image.brokers.values())),
        (TopicImage, list(image.topics.values())),
        (PartitionState, [p for t in image.topics.values() for p in t.partitions.values()]),
    ]
    blank = {MetadataImage: MetadataImage(), BrokerRegistration: BrokerRegistration(0, "", 0),
             TopicImage: TopicImage("", uuid.UUID(int=0)), PartitionState: PartitionState(0, 0, 0, 0, (), ())}
    for cls, objects in parts:
        for f in dataclasses.fields(cls):
            default = getattr(blank[cls], f.name)
            assert any(getattr(o, f.name) != default for o in objects), f"{cls.__name__}.{f.name} never set"
    broker_1_overrides = image.broker_configs.get("1")
    assert broker_1_overrides is None  # deleted down to nothing: no entry, as a snapshot replay gives
    assert list(image.client_metrics) == ["zz", "aa"]  # the same for a subscription; creation order
    assert list(image.group_configs) == ["queue", "app"]  # and for a group's configs


def test_snapshot_keeps_the_order_subscriptions_were_created_in() -> None:
    assert list(_replayed(_image(_history())).client_metrics) == ["zz", "aa"]
    assert _replayed(_image(_history())).group_configs == {"queue": {"share.record.lock.duration.ms": "15000"},
                                                           "app": {"streams.num.standby.replicas": "1"}}


def test_empty_image_has_no_records_and_replays_empty() -> None:
    assert image_records(MetadataImage()) == []
    assert _replayed(MetadataImage(cluster_id="c")) == MetadataImage(cluster_id="c")


def test_image_delta_names_what_changed() -> None:
    old = _image(_history())
    recreated = uuid.uuid4()
    new = _image(_history() + [
        RemoveTopicRecord(INTERNAL),
        TopicRecord("__consumer_offsets", recreated, is_internal=True),  # same name, new id
        PartitionRecord(0, recreated, (2,), (2,), leader=2),
        TopicRecord("fresh", uuid.uuid4()),
        PartitionChangeRecord(1, ORDERS, isr=(2,)),
        ConfigRecord(TOPIC, "orders", "segment.ms", "100"),
        ConfigRecord(BROKER, "", "log.retention.ms", None),
        ConfigRecord(CLIENT_METRICS, "aa", "interval.ms", "500"),
        ConfigRecord(GROUP, "app", "streams.num.standby.replicas", None),
        BrokerRegistrationChangeRecord(3, 7, fenced=False),
        ClientQuotaRecord((("ip", "10.0.0.1"),), "connection_creation_rate", 6.0),
    ])
    delta = image_delta(old, new)
    assert set(delta.deleted_topics) == {"__consumer_offsets"}
    assert delta.deleted_topics["__consumer_offsets"].topic_id == INTERNAL
    assert delta.created_topics == {"__consumer_offsets", "fresh"}
    assert delta.changed_partitions == {("orders", 1), ("__consumer_offsets", 0)}
    assert delta.changed_topic_configs == {"orders"}
    assert delta.changed_broker_configs == {""}
    assert delta.changed_client_metrics == {"aa"}
    assert delta.changed_group_configs == {"app"}
    assert delta.changed_brokers == {3}
    assert delta.client_quotas_changed and not delta.acls_changed and not delta.controller_changed
    assert image_delta(new, new) == type(delta)()  # nothing changed: nothing named


def test_image_delta_from_an_empty_image_creates_everything() -> None:
    new = _image(_history())
    delta = image_delta(MetadataImage(cluster_id="c1"), new)
    assert delta.created_topics == set(new.topics) and not delta.deleted_topics
    assert delta.changed_partitions == {(t.name, p) for t in new.topics.values() for p in t.partitions}
    assert delta.changed_topic_configs == {"orders"}
    assert delta.changed_brokers == set(new.brokers)
    assert delta.changed_broker_configs == set(new.broker_configs)
    assert delta.changed_client_metrics == {"zz", "aa"}
    assert delta.acls_changed and delta.client_quotas_changed and delta.controller_changed
