"""``GroupShard``: one __consumer_offsets partition as the coordinator runtime sees it.

Loading replays the partition's records here: the newest record per key wins, tombstones delete.
Classic group metadata and committed offsets are collected by key; KIP-848 records go to their
own loader. When the load ends (``on_loaded``) the groups are handed to the two managers, each
group taking its offsets. Transactional offset records (TxnOffsetCommit's, written as the
producer's transactional batch) are held per producer until that producer's marker is replayed:
COMMIT makes them committed offsets, ABORT drops them (Kafka's OffsetMetadataManager.replay with a
producer id, and replayEndTransactionMarker); those of transactions still open at the end of the
load become the pending offsets of ``TxnOffsetManager.install_pending``. On unload the managers
drop the partition's groups. The groups themselves live in the shared id space of
``GroupContext`` (a group id maps to one partition), so every partition's shard is a loader and
a lifecycle, not a second copy of the state.

With a ``RehashMigrations`` (broker/coordinator/rehash.py), the load first hands every record to
its ``LoadFilter``: the markers, and the records of groups that belong to another partition
since the partition rule was fixed, are set aside there (never installed); when the load ends the
migrations get the filter, to take over the state of the groups that moved here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinator.rehash import LoadFilter
from odradek.broker.coordinator.runtime import NO_PRODUCER_ID
from odradek.broker.group import records as R
from odradek.broker.group.consumer_group import ConsumerGroupLoader
from odradek.broker.group.context import OFFSETS_TOPIC
from odradek.broker.group.share_group import ShareGroupLoader
from odradek.broker.group.streams_group import StreamsGroupLoader
from odradek.broker.group.txn_offsets import offsets_to_commit

if TYPE_CHECKING:
    from odradek.broker.coordinator.migration import RehashMigrations
    from odradek.broker.group.classic_manager import ClassicGroupManager
    from odradek.broker.group.consumer_group import ConsumerGroupManager
    from odradek.broker.group.share_group import ShareGroupManager
    from odradek.broker.group.streams_manager import StreamsGroupManager
    from odradek.broker.group.txn_offsets import TxnOffsetManager

log = logging.getLogger(__name__)

Pending = dict[str, dict[tuple[str, int], R.OffsetAndMetadata]]  # group -> partition -> offset
LoadedOffsets = R.LoadedOffsets


class GroupShard:
    """Implements odradek.broker.coordinator.runtime.CoordinatorShard for one partition."""

    def __init__(self, partition: int, classic: ClassicGroupManager, consumer: ConsumerGroupManager,
                 txn_offsets: TxnOffsetManager | None = None,
                 migrations: RehashMigrations | None = None) -> None:
        self.partition = partition
        self.classic = classic
        self.consumer = consumer
        self.txn_offsets = txn_offsets
        self._group_values: dict[str, dict[str, Any] | None] = {}
        self._offsets: LoadedOffsets = {}
        self._pending: dict[int, Pending] = {}  # producer id -> its open transaction's offsets
        self._consumer_loader = ConsumerGroupLoader(partition)
        self.migrations = migrations
        self._filter = None if migrations is None else LoadFilter(partition, migrations.partition_of, R.key_group_id)
        # What else lives with the partition (the share groups): told of its unload.
        self.on_unload: Callable[[int], None] | None = None
        # KIP-932 share groups (set by the coordinator; a loader-only shard may go without).
        self.share: ShareGroupManager | None = None
        self._share_loader = ShareGroupLoader(partition)
        # KIP-1071 streams groups (set by the coordinator; a loader-only shard may go without).
        self.streams: StreamsGroupManager | None = None
        self._streams_loader = StreamsGroupLoader(partition)

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        if self._filter is not None and self._filter.consume(key, value):
            return  # a marker, or a group of another partition now
        if producer_id != NO_PRODUCER_ID:
            self._replay_transactional(offset, producer_id, key, value)
            return
        if self._consumer_loader.replay(key, value):  # KIP-848 records go to their loader
            return
        if self._streams_loader.replay(key, value):  # and KIP-1071 records to theirs
            return
        if self._share_loader.replay(key, value):  # and KIP-932 share-group records to theirs
            return
        try:
            if key is None:
                raise R.CorruptRecordError("a record without a key")
            k = R.decode_key(key)
            if isinstance(k, R.OffsetKey):
                om = None if value is None else R.decode_offset_value(value)
                if om is not None:
                    om.record_offset = offset
                self._offsets.setdefault(k.group, {})[(k.topic, k.partition)] = om
            elif isinstance(k, R.GroupKey):
                self._group_values[k.group] = None if value is None else R.decode_group_value(value)
        except R.CorruptRecordError as exc:
            # Kafka fails the whole load; one unreadable record should not cost every group of the
            # partition its offsets, so we log and skip it.
            log.error("skipping unreadable %s record at offset %s: %s", OFFSETS_TOPIC, offset, exc)

    def _replay_transactional(self, offset: int, producer_id: int, key: bytes | None, value: bytes | None) -> None:
        """A record of a transaction: only TxnOffsetCommit's offsets are written in one."""
        try:
            k = None if key is None else R.decode_key(key)
            if isinstance(k, R.OffsetKey) and value is not None:
                om = R.decode_offset_value(value)
                om.record_offset = offset
                self._pending.setdefault(producer_id, {}).setdefault(k.group, {})[(k.topic, k.partition)] = om
            else:
                log.error("skipping a transactional %s record at offset %s that is not an offset commit",
                          OFFSETS_TOPIC, offset)
        except R.CorruptRecordError as exc:
            log.error("skipping unreadable transactional %s record at offset %s: %s", OFFSETS_TOPIC, offset, exc)

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The producer's transaction ended here: its offsets become the groups' (COMMIT), each
        unless an ordinary commit of that partition was written after the transaction's offset
        record (the newer record wins, as in Kafka and on the live path), or are dropped (ABORT)."""
        pending = self._pending.pop(producer_id, None)
        if not commit or not pending:
            return
        for group, offsets in pending.items():
            loaded = self._offsets.setdefault(group, {})
            loaded.update(offsets_to_commit(group, loaded, offsets))

    def on_loaded(self) -> None:
        self.consumer.install_loaded(self.partition, self._consumer_loader.groups, self._offsets)  # takes its offsets
        if self.streams is not None:
            self.streams.install_loaded(self.partition, self._streams_loader.groups, self._offsets)
        self._streams_loader = StreamsGroupLoader(self.partition)
        if self.share is not None:
            self.share.install_loaded(self._share_loader.groups)
        self._share_loader = ShareGroupLoader(self.partition)
        self.classic.install_loaded(self.partition, self._group_values, self._offsets)
        self._group_values, self._offsets = {}, {}
        self._consumer_loader = ConsumerGroupLoader(self.partition)
        if self.txn_offsets is not None:
            self.txn_offsets.install_pending(self._pending)  # transactions still open on the partition
        self._pending = {}
        if self.migrations is not None and self._filter is not None:
            self.migrations.on_loaded(self.partition, self._filter)
            self._filter = LoadFilter(self.partition, self.migrations.partition_of, R.key_group_id)

    def on_unloaded(self) -> None:
        if self.migrations is not None:
            self.migrations.on_unloaded(self.partition)
        self.consumer.unload(self.partition)
        if self.streams is not None:
            self.streams.unload(self.partition)
        self.classic.unload(self.partition)
        if self.on_unload is not None:
            self.on_unload(self.partition)
        if self.txn_offsets is not None:
            self.txn_offsets.unload(self.partition)
