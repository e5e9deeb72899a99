"""Records inside produced batches are validated before anything is appended (Kafka's LogValidator):
each malformation gets Kafka's error code and message, the log end and the segment do not move,
and the log keeps serving; batches that slipped in earlier (replication path) break neither
timestamp lookups nor the cleaner's memory."""

from __future__ import annotations

import os
import tracemalloc

import pytest
from log_test_helpers import batch, open_log, read_all, small_config

from odradek.protocol.records import Record, decode_batch, encode_batch
from odradek.storage.cleaner import LogCleaner
from odradek.storage.errors import RecordTooLargeError, StorageError
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.support.bad_batches import MESSAGE_TOO_LARGE, catalogue, gzip_bomb, record, wrap

CODECS = [0, 1, 2, 3, 4]


def _config(mode: str) -> LogConfig:
    return small_config(segment_bytes=1 << 20, max_message_bytes=1 << 20,
                        cleanup_policy="compact" if mode == "compact" else "delete")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("mode", ["fast", "general", "compact"])
def test_every_malformation_is_refused_with_kafkas_answer_and_nothing_appended(tmp_path, codec, mode):
    log = open_log(tmp_path / "t-0", _config(mode))
    if mode == "general":
        log._plain_appends = False  # the multi-batch path, which a single batch takes on other topics
    log.append(batch(2), leader_epoch=0)
    size = log.size_in_bytes
    for bad in catalogue(codec):
        with pytest.raises(StorageError) as info:
            log.append(bad.batch, leader_epoch=0)
        assert (bad.name, int(info.value.code)) == (bad.name, bad.code)
        assert bad.message in str(info.value), bad.name
        assert [i for i, _ in getattr(info.value, "record_errors", [])] == list(bad.record_errors), bad.name
        assert (log.log_end_offset, log.size_in_bytes) == (2, size), bad.name
        assert os.path.getsize(log.active_segment.log_path) == size
        # A bad batch after a good one in the same request: the whole set is refused.
        with pytest.raises(StorageError):
            log.append(batch(1) + bad.batch, leader_epoch=0)
        assert log.log_end_offset == 2
    info = log.append(encode_batch([Record(timestamp=5, key=b"a", value=b"b")], compression=codec), leader_epoch=0)
    assert (info.first_offset, log.log_end_offset) == (2, 3)
    assert [r.offset for _, _, raw in read_all(log) for r in decode_batch(raw).records] == [0, 1, 2]
    log.close()


@pytest.mark.parametrize("codec", CODECS)
def test_well_formed_batches_of_every_shape_are_accepted(tmp_path, codec):
    log = open_log(tmp_path / "t-0", _config("fast"))
    shapes = [
        [Record(timestamp=1, key=None, value=None)],
        [Record(timestamp=1, key=b"", value=b"", headers=[("", None), ("h", b"")])],
        [Record(timestamp=-1, key=b"k" * 300, value=b"v" * 70000, headers=[("x" * 200, b"y" * 200)] * 3)],
        [Record(timestamp=2**40 + i, key=b"%d" % i, value=None) for i in range(500)],
    ]
    for records in shapes:
        log.append(encode_batch(records, compression=codec), leader_epoch=0)
    assert log.log_end_offset == 503
    log.close()


def test_compacted_topic_reports_null_keys_and_bad_deltas_per_record(tmp_path):
    log = open_log(tmp_path / "t-0", _config("compact"))
    raw = wrap([record(0, key=None), record(1), record(3, key=None), record(3, key=None)], 4)
    with pytest.raises(StorageError) as info:
        log.append(raw, leader_epoch=0)
    assert info.value.code == 87
    assert [i for i, _ in info.value.record_errors] == [0, 2, 3]
    assert "Compacted topic cannot accept message without key in topic partition t-0." in info.value.record_errors[0][1]
    assert "has offset delta 3" in info.value.record_errors[1][1]
    assert str(info.value).startswith("One or more records have been rejected due to 3 record errors in total")
    assert log.log_end_offset == 0
    log.close()


def _peak_traced(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("mode", ["fast", "compact"])
def test_gzip_bomb_is_refused_with_bounded_memory(tmp_path, mode):
    log = open_log(tmp_path / "t-0", _config(mode))
    bomb = gzip_bomb()  # ~400 KiB: one record claiming 400 MiB of zeros

    def append():
        with pytest.raises(RecordTooLargeError) as info:
            log.append(bomb, leader_epoch=0)
        assert info.value.code == MESSAGE_TOO_LARGE
        assert "decompress to more than 67108864 bytes" in str(info.value)

    assert _peak_traced(append) < 100 * 1024 * 1024  # the cap is 64 MiB; unbounded it was 400+ MiB
    assert log.log_end_offset == 0
    log.append(batch(1), leader_epoch=0)
    log.close()


def test_timestamp_lookups_answer_from_the_header_for_unreadable_stored_batches(tmp_path):
    # The replication path stores batches without reading their records, as before this check
    # existed: a lookup must not fail on them.
    log = open_log(tmp_path / "t-0", _config("fast"))
    log.append(batch(2, ts=1000), leader_epoch=0)
    bad = bytearray(catalogue()[0].batch)  # count 4, three records
    bad[0:8] = (2).to_bytes(8, "big")
    log.append(bytes(bad), leader_epoch=0, assign_offsets=False)
    log.append(batch(1, ts=10**13), leader_epoch=0)
    assert log.log_end_offset == 7
    header_max = int.from_bytes(bad[35:43], "big")
    assert log.offset_for_timestamp(1001) == (2, header_max)
    assert log.offset_for_timestamp(10**13) == (6, 10**13)
    assert log.max_timestamp_and_offset() == (10**13, 6)
    log.close()


def test_cleaner_meets_a_stored_bomb_with_bounded_memory(tmp_path):
    config = LogConfig(segment_bytes=1 << 20, segment_index_bytes=1024, index_interval_bytes=100,
                       file_delete_delay_ms=0, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    mgr = LogManager([tmp_path], config)
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    log.append(encode_batch([Record(timestamp=1, key=b"a", value=b"1")]), leader_epoch=0)
    bomb = bytearray(gzip_bomb())
    bomb[0:8] = (1).to_bytes(8, "big")
    log.append(bytes(bomb), leader_epoch=0, assign_offsets=False)  # slipped in before validation
    log.append(encode_batch([Record(timestamp=1, key=b"a", value=b"2")]), leader_epoch=0)
    log.roll()
    cleaner = LogCleaner(mgr)
    assert _peak_traced(lambda: cleaner.clean_once(now_ms=10_000)) < 100 * 1024 * 1024
    assert ("t", 0) in cleaner.uncleanable  # as Kafka: a log whose records cannot be read is skipped
    assert log.log_end_offset == 3
    mgr.shutdown()
