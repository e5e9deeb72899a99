"""Transactions in the log: end markers, producer state's open transactions, the ``.txnindex``
(byte-exact to Kafka's AbortedTxn), truncation and its rebuild by recovery. Real temp-dir logs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.protocol.batch_header import parse_header
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import (
    ControlRecordType,
    decode_batch,
    decode_end_txn_marker,
    encode_end_txn_marker_batch,
)
from odradek.storage.log import Log
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn
from tests.unit.storage.log_test_helpers import batch, read_all, small_config

NOW = 1_700_000_000_000
LEADER_EPOCH = 0


def open_txn_log(dir: Path, **kwargs) -> Log:
    return Log.open(dir, small_config(), producer_state=ProducerStateManager(dir), now_ms=NOW, **kwargs)


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return batch(n, ts=NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def write(log: Log, records: bytes) -> tuple[int, int]:
    info = log.append(records, leader_epoch=LEADER_EPOCH, now_ms=NOW)
    return info.first_offset, info.last_offset


def end_txn(log: Log, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0,
            transaction_version: int = 0) -> int:
    return log.append_end_txn_marker(pid, epoch, coordinator_epoch, commit, leader_epoch=LEADER_EPOCH,
                                     now_ms=NOW, transaction_version=transaction_version).first_offset


def txn_index_bytes(log: Log) -> dict[int, bytes]:
    """Each segment's .txnindex file, as on disk (absent files left out)."""
    out = {}
    for path in sorted(log.dir.glob("*.txnindex")):
        out[int(path.name.split(".")[0])] = path.read_bytes()
    return out


def kafka_entry(pid: int, first: int, last: int, lso: int) -> bytes:
    # Kafka's AbortedTxn: version int16 0, producerId, firstOffset, lastOffset, lastStableOffset (int64s).
    return struct.pack(">hqqqq", 0, pid, first, last, lso)


def test_marker_batch_is_kafkas_end_transaction_marker(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(7, 0))
    offset = end_txn(log, 7, commit=True, epoch=0, coordinator_epoch=5)
    raw = log.read(offset, 1 << 20).read_bytes()
    header = parse_header(raw)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (7, 0, -1, 1)
    record = decode_batch(raw).records[0]
    assert record.key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert record.value == struct.pack(">hi", 0, 5)  # version 0, coordinator epoch
    marker = decode_end_txn_marker(record)
    assert (marker.control_type, marker.coordinator_epoch) == (ControlRecordType.COMMIT, 5)


def test_abort_writes_kafkas_aborted_txn_entry(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    ps = log.producer_state
    write(log, batch(1, ts=NOW))  # offset 0, not transactional
    first, _ = write(log, txn_batch(7, 0))  # 1-2
    assert ps.first_unstable_offset() == first == 1
    marker = end_txn(log, 7, commit=False)  # 3
    assert ps.ongoing_txns == {}
    assert ps.unreplicated_txns == {1: (7, 3)}
    ps.on_high_watermark_updated(4)
    assert ps.first_unstable_offset() is None
    data = txn_index_bytes(log)
    assert data == {0: kafka_entry(7, 1, marker, marker + 1)}
    assert len(data[0]) == ENTRY_SIZE == 34
    assert log.collect_aborted_txns(0, 4) == [AbortedTxn(7, 1, 3, 4)]


def test_commit_and_empty_transactions_write_no_entry(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(7, 0))
    end_txn(log, 7, commit=True)
    end_txn(log, 8, commit=False)  # a transaction without data: nothing to index (Kafka)
    assert txn_index_bytes(log) == {}
    assert log.collect_aborted_txns(0, log.log_end_offset) == []


def test_interleaved_transactions_record_the_other_open_one_as_lso(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    ps = log.producer_state
    write(log, txn_batch(1, 0))  # 0-1, producer 1 opens
    write(log, txn_batch(2, 0))  # 2-3, producer 2 opens
    write(log, txn_batch(1, 2))  # 4-5
    assert ps.first_unstable_offset() == 0
    end_txn(log, 1, commit=False)  # 6: producer 2's transaction (from 2) is still open
    assert ps.first_unstable_offset() == 0  # the marker is not below the HW yet
    ps.on_high_watermark_updated(7)
    assert ps.first_unstable_offset() == 2
    end_txn(log, 2, commit=False)  # 7
    ps.on_high_watermark_updated(8)
    assert ps.first_unstable_offset() is None
    assert txn_index_bytes(log) == {0: kafka_entry(1, 0, 6, 2) + kafka_entry(2, 2, 7, 8)}
    # A fetch of [4, 6) overlaps both; one of [0, 2) only producer 1's (whose LSO 2 ends the search).
    assert log.collect_aborted_txns(4, 6) == [AbortedTxn(1, 0, 6, 2), AbortedTxn(2, 2, 7, 8)]
    assert log.collect_aborted_txns(0, 2) == [AbortedTxn(1, 0, 6, 2)]


def test_clients_may_not_write_markers(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    marker = encode_end_txn_marker_batch(producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=0,
                                         timestamp=NOW)
    with pytest.raises(KafkaApiError) as err:
        log.append(marker, leader_epoch=LEADER_EPOCH, now_ms=NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_fencing_of_markers(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(7, 0, epoch=3))
    end_txn(log, 7, commit=False, epoch=3, coordinator_epoch=4)
    end_before = log.log_end_offset
    with pytest.raises(KafkaApiError) as err:
        end_txn(log, 7, commit=True, epoch=3, coordinator_epoch=3)  # a zombie coordinator
    assert err.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KafkaApiError) as err:
        end_txn(log, 7, commit=True, epoch=2, coordinator_epoch=4)  # a fenced producer epoch
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end_before
    # A newer producer epoch (the coordinator aborting after InitProducerId's bump) is accepted.
    end_txn(log, 7, commit=False, epoch=4, coordinator_epoch=4)
    assert log.producer_state.last_entry(7).producer_epoch == 4


def test_a_v2_marker_needs_an_epoch_above_the_producers(tmp_path: Path) -> None:
    """Transactions v2 (KIP-890 part 2; KIP-1228's transaction version 2 in WriteTxnMarkers): the
    coordinator bumps the epoch of every commit and abort, so a v2 marker carries an epoch above its
    transaction's batches, and the next transaction runs at that marker's epoch. A v2 marker at the
    producer's own epoch is then a delayed repeat of the marker that ended the last transaction: it must
    not end the transaction open since (INVALID_PRODUCER_EPOCH, nothing written), but with nothing open
    it is written again (Kafka 4.4's ProducerAppendInfo.checkProducerEpoch at transaction version 2)."""
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(7, 0, epoch=3))
    end_txn(log, 7, commit=True, epoch=4, transaction_version=2)  # the commit of epoch 3's transaction
    assert log.producer_state.last_entry(7).producer_epoch == 4
    repeat = end_txn(log, 7, commit=True, epoch=4, transaction_version=2)  # nothing open: written again
    assert repeat == log.log_end_offset - 1
    first, _ = write(log, txn_batch(7, 0, epoch=4))  # the next transaction, at the marker's epoch
    end_before = log.log_end_offset
    for epoch in (4, 3):
        with pytest.raises(KafkaApiError) as err:
            end_txn(log, 7, commit=False, epoch=epoch, transaction_version=2)
        assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end_before and log.producer_state.last_entry(7).current_txn_first_offset == first
    # A v1 marker (no bump per transaction) at the producer's own epoch ends what is open, as ever.
    end_txn(log, 7, commit=True, epoch=4)
    assert log.producer_state.last_entry(7).current_txn_first_offset is None
    # The v2 marker of the transaction open at epoch 5 is at epoch 6.
    write(log, txn_batch(7, 0, epoch=5))
    end_txn(log, 7, commit=False, epoch=6, transaction_version=2)
    assert log.producer_state.last_entry(7).current_txn_first_offset is None


def test_non_transactional_write_during_a_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(7, 0))
    with pytest.raises(KafkaApiError) as err:
        write(log, batch(1, ts=NOW, producer_id=7, producer_epoch=0, base_sequence=2))
    assert err.value.code == ErrorCode.INVALID_TXN_STATE


def test_txn_index_rolls_with_segments_and_search_spans_them(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(1, 0))  # 0-1
    log.roll(NOW)
    write(log, txn_batch(2, 0))  # 2-3
    end_txn(log, 1, commit=False)  # 4, in the segment based at 2
    log.roll(NOW)
    end_txn(log, 2, commit=False)  # 5
    assert txn_index_bytes(log) == {2: kafka_entry(1, 0, 4, 2), 5: kafka_entry(2, 2, 5, 6)}
    # From offset 0 the search walks into later segments to find the markers.
    assert log.collect_aborted_txns(0, 2) == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_txns(0, 6) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    # Retention (DeleteRecords) removes a segment's .txnindex with it.
    log.delete_records_before(5, now_ms=NOW)
    log.remove_deleted_files(NOW + 1)
    assert set(txn_index_bytes(log)) == {5}


def test_truncation_drops_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_txn_log(tmp_path / "t-0")
    write(log, txn_batch(1, 0))  # 0-1
    log.roll(NOW)
    log.wait_for_background_flushes()
    marker = end_txn(log, 1, commit=False)  # 2
    assert txn_index_bytes(log) == {2: kafka_entry(1, 0, 2, 3)}
    log.truncate_to(marker, now_ms=NOW)
    assert txn_index_bytes(log) == {}
    assert log.producer_state.ongoing_txns == {0: 1}  # the transaction is open again
    assert log.collect_aborted_txns(0, 10) == []


@pytest.mark.parametrize("lose", ["txnindex", "txnindex+snapshots"])
def test_recovery_after_a_crash_rebuilds_the_txn_index(tmp_path: Path, lose: str) -> None:
    dir = tmp_path / "t-0"
    log = open_txn_log(dir)
    write(log, txn_batch(1, 0))  # 0-1
    write(log, txn_batch(2, 0))  # 2-3
    end_txn(log, 1, commit=False)  # 4
    log.roll(NOW)
    write(log, txn_batch(3, 0))  # 5-6
    end_txn(log, 2, commit=False)  # 7
    end_txn(log, 3, commit=True)  # 8
    write(log, txn_batch(4, 0))  # 9-10, still open at the crash
    log.roll(NOW)
    end_txn(log, 4, commit=False)  # 11
    log.wait_for_background_flushes()
    expected = txn_index_bytes(log)
    assert expected == {0: kafka_entry(1, 0, 4, 2), 5: kafka_entry(2, 2, 7, 5), 11: kafka_entry(4, 9, 11, 12)}
    batches = read_all(log)
    log.close_quietly()  # a crash: no clean-shutdown snapshot
    for path in dir.glob("*.txnindex"):
        path.unlink()
    if lose == "txnindex+snapshots":
        for path in dir.glob("*.snapshot"):
            path.unlink()
    reopened = open_txn_log(dir, recovery_point=0)
    assert read_all(reopened) == batches
    assert txn_index_bytes(reopened) == expected
    assert reopened.producer_state.ongoing_txns == {}
    assert reopened.collect_aborted_txns(0, 12) == [
        AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 5), AbortedTxn(4, 9, 11, 12)]
    reopened.close()


def test_recovery_of_the_active_segment_only_keeps_older_indexes(tmp_path: Path) -> None:
    """A crash after a clean history: only the segment past the recovery point is rescanned, its
    index rebuilt from producer state at its base; an older segment's index is trusted as is."""
    dir = tmp_path / "t-0"
    log = open_txn_log(dir)
    write(log, txn_batch(1, 0))  # 0-1
    end_txn(log, 1, commit=False)  # 2
    write(log, txn_batch(2, 0))  # 3-4, open across the roll
    log.roll(NOW)
    log.wait_for_background_flushes()
    recovery_point = log.recovery_point
    end_txn(log, 2, commit=False)  # 5
    expected = txn_index_bytes(log)
    assert expected == {0: kafka_entry(1, 0, 2, 3), 5: kafka_entry(2, 3, 5, 6)}
    log.close_quietly()
    (dir / f"{5:020d}.txnindex").unlink()
    reopened = open_txn_log(dir, recovery_point=recovery_point)
    assert txn_index_bytes(reopened) == expected
    reopened.close()


def test_clean_reopen_keeps_open_transactions(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    log = open_txn_log(dir)
    write(log, batch(1, ts=NOW))
    write(log, txn_batch(1, 0))  # 1-2
    log.close()
    reopened = open_txn_log(dir, clean_shutdown=True, recovery_point=3)
    assert reopened.producer_state.first_unstable_offset() == 1
    end_txn(reopened, 1, commit=False)
    assert txn_index_bytes(reopened) == {0: kafka_entry(1, 1, 3, 4)}
    reopened.close()


# --- compaction (Kafka's CleanedTransactionMetadata rules) -------------------------------------


def test_compaction_removes_aborted_data_and_keeps_markers_until_their_horizon(tmp_path: Path) -> None:
    from odradek.protocol.records import Record, encode_batch
    from odradek.storage.cleaner import LogCleaner
    from odradek.storage.log_config import LogConfig
    from odradek.storage.log_manager import LogManager
    from odradek.storage.producer_state import producer_state_factory

    config = LogConfig(segment_bytes=1 << 20, segment_index_bytes=1024, index_interval_bytes=100,
                       file_delete_delay_ms=0, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01,
                       delete_retention_ms=1000)
    mgr = LogManager([tmp_path], config, producer_state_factory=producer_state_factory(1))
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)

    def put(key: bytes, value: bytes, **kw: int | bool) -> None:
        log.append(encode_batch([Record(timestamp=1000, key=key, value=value)], **kw), leader_epoch=0)

    def clean(now: int, key: bytes) -> None:
        put(key, b"dirty")  # something new to clean, then roll it out of the active segment
        log.roll()
        LogCleaner(mgr).clean_once(now_ms=now)

    def data() -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for _, _, raw in read_all(log) if not parse_header(raw).is_control
                for r in decode_batch(raw).records]

    def markers() -> list[int]:
        return [h.base_offset for h in (parse_header(raw) for _, _, raw in read_all(log)) if h.is_control]

    put(b"a", b"old")  # 0
    put(b"a", b"committed", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)  # 1
    put(b"a", b"aborted", producer_id=6, producer_epoch=0, base_sequence=0, is_transactional=True)  # 2
    log.append_end_txn_marker(5, 0, 0, True, leader_epoch=0)  # 3
    log.append_end_txn_marker(6, 0, 0, False, leader_epoch=0)  # 4
    clean(5000, b"x")  # 5
    # The aborted "a" neither shadows the committed one nor survives; both markers stay, and the
    # abort's entry moved into the cleaned segment's .txnindex.
    assert data() == [(1, b"a", b"committed"), (5, b"x", b"dirty")]
    assert markers() == [3, 4]
    assert log.collect_aborted_txns(0, 6) == [AbortedTxn(6, 2, 4, 5)]
    assert [p.name for p in log.dir.glob("*.txnindex")] == [f"{0:020d}.txnindex"]

    log.remove_expired_producers(10**14)  # their last batches need not stay (empty) any more
    put(b"a", b"newest")  # supersedes the committed "a"
    clean(6000, b"y")  # the transactions' batches go; this pass still saw them: markers stay
    assert markers() == [3, 4]
    clean(7000, b"z")  # no data left: the markers get a delete horizon (7000 + delete.retention.ms)
    assert markers() == [3, 4] and log.collect_aborted_txns(0, log.log_end_offset) == []
    clean(8500, b"w")  # past the horizon: gone
    assert markers() == []
    assert [v for _, k, v in data() if k == b"a"] == [b"newest"]
    mgr.shutdown()


def test_a_follower_copying_the_leaders_batches_builds_the_same_txn_index(tmp_path: Path) -> None:
    leader = open_txn_log(tmp_path / "leader" / "t-0")
    write(leader, txn_batch(1, 0))  # 0-1
    write(leader, txn_batch(2, 0))  # 2-3
    end_txn(leader, 1, commit=False)  # 4
    write(leader, txn_batch(3, 0))  # 5-6
    end_txn(leader, 2, commit=True)  # 7
    end_txn(leader, 3, commit=False)  # 8
    follower = open_txn_log(tmp_path / "follower" / "t-0")
    for _, _, raw in read_all(leader):  # the replica fetcher's appends: offsets and epochs kept
        follower.append(raw, leader_epoch=LEADER_EPOCH, assign_offsets=False, now_ms=NOW)
    assert txn_index_bytes(follower) == txn_index_bytes(leader) == {
        0: kafka_entry(1, 0, 4, 2) + kafka_entry(3, 5, 8, 9)}
    assert follower.producer_state.ongoing_txns == {}
    assert follower.producer_state.last_entry(3).coordinator_epoch == 0
