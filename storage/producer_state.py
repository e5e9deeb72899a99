"""Idempotent producer state of one partition: Kafka's ProducerStateManager (KIP-98, KIP-360).

For every producer id that wrote to the partition we keep its epoch, the metadata of its last
five batches (first/last sequence, first/last offset, max timestamp) to answer retries of any
in-flight batch with the original offsets, its last timestamp (for expiry), the coordinator epoch
of its last transaction marker and the first offset of its open transaction.

Transactions (KIP-98): a transactional data batch opens its producer's transaction (its base
offset becomes ``current_txn_first_offset`` and an entry of ``ongoing_txns``, keyed by that
offset, so the oldest open transaction is the first key). An end-transaction marker (a control
batch the coordinator path writes, storage.txn_marker) closes it: :meth:`~ProducerStateManager.on_end_txn_marker`
returns a :class:`CompletedTxn` (none for a transaction without data, as Kafka), the log writes an
aborted one to its segment's ``.txnindex`` with :meth:`~ProducerStateManager.last_stable_offset`,
then :meth:`~ProducerStateManager.complete_txn` moves it to ``unreplicated_txns`` until the high
watermark passes its marker (:meth:`~ProducerStateManager.on_high_watermark_updated`).
:meth:`~ProducerStateManager.first_unstable_offset` - the first offset of the oldest of both - bounds
the last stable offset (Kafka's firstUnstableOffset).

Rules applied before a client batch is written (:meth:`ProducerStateManager.check_append`,
Kafka 4.0's ProducerAppendInfo):

1. A batch without a producer id (-1) is not idempotent: nothing is checked.
2. Same epoch and the same first and last sequence as one of the last five batches: a retry.
   Return :class:`DuplicateBatch` with the original offsets; the caller writes nothing.
3. An epoch below the producer's current one: INVALID_PRODUCER_EPOCH (fenced zombie).
4. A new, higher epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
5. The same epoch must continue at last_sequence + 1 (after 2**31 - 1 comes 0), else
   OUT_OF_ORDER_SEQUENCE_NUMBER.
6. A producer id we hold no state for (never seen, expired, or lost with a truncated log) is
   accepted at any sequence: since KIP-360 (Kafka 2.5) brokers no longer answer
   UNKNOWN_PRODUCER_ID, so a producer whose state expired keeps working.

Control batches (transaction markers, written by the coordinator) get the epoch check, and
from the coordinator path also the coordinator epoch check (:meth:`~ProducerStateManager.check_end_txn_marker`:
an older coordinator epoch is TRANSACTION_COORDINATOR_FENCED). A marker of a transactions-v2
transaction (KIP-890 part 2, whose commit or abort bumped the epoch; KIP-1228's transaction
version 2 in WriteTxnMarkers) must carry an epoch above the producer's
(:meth:`~ProducerStateManager.check_marker_epoch`): a delayed marker of the previous transaction
then cannot end the next one, which runs at that marker's epoch; only a repeat of the marker
that ended the producer's last transaction (same epoch, nothing open) is written again. A non-transactional batch from a
producer with an open transaction is INVALID_TXN_STATE.
:meth:`~ProducerStateManager.on_append` records a batch after offsets were assigned; it never
raises, because log recovery replays every batch through it.

Unlike pre-2.5 Kafka, advancing the log start offset does not forget producers: Kafka 4.0 keeps
them until ``producer_id_expiration_ms`` (transactional.id.expiration / producer.id.expiration)
after their last write, so retries after retention still get duplicate detection.

Snapshot file ``<end offset, 20 digits>.snapshot`` in the partition directory (Kafka's
ProducerSnapshot schema, version 1, all big-endian)::

    version                   int16   1
    crc                       uint32  CRC-32C of every byte after this field
    entries                   int32   count, then per producer (sorted by producer id):
      producer_id             int64
      epoch                   int16
      last_sequence           int32   -1 if no batch is remembered
      last_offset             int64   last offset of the last batch, -1 if none
      offset_delta            int32   last_offset - first offset of that batch
      timestamp               int64   last timestamp
      coordinator_epoch       int32
      current_txn_first_offset int64  -1 if no transaction is open

A snapshot holds the state after replaying everything below its end offset; only the last
batch of each producer survives it (as in Kafka). It is written to ``.snapshot.tmp``, fsynced
and renamed, so a crash leaves either the old set of snapshots or the new one; a snapshot that
is nonetheless unreadable (bad CRC, short, unknown version) is deleted on load and the next
older one is tried, and the log is replayed from the chosen snapshot's offset.

Ownership: one instance per partition, owned by the loop that appends to that partition's log;
not thread-safe. :meth:`take_snapshot` does blocking file I/O; a caller on the event loop can
serialize with :meth:`snapshot_bytes` on the loop and hand :func:`write_snapshot_file` to the IO
pool.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from odradek.protocol.batch_header import (
    CONTROL_BIT,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from odradek.protocol.checksum import crc32c
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.checkpoint_file import write_atomically
from odradek.storage.producer_state_contract import CompletedTxn, DuplicateBatch

if TYPE_CHECKING:
    from odradek.storage.producer_state_contract import ProducerState

NO_PRODUCER_EPOCH = -1
NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_TO_KEEP = 3
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_INT32_MAX = 2**31 - 1
_EPOCH_MAX = 2**15 - 1  # Short.MaxValue
_SNAPSHOT_PREFIX = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # the CRC covers everything after version and crc


class InvalidProducerEpochError(KafkaApiError):
    """The batch's producer epoch is older than the one we hold (a fenced producer)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_PRODUCER_EPOCH, message)


class OutOfOrderSequenceError(KafkaApiError):
    """The batch's first sequence does not follow the producer's last one."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, message)


class InvalidTxnStateError(KafkaApiError):
    """A producer with an open transaction wrote a non-transactional batch."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_TXN_STATE, message)


class TransactionCoordinatorFencedError(KafkaApiError):
    """A marker from a coordinator epoch older than the producer's last one (a zombie coordinator)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.TRANSACTION_COORDINATOR_FENCED, message)


class CorruptSnapshotError(Exception):
    """A producer snapshot file cannot be read; load() skips and deletes it."""


def _decrement_sequence(sequence: int, decrement: int) -> int:
    # Inverse of the wrap-around increment (DefaultRecordBatch.decrementSequence).
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


# The append path runs check_append and on_append for every idempotent batch. On this project's VM
# each BatchHeader property (last_sequence, is_control, ...) costs about a microsecond, as does
# a NamedTuple built with keywords, so these two read header fields by index (positions taken
# from BatchHeader itself) and build BatchMetadata from a tuple.
_BASE_OFFSET, _ATTRIBUTES, _LAST_OFFSET_DELTA, _MAX_TIMESTAMP, _PRODUCER_ID, _PRODUCER_EPOCH, _BASE_SEQUENCE = (
    BatchHeader._fields.index(name) for name in ("base_offset", "attributes", "last_offset_delta", "max_timestamp",
                                                 "producer_id", "producer_epoch", "base_sequence"))
_make_batch_metadata = partial(tuple.__new__, BatchMetadata)


def _last_sequence(header: BatchHeader) -> int:
    """BatchHeader.last_sequence, by index."""
    base_sequence = header[_BASE_SEQUENCE]
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + header[_LAST_OFFSET_DELTA]) % 0x80000000


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_producer_epoch(self, epoch: int) -> None:
        # A new epoch starts a new sequence space: the old batches can no longer be retried.
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header[_PRODUCER_EPOCH] != self.producer_epoch:
            return None
        first_seq, last_seq = header[_BASE_SEQUENCE], _last_sequence(header)
        for batch in self.batches:
            if batch[1] == last_seq and batch[0] == first_seq:
                return batch
        return None


class ProducerStateManager:
    """Per-partition producer id -> state map, its checks, and its snapshots (see module doc).

    Implements odradek.storage.producer_state_contract.ProducerState, the log's whole view of it."""

    def __init__(
        self,
        partition_dir: Path,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        *,
        snapshots_to_keep: int = SNAPSHOTS_TO_KEEP,
    ) -> None:
        self.partition_dir = Path(partition_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.snapshots_to_keep = snapshots_to_keep
        self.producers: dict[int, ProducerStateEntry] = {}
        # Offset up to which the map reflects the log (Kafka's lastMapOffset).
        self.map_end_offset = 0
        self.log_start_offset = 0
        # Open transactions, first offset -> producer id, oldest first (offsets only grow).
        self.ongoing_txns: dict[int, int] = {}
        # Ended transactions whose marker the HW has not passed: first offset -> (producer id, marker offset).
        self.unreplicated_txns: dict[int, tuple[int, int]] = {}

    # --- the append path -----------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def check_append(self, header: BatchHeader,
                     pending: dict[int, tuple[int, int]] | None = None) -> DuplicateBatch | None:
        """Validate a client batch before it is written (rules 1-6 of the module doc).

        Raises InvalidProducerEpochError or OutOfOrderSequenceError; returns a DuplicateBatch for
        a retry. Changes nothing: call :meth:`on_append` once the batch is in the log. For a
        record set with several batches use :meth:`check_append_batches`; ``pending`` is its
        overlay of (epoch, last sequence) per producer for the batches checked so far.
        """
        producer_id = header[_PRODUCER_ID]
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        is_control = header[_ATTRIBUTES] & CONTROL_BIT
        if entry is not None:
            current_epoch = entry.producer_epoch
            batches = entry.batches
            last_seq = batches[-1][1] if batches else NO_SEQUENCE  # entry.last_seq
            # Like Kafka, retries are looked up in the committed state only.
            if not is_control:
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return DuplicateBatch(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp)
        else:
            current_epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE

        if pending is not None and producer_id in pending:
            current_epoch, last_seq = pending[producer_id]

        epoch = header[_PRODUCER_EPOCH]
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch of producer {producer_id} is {epoch}, "
                f"which is smaller than the last seen epoch {current_epoch}"
            )
        if is_control:
            if pending is not None:
                pending[producer_id] = (epoch, last_seq if epoch == current_epoch else NO_SEQUENCE)
            return None

        first_seq = header[_BASE_SEQUENCE]
        if epoch != current_epoch:
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number {first_seq} for new epoch {epoch} of "
                    f"producer {producer_id} (current epoch {current_epoch}); a new epoch starts at 0"
                )
        elif current_epoch != NO_PRODUCER_EPOCH:
            if not _in_sequence(last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"out of order sequence number for producer {producer_id}: {first_seq} "
                    f"(incoming seq. number), {last_seq} (current end sequence number)"
                )
        if entry is not None and entry.current_txn_first_offset is not None and not header[_ATTRIBUTES] & TRANSACTIONAL_BIT:
            # After the sequence checks, as Kafka's appendDataBatch.
            raise InvalidTxnStateError(f"Expected transactional write from producer {producer_id} at "
                                       f"offset {header[_BASE_OFFSET]}")
        if pending is not None:
            pending[producer_id] = (epoch, _last_sequence(header))
        return None

    def check_append_batches(self, headers: list[BatchHeader]) -> DuplicateBatch | None:
        """Check the batches of one append in order, each as if the earlier ones were appended.

        Kafka keeps a pending ProducerAppendInfo per producer for the whole record set, so a
        request carrying batches with sequences 0-4 and 5-9 is in order even though only 0-4
        would follow the committed state. Raises on the first bad batch (nothing is appended);
        returns the first duplicate (the whole append is answered as that retry) or None.
        """
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            duplicate = self.check_append(header, pending)
            if duplicate is not None:
                return duplicate
        return None

    def on_append(self, header: BatchHeader, append_time_ms: int, *, coordinator_epoch: int | None = None) -> None:
        """Record a batch now in the log (``header.base_offset`` is its real offset).

        Used both after a checked append and when recovery replays the log, so it never raises.
        The batch timestamp kept is ``max_timestamp`` as in Kafka (for LogAppendTime pass the
        stamped header); ``append_time_ms`` stands in when the batch has no timestamp (-1).
        ``coordinator_epoch`` comes from a transaction marker's value, for control batches.
        """
        base_offset = header[_BASE_OFFSET]
        last_offset = base_offset + header[_LAST_OFFSET_DELTA]
        if last_offset >= self.map_end_offset:
            self.map_end_offset = last_offset + 1
        producer_id = header[_PRODUCER_ID]
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        timestamp = header[_MAX_TIMESTAMP]
        if timestamp < 0:
            timestamp = append_time_ms
        if header[_PRODUCER_EPOCH] != entry.producer_epoch:
            entry.maybe_update_producer_epoch(header[_PRODUCER_EPOCH])
        entry.last_timestamp = timestamp
        attributes = header[_ATTRIBUTES]
        if attributes & CONTROL_BIT:
            # A control batch without a readable marker (the log passes those here): it still ends
            # whatever was open, with nothing to index.
            if entry.current_txn_first_offset is not None:
                self.ongoing_txns.pop(entry.current_txn_first_offset, None)
                entry.current_txn_first_offset = None
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return
        entry.batches.append(_make_batch_metadata(
            (header[_BASE_SEQUENCE], _last_sequence(header), base_offset, last_offset, timestamp)))
        if attributes & TRANSACTIONAL_BIT and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = base_offset
            self.ongoing_txns[base_offset] = producer_id

    # --- transactions ----------------------------------------------------------------------------

    def check_end_txn_marker(self, header: BatchHeader, coordinator_epoch: int) -> None:
        """A marker from the coordinator path: its coordinator epoch must not be older than the
        producer's last one (Kafka's checkCoordinatorEpoch; the producer epoch is check_append's)."""
        entry = self.producers.get(header[_PRODUCER_ID])
        if entry is not None and entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {header[_PRODUCER_ID]} at offset {header[_BASE_OFFSET]}: "
                f"{coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)")

    def check_marker_epoch(self, producer_id: int, producer_epoch: int, transaction_version: int) -> None:
        """A transactions-v2 marker's epoch (Kafka 4.4's ProducerAppendInfo.checkProducerEpoch at a
        transaction version of 2 or more): above the producer's, or the same epoch repeating the
        marker that ended its transaction (nothing open, or the epoch is Short.MaxValue)."""
        if transaction_version < 2:
            return  # check_append's rule (not older than the producer's epoch) is v1's
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.producer_epoch:
            return
        current = entry.producer_epoch
        if producer_epoch == current and (entry.current_txn_first_offset is None or producer_epoch == _EPOCH_MAX):
            return
        raise InvalidProducerEpochError(
            f"Epoch of producer {producer_id} is {producer_epoch}, which is <= the last seen epoch {current} "
            f"(TV{transaction_version})")

    def on_end_txn_marker(self, header: BatchHeader, aborted: bool, coordinator_epoch: int,
                          append_time_ms: int) -> CompletedTxn | None:
        """A COMMIT/ABORT marker is in the log: the producer's transaction ends (Kafka's
        appendEndTxnMarker). Returns the transaction for the log to index and then pass to
        :meth:`complete_txn`, or None if it had no data. Never raises (replay)."""
        base_offset = header[_BASE_OFFSET]
        if base_offset >= self.map_end_offset:
            self.map_end_offset = base_offset + header[_LAST_OFFSET_DELTA] + 1
        producer_id = header[_PRODUCER_ID]
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if header[_PRODUCER_EPOCH] != entry.producer_epoch:
            entry.maybe_update_producer_epoch(header[_PRODUCER_EPOCH])
        first_offset = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        timestamp = header[_MAX_TIMESTAMP]
        entry.last_timestamp = timestamp if timestamp >= 0 else append_time_ms
        if first_offset is None:
            return None
        return CompletedTxn(producer_id, first_offset, base_offset, aborted)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` ends: the oldest open transaction of another producer, else
        the offset after its marker (the ``last_stable_offset`` of its AbortedTxn entry)."""
        for first_offset, producer_id in self.ongoing_txns.items():
            if producer_id != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The ended transaction waits in ``unreplicated_txns`` until the HW passes its marker."""
        self.ongoing_txns.pop(completed.first_offset, None)
        self.unreplicated_txns[completed.first_offset] = (completed.producer_id, completed.last_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Ended transactions whose marker is below the HW no longer hold the LSO."""
        unreplicated = self.unreplicated_txns
        if unreplicated:
            for first_offset in [f for f, (_, last) in unreplicated.items() if last < high_watermark]:
                del unreplicated[first_offset]

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open or not yet replicated transaction; None if none."""
        first = next(iter(self.ongoing_txns), None)
        if self.unreplicated_txns:
            oldest = min(self.unreplicated_txns)
            if first is None or oldest < first:
                return oldest
        return first

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last data offset of every producer with one (the cleaner keeps those
        batches). Called from the cleaner's thread: iterates a copy of the map."""
        return {pid: entry.last_data_offset for pid, entry in list(self.producers.items())
                if entry.last_data_offset >= 0}

    # --- expiry and log start ------------------------------------------------------------------

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        # A producer with an open transaction is kept until the transaction ends.
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer_id_expiration_ms; returns their ids."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(entry, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return expired

    def set_producer_id_expiration_ms(self, expiration_ms: int) -> None:
        self.producer_id_expiration_ms = expiration_ms

    def on_log_start_offset_advanced(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start. Producers are kept (Kafka >= 2.5);
        only the map's own bounds move, so replay never starts below the new start."""
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        self.on_high_watermark_updated(log_start_offset)  # Kafka's removeUnreplicatedTransactions

    # --- snapshots -----------------------------------------------------------------------------

    def snapshot_path(self, end_offset: int) -> Path:
        return self.partition_dir / f"{end_offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_bytes(self) -> bytes:
        """The snapshot of the current map, in Kafka's ProducerSnapshot v1 format."""
        return encode_snapshot(self.producers.values())

    def take_snapshot(self, end_offset: int) -> Path:
        """Write the state (which must reflect the log below ``end_offset``) and prune old ones."""
        path = self.snapshot_path(end_offset)
        write_snapshot_file(path, self.snapshot_bytes())
        self.prune_snapshots()
        return path

    def prepare_snapshot(self, end_offset: int) -> tuple[Path, bytes]:
        """At a roll: the state covers the log below ``end_offset``; the snapshot for the log to write
        in the background (Kafka snapshots at every roll so recovery replays one segment at most)."""
        self.update_map_end_offset(end_offset)
        return self.snapshot_path(end_offset), self.snapshot_bytes()

    def snapshot_offsets(self) -> list[int]:
        """End offsets of the snapshot files present, ascending."""
        offsets: list[int] = []
        if not self.partition_dir.is_dir():
            return offsets
        for path in self.partition_dir.iterdir():
            name = path.name
            if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
                offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
        return sorted(offsets)

    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset < offset:
                self.snapshot_path(snapshot_offset).unlink(missing_ok=True)

    def prune_snapshots(self) -> None:
        offsets = self.snapshot_offsets()
        for snapshot_offset in offsets[: max(0, len(offsets) - self.snapshots_to_keep)]:
            self.snapshot_path(snapshot_offset).unlink(missing_ok=True)

    def load(self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None) -> int:
        """Rebuild the map from the newest readable snapshot at or below ``log_end_offset``.

        Snapshots above the log end (the log was truncated under them) and unreadable ones are
        deleted. With ``now_ms``, producers already expired are dropped as in Kafka. Returns the
        offset from which the caller must replay the log through :meth:`on_append`: the
        snapshot's offset, never below ``log_start_offset`` (which is returned if no snapshot).
        """
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self.log_start_offset = log_start_offset
        for stray in self.partition_dir.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
            stray.unlink(missing_ok=True)  # a snapshot write that crashed before its rename
        for snapshot_offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(snapshot_offset)
            if snapshot_offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = decode_snapshot(path.read_bytes())
            except (CorruptSnapshotError, OSError):
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if now_ms is None or not self._is_expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
            open_txns = sorted((e.current_txn_first_offset, e.producer_id) for e in self.producers.values()
                               if e.current_txn_first_offset is not None)
            self.ongoing_txns.update(open_txns)
            self.map_end_offset = max(snapshot_offset, log_start_offset)
            return self.map_end_offset
        self.map_end_offset = log_start_offset
        return log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None) -> int:
        """The log was truncated to ``log_end_offset``: reload from snapshots at or below it.
        Returns the offset to replay from, as :meth:`load`."""
        return self.load(log_start_offset, log_end_offset, now_ms)

    def truncate_to(self, offset: int) -> int:
        """Shorthand for :meth:`truncate_and_reload` keeping the current log start offset."""
        return self.truncate_and_reload(min(self.log_start_offset, offset), offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The whole log was discarded (e.g. a follower restarting from the leader's start)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for snapshot_offset in self.snapshot_offsets():
            self.snapshot_path(snapshot_offset).unlink(missing_ok=True)
        self.map_end_offset = offset
        self.log_start_offset = offset


def producer_state_factory(
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
) -> Callable[[str, int, Path], ProducerStateManager]:
    """The ``producer_state_factory`` for odradek.storage.log_manager.LogManager: a ProducerStateManager per
    partition directory, forgetting producers idle for ``producer_id_expiration_ms``
    (``producer.id.expiration.ms``)."""

    def create(topic: str, partition: int, partition_dir: Path) -> ProducerStateManager:
        return ProducerStateManager(partition_dir, producer_id_expiration_ms)

    return create


# --- snapshot file format ------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's ProducerSnapshot v1 bytes for ``entries`` (ProducerStateEntry), sorted by id."""
    ordered = sorted(entries, key=lambda entry: entry.producer_id)
    out = bytearray(_SNAPSHOT_PREFIX.pack(SNAPSHOT_VERSION, 0, len(ordered)))
    for entry in ordered:
        out += _SNAPSHOT_ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
    struct.pack_into(">I", out, 2, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse a snapshot file; raises CorruptSnapshotError for anything not exactly valid."""
    if len(data) < _SNAPSHOT_PREFIX.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_PREFIX.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot is corrupt: stored crc {crc}, computed crc {computed}")
    if count < 0 or _SNAPSHOT_PREFIX.size + count * _SNAPSHOT_ENTRY.size != len(data):
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    entries = []
    for index in range(count):
        (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
         txn_first_offset) = _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_PREFIX.size + index * _SNAPSHOT_ENTRY.size)
        entry = ProducerStateEntry(
            producer_id,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            last_timestamp=timestamp,
            current_txn_first_offset=txn_first_offset if txn_first_offset >= 0 else None,
        )
        if last_offset >= 0:
            entry.batches.append(
                BatchMetadata(
                    first_seq=_decrement_sequence(last_seq, offset_delta) if last_seq >= 0 else NO_SEQUENCE,
                    last_seq=last_seq,
                    first_offset=last_offset - offset_delta,
                    last_offset=last_offset,
                    timestamp=timestamp,
                )
            )
        entries.append(entry)
    return entries


def write_snapshot_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` durably: temp file, fsync, rename, fsync the directory."""
    write_atomically(path, data)


if TYPE_CHECKING:
    def _implements_the_contract(manager: ProducerStateManager) -> ProducerState:
        return manager  # the type checker proves ProducerStateManager is a whole ProducerState
