"""Replaying a partition's batches into its producer state (Kafka's UnifiedLog.rebuildProducerState).

What it reads: the v2 batch headers of the log's segments (odradek.storage.segment), and the one record of
each control batch, a transaction marker (odradek.protocol.records: key ``version: int16, type: int16``
with type 0 ABORT and 1 COMMIT; value ``version: int16, coordinator_epoch: int32``). What it
writes: producer state (odradek.storage.producer_state_contract.ProducerState) and, for a transaction
that ends aborted with data, one entry in the ``.txnindex`` of the segment holding its marker
(odradek.storage.txn_index: producer id, first offset, last offset, last stable offset).

Used on three paths: opening a log (odradek.storage.log_loader, after recovery), truncating one
(odradek.storage.log.Log.truncate_to: snapshots above the new end go and the state is rebuilt), and every
append of a marker (odradek.storage.log.Log.append, through :func:`apply_control_batch`). The rebuild
starts from the newest producer snapshot at or below where replay must begin, then walks batch
headers only: data records are never decoded, a marker's single record is.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol.batch_header import BatchHeader, InvalidBatchError
from odradek.protocol.records import (
    ControlRecordType,
    EndTransactionMarker,
    decode_batch,
    decode_end_txn_marker,
)
from odradek.storage.producer_state_contract import ProducerState
from odradek.storage.segment import LogSegment
from odradek.storage.txn_index import AbortedTxn


def rebuild_producer_state(producer_state: ProducerState, segments: Sequence[LogSegment], log_start_offset: int,
                           log_end_offset: int, now: int) -> None:
    """Load the newest producer snapshot and replay batch headers after it (Kafka's
    loadProducerState). A segment whose ``.txnindex`` recovery emptied needs the state as of its
    base offset to rebuild it: the snapshot is then taken at or below that offset."""
    rebuild_from = min((s.base_offset for s in segments if s.txn_index_stale), default=None)
    end = log_end_offset if rebuild_from is None else min(rebuild_from, log_end_offset)
    replay_from = producer_state.truncate_and_reload(log_start_offset, end, now)
    _replay(producer_state, segments, replay_from, log_end_offset, now)
    for seg in segments:
        seg.txn_index_stale = False


def _replay(producer_state: ProducerState, segments: Sequence[LogSegment], replay_from: int, log_end_offset: int,
            now: int) -> None:
    for seg in segments:
        if seg.next_offset <= replay_from or seg.size == 0:
            continue
        found = seg.translate_offset(replay_from)
        if found is None:
            continue
        for pos, header in seg.iter_headers(found[0]):
            if header.base_offset >= replay_from and header.producer_id >= 0:
                if header.is_control:
                    apply_control_batch(producer_state, seg, header, seg.read_batch(pos, header.size), now,
                                        index=seg.txn_index_stale)
                else:
                    producer_state.on_append(header, now)
    producer_state.update_map_end_offset(log_end_offset)


def apply_control_batch(producer_state: ProducerState, seg: LogSegment, header: BatchHeader, raw: bytes | memoryview,
                        now: int, *, index: bool = True) -> None:
    """A control batch is in ``seg``: end its producer's transaction and, for an aborted one with
    data, add it to the segment's ``.txnindex`` (unless ``index`` is False: replay over a
    segment whose index is intact)."""
    marker = end_txn_marker(raw)
    if marker is None:
        producer_state.on_append(header, now)  # an emptied control batch (the cleaner's)
        return
    completed = producer_state.on_end_txn_marker(header, marker.control_type == ControlRecordType.ABORT,
                                                 marker.coordinator_epoch, now)
    if completed is None:
        return
    if completed.is_aborted and index:
        seg.update_txn_index(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                        producer_state.last_stable_offset(completed)))
    producer_state.complete_txn(completed)


def end_txn_marker(raw: bytes | memoryview) -> EndTransactionMarker | None:
    """The COMMIT/ABORT marker of a control batch; None for a batch without one (emptied by the
    cleaner, or not a transaction marker) or one that cannot be read."""
    try:
        batch = decode_batch(bytes(raw), verify_crc=False)
        if not batch.records:
            return None
        return decode_end_txn_marker(batch.records[0])
    except InvalidBatchError:
        return None
