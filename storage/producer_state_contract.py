"""What a partition's Log needs from its producer state, declared in one place.

:class:`ProducerState` is the whole contract between odradek.storage.log / odradek.storage.cleaner and
odradek.storage.producer_state.ProducerStateManager (Kafka's UnifiedLog <-> ProducerStateManager): the log
calls exactly these methods, directly, and nothing else. :class:`NoProducerState` is the same
contract doing nothing, for a log opened without producer state (tools, tests, logs that never see
idempotent producers): the log never asks "is there producer state?", it always has one.

Threading: every method is called with the log's lock held (appends, rolls, truncation, expiry),
except :meth:`ProducerState.last_data_offsets`, which the cleaner calls from its IO thread and
which must therefore only copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

from odradek.protocol.batch_header import BatchHeader

__all__ = ["CompletedTxn", "DuplicateBatch", "NoProducerState", "ProducerState"]


class DuplicateBatch(NamedTuple):
    """A retried batch already in the log: answer with these instead of appending again."""

    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def log_append_time(self) -> int:
        # Kafka answers a duplicate with the original batch's timestamp as log_append_time.
        return self.timestamp


class CompletedTxn(NamedTuple):
    """A transaction its end marker closed (Kafka's CompletedTxn): the log indexes aborted ones."""

    producer_id: int
    first_offset: int  # first offset of the transaction's data
    last_offset: int  # offset of the marker
    is_aborted: bool


class ProducerState(Protocol):
    """One partition's producer state as the log uses it (see odradek.storage.producer_state for the rules)."""

    # Open transactions (first offset -> producer id) and ended ones the HW has not passed yet:
    # the partition reads these two to skip the LSO computation when both are empty.
    ongoing_txns: dict[int, int]
    unreplicated_txns: dict[int, tuple[int, int]]

    # --- the append path (client batches, producer id >= 0) -------------------------------------

    def check_append(self, header: BatchHeader) -> DuplicateBatch | None:
        """Before a single batch is written: None, a DuplicateBatch for a retry (nothing is written),
        or raise the KafkaApiError to answer (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH)."""
        ...

    def check_append_batches(self, headers: list[BatchHeader]) -> DuplicateBatch | None:
        """:meth:`check_append` for the batches of one append, each as if the earlier ones were in."""
        ...

    def on_append(self, header: BatchHeader, append_time_ms: int) -> None:
        """A batch is in the log with its assigned offsets (also during replay); never raises."""
        ...

    # --- transactions (end markers, the last stable offset) ----------------------------------------

    def check_end_txn_marker(self, header: BatchHeader, coordinator_epoch: int) -> None:
        """Before the coordinator path writes a marker: raise TRANSACTION_COORDINATOR_FENCED for a
        coordinator epoch older than the producer's last one."""
        ...

    def check_marker_epoch(self, producer_id: int, producer_epoch: int, transaction_version: int) -> None:
        """Before the coordinator path writes a marker of a transactions-v2 transaction
        (``transaction_version`` >= 2): raise INVALID_PRODUCER_EPOCH unless its epoch is above the
        producer's, or equal to it repeating a marker already written (KIP-1228)."""
        ...

    def on_end_txn_marker(self, header: BatchHeader, aborted: bool, coordinator_epoch: int,
                          append_time_ms: int) -> CompletedTxn | None:
        """A COMMIT/ABORT marker is in the log; the transaction it ended (None if it had no data)."""
        ...

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The last stable offset recorded with an aborted transaction in the ``.txnindex``."""
        ...

    def complete_txn(self, completed: CompletedTxn) -> None:
        """After indexing: the transaction is no longer open (it waits for the HW to pass its marker)."""
        ...

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """The HW moved: ended transactions below it stop holding the LSO."""
        ...

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open or unreplicated transaction; None if there is none."""
        ...

    # --- loading, truncation and the log start ---------------------------------------------------

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> int:
        """Reload from the newest snapshot at or below ``log_end_offset``; returns the offset from
        which the log must replay its batches through :meth:`on_append`."""
        ...

    def update_map_end_offset(self, offset: int) -> None:
        """The state now reflects the log below ``offset``."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The whole log was discarded and restarts empty at ``offset``."""
        ...

    def on_log_start_offset_advanced(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start offset."""
        ...

    def delete_snapshots_before(self, offset: int) -> None:
        """Snapshots below the first segment describe deleted data."""
        ...

    # --- snapshots --------------------------------------------------------------------------------

    def prepare_snapshot(self, end_offset: int) -> tuple[Path, bytes] | None:
        """At a roll: mark the state as reflecting the log below ``end_offset`` and return the snapshot
        to write there, (path, bytes), or None if this state keeps no snapshots. The log writes it
        at once, fsyncs it in the background, then calls :meth:`prune_snapshots`."""
        ...

    def prune_snapshots(self) -> None:
        """Delete all but the newest snapshots."""
        ...

    def take_snapshot(self, end_offset: int) -> Path | None:
        """Write a snapshot at ``end_offset`` now (clean close); its path, or None if none is kept."""
        ...

    # --- expiry and the cleaner -------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms; returns their ids."""
        ...

    def set_producer_id_expiration_ms(self, expiration_ms: int) -> None:
        """A new producer.id.expiration.ms (a dynamic broker config change), used from the next check."""
        ...

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> offset of its last data batch, for producers with state (Kafka's
        lastRecordsOfActiveProducers): compaction keeps those batches so sequences survive."""
        ...


class NoProducerState:
    """The contract with nothing behind it: no checks, no state, no snapshots (see module doc)."""

    def __init__(self) -> None:
        self.ongoing_txns: dict[int, int] = {}
        self.unreplicated_txns: dict[int, tuple[int, int]] = {}

    def check_append(self, header: BatchHeader) -> DuplicateBatch | None:
        return None

    def check_append_batches(self, headers: list[BatchHeader]) -> DuplicateBatch | None:
        return None

    def on_append(self, header: BatchHeader, append_time_ms: int) -> None:
        pass

    def check_end_txn_marker(self, header: BatchHeader, coordinator_epoch: int) -> None:
        pass

    def check_marker_epoch(self, producer_id: int, producer_epoch: int, transaction_version: int) -> None:
        pass

    def on_end_txn_marker(self, header: BatchHeader, aborted: bool, coordinator_epoch: int,
                          append_time_ms: int) -> CompletedTxn | None:
        return None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        pass

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        pass

    def first_unstable_offset(self) -> int | None:
        return None

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> int:
        return log_end_offset  # nothing to replay

    def update_map_end_offset(self, offset: int) -> None:
        pass

    def truncate_fully_and_start_at(self, offset: int) -> None:
        pass

    def on_log_start_offset_advanced(self, log_start_offset: int) -> None:
        pass

    def delete_snapshots_before(self, offset: int) -> None:
        pass

    def prepare_snapshot(self, end_offset: int) -> tuple[Path, bytes] | None:
        return None

    def prune_snapshots(self) -> None:
        pass

    def take_snapshot(self, end_offset: int) -> Path | None:
        return None

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        return []

    def set_producer_id_expiration_ms(self, expiration_ms: int) -> None:
        pass

    def last_data_offsets(self) -> dict[int, int]:
        return {}


def _implements_the_contract(nothing: NoProducerState) -> ProducerState:
    return nothing  # the type checker proves NoProducerState is a whole ProducerState
