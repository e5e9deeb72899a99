"""odradek.protocol.records: record batch v2 bytes built by hand from the spec, kafka-python's builder as an
oracle, round trips for every codec, control records, and hostile input that must raise
InvalidBatchError (CORRUPT_MESSAGE) rather than crash."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from odradek.protocol.batch_header import (
    InvalidBatchError,
    crc_is_valid,
    parse_header,
    set_base_offset,
    set_log_append_time,
)
from odradek.protocol.checksum import crc32c
from odradek.protocol.compression import CompressionError, CompressionType, UnknownCodecError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    ControlRecordType,
    EndTransactionMarker,
    InvalidRecordError,
    Record,
    decode_batch,
    decode_end_txn_marker,
    decode_records,
    encode_batch,
    encode_control_key,
    encode_end_txn_marker_batch,
    encode_end_txn_marker_value,
    iter_batches,
    parse_control_type,
    read_varint,
    read_varlong,
    write_varint,
)

TS = 1_700_000_000_000  # 0x18BCFE56800


def forge(
    body: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int = 0,
    base_timestamp: int = TS,
    max_timestamp: int = TS,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch around ``body`` with a correct CRC, laid out by hand from the spec."""
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + body
    crc = crc32c(after_crc)
    # base_offset, batch_length (bytes after this field), leader epoch, magic, crc
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), -1, 2, crc) + after_crc


# --- exact bytes ------------------------------------------------------------------------------


def test_exact_bytes_of_a_hand_built_batch() -> None:
    # Two records: (k="k", v="hello", header h="v") at TS, offset 0; then null key, null value,
    # no headers, at TS-1 (negative timestamp delta), offset 1.
    record0 = bytes.fromhex(
        "20"  # length 16, zigzag -> 0x20
        "00"  # attributes
        "00"  # timestamp delta 0
        "00"  # offset delta 0
        "02" "6b"  # key length 1, "k"
        "0a" "68656c6c6f"  # value length 5, "hello"
        "02"  # one header
        "02" "68"  # header key length 1, "h"
        "02" "76"  # header value length 1, "v"
    )
    record1 = bytes.fromhex(
        "0c"  # length 6
        "00"  # attributes
        "01"  # timestamp delta -1 (zigzag 1)
        "02"  # offset delta 1
        "01"  # key length -1 (null)
        "01"  # value length -1 (null)
        "00"  # no headers
    )
    after_crc = bytes.fromhex(
        "0000"  # attributes: no compression, CreateTime, not transactional, not control
        "00000001"  # last offset delta
        "0000018bcfe56800"  # base timestamp
        "0000018bcfe56800"  # max timestamp
        "ffffffffffffffff"  # producer id -1
        "ffff"  # producer epoch -1
        "ffffffff"  # base sequence -1
        "00000002"  # records count
    ) + record0 + record1
    expected = (
        bytes.fromhex("0000000000000000")  # base offset
        + struct.pack(">i", 9 + len(after_crc))  # batch length
        + bytes.fromhex("ffffffff" "02")  # partition leader epoch -1, magic 2
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )
    records = [
        Record(timestamp=TS, key=b"k", value=b"hello", headers=[("h", b"v")]),
        Record(timestamp=TS - 1),
    ]
    assert encode_batch(records) == expected

    batch = decode_batch(expected)
    assert batch.records == [
        Record(0, TS, b"k", b"hello", [("h", b"v")]),
        Record(1, TS - 1, None, None, []),
    ]
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (0, 1, 2)
    assert batch.max_timestamp == TS and batch.base_timestamp == TS
    assert batch.size == len(expected)
    assert batch.timestamp_type == CREATE_TIME
    assert not batch.is_control and not batch.is_transactional
    assert batch.compression == 0 and batch.producer_id == -1 and batch.base_sequence == -1


def test_multi_byte_varint_lengths() -> None:
    value = b"x" * 200  # length 200 -> zigzag 400 -> varint 0x90 0x03
    raw = encode_batch([Record(timestamp=TS, value=value)])
    assert bytes.fromhex("9003") + value in raw
    assert decode_batch(raw).records[0].value == value


@pytest.mark.parametrize(
    "value, encoded",
    [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (2**31 - 1, "feffffff0f"),
     (-(2**31), "ffffffff0f")],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    out = bytearray()
    write_varint(value, out)
    assert out.hex() == encoded
    assert read_varint(bytes(out), 0) == (value, len(out))


def test_varlong_extremes() -> None:
    for value in (2**63 - 1, -(2**63), TS, -TS):
        out = bytearray()
        write_varint(value, out)
        assert read_varlong(bytes(out), 0) == (value, len(out))
    assert len(out) <= 10


# --- kafka-python's builder as an oracle -----------------------------------------------------


def kafka_python_batch(codec: int, *, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=0, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 22,
    )
    for i in range(50):
        headers = [("trace", b"id-%d" % i), ("empty", None)] if i % 3 == 0 else []
        key = None if i % 5 == 0 else b"key-%d" % i
        builder.append(i, timestamp=TS + i * 7, key=key, value=b"value %d " % i * 20, headers=headers)
    return bytes(builder.build())


def expected_oracle_records() -> list[Record]:
    return [
        Record(
            i,
            TS + i * 7,
            None if i % 5 == 0 else b"key-%d" % i,
            b"value %d " % i * 20,
            [("trace", b"id-%d" % i), ("empty", None)] if i % 3 == 0 else [],
        )
        for i in range(50)
    ]


@pytest.mark.parametrize("codec", [0, 1, 3, 4])  # kafka-python has no snappy library here
def test_decodes_kafka_python_batches(codec: int) -> None:
    raw = kafka_python_batch(codec, producer_id=42, epoch=3, seq=100)
    batch = decode_batch(raw)
    assert batch.compression == codec
    assert batch.records == expected_oracle_records()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 100)
    assert batch.last_sequence == 149 and batch.max_timestamp == TS + 49 * 7


def test_uncompressed_encoding_equals_kafka_python_bytes() -> None:
    raw = kafka_python_batch(0, producer_id=42, epoch=3, seq=100)
    ours = encode_batch(
        expected_oracle_records(), producer_id=42, producer_epoch=3, base_sequence=100,
        partition_leader_epoch=0,  # kafka-python leaves it 0; the Java client writes -1
    )
    assert ours == raw


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_kafka_python_reads_our_compressed_batches(codec: int) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    raw = encode_batch(expected_oracle_records(), compression=codec)
    theirs = DefaultRecordBatch(bytearray(raw))
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in theirs]
    assert got == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected_oracle_records()]


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip_every_codec_many_records(codec: CompressionType) -> None:
    records = [
        Record(timestamp=TS + i, key=None if i % 2 else b"k%d" % i, value=None if i % 7 == 0 else b"v" * (i % 300),
               headers=[("h\u00e9", None), ("x", b"")] if i % 11 == 0 else [])
        for i in range(5000)
    ]
    raw = encode_batch(records, base_offset=1000, compression=codec, producer_id=9, producer_epoch=2,
                       base_sequence=2**31 - 10)
    batch = decode_batch(raw)
    assert batch.compression == codec
    assert batch.records_count == 5000 and batch.last_offset == 5999
    assert batch.last_sequence == 4989  # wrapped past 2**31 - 1
    for i, record in enumerate(batch.records):
        assert record.offset == 1000 + i
        assert (record.timestamp, record.key, record.value, record.headers) == (
            records[i].timestamp, records[i].key, records[i].value, records[i].headers)


def test_null_and_empty_are_distinct() -> None:
    raw = encode_batch([Record(key=b"", value=None, headers=[("k", b"")]), Record(key=None, value=b"")])
    first, second = decode_batch(raw).records
    assert first.key == b"" and first.value is None and first.headers == [("k", b"")]
    assert second.key is None and second.value == b""


def test_no_timestamp_records() -> None:
    batch = decode_batch(encode_batch([Record(), Record()]))
    assert batch.base_timestamp == -1 and batch.max_timestamp == -1
    assert [r.timestamp for r in batch.records] == [-1, -1]


record_strategy = st.builds(
    Record,
    offset=st.none(),
    timestamp=st.integers(min_value=-1, max_value=2**50),
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_strategy, max_size=30),
    codec=st.sampled_from(list(CompressionType)),
    base_offset=st.integers(min_value=0, max_value=2**62),
    producer_id=st.integers(min_value=-1, max_value=2**63 - 1),
    base_sequence=st.integers(min_value=-1, max_value=2**31 - 1),
    is_transactional=st.booleans(),
)
def test_round_trip_property(records, codec, base_offset, producer_id, base_sequence, is_transactional) -> None:
    raw = encode_batch(records, base_offset=base_offset, compression=codec, producer_id=producer_id,
                       producer_epoch=5, base_sequence=base_sequence, is_transactional=is_transactional)
    assert crc_is_valid(raw)
    batch = decode_batch(raw)
    assert batch.is_transactional == is_transactional
    assert batch.producer_id == producer_id and batch.base_sequence == base_sequence
    assert len(batch.records) == len(records)
    for i, (got, sent) in enumerate(zip(batch.records, records, strict=True)):
        assert got.offset == base_offset + i
        assert (got.timestamp, got.key, got.value, got.headers) == (
            sent.timestamp, sent.key, sent.value, sent.headers)
    if records:
        assert batch.max_timestamp == max(r.timestamp for r in records)


def test_explicit_offsets_with_gaps() -> None:
    records = [Record(offset=100, value=b"a"), Record(offset=103, value=b"b"), Record(offset=110, value=b"c")]
    batch = decode_batch(encode_batch(records, base_offset=100))
    assert [r.offset for r in batch.records] == [100, 103, 110]
    assert batch.last_offset_delta == 10


def test_rejects_offsets_that_do_not_increase() -> None:
    with pytest.raises(ValueError):
        encode_batch([Record(offset=5), Record(offset=5)], base_offset=5)
    with pytest.raises(ValueError):
        encode_batch([Record(offset=4)], base_offset=5)


def test_empty_batch_keeps_last_offset_delta() -> None:
    # The cleaner keeps empty batches so a producer's last sequence survives compaction.
    raw = encode_batch([], base_offset=50, last_offset_delta=4, producer_id=7, producer_epoch=0, base_sequence=10)
    batch = decode_batch(raw)
    assert batch.records == [] and batch.last_offset == 54 and batch.last_sequence == 14


def test_delete_horizon_replaces_base_timestamp() -> None:
    raw = encode_batch([Record(timestamp=TS, value=b"x")], delete_horizon_ms=TS + 500)
    batch = decode_batch(raw)
    assert batch.delete_horizon_ms == TS + 500 and batch.base_timestamp == TS + 500
    assert batch.records[0].timestamp == TS
    assert decode_batch(encode_batch([Record(timestamp=TS)])).delete_horizon_ms is None


def test_log_append_time_overrides_record_timestamps() -> None:
    raw = encode_batch([Record(timestamp=TS), Record(timestamp=TS + 5)], timestamp_type=LOG_APPEND_TIME,
                       log_append_time=TS + 1000)
    batch = decode_batch(raw)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records] == [TS + 1000, TS + 1000]
    with pytest.raises(ValueError):
        encode_batch([Record()], timestamp_type=LOG_APPEND_TIME)


def test_leader_stamping_log_append_time_is_seen_by_decode() -> None:
    buf = bytearray(encode_batch([Record(timestamp=TS), Record(timestamp=TS + 5)], compression=3))
    set_log_append_time(buf, TS + 9999)
    batch = decode_batch(buf)
    assert [r.timestamp for r in batch.records] == [TS + 9999, TS + 9999]


def test_rewriting_base_offset_keeps_crc_and_shifts_records() -> None:
    buf = bytearray(encode_batch([Record(value=b"a"), Record(value=b"b")], compression=4))
    set_base_offset(buf, 7777)
    assert [r.offset for r in decode_batch(buf).records] == [7777, 7778]


# --- record sets ------------------------------------------------------------------------------


def test_record_set_of_several_batches() -> None:
    first = encode_batch([Record(value=b"a"), Record(value=b"b")], base_offset=0)
    second = encode_batch([Record(value=b"c")], base_offset=2, compression=1)
    batches = decode_records(first + second)
    assert [[r.value for r in b.records] for b in batches] == [[b"a", b"b"], [b"c"]]
    assert decode_records(b"") == []


def test_partial_trailing_batch() -> None:
    first = encode_batch([Record(value=b"a")])
    second = encode_batch([Record(value=b"b")], base_offset=1)
    data = first + second[:-3]
    assert [b.base_offset for b in iter_batches(data)] == [0]  # fetch responses may be cut
    with pytest.raises(InvalidBatchError, match="trailing"):
        decode_records(data)
    with pytest.raises(InvalidBatchError, match="trailing"):
        decode_records(first + b"\x00" * 10)


def test_corrupt_batch_after_good_one() -> None:
    first = encode_batch([Record(value=b"a")])
    second = bytearray(encode_batch([Record(value=b"b")], base_offset=1))
    second[-1] ^= 0xFF
    batches = iter_batches(first + bytes(second))
    assert next(batches).records[0].value == b"a"  # the good batch is not lost
    with pytest.raises(InvalidBatchError, match="crc"):
        next(batches)


def test_decode_at_position() -> None:
    first = encode_batch([Record(value=b"a")])
    second = encode_batch([Record(value=b"b")], base_offset=1)
    assert decode_batch(first + second, len(first)).records[0].value == b"b"


# --- control records --------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_transaction_marker_batch(commit: bool) -> None:
    raw = encode_end_txn_marker_batch(producer_id=77, producer_epoch=4, commit=commit, coordinator_epoch=12,
                                      timestamp=TS, base_offset=300)
    batch = decode_batch(raw)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 4, -1)
    (record,) = batch.records
    assert record.offset == 300 and record.timestamp == TS
    expected_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert record.key == struct.pack(">hh", 0, expected_type)
    assert record.value == struct.pack(">hi", 0, 12)
    assert decode_end_txn_marker(record) == EndTransactionMarker(expected_type, 12)


def test_control_key_and_marker_value_bytes() -> None:
    assert encode_control_key(ControlRecordType.COMMIT) == b"\x00\x00\x00\x01"
    assert encode_end_txn_marker_value(258) == b"\x00\x00\x00\x00\x01\x02"
    assert parse_control_type(b"\x00\x00\x00\x00") is ControlRecordType.ABORT
    assert parse_control_type(b"\x00\x05\x00\x01") is ControlRecordType.COMMIT  # newer key version
    assert parse_control_type(b"\x00\x00\x00\x63") is ControlRecordType.UNKNOWN


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", b"\xff\xff\x00\x01"])
def test_bad_control_keys(key: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        parse_control_type(key)


@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # LEADER_CHANGE is not a txn marker
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00"),  # value one byte short
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01"),  # negative version
    ],
)
def test_bad_end_txn_markers(key: bytes, value: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        decode_end_txn_marker(Record(offset=0, key=key, value=value))


# --- hostile input ----------------------------------------------------------------------------


GOOD = encode_batch(
    [Record(timestamp=TS, key=b"k", value=b"hello", headers=[("h", b"v")]), Record(timestamp=TS, value=b"x")]
)


def test_every_truncation_raises_invalid_batch() -> None:
    for cut in range(len(GOOD)):
        with pytest.raises(InvalidBatchError):
            decode_batch(GOOD[:cut])


def test_bad_crc() -> None:
    bad = bytearray(GOOD)
    bad[-2] ^= 0x01
    with pytest.raises(InvalidBatchError, match="crc") as info:
        decode_batch(bad)
    assert not isinstance(info.value, InvalidRecordError)
    assert bytes(bad[:-2]) == GOOD[:-2]  # the caller's buffer is untouched


def test_crc_check_can_be_skipped() -> None:
    bad = bytearray(GOOD)
    bad[-2] = ord("y")  # value "x" -> "y" (the last byte is the header count)
    assert decode_batch(bad, verify_crc=False).records[1].value == b"y"


def test_bad_magic_and_short_length() -> None:
    bad = bytearray(GOOD)
    bad[16] = 1
    with pytest.raises(InvalidBatchError, match="magic"):
        decode_batch(bad)
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(InvalidBatchError, match="below the header"):
        decode_batch(bad)


def test_batch_length_beyond_buffer() -> None:
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, 8, 2**31 - 1)
    with pytest.raises(InvalidBatchError, match="beyond"):
        decode_batch(bad)


ONE_RECORD = bytes.fromhex("0c" "00" "00" "00" "01" "01" "00")  # null key/value, no headers


@pytest.mark.parametrize(
    "body, count, match",
    [
        (b"", -1, "record count"),
        (ONE_RECORD, 2, "record count|varint"),
        (ONE_RECORD, 0, "remaining"),
        (ONE_RECORD + b"\x00", 1, "remaining"),
        (b"\xff\xff\xff\xff\xff\xff\x01" + b"\x00" * 10, 1, "longer than 5"),  # record length varint
        (b"\xff\xff", 1, "inside a varint"),
        (b"\xfe\xff\xff\xff\x7f" + b"\x00" * 10, 1, "outside int32"),  # fifth byte overflows 32 bits
        (bytes.fromhex("40" "00" "00" "00" "01" "01" "00"), 1, "beyond"),  # length 32 > 6 left
        (bytes.fromhex("03") + b"\x00" * 8, 1, "record size -2"),  # negative length
        (bytes.fromhex("00") + b"\x00" * 3, 1, "empty record|remaining"),
        (bytes.fromhex("0c" "00" "00" "00" "14" "01" "00"), 1, "key of 10 bytes"),  # key longer than record
        (bytes.fromhex("0c" "00" "00" "00" "03" "01" "00"), 1, "invalid key length -2"),
        (bytes.fromhex("0c" "00" "00" "00" "01" "05" "00"), 1, "invalid value length -3"),
        (bytes.fromhex("0c" "00" "00" "00" "01" "01" "01"), 1, "headers -1"),
        (bytes.fromhex("0c" "00" "00" "00" "01" "01" "14"), 1, "headers 10"),
        (bytes.fromhex("10" "00" "00" "00" "01" "01" "02" "01" "01"), 1, "negative header key"),
        (bytes.fromhex("0e" "00" "00" "00" "01" "01" "00" "00"), 1, "fields take 6"),  # 1 spare byte
        (bytes.fromhex("0c" "00" "ff" "ff" "ff" "ff" "ff"), 1, "inside a varint"),  # timestamp runs on
        (bytes.fromhex("0c" "00" "00" "00" "01" "01"), 1, "beyond"),  # record cut short
    ],
)
def test_malformed_records(body: bytes, count: int, match: str) -> None:
    with pytest.raises(InvalidRecordError, match=match) as info:
        decode_batch(forge(body, count))
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


def test_forged_good_record_decodes() -> None:
    # The helper itself must produce a valid batch, or the hostile cases above prove nothing.
    batch = decode_batch(forge(ONE_RECORD, 1))
    assert batch.records == [Record(0, TS, None, None, [])]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_batch(codec: int) -> None:
    with pytest.raises(UnknownCodecError):
        decode_batch(forge(ONE_RECORD, 1, attributes=codec))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_compressed_body(codec: int) -> None:
    with pytest.raises(CompressionError):
        decode_batch(forge(b"\x00\x01\x02 not compressed at all", 1, attributes=codec))


def test_header_key_with_bad_utf8_is_replaced_like_java() -> None:
    body = bytes.fromhex("12" "00" "00" "00" "01" "01" "02" "02" "ff" "01")
    (record,) = decode_batch(forge(body, 1)).records
    assert record.headers == [("\ufffd", None)]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_corruption_never_crashes(data) -> None:
    raw = bytearray(encode_batch(
        [Record(timestamp=TS + i, key=b"key", value=b"value" * i, headers=[("a", b"b")]) for i in range(4)]
    ))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(raw) - 1))
        raw[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        decode_batch(bytes(raw[:cut]), verify_crc=False)
    except InvalidBatchError:
        pass


def test_parse_header_is_consistent_with_encode() -> None:
    header = parse_header(GOOD)
    assert header.records_count == 2 and header.size == len(GOOD) and crc_is_valid(GOOD)
