"""``GroupShard``: one __consumer_offsets partition as the coordinator runtime sees it.

Loading replays the partition's records here: the newest record per key wins, tombstones delete.
Classic group metadata and committed offsets are collected by key; KIP-848 records go to their
own loader. When the load ends (``on_loaded``) the groups are handed to the two managers, each
group taking its offsets, and the offsets of transactions still open are restored as pending
(``TxnOffsetManager.restore``); on unload the managers drop the partition's groups. The groups
themselves live in the shared id space of ``GroupContext`` (a group id maps to one partition),
so every partition's shard is a loader and a lifecycle, not a second copy of the state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.group import records as R
from broker.group.consumer_group import ConsumerGroupLoader
from broker.group.context import OFFSETS_TOPIC

if TYPE_CHECKING:
    from broker.group.classic_manager import ClassicGroupManager
    from broker.group.consumer_group import ConsumerGroupManager
    from broker.group.txn_offsets import TxnOffsetManager

log = logging.getLogger(__name__)

LoadedOffsets = dict[str, dict[tuple[str, int], "R.OffsetAndMetadata | None"]]


class GroupShard:
    """Implements broker.coordinator.runtime.CoordinatorShard for one partition."""

    def __init__(self, partition: int, classic: ClassicGroupManager, consumer: ConsumerGroupManager,
                 txn_offsets: TxnOffsetManager | None = None) -> None:
        self.partition = partition
        self.classic = classic
        self.consumer = consumer
        self.txn_offsets = txn_offsets
        self._group_values: dict[str, dict | None] = {}
        self._offsets: LoadedOffsets = {}
        self._consumer_loader = ConsumerGroupLoader(partition)

    def replay(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if self._consumer_loader.replay(key, value):  # KIP-848 records go to their loader
            return
        try:
            if key is None:
                raise R.CorruptRecordError("a record without a key")
            k = R.decode_key(key)
            if isinstance(k, R.OffsetKey):
                om = None if value is None else R.decode_offset_value(value)
                self._offsets.setdefault(k.group, {})[(k.topic, k.partition)] = om
            elif isinstance(k, R.GroupKey):
                self._group_values[k.group] = None if value is None else R.decode_group_value(value)
        except R.CorruptRecordError as exc:
            # Kafka fails the whole load; one unreadable record should not cost every group of the
            # partition its offsets, so we log and skip it.
            log.error("skipping unreadable %s record at offset %s: %s", OFFSETS_TOPIC, offset, exc)

    def on_loaded(self) -> None:
        self.consumer.install_loaded(self.partition, self._consumer_loader.groups, self._offsets)  # takes its offsets
        self.classic.install_loaded(self.partition, self._group_values, self._offsets)
        self._group_values, self._offsets = {}, {}
        self._consumer_loader = ConsumerGroupLoader(self.partition)
        if self.txn_offsets is not None:
            self.txn_offsets.restore(self.partition)

    def on_unloaded(self) -> None:
        self.consumer.unload(self.partition)
        self.classic.unload(self.partition)
        if self.txn_offsets is not None:
            self.txn_offsets.unload(self.partition)
