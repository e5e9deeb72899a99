"""The metadata format level: what an Odradek release may write into the metadata store, finalized in it.

Odradek's metadata store (the local metadata log and its snapshots, or etcd's log, snapshot and
registration keys) is a format of Odradek's own: Kafka's tools never read it. Every change to it that
an older release cannot read is a new level of one feature, ``odradek.metadata.format``, finalized by
a ``FeatureLevelRecord`` in the log itself, as Kafka finalizes ``metadata.version``:

=====  ========  =======================================================================================
level  release   what a store at this level may hold beyond the level below
=====  ========  =======================================================================================
1      0.1.0     batches from offset 0 of 0.1.0's record types; no FeatureLevelRecord (a log without
                 one is at level 1)
2      0.2.0     FeatureLevelRecord; metadata snapshots (a store whose batches start after offset 0,
                 etcd's snapshot keys); a RegisterBrokerRecord's ``features``; the group and
                 transaction coordinators' migration to Kafka's partition rule (odradek.broker.coordinator.rehash);
                 ConfigRecords of CLIENT_METRICS subscriptions and of GROUP configs (0.1.0 refuses a
                 resource type it does not know)
=====  ========  =======================================================================================

Rules:

1. A new cluster (an empty log) is formatted at ``LATEST``: its first controller writes the level in
   its first batch (Kafka's ``kafka-storage format`` writes the newest metadata.version).
2. Every broker registers the range it can read (``SUPPORTED``), in its etcd registration and so in
   its RegisterBrokerRecord; a registration without one (0.1.0) can read level 1 only.
3. The active controller raises the level to the newest one that every registered broker (fenced or
   not: it may come back) can read, and never lowers it (no downgrade: a release older than the
   level cannot read the store). A rolling upgrade therefore stays at the old level, writing nothing
   an old broker cannot read, until the last broker runs the new release; then the controller raises
   it by itself (Kafka waits for ``kafka-features upgrade``; here nothing else depends on the level,
   and an operator who forgets would keep the log growing forever).
4. What needs a level waits for it: ``image.metadata_format >= level`` (the controller's snapshots,
   broker/coordinator/partition_rule.py's switch to Kafka's partition rule).
5. A release that finds the store at a level above ``LATEST`` refuses to go on
   (``UnsupportedMetadataFormatError`` from ``odradek.controller.image.apply``), naming both levels: starting
   would mean misreading the store. A registration whose range does not include the finalized level is
   kept fenced (it could not follow the log).

Fields added to a record type with a default, and readers that ignore fields they do not know
(``odradek.controller.records``), are not a new level: an older release reads such records, minus the field.
A new record type, a record whose meaning changes, or a new shape of the store is a new level.
Kafka-owned formats in the log dirs (segments, indexes, checkpoints, producer snapshots,
``partition.metadata``, ``meta.properties``, ``__consumer_offsets`` and ``__transaction_state`` records)
carry Kafka's own version fields and follow Kafka's rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from odradek.controller.records import FeatureLevelRecord, MetadataRecord

FEATURE = "odradek.metadata.format"
MIN_SUPPORTED = 1
LATEST = 2
# The level a log without a FeatureLevelRecord of FEATURE is at (written by 0.1.0).
UNVERSIONED = 1
# What needs which level.
SNAPSHOTS = 2
COORDINATOR_REHASH = 2
FEATURE_LEVELS = 2  # Kafka's feature levels (odradek.controller.features), FeatureLevelRecords of their own
CLIENT_METRICS_CONFIGS = 2  # KIP-714 subscriptions (odradek.controller.client_metrics_configs)
GROUP_CONFIGS = 2  # group config overrides (odradek.controller.group_configs)

# (feature, min level, max level) this release reads, as a registration carries it.
SUPPORTED: tuple[tuple[str, int, int], ...] = ((FEATURE, MIN_SUPPORTED, LATEST),)


class UnsupportedMetadataFormatError(Exception):
    """The store is at a format level this release cannot read (a newer release wrote it)."""

    def __init__(self, level: int) -> None:
        super().__init__(
            f"the metadata store is at {FEATURE} level {level}, written by a newer Odradek; this release reads "
            f"levels {MIN_SUPPORTED}-{LATEST}. Run the release that wrote it (downgrades are not supported).")
        self.level = level


def check_supported(level: int) -> None:
    if not MIN_SUPPORTED <= level <= LATEST:
        raise UnsupportedMetadataFormatError(level)


def check_readable(records: Iterable[MetadataRecord]) -> None:
    """Raise ``UnsupportedMetadataFormatError`` before any of ``records`` is applied if one of them
    finalizes a level this release cannot read (a reader that stops half way through a batch would
    hold an image no log offset describes)."""
    for record in records:
        if isinstance(record, FeatureLevelRecord) and record.name == FEATURE:
            check_supported(record.feature_level)


def max_readable(features: Iterable[tuple[str, int, int]]) -> int:
    """The highest level a broker registered with ``features`` reads (0.1.0 registered none: level 1)."""
    for name, _low, high in features:
        if name == FEATURE:
            return high
    return UNVERSIONED


def min_readable(features: Iterable[tuple[str, int, int]]) -> int:
    for name, low, _high in features:
        if name == FEATURE:
            return low
    return UNVERSIONED
