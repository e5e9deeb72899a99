"""odradek.storage.producer_state: Kafka 4.0's idempotent-producer rules, snapshots on real files,
corrupt snapshots, truncation and expiry."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.protocol.batch_header import BatchHeader, parse_header, set_base_offset, set_log_append_time
from odradek.protocol.checksum import crc32c
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, encode_batch, encode_end_txn_marker_batch
from odradek.storage.producer_state import (
    DuplicateBatch,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)

TS = 1_700_000_000_000
PID = 4000


def batch(
    seq: int,
    count: int = 1,
    *,
    offset: int = 0,
    epoch: int = 0,
    pid: int = PID,
    ts: int = TS,
    transactional: bool = False,
) -> BatchHeader:
    """The header of a real encoded batch of ``count`` records."""
    raw = encode_batch(
        [Record(timestamp=ts, value=b"v") for _ in range(count)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )
    return parse_header(raw)


def append(psm: ProducerStateManager, header: BatchHeader) -> None:
    assert psm.check_append(header) is None
    psm.on_append(header, TS)


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


# --- sequence and epoch rules -----------------------------------------------------------------


def test_non_idempotent_batches_are_not_tracked(psm: ProducerStateManager) -> None:
    header = parse_header(encode_batch([Record(value=b"x")]))
    assert psm.check_append(header) is None
    psm.on_append(header, TS)
    assert psm.producers == {}
    assert psm.map_end_offset == 1


@pytest.mark.parametrize("seq", [0, 1, 42, 2**31 - 1])
def test_unknown_producer_accepted_at_any_sequence(psm: ProducerStateManager, seq: int) -> None:
    # KIP-360: no UNKNOWN_PRODUCER_ID from the broker; a producer whose state expired goes on.
    append(psm, batch(seq, 3))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 0
    assert entry.last_seq == (seq + 2) % 2**31


def test_consecutive_batches_accepted(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 3, offset=0))
    append(psm, batch(3, 2, offset=3))
    append(psm, batch(5, 1, offset=5))
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 5, 5)


@pytest.mark.parametrize("seq", [4, 10, 1, 2])
def test_gap_or_overlap_is_out_of_order(psm: ProducerStateManager, seq: int) -> None:
    append(psm, batch(0, 3, offset=0))  # sequences 0..2
    before = psm.snapshot_bytes()
    with pytest.raises(OutOfOrderSequenceError) as info:
        psm.check_append(batch(seq, 1, offset=3))
    assert info.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm.snapshot_bytes() == before  # a rejected batch changes nothing


def test_duplicate_of_each_of_last_five_batches(psm: ProducerStateManager) -> None:
    headers = [batch(i * 2, 2, offset=100 + i * 2, ts=TS + i) for i in range(6)]
    for header in headers:
        append(psm, header)
    for i, header in enumerate(headers[1:], start=1):
        duplicate = psm.check_append(header)
        assert duplicate == DuplicateBatch(100 + i * 2, 101 + i * 2, TS + i)
        assert duplicate.log_append_time == TS + i  # the name odradek.storage.log reads
    # The first batch has left the five-batch window: its retry is out of order, not a duplicate.
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(headers[0])


def test_duplicate_needs_same_first_and_last_sequence(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(0, 2))  # same first sequence, different last


def test_duplicate_from_another_epoch_is_not_a_duplicate(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 1, epoch=0))
    append(psm, batch(0, 1, epoch=1, offset=1))
    with pytest.raises(InvalidProducerEpochError):
        psm.check_append(batch(0, 1, epoch=0))


def test_lower_epoch_is_fenced(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 1, epoch=5))
    before = psm.snapshot_bytes()
    with pytest.raises(InvalidProducerEpochError) as info:
        psm.check_append(batch(1, 1, epoch=4, offset=1))
    assert info.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    assert psm.snapshot_bytes() == before


def test_new_epoch_must_start_at_zero(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 5, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        psm.check_append(batch(5, 1, epoch=1, offset=5))
    append(psm, batch(0, 1, epoch=1, offset=5))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1


def test_sequence_wraps_after_int32_max(psm: ProducerStateManager) -> None:
    append(psm, batch(2**31 - 1, 1, offset=0))
    append(psm, batch(0, 1, offset=1))
    # A batch that itself crosses the wrap: 2**31-2, 2**31-1, 0.
    other = ProducerStateManager(psm.partition_dir)
    append(other, batch(2**31 - 2, 3, offset=0))
    entry = other.last_entry(PID)
    assert entry is not None and entry.last_seq == 0
    assert other.check_append(batch(2**31 - 2, 3, offset=0)) == DuplicateBatch(0, 2, TS)
    append(other, batch(1, 1, offset=3))


def test_producers_are_independent(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 1, pid=1))
    append(psm, batch(0, 1, pid=2, offset=1))
    append(psm, batch(1, 1, pid=1, offset=2))
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(3, 1, pid=2, offset=3))


def test_control_batch_only_checks_epoch(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 2, epoch=3, transactional=True))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.current_txn_first_offset == 0
    marker = parse_header(
        encode_end_txn_marker_batch(
            producer_id=PID, producer_epoch=3, commit=True, coordinator_epoch=9, timestamp=TS, base_offset=2
        )
    )
    assert psm.check_append(marker) is None
    psm.on_append(marker, TS, coordinator_epoch=9)
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 9
    stale = parse_header(
        encode_end_txn_marker_batch(
            producer_id=PID, producer_epoch=2, commit=False, coordinator_epoch=9, timestamp=TS, base_offset=3
        )
    )
    with pytest.raises(InvalidProducerEpochError):
        psm.check_append(stale)


def test_on_append_never_raises_during_replay(psm: ProducerStateManager) -> None:
    # Replay trusts the log: out-of-order and stale-epoch batches are recorded, not rejected.
    psm.on_append(batch(7, 1, epoch=2, offset=0), TS)
    psm.on_append(batch(100, 1, epoch=2, offset=1), TS)
    psm.on_append(batch(0, 1, epoch=1, offset=2), TS)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and entry.last_seq == 0
    assert psm.map_end_offset == 3


def test_timestamp_is_max_timestamp_or_append_time(psm: ProducerStateManager) -> None:
    buf = bytearray(encode_batch([Record(timestamp=TS, value=b"v")], producer_id=PID, producer_epoch=0,
                                 base_sequence=0))
    set_base_offset(buf, 10)
    set_log_append_time(buf, TS + 777)
    psm.on_append(parse_header(buf), TS + 777)
    assert psm.check_append(parse_header(buf)) == DuplicateBatch(10, 10, TS + 777)
    no_ts = parse_header(encode_batch([Record(value=b"v")], producer_id=PID, producer_epoch=0,
                                      base_sequence=1, base_offset=11))
    psm.on_append(no_ts, TS + 5)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_timestamp == TS + 5


# --- expiry and log start -----------------------------------------------------------------------


def test_expiry(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    append(psm, batch(0, 1, pid=1, ts=TS))
    append(psm, batch(0, 1, pid=2, ts=TS + 500, offset=1))
    append(psm, batch(0, 1, pid=3, ts=TS, offset=2, transactional=True))
    assert psm.remove_expired_producers(TS + 999) == []
    assert psm.remove_expired_producers(TS + 1000) == [1]
    assert psm.last_entry(1) is None and psm.last_entry(2) is not None
    assert psm.last_entry(3) is not None  # open transaction: kept
    # An expired producer is unknown again, so any sequence is accepted.
    append(psm, batch(17, 1, pid=1, offset=3))


def test_log_start_advance_keeps_producers_like_kafka(psm: ProducerStateManager) -> None:
    append(psm, batch(0, 1, offset=0))
    psm.on_log_start_offset_advanced(50)
    assert psm.check_append(batch(0, 1, offset=0)) == DuplicateBatch(0, 0, TS)
    assert psm.map_end_offset == 50 and psm.log_start_offset == 50


# --- snapshots ----------------------------------------------------------------------------------


def test_snapshot_exact_bytes_for_one_entry(psm: ProducerStateManager) -> None:
    append(psm, batch(10, 3, offset=100, epoch=7, ts=TS))
    path = psm.take_snapshot(103)
    assert path.name == "00000000000000000103.snapshot"
    entries = bytes.fromhex(
        "00000001"  # one entry
        "0000000000000fa0"  # producer id 4000
        "0007"  # epoch 7
        "0000000c"  # last sequence 12
        "0000000000000066"  # last offset 102
        "00000002"  # offset delta 2
        "0000018bcfe56800"  # timestamp
        "ffffffff"  # coordinator epoch -1
        "ffffffffffffffff"  # no open transaction
    )
    expected = b"\x00\x01" + struct.pack(">I", crc32c(entries)) + entries
    assert path.read_bytes() == expected
    assert not list(psm.partition_dir.glob("*.tmp"))


def test_empty_snapshot_bytes() -> None:
    body = b"\x00\x00\x00\x00"
    assert encode_snapshot([]) == b"\x00\x01" + struct.pack(">I", crc32c(body)) + body
    assert decode_snapshot(encode_snapshot([])) == []


def test_snapshot_round_trip(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, batch(0, 2, pid=1, offset=0))
    append(psm, batch(2, 2, pid=1, offset=2))
    append(psm, batch(5, 1, pid=2, offset=4, epoch=3, transactional=True))
    psm.take_snapshot(5)

    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 5) == 5
    assert reloaded.map_end_offset == 5
    assert reloaded.snapshot_bytes() == psm.snapshot_bytes()
    one = reloaded.last_entry(1)
    two = reloaded.last_entry(2)
    assert one is not None and two is not None
    assert (one.first_seq, one.last_seq, one.last_data_offset) == (2, 3, 3)  # only the last batch survives
    assert two.producer_epoch == 3 and two.current_txn_first_offset == 4
    # The last batch is still recognised as a retry, and the sequence continues.
    assert reloaded.check_append(batch(2, 2, pid=1, offset=2)) == DuplicateBatch(2, 3, TS)
    append(reloaded, batch(4, 1, pid=1, offset=5))
    with pytest.raises(OutOfOrderSequenceError):
        reloaded.check_append(batch(7, 1, pid=2, offset=6, epoch=3))
    append(reloaded, batch(6, 1, pid=2, offset=6, epoch=3, transactional=True))


def test_snapshot_round_trip_across_sequence_wrap(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, batch(2**31 - 2, 4, offset=0))  # sequences 2**31-2 .. 1
    psm.take_snapshot(4)
    reloaded = ProducerStateManager(tmp_path)
    reloaded.load(0, 4)
    entry = reloaded.last_entry(PID)
    assert entry is not None and (entry.first_seq, entry.last_seq) == (2**31 - 2, 1)
    assert reloaded.check_append(batch(2**31 - 2, 4, offset=0)) == DuplicateBatch(0, 3, TS)


def test_load_without_snapshot(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    assert psm.load(0, 100) == 0
    assert psm.load(40, 100) == 40
    assert psm.producers == {}


def test_load_skips_expired_producers(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    append(psm, batch(0, 1, pid=1, ts=TS))
    append(psm, batch(0, 1, pid=2, ts=TS + 900, offset=1))
    psm.take_snapshot(2)
    reloaded = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    reloaded.load(0, 2, now_ms=TS + 1000)
    assert set(reloaded.producers) == {2}


def write_state(tmp_path: Path, offsets: list[int]) -> ProducerStateManager:
    psm = ProducerStateManager(tmp_path, snapshots_to_keep=10)
    for i, offset in enumerate(offsets):
        append(psm, batch(i, 1, offset=offset - 1))
        psm.take_snapshot(offset)
    return psm


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],  # truncated
        lambda data: data[:3],  # shorter than the header
        lambda data: b"",
        lambda data: data + b"\x00",  # trailing bytes
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # flipped bit
        lambda data: b"\x00\x02" + data[2:],  # unknown version
    ],
    ids=["truncated", "short", "empty", "trailing", "bitflip", "version"],
)
def test_corrupt_latest_snapshot_is_deleted_and_older_used(tmp_path: Path, damage) -> None:
    write_state(tmp_path, [10, 20])
    latest = tmp_path / "00000000000000000020.snapshot"
    latest.write_bytes(damage(latest.read_bytes()))
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 30) == 10
    assert not latest.exists()
    entry = reloaded.last_entry(PID)
    assert entry is not None and entry.last_seq == 0 and entry.last_data_offset == 9


def test_decode_snapshot_rejects_count_beyond_data() -> None:
    body = struct.pack(">i", 3)
    with pytest.raises(Exception, match="cannot hold 3"):
        decode_snapshot(b"\x00\x01" + struct.pack(">I", crc32c(body)) + body)


def test_load_deletes_snapshots_above_log_end(tmp_path: Path) -> None:
    write_state(tmp_path, [10, 20, 30])
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 25) == 20
    assert reloaded.snapshot_offsets() == [10, 20]


def test_snapshot_below_log_start_replays_from_log_start(tmp_path: Path) -> None:
    write_state(tmp_path, [10])
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(15, 30) == 15
    assert reloaded.last_entry(PID) is not None


def test_keeps_only_latest_snapshots(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for offset in (5, 10, 15, 20, 25):
        psm.take_snapshot(offset)
    assert psm.snapshot_offsets() == [15, 20, 25]
    assert psm.latest_snapshot_offset() == 25
    psm.delete_snapshots_before(20)
    assert psm.snapshot_offsets() == [20, 25]


def test_unrelated_files_and_stray_tmp(tmp_path: Path) -> None:
    write_state(tmp_path, [10])
    (tmp_path / "00000000000000000000.log").write_bytes(b"segment")
    (tmp_path / "garbage.snapshot").write_bytes(b"x")
    stray = tmp_path / "00000000000000000050.snapshot.tmp"
    stray.write_bytes(b"half written")
    psm = ProducerStateManager(tmp_path)
    assert psm.load(0, 100) == 10
    assert not stray.exists()
    assert (tmp_path / "00000000000000000000.log").exists()


def test_truncate_to(tmp_path: Path) -> None:
    psm = write_state(tmp_path, [10, 20])
    append(psm, batch(2, 1, offset=25))
    assert psm.truncate_to(15) == 10
    assert psm.snapshot_offsets() == [10]
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 0  # state as of offset 10
    # Replaying the log from 10 restores the batch that was at offset 19.
    psm.on_append(batch(1, 1, offset=19), TS)
    assert psm.check_append(batch(2, 1, offset=20)) is None


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    psm = write_state(tmp_path, [10, 20])
    psm.truncate_fully_and_start_at(500)
    assert psm.producers == {} and psm.snapshot_offsets() == []
    assert psm.map_end_offset == 500
    assert ProducerStateManager(tmp_path).load(500, 500) == 500
