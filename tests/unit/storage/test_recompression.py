"""Broker-side recompression on append: a topic's compression.type applied by Log.append and Log.recompress.

The expected values are Kafka's rules (LogValidator, BrokerCompressionType, KIP-390), read back from
the segment files themselves:
- ``producer`` stores each batch as sent; ``uncompressed``/gzip/snappy/lz4/zstd store the records in
  that codec (codec ids 0-4, attributes bits 0-2);
- a batch already in the target codec is stored in place (only base offset and leader epoch change),
  whatever level it was written at; an uncompressed control batch (a transaction marker) is never
  compressed; a follower stores the leader's bytes;
- a rebuilt batch keeps producer id, epoch, base sequence, the transactional bit, timestamps, count,
  and the records' keys, values and headers; LogAppendTime is stamped on it as on any batch;
- bad records get the answer they get on any topic, and nothing is written; a batch that outgrows
  max.message.bytes by it is MESSAGE_TOO_LARGE (Kafka's RecordTooLargeException after conversion).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from odradek.protocol.batch_header import CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, parse_header
from odradek.protocol.compression import compress, decompress
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, RecordBatch, decode_batch, encode_batch, iter_batches
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.recompression import CODEC_IDS
from tests.support.bad_batches import catalogue, record, wrap

NOW = 1_700_000_000_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
TARGETS = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]
# Kafka's CompressionType ids (and BrokerCompressionType's names for them).
TARGET_CODEC = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def records() -> list[Record]:
    """Keys and values (null ones too), headers (a null value too), timestamps that are not in order."""
    out = []
    for i in range(40):
        key = None if i % 7 == 0 else b"key-%d" % (i % 5)
        value = None if i % 11 == 3 else (b"value %d " % i) * (1 + i % 9)
        headers = [("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
        out.append(Record(timestamp=NOW - 500 + (i * 37) % 101, key=key, value=value, headers=headers))
    return out


def producer_batch(codec: int, **kwargs) -> bytes:
    fields = dict(producer_id=7, producer_epoch=3, base_sequence=11)
    fields.update(kwargs)
    return encode_batch(records(), compression=codec, **fields)


def make_log(dir: Path, producer_state: bool = False, **config) -> Log:
    state = ProducerStateManager(dir) if producer_state else None
    return Log.open(dir, LogConfig(**config), producer_state=state, now_ms=NOW)


def stored(dir: Path) -> list[RecordBatch]:
    """Every batch in the partition's .log segment files, CRCs checked, nothing left over."""
    raw = b"".join(p.read_bytes() for p in sorted(dir.glob("*.log")))
    return list(iter_batches(raw, allow_partial=False))


def same_records(batch: RecordBatch, original: bytes, base_offset: int) -> None:
    expected = decode_batch(original).records
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(expected)]


def test_compression_type_names_kafkas_codec_ids() -> None:
    assert CODEC_IDS == TARGET_CODEC
    assert LogConfig().recompression is None  # producer, the default
    for name, codec in TARGET_CODEC.items():
        assert LogConfig(compression_type=name).recompression.codec == codec


@pytest.mark.parametrize("source", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("target", TARGETS)
def test_each_codec_is_stored_in_the_topics_codec(tmp_path: Path, target: str, source: int) -> None:
    log = make_log(tmp_path / "t-0", compression_type=target)
    original = producer_batch(source, is_transactional=True)
    log.append(producer_batch(NONE, base_sequence=0), leader_epoch=5, now_ms=NOW)  # something before it
    info = log.append(original, leader_epoch=5, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (40, 79)
    first, batch = stored(tmp_path / "t-0")
    expected = source if target == "producer" else TARGET_CODEC[target]
    assert batch.compression == expected
    sent = parse_header(original)
    assert (batch.base_offset, batch.partition_leader_epoch) == (40, 5)
    for name in ("last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "records_count"):
        assert getattr(batch.header, name) == getattr(sent, name), name
    assert batch.is_transactional and not batch.is_control
    assert batch.header.attributes & ~0x07 == sent.attributes & ~0x07
    same_records(batch, original, 40)
    if expected == source:  # Kafka's in-place assignment: the producer's bytes after the leader epoch
        raw = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()[first.size:]
        assert raw[16:] == original[16:]


def test_rebuilt_off_the_log_equals_rebuilt_inline(tmp_path: Path) -> None:
    inline = make_log(tmp_path / "a-0", compression_type="gzip")
    prepared = make_log(tmp_path / "b-0", compression_type="gzip")
    original = producer_batch(LZ4)
    inline.append(original, leader_epoch=0, now_ms=NOW)
    rebuilt, config = prepared.recompress(original, now_ms=NOW)
    assert config is prepared.config
    prepared.append(rebuilt, leader_epoch=0, now_ms=NOW, recompressed_for=config)
    assert (tmp_path / "a-0" / "00000000000000000000.log").read_bytes() == \
        (tmp_path / "b-0" / "00000000000000000000.log").read_bytes()
    assert stored(tmp_path / "a-0")[0].compression == GZIP


def test_a_config_change_between_rebuild_and_append_applies_the_new_codec(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="gzip")
    rebuilt, config = log.recompress(producer_batch(LZ4), now_ms=NOW)
    log.update_config(LogConfig(compression_type="snappy"))
    log.append(rebuilt, leader_epoch=0, now_ms=NOW, recompressed_for=config)
    (batch,) = stored(tmp_path / "t-0")
    assert batch.compression == SNAPPY
    same_records(batch, producer_batch(LZ4), 0)


def test_config_changes_apply_to_later_appends_only(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="zstd")
    log.append(producer_batch(LZ4, base_sequence=0), leader_epoch=0, now_ms=NOW)
    log.update_config(LogConfig(compression_type="producer"))
    log.append(producer_batch(LZ4, base_sequence=40), leader_epoch=0, now_ms=NOW)
    log.update_config(LogConfig(compression_type="uncompressed"))
    log.append(producer_batch(LZ4, base_sequence=80), leader_epoch=0, now_ms=NOW)
    assert [b.compression for b in stored(tmp_path / "t-0")] == [ZSTD, LZ4, NONE]


def test_every_batch_of_a_record_set_is_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="snappy")
    first = encode_batch(records()[:5], compression=LZ4)
    second = encode_batch(records()[5:9], compression=NONE)
    third = encode_batch(records()[9:12], compression=SNAPPY)
    info = log.append(first + second + third, leader_epoch=0, now_ms=NOW)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 11, 3)
    batches = stored(tmp_path / "t-0")
    assert [(b.base_offset, b.compression, len(b.records)) for b in batches] == [(0, SNAPPY, 5), (5, SNAPPY, 4),
                                                                                 (9, SNAPPY, 3)]
    assert [r.value for b in batches for r in b.records] == [r.value for r in records()[:12]]


def test_levels_are_kafkas(tmp_path: Path) -> None:
    """KIP-390: gzip -1 is zlib's default level 6; lz4's default 9 is LZ4's fast compressor and any other
    level LZ4 HC; zstd's level is zstd's. Compressible records, so a level shows in the size."""
    data = [Record(timestamp=NOW, value=b"the same words again and again, " * 60 + b"%d" % i) for i in range(300)]
    original = encode_batch(data, compression=NONE)

    logs = iter(range(100))

    def stored_payload(name: str, **levels: int) -> bytes:
        d = tmp_path / f"{name}-{next(logs)}-0"
        make_log(d, compression_type=name, **levels).append(original, leader_epoch=0, now_ms=NOW)
        (batch,) = stored(d)
        assert [r.value for r in batch.records] == [r.value for r in data]
        return d.joinpath("00000000000000000000.log").read_bytes()[61:]

    body = original[61:]
    gzip_default = stored_payload("gzip")
    assert gzip_default == stored_payload("gzip", compression_gzip_level=6)
    assert gzip.decompress(stored_payload("gzip", compression_gzip_level=1)) == body
    assert len(stored_payload("gzip", compression_gzip_level=1)) > len(gzip_default)
    lz4_fast = stored_payload("lz4")
    assert lz4_fast == compress(LZ4, body)  # the fast compressor, as Kafka's Lz4BlockOutputStream at level 9
    lz4_hc = stored_payload("lz4", compression_lz4_level=17)
    assert decompress(LZ4, lz4_hc) == body and len(lz4_hc) < len(lz4_fast)
    zstd_default = stored_payload("zstd")
    assert zstd_default == stored_payload("zstd", compression_zstd_level=3)
    assert len(stored_payload("zstd", compression_zstd_level=19)) < len(stored_payload("zstd", compression_zstd_level=-5))
    assert decompress(ZSTD, stored_payload("zstd", compression_zstd_level=-131072)) == body


def test_a_batch_in_the_target_codec_is_kept_whatever_its_level(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="gzip", compression_gzip_level=1)
    payload = gzip.compress(encode_batch(records(), compression=NONE)[61:], compresslevel=9, mtime=0)
    sent = wrap(b"", 40, codec=GZIP, compressed=payload)  # records compressed at gzip level 9
    log.append(sent, leader_epoch=0, now_ms=NOW)
    raw = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert raw[61:] == payload and raw[16:] == sent[16:]


def test_a_batch_the_topic_keeps_takes_the_plain_path_and_is_stored_as_sent(tmp_path: Path) -> None:
    """append_kept (the lane's path for a batch already in the topic's codec) stores what append stores."""
    kept = make_log(tmp_path / "a-0", producer_state=True, compression_type="zstd")
    plain = make_log(tmp_path / "b-0", producer_state=True, compression_type="zstd")
    for seq in (0, 40):
        batch = producer_batch(ZSTD, producer_id=3, producer_epoch=0, base_sequence=seq)
        assert kept.append_kept(batch, leader_epoch=1, now_ms=NOW) == plain.append(batch, leader_epoch=1, now_ms=NOW)
    again = kept.append_kept(producer_batch(ZSTD, producer_id=3, producer_epoch=0, base_sequence=40),
                             leader_epoch=1, now_ms=NOW)
    assert again.duplicate and (again.first_offset, again.last_offset) == (40, 79)
    assert (tmp_path / "a-0" / "00000000000000000000.log").read_bytes() == \
        (tmp_path / "b-0" / "00000000000000000000.log").read_bytes()


def test_transaction_markers_stay_uncompressed_and_the_transaction_ends(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", producer_state=True, compression_type="zstd")
    log.append(producer_batch(LZ4, producer_id=21, producer_epoch=0, base_sequence=0, is_transactional=True),
               leader_epoch=0, now_ms=NOW)
    assert log.producer_state.first_unstable_offset() == 0
    log.append_end_txn_marker(21, 0, coordinator_epoch=4, commit=False, leader_epoch=0, now_ms=NOW)
    data, marker = stored(tmp_path / "t-0")
    assert (data.compression, data.is_transactional, data.producer_id) == (ZSTD, True, 21)
    assert marker.compression == NONE and marker.header.attributes & (CONTROL_BIT | TRANSACTIONAL_BIT) == \
        CONTROL_BIT | TRANSACTIONAL_BIT
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 100)] == [(21, 0, 40)]


def test_log_append_time_is_stamped_on_the_rebuilt_batch(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="zstd", message_timestamp_type="LogAppendTime")
    info = log.append(producer_batch(GZIP), leader_epoch=0, now_ms=NOW + 999)
    assert info.log_append_time == NOW + 999
    (batch,) = stored(tmp_path / "t-0")
    assert batch.compression == ZSTD and batch.header.attributes & TIMESTAMP_TYPE_BIT
    assert batch.max_timestamp == NOW + 999 and {r.timestamp for r in batch.records} == {NOW + 999}


def test_duplicates_and_sequence_gaps_are_still_detected(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", producer_state=True, compression_type="zstd")
    first = producer_batch(LZ4, producer_id=9, producer_epoch=0, base_sequence=0)
    info = log.append(first, leader_epoch=0, now_ms=NOW)
    again = log.append(first, leader_epoch=0, now_ms=NOW)  # the producer's retry of a batch it never heard about
    assert again.duplicate and (again.first_offset, again.last_offset) == (info.first_offset, info.last_offset)
    assert log.log_end_offset == 40
    with pytest.raises(KafkaApiError) as exc:
        log.append(producer_batch(LZ4, producer_id=9, producer_epoch=0, base_sequence=41), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    rebuilt, config = log.recompress(producer_batch(SNAPPY, producer_id=9, producer_epoch=0, base_sequence=40))
    log.append(rebuilt, leader_epoch=0, now_ms=NOW, recompressed_for=config)
    assert [(b.compression, b.producer_id, b.base_sequence, b.last_sequence) for b in stored(tmp_path / "t-0")] == [
        (ZSTD, 9, 0, 39), (ZSTD, 9, 40, 79)]


def test_a_follower_stores_the_leaders_bytes(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="zstd")
    leaders = bytearray(producer_batch(LZ4))
    log.append(bytes(leaders), leader_epoch=2, assign_offsets=False, now_ms=NOW)
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == bytes(leaders)


@pytest.mark.parametrize(("target", "codec"), [("zstd", NONE), ("zstd", LZ4), ("zstd", ZSTD), ("uncompressed", GZIP)])
def test_bad_records_get_kafkas_answer_and_nothing_is_written(tmp_path: Path, target: str, codec: int) -> None:
    log = make_log(tmp_path / "t-0", compression_type=target)
    log.append(producer_batch(codec), leader_epoch=0, now_ms=NOW)
    attempts = ["inline", "off the log"] + (["kept"] if TARGET_CODEC[target] == codec else [])
    for bad in catalogue(codec):
        for attempt in attempts:
            with pytest.raises(KafkaApiError) as exc:
                if attempt == "inline":
                    log.append(bad.batch, leader_epoch=0, now_ms=NOW)
                elif attempt == "kept":
                    log.append_kept(bad.batch, leader_epoch=0, now_ms=NOW)
                else:
                    log.recompress(bad.batch, now_ms=NOW)
            assert exc.value.code == bad.code, (bad.name, attempt)
            assert bad.message in str(exc.value), (bad.name, attempt, str(exc.value))
            assert [i for i, _ in getattr(exc.value, "record_errors", None) or ()] == list(bad.record_errors)
        assert log.log_end_offset == 40, bad.name
    assert len(stored(tmp_path / "t-0")) == 1


def test_null_keys_on_a_compacted_recompressing_topic(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="gzip", cleanup_policy="compact")
    with pytest.raises(KafkaApiError) as exc:
        log.append(wrap([record(0), record(1, key=None), record(2)], 3, codec=LZ4), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in exc.value.record_errors] == [1]
    assert log.log_end_offset == 0


def test_a_batch_that_outgrows_max_message_bytes_is_message_too_large(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", compression_type="uncompressed", max_message_bytes=2000)
    small = encode_batch([Record(timestamp=NOW, value=bytes(300)) for _ in range(20)], compression=ZSTD)
    assert len(small) < 2000
    with pytest.raises(KafkaApiError) as exc:
        log.append(small, leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and stored(tmp_path / "t-0") == []
    # Under the producer's codec it fits.
    log.update_config(LogConfig(compression_type="zstd", max_message_bytes=2000))
    log.append(small, leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 20
