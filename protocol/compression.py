"""Compression codecs of record batch v2: the bytes after the 61-byte header, by codec id.

The codec id is ``attributes & 0x07`` of the batch header (Kafka's CompressionType):

    id  codec   wire format (what the Java client writes, and what we write)
     0  none    the records as they are
     1  gzip    one gzip member (RFC 1952); several concatenated members are accepted on read
     2  snappy  xerial snappy-java framing: magic b"\\x82SNAPPY\\x00", int32 version 1,
                int32 min-compatible version 1, then blocks of (int32 compressed length,
                raw snappy block of at most 32 KiB uncompressed). Some non-Java clients send a
                bare raw snappy block instead; :func:`decompress` accepts both.
     3  lz4     standard LZ4 frame (v2 batches use the correct header checksum): independent
                64 KiB blocks, no block or content checksum, no content size — like Kafka's
                Lz4BlockOutputStream, whose reader rejects linked blocks
     4  zstd    zstd frame(s); Java's zstd-jni does not record the content size, so we decode
                as a stream rather than trusting a size field

Ids 5-7 are unused; they raise :class:`UnknownCodecError`. Malformed compressed data raises
:class:`CompressionError`. Both are :class:`~protocol.batch_header.InvalidBatchError` and map to
CORRUPT_MESSAGE, which is what a Kafka broker answers for a batch it cannot read. (Refusing zstd
to Produce requests below v7 — UNSUPPORTED_COMPRESSION_TYPE — is the Produce handler's job.)

Pure functions over bytes, no state: any thread may call them. The broker's hot path never
calls them (batches are stored as sent); they serve decode_batch, the log cleaner, tests, and
any down-conversion.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from protocol.batch_header import InvalidBatchError
from protocol.errors import ErrorCode


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class UnknownCodecError(InvalidBatchError):
    """A batch names a compression codec id Kafka does not define (5-7)."""

    code = ErrorCode.CORRUPT_MESSAGE


class CompressionError(InvalidBatchError):
    """The compressed bytes of a batch cannot be decompressed (truncated or garbage)."""

    code = ErrorCode.CORRUPT_MESSAGE


XERIAL_MAGIC = b"\x82SNAPPY\x00"
# version and min-compatible version, both 1, as snappy-java's SnappyCodec writes them.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's SnappyOutputStream default block size; Kafka uses the default constructor.
XERIAL_BLOCK_SIZE = 32 * 1024

_INT32 = struct.Struct(">i")


def codec_of(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnknownCodecError(f"unknown compression codec id {codec}") from None


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` the way the Java client does for ``codec``."""
    kind = codec_of(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        # mtime=0 keeps output deterministic; readers ignore the gzip header fields.
        return gzip.compress(bytes(data), compresslevel=6, mtime=0)
    if kind is CompressionType.SNAPPY:
        return _xerial_compress(memoryview(data).cast("B"))
    if kind is CompressionType.LZ4:
        return lz4.frame.compress(
            bytes(data),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor(level=3).compress(bytes(data))


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress ``data`` written with ``codec``; raises CompressionError on malformed input."""
    kind = codec_of(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if len(data) == 0:
        # Every codec's stream has a header; gzip.decompress would quietly return b"".
        raise CompressionError(f"empty {kind.name.lower()} data")
    try:
        if kind is CompressionType.GZIP:
            return gzip.decompress(bytes(data))
        if kind is CompressionType.SNAPPY:
            return _snappy_decompress(memoryview(data).cast("B"))
        if kind is CompressionType.LZ4:
            return _lz4_decompress(bytes(data))
        return _zstd_decompress(bytes(data))
    except CompressionError:
        raise
    except (
        OSError,  # gzip.BadGzipFile
        EOFError,  # truncated gzip
        zlib.error,
        RuntimeError,  # lz4.frame
        zstandard.ZstdError,
        cramjam.DecompressionError,
        ValueError,
    ) as exc:
        raise CompressionError(f"cannot decompress {kind.name.lower()} data: {exc}") from exc


def _xerial_compress(data: memoryview) -> bytes:
    out = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + XERIAL_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: memoryview) -> bytes:
    if len(data) < len(XERIAL_HEADER) or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if len(data) - pos < 4:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or size > len(data) - pos:
            raise CompressionError(f"xerial snappy block length {size} beyond the data")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)


def _lz4_decompress(data: bytes) -> bytes:
    out = []
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out.append(decompressor.decompress(data))
        if not decompressor.eof:
            raise CompressionError("truncated lz4 frame")
        data = decompressor.unused_data
        if not data:
            return b"".join(out)


def _zstd_decompress(data: bytes) -> bytes:
    out = []
    while True:
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        out.append(decompressor.decompress(data))
        if not decompressor.eof:
            raise CompressionError("truncated zstd frame")
        data = decompressor.unused_data
        if not data:
            return b"".join(out)
