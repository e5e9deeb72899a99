import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_helpers import batch, open_log, read_all, small_config, values_of

from odradek.protocol.batch_header import parse_header
from odradek.protocol.checksum import crc32c
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import LOG_APPEND_TIME, decode_batch
from odradek.storage import segment as segment_module
from odradek.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from odradek.storage.log import DuplicateBatch, Log
from odradek.storage.log_config import LogConfig
from odradek.storage.partition_metadata import read_partition_metadata
from odradek.storage.producer_state_contract import NoProducerState
from odradek.storage.results import AppendInfo


@pytest.fixture
def log(tmp_path):
    log = open_log(tmp_path / "t-0")
    yield log
    log.close()


def test_new_log_files_and_names(tmp_path):
    log = open_log(tmp_path / "t-0", topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    assert (tmp_path / "t-0" / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert read_partition_metadata(tmp_path / "t-0") == "AAAAAAAAAAAAAAAAAAAAAQ"
    # the active index is preallocated to segment.index.bytes (rounded to whole entries)
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.index") == 1024
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.timeindex") == 1020
    log.close()
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.index") == 0


def test_append_assigns_dense_offsets_and_epoch(log):
    info = log.append(batch(3), leader_epoch=5, now_ms=10)
    assert (info.first_offset, info.last_offset, info.num_batches, info.log_append_time) == (0, 2, 1, -1)
    info = log.append(batch(2) + batch(4), leader_epoch=5)
    assert (info.first_offset, info.last_offset, info.num_batches) == (3, 8, 2)
    assert log.log_end_offset == 9
    batches = read_all(log)
    assert [(b, e) for b, e, _ in batches] == [(0, 2), (3, 4), (5, 8)]
    for _, _, raw in batches:
        h = parse_header(raw)
        assert h.partition_leader_epoch == 5
        decode_batch(raw)  # CRC still valid after the rewrite
    assert log.epoch_cache.entries == [(5, 0)]


def test_append_keeps_record_bytes_untouched(log):
    raw = batch(2, value_size=50, tag=7)
    log.append(raw, leader_epoch=0)
    stored = read_all(log)[0][2]
    assert stored[12:16] == (0).to_bytes(4, "big")  # epoch rewritten
    assert stored[16:] == raw[16:]


def test_log_append_time_stamps_batches(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    info = log.append(batch(2, ts=5), leader_epoch=0, now_ms=123456)
    assert info.log_append_time == 123456
    decoded = decode_batch(read_all(log)[0][2])
    assert decoded.timestamp_type == LOG_APPEND_TIME and decoded.max_timestamp == 123456
    assert [r.timestamp for r in decoded.records] == [123456, 123456]
    log.close()


def _corrupt_last_byte(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 1])


@pytest.mark.parametrize("mutate,error", [
    (lambda b: b[:-1], CorruptRecordError),  # truncated batch
    (lambda b: b[:30], CorruptRecordError),  # shorter than a header
    (lambda b: b + b"\x00" * 5, CorruptRecordError),  # trailing garbage
    (_corrupt_last_byte, CorruptRecordError),  # CRC mismatch
    (lambda b: b[:16] + b"\x01" + b[17:], CorruptRecordError),  # magic 1
])
def test_bad_input_is_rejected_and_nothing_written(log, mutate, error):
    log.append(batch(1), leader_epoch=0)
    before = log.active_segment.size
    good = batch(2)
    with pytest.raises(error) as info:
        log.append(good + mutate(batch(3)), leader_epoch=0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 1 and log.active_segment.size == before
    assert os.path.getsize(log.active_segment.log_path) == before
    assert log.append(good, leader_epoch=0).first_offset == 1


def test_empty_record_set_rejected(log):
    with pytest.raises(CorruptRecordError):
        log.append(b"", leader_epoch=0)
    assert log.log_end_offset == 0


def test_too_large_batch_rejected(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(max_message_bytes=200))
    with pytest.raises(RecordTooLargeError) as info:
        log.append(batch(1, value_size=10) + batch(1, value_size=300), leader_epoch=0)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    log.close()


def test_record_count_mismatch_and_control_batches_rejected(log):
    bad = batch(2, last_offset_delta=5)
    with pytest.raises(InvalidRecordError):
        log.append(bad, leader_epoch=0)
    with pytest.raises(InvalidRecordError):
        log.append(batch(1, is_control=True), leader_epoch=0)
    assert log.log_end_offset == 0


def test_timestamp_bounds(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_after_max_ms=1000,
                                                   message_timestamp_before_max_ms=1000))
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=50_000), leader_epoch=0, now_ms=10_000)
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=1), leader_epoch=0, now_ms=10_000)
    assert log.append(batch(1, ts=10_500), leader_epoch=0, now_ms=10_000).first_offset == 0
    log.close()


def test_read_semantics(log):
    for i in range(5):
        log.append(batch(3, tag=i), leader_epoch=0)  # batches at 0,3,6,9,12
    one = len(batch(3))
    s = log.read(4, 10_000)
    assert s.first_offset == 3 and s.position == one  # batch holding offset 4 starts at 3
    assert s.size == 4 * one and s.next_offset == 15
    s = log.read(0, one * 2 + 1)
    assert s.size == 2 * one
    s = log.read(0, 1)  # KIP-74: at least one whole batch
    assert s.size == one
    assert log.read(0, 1, min_one_batch=False).size == 0
    s = log.read(0, 10_000, max_offset=7)  # high watermark 7: batch 6..8 straddles it, excluded
    assert s.next_offset == 6
    assert log.read(15, 100).size == 0 and log.read(15, 100).fd == -1
    assert log.read(6, 100, max_offset=6).size == 0
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(16, 100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert values_of(log.read(9, one).read_bytes()) == [b"\x03" * 10] * 3


def test_read_slice_is_sendfile_ready(log):
    import socket
    log.append(batch(2), leader_epoch=0)
    s = log.read(0, 1000)
    a, b = socket.socketpair()
    with a, b:
        sent = os.sendfile(a.fileno(), s.fd, s.position, s.size)
        assert sent == s.size and b.recv(65536) == s.read_bytes()


def test_roll_on_segment_bytes_and_reads_across_segments(log):
    for i in range(60):
        log.append(batch(2, value_size=100, tag=i), leader_epoch=0)
    assert len(log.segments) > 3
    for seg in log.segments:
        assert seg.size <= 4096
        assert seg.log_path.name == f"{seg.base_offset:020d}.log"
    assert [b for b, _, _ in read_all(log)] == list(range(0, 120, 2))
    for seg in log.segments[:-1]:  # inactive indexes trimmed
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
        assert seg.offset_index.entries > 0
    log.wait_for_background_flushes()  # Kafka fsyncs rolled segments asynchronously
    assert log.recovery_point == log.active_segment.base_offset  # rolled segments fsynced


def test_roll_on_segment_ms_uses_batch_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=1000))
    log.append(batch(1, ts=10_000), leader_epoch=0)
    log.append(batch(1, ts=10_900), leader_epoch=0)
    assert len(log.segments) == 1
    log.append(batch(1, ts=11_001), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_explicit_roll_and_empty_roll_is_noop(log):
    log.append(batch(1), leader_epoch=0)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_reopen_clean_keeps_everything(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(40):
        log.append(batch(2, value_size=100, tag=i, ts=1000 + i), leader_epoch=i // 10)
    expected = read_all(log)
    log.close()
    log = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert read_all(log) == expected and log.log_end_offset == 80
    assert log.epoch_cache.entries == [(0, 0), (1, 20), (2, 40), (3, 60)]
    assert log.offset_for_timestamp(1020) == (40, 1020)
    assert log.append(batch(1), leader_epoch=3).first_offset == 80
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(index_interval_bytes=0))
    log.append(batch(3, ts=[100, 300, 200]), leader_epoch=0)  # 0..2, max 300
    log.append(batch(2, ts=[300, 400]), leader_epoch=0)  # 3..4
    log.append(batch(2, ts=[150, 150]), leader_epoch=0)  # 5..6 (timestamps may go backwards)
    log.roll()
    log.append(batch(1, ts=1000), leader_epoch=0)  # 7
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 300)
    assert log.offset_for_timestamp(300) == (1, 300)  # first record with ts >= 300, not batch 3
    assert log.offset_for_timestamp(301) == (4, 400)
    assert log.offset_for_timestamp(401) == (7, 1000)
    assert log.offset_for_timestamp(1001) is None
    assert log.offset_for_timestamp(401, max_offset=7) is None
    assert log.max_timestamp_and_offset() == (1000, 7)
    log.delete_records_before(2)
    assert log.offset_for_timestamp(0) == (2, 200)
    log.close()


def test_offset_for_timestamp_equal_timestamps_unindexed(tmp_path):
    # An earlier record with the same timestamp as an indexed one must still be found first.
    log = open_log(tmp_path / "t-0", small_config(index_interval_bytes=0))
    for _ in range(6):
        log.append(batch(1, ts=100), leader_epoch=0)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.max_timestamp_and_offset() == (100, 0)
    log.close()


def test_max_timestamp_with_log_append_time(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    log.append(batch(2), leader_epoch=0, now_ms=500)
    log.append(batch(2), leader_epoch=0, now_ms=700)
    assert log.max_timestamp_and_offset() == (700, 2)
    assert log.offset_for_timestamp(600) == (2, 700)
    log.close()


def test_empty_log_lookups(log):
    assert log.offset_for_timestamp(0) is None and log.max_timestamp_and_offset() is None


def test_retention_by_time_and_delayed_file_removal(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_ms=1000, file_delete_delay_ms=500))
    for i in range(30):
        log.append(batch(2, value_size=100, ts=10_000 + i * 100), leader_epoch=0)
    nsegs = len(log.segments)
    assert nsegs > 2
    assert log.delete_old_segments(now_ms=10_000) == 0
    deleted = log.delete_old_segments(now_ms=100_000)
    assert deleted == nsegs - 1  # never the active segment
    assert log.log_start_offset == log.active_segment.base_offset
    leftovers = [n for n in os.listdir(log.dir) if n.endswith(".deleted")]
    assert len(leftovers) == 3 * deleted
    assert log.remove_deleted_files(now_ms=100_499) == 0
    assert log.remove_deleted_files(now_ms=100_500) == deleted
    assert not [n for n in os.listdir(log.dir) if n.endswith(".deleted")]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.close()


def test_deleted_segments_are_renamed_before_the_log_start_offset_moves(tmp_path):
    # Kafka's deleteSegments renames the files before it raises the log start offset. A reader that
    # sees the new log start (ListOffsets reads it without the log's lock) must not find the deleted
    # segments under their live names; the epoch checkpoint written right after the move does IO
    # and can take a while. The probe records the live .log files when the epoch cache is told.
    log = open_log(tmp_path / "t-0", small_config(retention_ms=1000))
    for i in range(30):
        log.append(batch(2, value_size=100, ts=10_000 + i * 100), leader_epoch=0)
    truncate = log.epoch_cache.truncate_from_start
    seen: list[tuple[int, list[str]]] = []

    def probe(offset: int) -> None:
        seen.append((log.log_start_offset, sorted(n for n in os.listdir(log.dir) if n.endswith(".log"))))
        truncate(offset)

    log.epoch_cache.truncate_from_start = probe
    assert log.delete_old_segments(now_ms=100_000) > 0
    active = f"{log.active_segment.base_offset:020d}.log"
    assert seen == [(log.active_segment.base_offset, [active])]
    log.close()


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_bytes=5000, retention_ms=-1))
    for _i in range(60):
        log.append(batch(2, value_size=100), leader_epoch=0)
    log.delete_old_segments(now_ms=0)
    assert log.size_in_bytes - log.active_segment.size <= 5000
    assert log.size_in_bytes > 5000 - 4096
    assert read_all(log)[0][0] == log.log_start_offset
    log.close()


def test_compact_only_policy_ignores_time_retention(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_ms=1, cleanup_policy="compact"))
    for _i in range(30):
        log.append(batch(2, value_size=100), leader_epoch=0)
    assert log.delete_old_segments(now_ms=10**12) == 0
    log.close()

# Kafka deletes a retention-breached active segment too, once the high watermark reached the log
# end (UnifiedLog.deletableSegments), rolling a new empty one first (deleteSegments).


def _expired_log(dir, config=None):
    """A log of several segments whose records (timestamps 10_000..12_900) all expired by 100_000
    under retention.ms=1000."""
    log = open_log(dir, config or small_config(retention_ms=1000))
    for i in range(30):
        log.append(batch(2, value_size=100, ts=10_000 + i * 100), leader_epoch=3)
    assert len(log.segments) > 2 and log.log_end_offset == 60
    return log


def test_retention_by_time_deletes_the_active_segment_once_the_high_watermark_reaches_the_log_end(tmp_path):
    log = _expired_log(tmp_path / "t-0")
    old_active = log.active_segment
    older = len(log.segments) - 1
    # The high watermark below the log end: the active segment holds unreplicated records and stays.
    assert log.delete_old_segments(now_ms=100_000, high_watermark=59) == older
    assert log.segments == [old_active] and log.log_start_offset == old_active.base_offset
    # Once the high watermark reaches the log end it goes too, and a new empty segment takes its place
    # at the log end offset, which does not move.
    assert log.delete_old_segments(now_ms=100_000, high_watermark=60) == 1
    assert [(s.base_offset, s.size) for s in log.segments] == [(60, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (60, 60)
    assert old_active.deleted and (tmp_path / "t-0" / "00000000000000000060.log").exists()
    assert sorted(n for n in os.listdir(log.dir) if n.endswith(".log")) == ["00000000000000000060.log"]
    assert log.epoch_cache.entries == [(3, 60)]  # the epoch covering the new log start starts there
    with pytest.raises(OffsetOutOfRangeError):
        log.read(59, 100)  # a consumer below the new log start: OFFSET_OUT_OF_RANGE, as in Kafka
    assert log.read(60, 100).size == 0
    # Producers go on at the same offsets.
    info = log.append(batch(2, ts=100_000), leader_epoch=3)
    assert (info.first_offset, info.log_start_offset) == (60, 60)
    assert [b for b, _, _ in read_all(log)] == [60]
    # A fresh record has not expired: nothing goes.
    assert log.delete_old_segments(now_ms=100_500, high_watermark=62) == 0
    log.close()


def test_retention_by_size_deletes_the_active_segment_once_the_high_watermark_reaches_the_log_end(tmp_path):
    # retention.bytes=1: the log may keep the active segment (what is left above the limit is less
    # than it), as Kafka's rule (size - retention.bytes - segment size >= 0) says.
    log = _expired_log(tmp_path / "t-0", small_config(retention_bytes=1, retention_ms=-1))
    older = len(log.segments) - 1
    assert log.delete_old_segments(now_ms=0, high_watermark=60) == older
    assert len(log.segments) == 1 and log.active_segment.size > 0
    # retention.bytes=0: nothing may be kept, the active segment goes once the high watermark allows.
    log.update_config(small_config(retention_bytes=0, retention_ms=-1))
    active = log.active_segment
    assert log.delete_old_segments(now_ms=0, high_watermark=59) == 0
    assert log.delete_old_segments(now_ms=0, high_watermark=60) == 1
    assert log.segments != [active] and (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (60, 60, 0)
    assert log.append(batch(1), leader_epoch=3).first_offset == 60
    log.close()


def test_retention_stops_at_the_high_watermark_in_older_segments_too(tmp_path):
    log = _expired_log(tmp_path / "t-0")
    bases = [s.base_offset for s in log.segments]
    # The high watermark inside the third segment: the first two go, not the one holding it, so
    # the log start offset never passes the high watermark.
    hw = bases[2] + 1
    assert log.delete_old_segments(now_ms=100_000, high_watermark=hw) == 2
    assert log.log_start_offset == bases[2] <= hw
    log.close()


def test_an_empty_active_segment_is_never_deleted(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_ms=0, retention_bytes=0))
    empty = log.active_segment
    assert log.delete_old_segments(now_ms=10**12, high_watermark=0) == 0
    assert log.segments == [empty]
    log.close()
    # Nor the empty one a deletion rolled.
    log = _expired_log(tmp_path / "t-1", small_config(retention_ms=0, retention_bytes=0))
    assert log.delete_old_segments(now_ms=100_000, high_watermark=60) > 0
    rolled = log.active_segment
    assert log.delete_old_segments(now_ms=10**12, high_watermark=60) == 0
    assert log.segments == [rolled] and not rolled.deleted
    log.close()


def test_without_a_high_watermark_the_active_segment_stays(tmp_path):
    log = _expired_log(tmp_path / "t-0")
    older = len(log.segments) - 1
    assert log.delete_old_segments(now_ms=100_000) == older
    assert log.delete_old_segments(now_ms=100_000, high_watermark=None) == 0
    assert len(log.segments) == 1 and log.active_segment.size > 0
    assert (log.log_start_offset, log.log_end_offset) == (log.active_segment.base_offset, 60)
    log.close()


def test_the_high_watermark_callable_is_read_under_the_lock_and_capped_at_the_log_end(tmp_path):
    log = _expired_log(tmp_path / "t-0")
    seen = []

    def high_watermark():
        seen.append(log._lock._is_owned())  # RLock: owned by this thread while retention runs
        return 10**9  # beyond the log end (stale after a truncation): only the log end counts

    assert log.delete_old_segments(now_ms=100_000, high_watermark=high_watermark) > 0
    assert seen == [True]
    assert (log.log_start_offset, log.log_end_offset) == (60, 60)
    assert log.delete_old_segments(now_ms=100_000, high_watermark=lambda: None) == 0
    log.close()


def test_deleting_every_segment_keeps_producer_state_and_survives_a_restart(tmp_path):
    from odradek.storage.producer_state import ProducerStateManager

    dir = tmp_path / "t-0"
    log = open_log(dir, small_config(retention_ms=1000), producer_state=ProducerStateManager(dir))
    seq = 0
    for i in range(30):
        log.append(batch(2, value_size=100, ts=10_000 + i * 100, producer_id=7, producer_epoch=0,
                         base_sequence=seq), leader_epoch=3)
        seq += 2
    assert log.delete_old_segments(now_ms=100_000, high_watermark=60) > 0
    log.wait_for_background_flushes()
    # The roll's snapshot at the new base is there; those of the deleted segments are gone.
    assert log.producer_state.snapshot_offsets() == [60]
    assert log.recovery_point == 60
    # The producer is still known: a retry of its last batch is a duplicate, the next one follows.
    retry = log.append(batch(2, value_size=100, ts=12_900, producer_id=7, producer_epoch=0, base_sequence=seq - 2),
                       leader_epoch=3)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (58, 59)
    nxt = log.append(batch(2, ts=100_000, producer_id=7, producer_epoch=0, base_sequence=seq), leader_epoch=3)
    assert (nxt.first_offset, nxt.duplicate) == (60, False)
    log.close()
    # Reopened (log start offset from its checkpoint, as the log manager gives it): same offsets.
    log = open_log(dir, small_config(retention_ms=1000), producer_state=ProducerStateManager(dir),
                   log_start_offset=60, recovery_point=62, clean_shutdown=True)
    assert (log.log_start_offset, log.log_end_offset) == (60, 62)
    assert [b for b, _, _ in read_all(log)] == [60]
    assert log.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=seq + 2), leader_epoch=3).first_offset == 62
    log.close()
    # Crashed instead (no clean shutdown, the log start checkpoint older): the .deleted files are
    # gone and the log starts at its first segment.
    log = open_log(dir, small_config(retention_ms=1000), producer_state=ProducerStateManager(dir))
    assert (log.log_start_offset, log.log_end_offset) == (60, 63)
    log.close()



def test_delete_records_before(log):
    for _i in range(40):
        log.append(batch(2, value_size=100), leader_epoch=0)
    second = log.segments[2].base_offset
    assert log.delete_records_before(second + 1) == second + 1
    assert log.segments[0].base_offset == second  # wholly-below segments removed
    assert log.read(second + 1, 100).first_offset == second  # batch holding it
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(81)
    assert log.delete_records_before(3) == second + 1  # never goes backwards
    assert log.delete_records_before(80) == 80


def test_truncate_to(log):
    for i in range(40):
        log.append(batch(2, value_size=100, ts=i), leader_epoch=i // 10)
    assert log.truncate_to(31)  # mid-batch: the whole batch 30..31 goes
    assert log.log_end_offset == 30
    assert [b for b, _, _ in read_all(log)] == list(range(0, 30, 2))
    assert log.epoch_cache.entries == [(0, 0), (1, 20)]
    assert log.append(batch(1, ts=99), leader_epoch=7).first_offset == 30
    assert log.max_timestamp_and_offset() == (99, 30)
    assert log.offset_for_timestamp(15) == (30, 99)  # records with ts 15..19 were truncated
    assert not log.truncate_to(100)


def test_truncate_fully_and_start_at(log):
    log.append(batch(5), leader_epoch=1)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert [s.base_offset for s in log.segments] == [1000]
    assert log.epoch_cache.entries == []
    assert log.append(batch(1), leader_epoch=2).first_offset == 1000


def test_end_offset_for_epoch(log):
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=3)
    log.append(batch(2), leader_epoch=4)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(4) == (4, 6)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(5) == (-1, -1)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 2\n4 4\n"


def test_replication_append_keeps_offsets(log):
    from odradek.protocol.records import Record, encode_batch
    raw = encode_batch([Record(timestamp=1, value=b"x")] * 2, base_offset=0, partition_leader_epoch=9)
    info = log.append(raw, leader_epoch=-1, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (0, 1) and log.epoch_cache.entries == [(9, 0)]
    with pytest.raises(InvalidRecordError):
        log.append(raw, leader_epoch=-1, assign_offsets=False)  # below the LEO


class RecordingProducerState(NoProducerState):
    """The producer-state contract with only the append checks recorded (the rest does nothing)."""

    def __init__(self):
        self.checked, self.appended = [], []
        self.dup = None
        self.error = None

    def check_append(self, header):
        self.checked.append(header)
        if self.error:
            raise self.error
        return self.dup

    def on_append(self, header, now_ms):
        self.appended.append((header.base_offset, header.last_offset, now_ms))


def test_producer_state_hook(tmp_path):
    ps = RecordingProducerState()
    log = open_log(tmp_path / "t-0", producer_state=ps)
    log.append(batch(1), leader_epoch=0)  # producer_id -1: hook not called
    info = log.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=0), leader_epoch=0, now_ms=5)
    assert ps.appended == [(1, 2, 5)] and ps.checked[0].base_offset == 0
    ps.dup = DuplicateBatch(1, 2, -1)
    info = log.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=0), leader_epoch=0)
    assert info.duplicate and (info.first_offset, info.last_offset) == (1, 2) and log.log_end_offset == 3
    ps.dup, ps.error = None, InvalidRecordError("fenced")
    with pytest.raises(InvalidRecordError):
        log.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=2), leader_epoch=0)
    assert log.log_end_offset == 3
    log.close()


def test_flush_messages_policy_advances_recovery_point(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(flush_messages=3, segment_bytes=1 << 20))
    log.append(batch(2), leader_epoch=0)
    assert log.recovery_point == 0
    log.append(batch(1), leader_epoch=0)
    assert log.recovery_point == 3
    log.close()


def test_flush_ms_policy(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(flush_ms=1000, segment_bytes=1 << 20))
    log.last_flush_ms = 0
    log.append(batch(2), leader_epoch=0)
    assert not log.maybe_flush(500) and log.recovery_point == 0
    assert log.maybe_flush(1000) and log.recovery_point == 2
    log.close()


def test_closed_log_raises_storage_error(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.close()
    with pytest.raises(KafkaStorageError) as info:
        log.append(batch(1), leader_epoch=0)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_log_start_checkpoint_beyond_end_starts_over(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(batch(3), leader_epoch=0)
    log.close()
    log = Log.open(tmp_path / "t-0", small_config(), log_start_offset=10, clean_shutdown=True)
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    log.close()


def test_config_default_is_usable(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(batch(1), leader_epoch=0)
    assert log.read(0, 100).size == len(batch(1))
    log.close()


def test_reads_concurrent_with_appends_see_whole_batches(tmp_path):
    import threading
    log = open_log(tmp_path / "t-0")
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                leo = log.log_end_offset
                if leo:
                    data = log.read(max(leo - 5, log.log_start_offset), 10_000).read_bytes()
                    for raw in [data]:
                        pos = 0
                        while pos < len(raw):
                            pos += parse_header(raw, pos).size
                        assert pos == len(raw)
            except Exception as exc:  # noqa: BLE001 - surfaced below
                errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(300):
        log.append(batch(2, value_size=50, tag=i), leader_epoch=0)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert [b for b, _, _ in read_all(log)] == list(range(0, 600, 2))
    log.close()


def _big_config() -> LogConfig:
    return LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=4096, file_delete_delay_ms=0)


def test_large_record_sets_with_a_bad_crc_anywhere_write_nothing(tmp_path):
    # Several-hundred-KiB record sets, the bad batch first, last or alone: no byte stays behind,
    # and the next good append and a recovery scan see exactly the good batches.
    log = open_log(tmp_path / "t-0", _big_config())
    big = batch(40, value_size=8000, tag=1)
    assert log.append(big, leader_epoch=0).first_offset == 0
    before = log.active_segment.size
    for bad in (_corrupt_last_byte(big), big + _corrupt_last_byte(batch(2)), _corrupt_last_byte(big) + batch(2)):
        with pytest.raises(CorruptRecordError) as info:
            log.append(bad, leader_epoch=0)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE
        assert log.log_end_offset == 40 and log.active_segment.size == before
        assert os.path.getsize(log.active_segment.log_path) == before
    info = log.append(big + batch(2), leader_epoch=3)
    assert (info.first_offset, info.last_offset, info.num_batches) == (40, 81, 2)
    got = read_all(log)
    assert [(b, last) for b, last, _ in got] == [(0, 39), (40, 79), (80, 81)]
    assert got[1][2][16:] == big[16:]  # record bytes untouched past the rewritten prefix
    assert decode_batch(got[1][2]).partition_leader_epoch == 3
    log.close()
    # Reopened without the clean-shutdown marker: recovery CRC-checks and keeps exactly this.
    reopened = Log.open(tmp_path / "t-0", _big_config(), clean_shutdown=False)
    assert [(b, last) for b, last, _ in read_all(reopened)] == [(0, 39), (40, 79), (80, 81)]
    reopened.close()


def test_large_corrupt_retry_of_a_duplicate_is_corrupt_not_duplicate(tmp_path):
    # Kafka checks CRCs before the producer-state duplicate check (LogValidator runs first).
    ps = RecordingProducerState()
    log = open_log(tmp_path / "t-0", _big_config(), producer_state=ps)
    big = batch(40, value_size=8000, producer_id=7, producer_epoch=0, base_sequence=0)
    log.append(big, leader_epoch=0)
    ps.dup = DuplicateBatch(0, 39, -1)
    assert log.append(big, leader_epoch=0).duplicate
    with pytest.raises(CorruptRecordError):
        log.append(_corrupt_last_byte(big), leader_epoch=0)
    assert log.log_end_offset == 40
    log.close()


def test_readers_never_see_a_rejected_large_batch(tmp_path):
    import threading


    log = open_log(tmp_path / "t-0", _big_config())
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0]

    def reader():
        while not stop.is_set():
            try:
                for _base, _last, raw in read_all(log):
                    header = parse_header(raw, 0)
                    assert crc32c(raw[21:]) == header.crc, "a reader saw a batch whose CRC fails"
                    seen[0] += 1
            except Exception as exc:  # noqa: BLE001 - surfaced below
                errors.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    good = batch(40, value_size=8000, tag=2)
    bad = _corrupt_last_byte(good)
    for _ in range(30):
        log.append(good, leader_epoch=0)
        with pytest.raises(CorruptRecordError):
            log.append(bad, leader_epoch=0)
    stop.set()
    thread.join()
    assert not errors and seen[0] > 0
    assert log.log_end_offset == 30 * 40
    log.close()


# -- the single-batch fast path (Log._append_plain_batch) against the general path ---------------

def _count_validations(log: Log) -> list[int]:
    """Count the log's calls of the general path's validation (in a one-element list)."""
    calls = [0]
    validate = log._validate

    def counting(*args):
        calls[0] += 1
        return validate(*args)

    log._validate = counting
    return calls


def _outcome(log: Log, raw: bytes, epoch: int):
    try:
        return log.append(raw, leader_epoch=epoch, now_ms=5_000)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc), str(exc).replace(log.dir.name, "<topic partition>")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 400), st.integers(-1, 3), st.integers(0, 2),
                          st.sampled_from(["none", "byte", "magic", "count", "control", "length", "record"]),
                          st.integers(0, 10_000)), min_size=1, max_size=12))
def test_plain_batch_fast_path_matches_the_general_path(tmp_path_factory, steps):
    """Every single batch, good or bad, gives the same result, error and log bytes on both paths."""
    d = tmp_path_factory.mktemp("paths")
    config = small_config(max_message_bytes=1500, segment_bytes=3000)
    fast, general = open_log(d / "fast-0", config), open_log(d / "general-0", config)
    general._plain_appends = False
    fast_validations, general_validations = _count_validations(fast), _count_validations(general)
    good = 0
    for n, value_size, producer_id, epoch, mutation, where in steps:
        ids = dict(producer_id=producer_id, producer_epoch=0, base_sequence=0) if producer_id >= 0 else {}
        raw = bytearray(batch(n, value_size=value_size, ts=1000 + where, **ids))
        if mutation == "byte":
            raw[where % len(raw)] ^= 0x40
        elif mutation == "magic":
            raw[16] = 1
        elif mutation == "count":
            raw[57:61] = (n + 1).to_bytes(4, "big")
        elif mutation == "control":
            raw[22] |= 0x20
        elif mutation == "length":
            raw[8:12] = (len(raw) - 12 + 3).to_bytes(4, "big")
        elif mutation == "record":  # the first record's length varint: its records no longer add up
            raw[61] ^= 0x02
        if mutation in ("count", "control", "record"):  # a well-formed batch that breaks a rule: CRC kept valid
            raw[17:21] = crc32c(memoryview(raw)[21:]).to_bytes(4, "big")
        a, b = _outcome(fast, bytes(raw), epoch), _outcome(general, bytes(raw), epoch)
        assert a == b
        good += isinstance(a, AppendInfo)
        assert (fast.log_end_offset, fast.size_in_bytes) == (general.log_end_offset, general.size_in_bytes)
    assert read_all(fast) == read_all(general)
    assert fast.latest_epoch == general.latest_epoch
    assert general_validations == [len(steps)]
    assert fast_validations == [len(steps) - good]  # good batches never reach the general path
    fast.close()
    general.close()


def test_a_read_over_large_batches_reads_their_headers_not_their_bodies(tmp_path, monkeypatch):
    # The fetch path bounds a slice by walking batch headers; the bytes themselves go out by
    # sendfile. Reading 64 KiB chunks copied every byte of a slice of large batches into user
    # space first (Kafka's FileLogInputStream reads the headers only).
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 << 20, index_interval_bytes=4096))
    for i in range(24):
        log.append(batch(1, value_size=60_000, tag=i), leader_epoch=0)
    one = len(batch(1, value_size=60_000))
    read_bytes = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    s = log.read(3, 1 << 20)
    assert (s.first_offset, s.position, s.size, s.next_offset) == (3, 3 * one, 17 * one, 20)
    assert sum(read_bytes) <= 20 * 4096  # a page per batch at most, against 17 x 60 KB of bodies
    monkeypatch.undo()
    assert [values_of(raw)[0][:1] for _, _, raw in read_all(log)] == [bytes([i]) for i in range(24)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.sampled_from([1, 40, 900, 3_000, 5_000, 16_300, 16_400, 70_000]), min_size=1, max_size=40),
       start=st.integers(0, 39), cut=st.integers(0, 200_000))
def test_header_scans_find_every_batch_whatever_the_mix_of_sizes(tmp_path, sizes, start, cut):
    # iter_headers switches between page and 64 KiB reads with the batch sizes; whatever the
    # mix, it must yield exactly the batches a whole-file parse finds, from any batch start and
    # up to any end bound (stopping before a batch that does not end by it).
    d = tmp_path / f"t-{len(sizes)}-{start}-{cut}"
    log = open_log(d, small_config(segment_bytes=64 << 20))
    for i, size in enumerate(sizes):
        log.append(batch(1, value_size=size, tag=i), leader_epoch=0)
    seg = log.active_segment
    data = seg.read_batch(0, seg.size)
    expected, pos = [], 0
    while pos < len(data):
        h = parse_header(data, pos)
        expected.append((pos, h.base_offset, h.size))
        pos += h.size
    first = expected[min(start, len(expected) - 1)][0]
    end = min(seg.size, first + cut)
    got = [(p, h.base_offset, h.size) for p, h in seg.iter_headers(first, end)]
    assert got == [e for e in expected if e[0] >= first and e[0] + e[2] <= end]
    log.close()


def test_a_read_jumps_to_the_last_indexed_boundary_within_its_budget(tmp_path, monkeypatch):
    # Issue 31: every 64 KiB batch of a 1 MiB fetch cost a header pread (16 per partition per
    # Fetch); the offset index holds each batch's start, so the read jumps to the last one within
    # the budget and reads one or two headers from there.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 << 20, index_interval_bytes=4096,
                                                  segment_index_bytes=1 << 20))
    for i in range(40):
        log.append(batch(16, value_size=4_000, tag=i), leader_epoch=0)
    one = len(batch(16, value_size=4_000))  # ~64 KiB
    reads = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        reads.append(offset)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    s = log.read(3 * 16 + 5, 1 << 20)
    whole = (1 << 20) // one
    assert (s.first_offset, s.position, s.size, s.next_offset) == (48, 3 * one, whole * one, (3 + whole) * 16)
    assert len(reads) <= 3, reads  # the start batch's header, then one read from the jump point
    reads.clear()
    s = log.read(0, 1 << 20, max_offset=10 * 16 + 3)  # the high watermark inside batch 10
    assert (s.position, s.size, s.next_offset) == (0, 10 * one, 160)
    assert len(reads) <= 3, reads
    monkeypatch.undo()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 300, 2_000, 9_000, 30_000])),
                      min_size=1, max_size=30),
       interval=st.sampled_from([1, 100, 4096, 50_000]), start=st.integers(0, 200), budget=st.integers(0, 200_000),
       limit=st.integers(0, 200), min_one=st.booleans())
def test_reads_end_where_a_walk_over_every_header_ends(tmp_path, sizes, interval, start, budget, limit, min_one):
    # Whatever the index's density, the slice is Log.read's rule applied batch by batch: from the
    # batch holding ``start``, whole batches while they fit ``budget`` (the first one regardless
    # with min_one_batch) and end below ``limit``.
    d = tmp_path / f"t-{len(sizes)}-{interval}-{start}-{budget}-{limit}-{min_one}"
    log = open_log(d, small_config(segment_bytes=64 << 20, index_interval_bytes=interval,
                                   segment_index_bytes=1 << 20))
    for i, (n, size) in enumerate(sizes):
        log.append(batch(n, value_size=size, tag=i), leader_epoch=0)
    leo = log.log_end_offset
    start, limit = min(start, leo), min(limit, leo)
    data = log.active_segment.read_batch(0, log.active_segment.size)
    batches, pos = [], 0
    while pos < len(data):
        h = parse_header(data, pos)
        batches.append((pos, h))
        pos += h.size
    s = log.read(start, budget, max_offset=limit, min_one_batch=min_one)
    taken = []
    if start < limit:
        first = next(i for i, (_, h) in enumerate(batches) if h.last_offset >= start)
        for p, h in batches[first:]:
            fits = sum(x.size for _, x in taken) + h.size <= budget or (min_one and not taken)
            if h.last_offset >= limit or not fits:
                break
            taken.append((p, h))
    if not taken:
        assert s.size == 0
    else:
        assert (s.position, s.size, s.first_offset, s.next_offset) == (
            taken[0][0], sum(h.size for _, h in taken), taken[0][1].base_offset, taken[-1][1].next_offset)
    log.close()


def test_a_read_of_the_latest_batches_reads_nothing_from_the_file(tmp_path, monkeypatch):
    # Issue 31 item 3: a follower fetches what the leader appended since its last fetch, just
    # behind the log end; finding that slice cost an index lookup and two preads (the batch
    # holding the offset, then the walk to the end) per partition per Fetch. The segment knows
    # where its latest batches lie.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 << 20, index_interval_bytes=4096))
    sizes = []
    for i in range(30):
        raw = batch(2, value_size=1000, tag=i)
        sizes.append(len(raw))
        log.append(raw, leader_epoch=0)
    reads = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        reads.append(offset)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    s = log.read(56, 1 << 20)  # the last two batches: what a follower at offset 56 fetches
    assert (s.first_offset, s.position, s.size, s.next_offset) == (56, sum(sizes[:28]), sum(sizes[28:]), 60)
    s = log.read(58, 1 << 20, max_offset=59)  # a consumer below an HW inside the last batch
    assert s.size == 0
    s = log.read(0, 5 * sizes[0] + 1)  # from the segment's first batch, within a budget
    assert (s.position, s.size, s.next_offset) == (0, 5 * sizes[0], 10)
    assert reads == []
    monkeypatch.undo()
    assert [values_of(raw)[0][:1] for _, _, raw in read_all(log, 56)] == [bytes([28]), bytes([29])]
    log.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 300, 2_000, 9_000])), min_size=1,
                      max_size=30),
       reopen_after=st.integers(0, 30), tail_batches=st.sampled_from([2, 4, 32]), start=st.integers(0, 200),
       budget=st.integers(0, 100_000), limit=st.integers(0, 200), min_one=st.booleans())
def test_reads_among_the_latest_batches_end_where_a_header_walk_ends(tmp_path, monkeypatch, sizes, reopen_after,
                                                                     tail_batches, start, budget, limit, min_one):
    # The slice taken from the segment's memory of its latest batches is the one the header walk
    # finds: from a reopened log (the batches before it are not remembered), after the memory
    # dropped its older half, from inside a batch, up to a limit inside one, within any budget.
    monkeypatch.setattr(segment_module, "TAIL_BATCHES", tail_batches)
    d = tmp_path / f"t-{len(sizes)}-{reopen_after}-{tail_batches}-{start}-{budget}-{limit}-{min_one}"
    log = open_log(d, small_config(segment_bytes=64 << 20, index_interval_bytes=4096, segment_index_bytes=1 << 20))
    for i, (n, size) in enumerate(sizes):
        if i == reopen_after:
            log.close()
            log = open_log(d, small_config(segment_bytes=64 << 20, index_interval_bytes=4096,
                                           segment_index_bytes=1 << 20))
        log.append(batch(n, value_size=size, tag=i), leader_epoch=0)
    leo = log.log_end_offset
    start, limit = min(start, leo), min(limit, leo)
    seg = log.active_segment
    s = log.read(start, budget, max_offset=limit, min_one_batch=min_one)
    expected = []
    if start < limit:
        walk = seg.iter_headers(seg.translate_offset(start)[0])
        for p, h in walk:
            fits = sum(x.size for _, x in expected) + h.size <= budget or (min_one and not expected)
            if h.last_offset >= limit or not fits:
                break
            expected.append((p, h))
    if not expected:
        assert s.size == 0
    else:
        assert (s.position, s.size, s.first_offset, s.next_offset) == (
            expected[0][0], sum(h.size for _, h in expected), expected[0][1].base_offset,
            expected[-1][1].next_offset)
    log.close()
