"""``TxnShard``: one ``__transaction_state`` partition as the coordinator runtime sees it.

Loading replays the partition (newest record per transactional id wins, a tombstone removes it);
when the load ends the coordinator is told (``on_loaded``) so it can finish transactions the
previous leader left prepared. With a ``LoadFilter`` (broker/coordinator/rehash.py) the load sets
aside the markers and the records of transactional ids that belong to another partition since the
partition rule was fixed; ``epoch_floor`` is what the MIGRATED marker says to add to the
coordinator epoch of this partition's transaction markers. Owned by the handler loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from odradek.broker.coordinator.rehash import LoadFilter
from odradek.broker.txn.metadata import TxnMetadata
from odradek.broker.txn.records import CorruptTxnRecordError, decode_key, decode_value

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"


class TxnShard:
    """Implements odradek.broker.coordinator.runtime.CoordinatorShard for one partition."""

    def __init__(self, partition: int, loaded: Callable[[TxnShard], None], unloaded: Callable[[TxnShard], None],
                 load_filter: LoadFilter | None = None) -> None:
        self.partition = partition
        self.txns: dict[str, TxnMetadata] = {}
        self._loaded = loaded
        self._unloaded = unloaded
        self.load_filter = load_filter
        self.epoch_floor = 0

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = -1, producer_epoch: int = -1) -> None:
        # Only the coordinator writes here, never inside a transaction: the producer is ignored.
        if self.load_filter is not None and self.load_filter.consume(key, value):
            return  # a marker, or a transactional id of another partition now
        try:
            txn_id = decode_key(key)
            if value is None:
                self.txns.pop(txn_id, None)
                return
            v = decode_value(value)
        except CorruptTxnRecordError as exc:
            log.error("skipping unreadable %s record at offset %d: %s", TXN_TOPIC, offset, exc)
            return
        current = self.txns.get(txn_id)
        if current is None:
            self.txns[txn_id] = TxnMetadata.from_value(txn_id, v)
        else:
            current.install(v)

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """No transaction ever writes to __transaction_state, so there are no markers to apply."""

    def on_loaded(self) -> None:
        if self.load_filter is not None and self.load_filter.markers.migrated:
            self.epoch_floor = self.load_filter.markers.source_epoch
        self._loaded(self)

    def on_unloaded(self) -> None:
        self._unloaded(self)
