"""Kafka's feature flags as Odradek serves them: which features and levels it supports, the levels a
new cluster is formatted at, and the levels finalized in a metadata image.

Kafka 4.4 (server-common's ``Feature``, ``MetadataVersion``; ``BrokerFeatures.defaultSupportedFeatures``)
finalizes each feature's level with a ``FeatureLevelRecord`` in the metadata log; brokers advertise
what they support and what is finalized in ApiVersions (v3+), and switch behaviour on the finalized
levels. Odradek keeps the same records in its own metadata log (``odradek.controller.image`` applies them to
``MetadataImage.features``) and supports only what it implements:

=================================  =========  ==========================================================
feature                            supported  why
=================================  =========  ==========================================================
metadata.version                   33 only    Kafka's KRaft record formats and broker behaviours by
                                              release. Odradek writes no KRaft records and switches
                                              nothing on it: it behaves as the one release it
                                              implements, Kafka 4.4 (4.4-IV2, level 33, which Kafka
                                              4.4 formats a new cluster at). A lower level would claim
                                              it can behave as an older release; Kafka 4.4 itself
                                              refuses every downgrade from 33 (4.4-IV2 changed the
                                              metadata), so only the refusal's message differs. No
                                              Kafka 4.4 client or tool needs another level: the Java
                                              client reads only transaction.version, and of the tools
                                              only kafka-features reads metadata.version.
group.version                      0-1        1: the KIP-848 consumer group protocol
                                              (ConsumerGroupHeartbeat, ConsumerGroupDescribe), which
                                              answer UNSUPPORTED_VERSION at 0, as Kafka's KafkaApis.
transaction.version                0-2        1: ``__transaction_state`` values are
                                              TransactionLogValue v1 (v0 at 0), as Kafka's
                                              TransactionLog. 2: KIP-890's transactions v2 - the Java
                                              producer switches to them at a finalized 2 (EndTxn v5,
                                              Produce v12, TxnOffsetCommit v5+, each commit or abort
                                              bumping the epoch), and the coordinator's own aborts
                                              (timeouts, fencing) bump as v2 does. As in Kafka, the
                                              API versions are advertised at every level: the client
                                              picks them from the finalized level.
eligible.leader.replicas.version   0          KIP-966's ELR is not kept (partitions list no ELR).
share.version                      0-1        1: share groups (KIP-932: ShareGroupHeartbeat,
                                              ShareGroupDescribe, ShareFetch, ShareAcknowledge,
                                              DescribeShareGroupOffsets), which answer
                                              UNSUPPORTED_VERSION at 0, as Kafka's KafkaApis. Kafka
                                              4.4's level 2 adds share groups' dead-letter queues
                                              (KIP-1191), not implemented: new clusters start at 1.
streams.version                    0-1        1: streams groups (KIP-1071: StreamsGroupHeartbeat,
                                              StreamsGroupDescribe), which answer UNSUPPORTED_VERSION
                                              at 0, as Kafka's KafkaApis; Kafka Streams 4.4 with
                                              group.protocol=streams needs it.
kraft.version                      0          KIP-853's KRaft quorum protocol: Odradek's metadata
                                              quorum is etcd, not KRaft.
=================================  =========  ==========================================================

A feature whose highest supported level is 0 is not advertised (Kafka's BrokerFeatures leaves out
a feature whose maximum is 0): ELR stays off in clients' eyes.

``odradek.metadata.format`` (odradek.controller.metadata_format) is a FeatureLevelRecord too, but Odradek's
own: the controller raises it by itself when every broker can read the next format, and it must
never be lowered. It is neither advertised in ApiVersions nor changeable with UpdateFeatures
(Kafka's tools would show it and offer to downgrade it; FeatureCommand prints whatever a broker
advertises), so to clients and tools it does not exist.

Bootstrap: a new cluster is formatted at Kafka 4.4's defaults for a new cluster (FeatureCommand's
version-mapping of 4.4-IV2: transaction.version 2, group.version 1, eligible.leader.replicas.version
1, share.version 2, streams.version 1, kraft.version 1), each capped at the highest level Odradek
supports and left out at 0 (``BOOTSTRAP``: metadata.version 33, group.version 1, transaction.version
2, share.version 1, streams.version 1). A store written before feature levels existed (0.1.0: metadata format level 1, no
FeatureLevelRecord of a Kafka feature) behaved as ``PRE_FEATURE_LEVELS`` (KIP-848 served,
TransactionLogValue v0): those levels are what ``finalized`` reports for it, and what the controller
writes once the store may hold them (when it raises the metadata format to FEATURE_LEVELS), so
upgrading the software changes no behaviour; ``kafka-features upgrade`` raises them, as in Kafka.

Pure functions over an image; any thread may call them on an image it may read.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.controller import metadata_format

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"

# Kafka 4.4's MetadataVersion.IBP_4_4_IV2 (LATEST_PRODUCTION), the release Odradek implements.
METADATA_VERSION_LEVEL = 33

# What this release supports: feature -> (min level, max level); features not listed are 0-0.
SUPPORTED: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION: (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    GROUP_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
    SHARE_VERSION: (0, 1),
    STREAMS_VERSION: (0, 1),
}

# Every feature Kafka 4.4 knows (Feature.FEATURES, its test features included, and metadata.version):
# UpdateFeatures names any other one "not found" (Feature.featureFromName).
KAFKA_FEATURES = frozenset({
    METADATA_VERSION, KRAFT_VERSION, TRANSACTION_VERSION, GROUP_VERSION, ELIGIBLE_LEADER_REPLICAS_VERSION,
    SHARE_VERSION, STREAMS_VERSION, "test.feature.version",
    *(f"unit.test.feature.version.{i}" for i in range(8)),
})

# Kafka 4.4's levels for a new cluster (Feature.defaultLevel(IBP_4_4_IV2)).
KAFKA_NEW_CLUSTER_LEVELS: Mapping[str, int] = {
    METADATA_VERSION: METADATA_VERSION_LEVEL, KRAFT_VERSION: 1, TRANSACTION_VERSION: 2, GROUP_VERSION: 1,
    ELIGIBLE_LEADER_REPLICAS_VERSION: 1, SHARE_VERSION: 2, STREAMS_VERSION: 1,
}


def supported_range(name: str) -> tuple[int, int]:
    return SUPPORTED.get(name, (0, 0))


# A new cluster's levels: Kafka's, capped at what this release supports, level 0 left out.
BOOTSTRAP: Mapping[str, int] = {
    name: min(level, supported_range(name)[1]) for name, level in KAFKA_NEW_CLUSTER_LEVELS.items()
    if min(level, supported_range(name)[1]) > 0
}

# The levels a store from before feature levels (0.1.0) behaved as.
PRE_FEATURE_LEVELS: Mapping[str, int] = {METADATA_VERSION: METADATA_VERSION_LEVEL, GROUP_VERSION: 1}

# (feature, min, max) of every feature this release serves at a level above 0, as a broker
# registration carries them (with odradek.metadata.format's range: REGISTERED).
ADVERTISED: tuple[tuple[str, int, int], ...] = tuple(
    (name, low, high) for name, (low, high) in SUPPORTED.items() if high > 0)
REGISTERED: tuple[tuple[str, int, int], ...] = metadata_format.SUPPORTED + ADVERTISED


def has_feature_levels(features: Mapping[str, int]) -> bool:
    """Whether Kafka's feature levels were ever finalized in this store (metadata.version is among
    the levels written together: at format, or when the metadata format reaches FEATURE_LEVELS)."""
    return METADATA_VERSION in features


def finalized(features: Mapping[str, int]) -> dict[str, int]:
    """The finalized levels of Kafka's features (level > 0) given an image's ``features``; a store
    written before feature levels reports the levels it behaves at."""
    if not has_feature_levels(features):
        return dict(PRE_FEATURE_LEVELS)
    return {name: level for name, level in features.items() if name != metadata_format.FEATURE and level > 0}


def level(features: Mapping[str, int], name: str) -> int:
    """The finalized level of ``name`` (0 when not finalized)."""
    return finalized(features).get(name, 0)


def consumer_group_protocol(features: Mapping[str, int]) -> bool:
    """KIP-848's consumer group protocol is served (Kafka's GroupVersion.isConsumerRebalanceProtocolSupported);
    without it ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION (KafkaApis)."""
    return level(features, GROUP_VERSION) >= 1


def share_group_protocol(features: Mapping[str, int]) -> bool:
    """Share groups are served (Kafka's ShareVersion.supportsShareGroups: share.version 1 or more);
    without them the share-group APIs answer UNSUPPORTED_VERSION (KafkaApis)."""
    return level(features, SHARE_VERSION) >= 1


def streams_group_protocol(features: Mapping[str, int]) -> bool:
    """Streams groups are served (Kafka's StreamsVersion.streamsGroupSupported: streams.version 1 or
    more); without them StreamsGroupHeartbeat and StreamsGroupDescribe answer UNSUPPORTED_VERSION."""
    return level(features, STREAMS_VERSION) >= 1


def transaction_version(features: Mapping[str, int]) -> int:
    """The finalized transaction.version (Kafka's TransactionStateManager.transactionVersionLevel):
    the transaction version of the coordinator's own aborts (timeouts, fencing a new incarnation),
    2 bumping the epoch as a transactions-v2 EndTxn does."""
    return level(features, TRANSACTION_VERSION)


def transaction_log_value_version(features: Mapping[str, int]) -> int:
    """The TransactionLogValue version the transaction coordinator writes (Kafka's
    TransactionVersion.transactionLogValueVersion): 1, flexible, from transaction.version 1."""
    return 1 if level(features, TRANSACTION_VERSION) >= 1 else 0
