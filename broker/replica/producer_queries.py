"""What the handlers and coordinators ask of a partition's producer state (odradek.storage.producer_state):
DescribeProducers' rows, whether a transactional batch joins an open transaction, the open
transactions, and the sequence a coordinator-written batch continues with.

Functions of one partition's producer state; the replica manager finds the partition (led here,
Kafka's errors otherwise) and calls them. A log without Kafka's producer state (a test double's)
answers as one with no producers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.storage.producer_state import InvalidProducerEpochError, ProducerStateManager

if TYPE_CHECKING:
    from odradek.protocol.messages import ProducerState


def active_producers(state: Any) -> list[ProducerState]:
    """DescribeProducers: the producer state of a partition (Kafka's Partition.activeProducerState),
    in the response's field names."""
    if not isinstance(state, ProducerStateManager):
        return []
    return [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
             "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
             "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset}
            for e in list(state.producers.values())]


def transaction_to_join(state: Any, producer_id: int, producer_epoch: int) -> tuple[bool, bool]:
    """Before a transactional batch of (producer id, epoch) is appended (Kafka's
    UnifiedLog.maybeStartTransactionVerification): (whether the producer's transaction at that epoch
    is open here already - then the coordinator is not asked, neither to verify the partition
    (KIP-890) nor to add it (transactions v2) - and whether the partition remembers batches of the
    producer at its current epoch). INVALID_PRODUCER_EPOCH for an epoch below the producer's,
    before the coordinator is asked anything."""
    entry = state.last_entry(producer_id) if isinstance(state, ProducerStateManager) else None
    if entry is None:
        return False, False
    if producer_epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(f"Epoch of producer {producer_id} is {producer_epoch}, which is smaller "
                                        f"than the last seen epoch {entry.producer_epoch}")
    return entry.current_txn_first_offset is not None and entry.producer_epoch == producer_epoch, bool(entry.batches)


def open_transactions(state: Any) -> dict[int, int]:
    """Producer id -> first offset of its open transaction (the group coordinator restores
    TxnOffsetCommit's pending offsets from these when it loads)."""
    if not isinstance(state, ProducerStateManager):
        return {}
    return {pid: first for first, pid in state.ongoing_txns.items()}


def next_producer_sequence(state: Any, producer_id: int, producer_epoch: int) -> int:
    """The sequence a coordinator-written batch of (producer id, epoch) continues with (TxnOffsetCommit
    writes the offsets as the producer's transactional batch)."""
    entry = state.last_entry(producer_id) if isinstance(state, ProducerStateManager) else None
    if entry is None or entry.producer_epoch != producer_epoch or entry.last_seq < 0:
        return 0
    return (entry.last_seq + 1) & 0x7FFFFFFF
