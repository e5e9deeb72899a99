"""odradek.protocol.compression: every codec round-trips, writes the Java client's framing, and turns
malformed input into CompressionError / UnknownCodecError (CORRUPT_MESSAGE)."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.batch_header import InvalidBatchError
from odradek.protocol.compression import (
    XERIAL_BLOCK_SIZE,
    CompressionError,
    CompressionType,
    UnknownCodecError,
    compress,
    decompress,
)
from odradek.protocol.errors import ErrorCode

ALL_CODECS = list(CompressionType)
SAMPLE = b"".join(b"record %d with some repetitive payload; " % i for i in range(3000))


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one-byte", "large"])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(ALL_CODECS), data=st.binary(max_size=5000))
def test_round_trip_any_bytes(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_none_is_identity() -> None:
    assert compress(0, b"abc") == b"abc"
    assert decompress(0, memoryview(b"abc")) == b"abc"


def test_large_data_actually_shrinks() -> None:
    for codec in ALL_CODECS[1:]:
        assert len(compress(codec, SAMPLE)) < len(SAMPLE) // 4, codec


# --- snappy: xerial framing like snappy-java's SnappyOutputStream ----------------------------


def test_snappy_writes_xerial_framing_in_32k_blocks() -> None:
    out = compress(CompressionType.SNAPPY, SAMPLE)
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    # Walk the blocks by hand: each is an int32 length and a raw snappy block of <= 32 KiB.
    pos, pieces = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        piece = bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size]))
        assert len(piece) <= XERIAL_BLOCK_SIZE
        pieces.append(piece)
        pos += 4 + size
    assert pos == len(out)
    assert len(pieces) == -(-len(SAMPLE) // XERIAL_BLOCK_SIZE)
    assert b"".join(pieces) == SAMPLE


def test_snappy_reads_raw_block_without_framing() -> None:
    raw = bytes(cramjam.snappy.compress_raw(SAMPLE))
    assert decompress(CompressionType.SNAPPY, raw) == SAMPLE


def test_snappy_reads_xerial_with_uneven_blocks() -> None:
    # Other writers choose other block sizes; the reader must not assume 32 KiB.
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for chunk in (SAMPLE[:10], SAMPLE[10:70000], SAMPLE[70000:]):
        block = bytes(cramjam.snappy.compress_raw(chunk))
        framed += struct.pack(">i", len(block)) + block
    assert decompress(CompressionType.SNAPPY, framed) == SAMPLE


# --- lz4: standard frame, independent 64 KiB blocks ---------------------------------------------


def test_lz4_frame_descriptor_matches_kafka() -> None:
    out = compress(CompressionType.LZ4, SAMPLE)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert out[4] == 0x60  # FLG: version 01, independent blocks, no checksums, no content size
    assert out[5] == 0x40  # BD: 64 KiB max block
    assert lz4.frame.decompress(out) == SAMPLE


def test_lz4_reads_frames_with_content_size_and_checksum() -> None:
    other = lz4.frame.compress(SAMPLE, store_size=True, content_checksum=True)
    assert decompress(CompressionType.LZ4, other) == SAMPLE


# --- gzip / zstd ------------------------------------------------------------------------------


def test_gzip_reads_concatenated_members() -> None:
    data = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(CompressionType.GZIP, data) == b"abcdef"


def test_zstd_reads_frame_without_content_size() -> None:
    # zstd-jni's ZstdOutputStream (the Java client) does not write the content size.
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(SAMPLE)
    assert decompress(CompressionType.ZSTD, frame) == SAMPLE


def test_zstd_reads_concatenated_frames() -> None:
    one = zstandard.ZstdCompressor(write_content_size=False).compress(b"abc")
    assert decompress(CompressionType.ZSTD, one + one) == b"abcabc"


# --- levels (KIP-390: the topic's compression.<codec>.level, used when the broker recompresses) ----

WORDS = b"".join(b"record %d of a batch that compresses, " % (i % 97) for i in range(20_000))


def test_gzip_levels_are_zlibs_and_minus_one_is_its_default() -> None:
    default = compress(CompressionType.GZIP, WORDS)
    assert compress(CompressionType.GZIP, WORDS, -1) == default == compress(CompressionType.GZIP, WORDS, 6)
    fastest, best = compress(CompressionType.GZIP, WORDS, 1), compress(CompressionType.GZIP, WORDS, 9)
    assert gzip.decompress(fastest) == gzip.decompress(best) == WORDS
    assert len(best) < len(fastest)


@pytest.mark.parametrize("level", [1, 2, 3, 8, 9, 10, 12, 16, 17])
def test_lz4_levels_keep_kafkas_frame(level: int) -> None:
    """Any level writes the frame Kafka's reader takes (independent 64 KiB blocks, no checksums)."""
    out = compress(CompressionType.LZ4, WORDS, level)
    assert out[4:6] == b"\x60\x40"
    assert decompress(CompressionType.LZ4, out) == WORDS


def test_lz4_default_level_is_the_fast_compressor_and_others_are_hc() -> None:
    """Kafka's Lz4BlockOutputStream: level 9 (the default) uses LZ4's fast compressor, any other level
    LZ4 HC at that level, which compresses these records further."""
    fast = compress(CompressionType.LZ4, WORDS)
    assert compress(CompressionType.LZ4, WORDS, 9) == fast
    for level in (1, 8, 10, 17):
        assert len(compress(CompressionType.LZ4, WORDS, level)) < len(fast), level


def test_zstd_levels_from_negative_to_22() -> None:
    default = compress(CompressionType.ZSTD, WORDS)
    assert compress(CompressionType.ZSTD, WORDS, 3) == default
    sizes = {level: len(compress(CompressionType.ZSTD, WORDS, level)) for level in (-131072, -5, 1, 19, 22)}
    assert sizes[-131072] > sizes[1] > sizes[19]
    for level in sizes:
        assert decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, WORDS, level)) == WORDS


def test_levels_do_not_apply_to_none_and_snappy() -> None:
    assert compress(CompressionType.NONE, WORDS, 5) == WORDS
    assert compress(CompressionType.SNAPPY, WORDS, 5) == compress(CompressionType.SNAPPY, WORDS)


# --- hostile input ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec_is_rejected_both_ways(codec: int) -> None:
    with pytest.raises(UnknownCodecError, match=f"codec id {codec}") as info:
        decompress(codec, b"whatever")
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert isinstance(info.value, InvalidBatchError)
    with pytest.raises(UnknownCodecError):
        compress(codec, b"whatever")


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_garbage_raises_compression_error(codec: CompressionType) -> None:
    with pytest.raises(CompressionError) as info:
        decompress(codec, b"\xff\xfe this is not compressed data at all \x00\x01" * 3)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_truncated_raises_compression_error(codec: CompressionType) -> None:
    whole = compress(codec, SAMPLE)
    for cut in (len(whole) // 2, len(whole) - 1):
        with pytest.raises(CompressionError):
            decompress(codec, whole[:cut])


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_empty_input_raises_compression_error(codec: CompressionType) -> None:
    with pytest.raises(CompressionError, match="empty"):
        decompress(codec, b"")


def test_xerial_block_length_beyond_data() -> None:
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(CompressionError, match="beyond"):
        decompress(CompressionType.SNAPPY, framed)


def test_xerial_negative_block_length() -> None:
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", -5) + b"abc"
    with pytest.raises(CompressionError, match="beyond"):
        decompress(CompressionType.SNAPPY, framed)


def test_xerial_truncated_block_length() -> None:
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00"
    with pytest.raises(CompressionError, match="truncated"):
        decompress(CompressionType.SNAPPY, framed)


def test_xerial_corrupt_block() -> None:
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 6) + b"\xff\xff\xff\xff\x0fa"
    with pytest.raises(CompressionError):
        decompress(CompressionType.SNAPPY, framed)
