"""Log compaction: model check, lags, tombstones/delete horizon, swap crash recovery, readers, checkpoint."""

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_helpers import read_all

from odradek.protocol.batch_header import DELETE_HORIZON_BIT, parse_header
from odradek.protocol.records import Record, decode_batch, encode_batch
from odradek.storage.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner, group_segments_by_size
from odradek.storage.errors import InvalidRecordError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager

DAY = 86_400_000


def compact_config(**overrides) -> LogConfig:
    base = dict(segment_bytes=700, segment_index_bytes=1024, index_interval_bytes=100, file_delete_delay_ms=0,
                cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)
    base.update(overrides)
    return LogConfig(**base)


def start(tmp_path, config=None):
    mgr = LogManager([tmp_path], config or compact_config())
    mgr.startup()
    return mgr, mgr.get_or_create_log("t", 0)


def rec(key, value, ts=1000):
    return Record(timestamp=ts, key=key, value=value)


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, _, raw in read_all(log) for r in decode_batch(raw).records]


def produce(log, entries, per_batch=1, compression=0, ts=1000):
    """entries: list of (key, value); returns the offsets assigned, in order."""
    offsets = []
    for i in range(0, len(entries), per_batch):
        chunk = entries[i:i + per_batch]
        info = log.append(encode_batch([rec(k, v, ts) for k, v in chunk], compression=compression),
                          leader_epoch=0)
        offsets.extend(range(info.first_offset, info.last_offset + 1))
    return offsets


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=60),
       per_batch=st.integers(1, 4), segment_bytes=st.sampled_from([300, 700, 2000]),
       compression=st.sampled_from([0, 1, 3, 4]))
def test_compaction_matches_latest_value_model(tmp_path_factory, ops, per_batch, segment_bytes, compression):
    tmp = tmp_path_factory.mktemp("cleaner")
    mgr, log = start(tmp, compact_config(segment_bytes=segment_bytes))
    entries = [(b"k%d" % k, None if tomb else b"v%d-%d" % (k, i)) for i, (k, tomb) in enumerate(ops)]
    offsets = produce(log, entries, per_batch, compression)
    log.roll()
    latest = {}
    for off, (k, v) in zip(offsets, entries, strict=True):
        latest[k] = (off, v)
    now = 10_000
    LogCleaner(mgr).clean_once(now_ms=now)
    got = records_of(log)
    got_offsets = [o for o, _, _ in got]
    assert got_offsets == sorted(set(got_offsets))  # increasing, no duplicates
    # First cleaning: exactly the latest record per key, tombstones included, at its original offset.
    assert sorted(got) == sorted((off, k, v) for k, (off, v) in latest.items())
    assert log.log_end_offset == offsets[-1] + 1
    for _, _, raw in read_all(log):
        h = parse_header(raw)
        assert h.compression == compression or h.records_count == 0
        if any(r.value is None for r in decode_batch(raw).records):
            assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == now + 1000

    # Past the delete horizon, the next cleaning (triggered by new dirty data) drops tombstones.
    produce(log, [(b"fresh", b"x")])
    log.roll()
    assert LogCleaner(mgr).clean_once(now_ms=now + 1001) is not None
    expected = sorted([(off, k, v) for k, (off, v) in latest.items() if v is not None]
                      + [(offsets[-1] + 1, b"fresh", b"x")])
    assert sorted(records_of(log)) == expected
    mgr.shutdown()
    reopened = Log.open(tmp / "t-0", compact_config(segment_bytes=segment_bytes), clean_shutdown=False)
    assert sorted(records_of(reopened)) == expected  # survives an unclean reopen (full rescan)
    reopened.close()


def test_active_segment_is_never_cleaned(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=1 << 20))
    produce(log, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
    before = log.active_segment.log_path.read_bytes()
    assert LogCleaner(mgr).clean_once(now_ms=10**12) is None  # everything is in the active segment
    assert log.active_segment.log_path.read_bytes() == before
    log.roll()
    produce(log, [(b"a", b"4"), (b"a", b"5")])
    active_before = log.active_segment.log_path.read_bytes()
    assert LogCleaner(mgr).clean_once(now_ms=10**12) is not None
    assert log.active_segment.log_path.read_bytes() == active_before
    assert [(o, v) for o, _, v in records_of(log)] == [(2, b"3"), (3, b"4"), (4, b"5")]
    mgr.shutdown()


def test_min_compaction_lag_is_respected(tmp_path):
    mgr, log = start(tmp_path, compact_config(min_compaction_lag_ms=5000, segment_bytes=1 << 20))
    produce(log, [(b"a", b"old1"), (b"a", b"old2")], ts=1000)
    log.roll()
    produce(log, [(b"a", b"new1"), (b"a", b"new2")], ts=9000)
    log.roll()
    cleaner = LogCleaner(mgr)
    # At 8000 the second segment (max ts 9000) is too young; the first (1000) may be cleaned.
    stats = cleaner.clean_once(now_ms=8000)
    assert stats is not None and stats.end_offset == 2
    assert [v for _, _, v in records_of(log)] == [b"old2", b"new1", b"new2"]
    # At 20000 both are old enough: only the latest value survives.
    assert cleaner.clean_once(now_ms=20000) is not None
    assert [v for _, _, v in records_of(log)] == [b"new2"]
    mgr.shutdown()


def test_max_compaction_lag_forces_cleaning_below_ratio(tmp_path):
    mgr, log = start(tmp_path, compact_config(min_cleanable_dirty_ratio=0.9, segment_bytes=1 << 20,
                                              max_compaction_lag_ms=60_000))
    produce(log, [(b"a", b"1"), (b"b", b"1")], ts=1000)
    log.roll()
    cleaner = LogCleaner(mgr)
    assert cleaner.clean_once(now_ms=2000) is not None  # all dirty: ratio 1.0 > 0.9
    produce(log, [(b"a", b"2")], ts=3000)
    log.roll()
    # Dirty ratio now about 1/3 < 0.9: nothing to do until the dirty batch is older than the max lag.
    assert cleaner.clean_once(now_ms=4000) is None
    assert cleaner.clean_once(now_ms=3000 + 60_001) is not None
    assert [(k, v) for _, k, v in records_of(log)] == [(b"b", b"1"), (b"a", b"2")]
    mgr.shutdown()


def test_filthiest_log_is_chosen_and_checkpoint_written(tmp_path):
    mgr = LogManager([tmp_path], compact_config(segment_bytes=1 << 20))
    mgr.startup()
    a, b = mgr.get_or_create_log("a", 0), mgr.get_or_create_log("b", 3)
    produce(a, [(b"k", b"1")] * 2)
    produce(b, [(b"k", b"1")] * 5)
    a.roll()
    b.roll()
    cleaner = LogCleaner(mgr)
    produce(b, [(b"k", b"2")])  # active segment: does not count
    b.roll()
    stats = cleaner.clean_once(now_ms=5000)
    assert (stats.topic, stats.partition) in {("a", 0), ("b", 3)}
    second = cleaner.clean_once(now_ms=5000)
    assert {(stats.topic, stats.partition), (second.topic, second.partition)} == {("a", 0), ("b", 3)}
    text = (tmp_path / CLEANER_CHECKPOINT).read_text()
    assert text == "0\n2\na 0 2\nb 3 6\n"
    assert cleaner.clean_once(now_ms=5000) is None  # nothing dirty any more
    mgr.shutdown()


def test_cleaner_config_from_broker_props():
    cfg = CleanerConfig.from_broker_props({"log.cleaner.dedupe.buffer.size": "1024", "log.cleaner.enable": "false",
                                           "log.cleaner.backoff.ms": "10"})
    assert (cfg.dedupe_buffer_size, cfg.enable, cfg.backoff_ms, cfg.threads) == (1024, False, 10, 1)


def test_disabled_cleaner_does_nothing(tmp_path):
    mgr, log = start(tmp_path)
    produce(log, [(b"a", b"1")] * 3)
    log.roll()
    assert LogCleaner(mgr, CleanerConfig(enable=False)).clean_once(now_ms=5000) is None
    assert len(records_of(log)) == 3
    mgr.shutdown()


def test_full_offset_map_cleans_in_several_rounds(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=1 << 20))
    entries = [(b"key-%03d" % (i % 40), b"v%d" % i) for i in range(120)]
    produce(log, entries, per_batch=10)
    log.roll()
    # Room for about 20 keys: the first round maps only part of the dirty section.
    cleaner = LogCleaner(mgr, CleanerConfig(dedupe_buffer_size=int(20 * 72 / 0.9)))
    rounds = 0
    while cleaner.clean_once(now_ms=5000) is not None:
        rounds += 1
        assert rounds < 20
    assert rounds > 1
    latest = {}
    for off, (k, v) in enumerate(entries):
        latest[k] = (off, v)
    assert sorted(records_of(log)) == sorted((o, k, v) for k, (o, v) in latest.items())
    mgr.shutdown()


def test_idempotent_producer_last_batch_kept_empty(tmp_path):
    from odradek.storage.producer_state import producer_state_factory

    mgr = LogManager([tmp_path], compact_config(segment_bytes=1 << 20), producer_state_factory=producer_state_factory())
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    log.append(encode_batch([rec(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0), leader_epoch=0)
    log.append(encode_batch([rec(b"b", b"1")]), leader_epoch=0)
    log.append(encode_batch([rec(b"a", b"2")]), leader_epoch=0)  # supersedes the producer's record
    log.append(encode_batch([rec(b"c", b"1")]), leader_epoch=0)
    log.roll()
    LogCleaner(mgr).clean_once(now_ms=5000)
    batches = [parse_header(raw) for _, _, raw in read_all(log)]
    kept = [(h.base_offset, h.producer_id, h.base_sequence, h.records_count) for h in batches]
    assert (0, 9, 0, 0) in kept  # the producer's last batch survives empty, sequence intact
    assert [(o, v) for o, _, v in records_of(log)] == [(1, b"1"), (2, b"2"), (3, b"1")]
    mgr.shutdown()
    reopened = Log.open(tmp_path / "t-0", compact_config(segment_bytes=1 << 20))
    assert reopened.log_end_offset == 4
    reopened.close()


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_an_empty_batch_the_cleaner_keeps_is_a_bare_uncompressed_header(tmp_path, compression):
    """Kafka's DefaultRecordBatch.writeEmptyHeader: 61 bytes, codec none, offsets and producer fields
    kept. (An empty compressed payload, as written before, makes librdkafka's consumer abort.)"""
    from odradek.storage.producer_state import producer_state_factory

    mgr = LogManager([tmp_path], compact_config(segment_bytes=1 << 20), producer_state_factory=producer_state_factory())
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    log.append(encode_batch([rec(b"a", b"1"), rec(b"b", b"1")], compression=compression, producer_id=9,
                            producer_epoch=0, base_sequence=0), leader_epoch=0)
    log.append(encode_batch([rec(b"c", b"1")], compression=compression), leader_epoch=0)
    log.append(encode_batch([rec(b"a", b"2"), rec(b"b", b"2"), rec(b"c", b"2")], compression=compression),
               leader_epoch=0)
    log.append(encode_batch([rec(b"d", b"1")], compression=compression), leader_epoch=0)
    log.roll()
    LogCleaner(mgr).clean_once(now_ms=5000)
    empty = [parse_header(raw) for _, _, raw in read_all(log) if parse_header(raw).records_count == 0]
    assert [(h.base_offset, h.last_offset_delta, h.producer_id, h.base_sequence) for h in empty] == [(0, 1, 9, 0)]
    assert [(h.size, h.compression) for h in empty] == [(61, 0)]
    assert [(o, k, v) for o, k, v in records_of(log)] == [(3, b"a", b"2"), (4, b"b", b"2"), (5, b"c", b"2"),
                                                          (6, b"d", b"1")]
    mgr.shutdown()


def test_reader_of_replaced_segment_keeps_valid_bytes(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=1 << 20, file_delete_delay_ms=60_000))
    produce(log, [(b"a", b"%d" % i) for i in range(10)])
    log.roll()
    before = log.read(0, 1 << 20)
    original = before.read_bytes()
    assert LogCleaner(mgr).clean_once(now_ms=5000) is not None
    assert before.read_bytes() == original  # the old segment's fd is still open
    assert [v for _, _, v in records_of(log)] == [b"9"]
    assert log.remove_deleted_files(now_ms=10**13) == 1
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
    mgr.shutdown()


def _clean_copy(tmp_path):
    """Build a log, copy its dir, clean the original: returns (original dir, copy dir, cleaned content)."""
    mgr, log = start(tmp_path / "a", compact_config(segment_bytes=1 << 20))
    produce(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)])
    log.roll()
    produce(log, [(b"tail", b"t")])
    mgr.shutdown()
    shutil.copytree(tmp_path / "a" / "t-0", tmp_path / "b")
    mgr = LogManager([tmp_path / "a"], compact_config(segment_bytes=1 << 20))
    mgr.startup()
    log = mgr.get_log("t", 0)
    LogCleaner(mgr).clean_once(now_ms=5000)
    cleaned = records_of(log)
    mgr.shutdown()
    return tmp_path / "a" / "t-0", tmp_path / "b", cleaned


@pytest.mark.parametrize("stage", ["cleaned", "swap", "swap-old-deleted"])
def test_crash_during_swap_is_recovered(tmp_path, stage):
    cleaned_dir, crashed, cleaned = _clean_copy(tmp_path)
    original = records_of(Log.open(crashed, compact_config(segment_bytes=1 << 20)))
    seg = "00000000000000000000"
    suffix = ".cleaned" if stage == "cleaned" else ".swap"
    for kind in (".log", ".index", ".timeindex"):
        shutil.copy(cleaned_dir / (seg + kind), crashed / (seg + kind + suffix))
        if stage == "swap-old-deleted":
            os.rename(crashed / (seg + kind), crashed / (seg + kind + ".deleted"))
    log = Log.open(crashed, compact_config(segment_bytes=1 << 20), clean_shutdown=False)
    assert records_of(log) == (original if stage == "cleaned" else cleaned)
    names = os.listdir(crashed)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert log.append(encode_batch([rec(b"x", b"y")]), leader_epoch=0).first_offset == 13
    log.close()


def test_swap_abandoned_when_log_truncated_meanwhile(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=1 << 20))
    produce(log, [(b"a", b"%d" % i) for i in range(5)])
    log.roll()
    produce(log, [(b"b", b"1")])
    cleaner = LogCleaner(mgr)

    calls = []

    def truncate_first():  # the cleaner's check between batches: the log changes while a group is rewritten
        calls.append(1)
        if len(calls) == 4 and log.log_end_offset > 2:
            log.truncate_to(2)

    from odradek.storage import cleaner as cleaner_module

    ltc = cleaner.grab_filthiest_log(5000)
    with pytest.raises(cleaner_module.CleaningAbortedError):
        cleaner_module.clean_log(ltc, 5000, cleaner.config, truncate_first)
    assert len(calls) >= 4 and [v for _, _, v in records_of(log)] == [b"0", b"1"]
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]
    mgr.shutdown()


def test_group_segments_by_size(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=400))
    produce(log, [(b"a", b"x" * 50) for _ in range(12)])
    log.roll()
    segs = log.segments[:-1]
    groups = group_segments_by_size(segs, 400, 1024)
    assert [s for g in groups for s in g] == segs
    assert all(sum(s.size for s in g) <= 400 for g in groups)
    assert len(group_segments_by_size(segs, 1 << 30, 1 << 20)) == 1
    mgr.shutdown()


# ---- null keys on compacted topics --------------------------------------------------------------

@pytest.mark.parametrize("compression", [0, 4])
def test_compacted_topic_rejects_null_key(tmp_path, compression):
    mgr, log = start(tmp_path)
    produce(log, [(b"a", b"1")])
    bad = encode_batch([rec(b"a", b"2"), rec(None, b"3"), rec(None, b"4")], compression=compression)
    with pytest.raises(InvalidRecordError) as err:
        log.append(bad, leader_epoch=0)
    assert err.value.code.name == "INVALID_RECORD"
    assert [i for i, _ in err.value.record_errors] == [1, 2]
    assert "Compacted topic cannot accept message without key" in err.value.record_errors[0][1]
    assert log.log_end_offset == 1 and records_of(log) == [(0, b"a", b"1")]  # nothing written
    mgr.shutdown()


def test_non_compacted_topic_accepts_null_key_and_corrupt_records_rejected(tmp_path):
    mgr, log = start(tmp_path, compact_config(cleanup_policy="delete"))
    assert log.append(encode_batch([rec(None, b"1")]), leader_epoch=0).first_offset == 0
    mgr.update_config("t", compact_config())
    good = bytearray(encode_batch([rec(b"a", b"1")]))
    good[61] = 0x7F  # record length varint beyond the batch; CRC fixed below so only records are bad
    from odradek.protocol.batch_header import compute_crc

    good[17:21] = compute_crc(good, 0, len(good)).to_bytes(4, "big")
    # Kafka's record iterator: InvalidRecordException, i.e. INVALID_RECORD (87), not CORRUPT_MESSAGE.
    with pytest.raises(InvalidRecordError, match="Invalid record size: expected -64 bytes"):
        log.append(bytes(good), leader_epoch=0)
    assert log.log_end_offset == 1
    mgr.shutdown()


def test_truncation_lowers_cleaner_checkpoint(tmp_path):
    mgr, log = start(tmp_path, compact_config(segment_bytes=1 << 20))
    produce(log, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")])
    log.roll()
    cleaner = LogCleaner(mgr)
    assert cleaner.clean_once(now_ms=5000).end_offset == 3
    log.truncate_to(2)
    cleaner.maybe_truncate_checkpoint("t", 0, 2)
    assert cleaner.read_checkpoint(tmp_path) == {("t", 0): 2}
    cleaner.maybe_truncate_checkpoint("t", 0, 7)  # never raised
    assert cleaner.read_checkpoint(tmp_path) == {("t", 0): 2}
    produce(log, [(b"c", b"1"), (b"c", b"2")])
    log.roll()
    assert cleaner.clean_once(now_ms=5000) is not None
    assert [(k, v) for _, k, v in records_of(log)] == [(b"a", b"2"), (b"c", b"2")]
    mgr.shutdown()
