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
:class:`CompressionError`. ``decompress(..., max_size=n)`` decompresses as a stream and stops with
:class:`DecompressedTooLargeError` (MESSAGE_TOO_LARGE) as soon as the output passes ``n`` bytes, so
a few hundred KiB of hostile gzip cannot make the broker allocate hundreds of MiB. Both are :class:`~odradek.protocol.batch_header.InvalidBatchError` and map to
CORRUPT_MESSAGE, which is what a Kafka broker answers for a batch it cannot read. (Refusing zstd
to Produce requests below v7 — UNSUPPORTED_COMPRESSION_TYPE — is the Produce handler's job.)

``compress(codec, data, level)`` takes Kafka's levels (KIP-390; the topic keys
``compression.gzip.level``, ``compression.lz4.level``, ``compression.zstd.level``):

    codec  levels               None / Kafka's default     what the level selects
    gzip   -1, 1..9             -1 (zlib's default, 6)     zlib's level
    lz4    1..17                9                          9: LZ4's fast compressor (Kafka's
                                                           Lz4BlockOutputStream uses it for the default
                                                           level); any other: LZ4 HC at that level
                                                           (python-lz4's frame API has HC from 3 on and
                                                           LZ4 caps HC at 12, so 1-2 give HC 3, 13-17 HC 12)
    zstd   -131072..22          3                          zstd's level (negative: faster, larger)
    snappy -                    -                          no levels

Pure functions over bytes; any thread may call them (zstd contexts are cached per thread). The
broker's hot path never calls them: batches are stored as sent unless the topic's
``compression.type`` names another codec (odradek.storage.recompression, off the handler loop); they also
serve decode_batch, the log cleaner and tests.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from odradek.protocol.batch_header import InvalidBatchError
from odradek.protocol.errors import ErrorCode


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


class DecompressedTooLargeError(InvalidBatchError):
    """A batch decompresses to more than the caller's ``max_size`` (a compression bomb, or records far
    beyond what the topic accepts). MESSAGE_TOO_LARGE: the Java producer then splits the batch."""

    code = ErrorCode.MESSAGE_TOO_LARGE


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


GZIP_DEFAULT_LEVEL = -1
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3
_ZLIB_DEFAULT = 6  # what zlib's Z_DEFAULT_COMPRESSION (-1) means


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` the way the Java client does for ``codec``, at Kafka's ``level`` for it (see
    the module docstring; None = Kafka's default level; ignored for none and snappy)."""
    kind = codec_of(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        # mtime=0 keeps output deterministic; readers ignore the gzip header fields.
        gzip_level = _ZLIB_DEFAULT if level is None or level == GZIP_DEFAULT_LEVEL else level
        return gzip.compress(bytes(data), compresslevel=gzip_level, mtime=0)
    if kind is CompressionType.SNAPPY:
        return _xerial_compress(memoryview(data).cast("B"))
    if kind is CompressionType.LZ4:
        return lz4.frame.compress(
            bytes(data),
            compression_level=_lz4_frame_level(LZ4_DEFAULT_LEVEL if level is None else level),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return _zstd_cctx(ZSTD_DEFAULT_LEVEL if level is None else level).compress(bytes(data))


def _lz4_frame_level(level: int) -> int:
    """python-lz4's frame level for Kafka's lz4 level: 0 (the fast compressor) for Kafka's default,
    else an HC level (the frame API's lowest is 3, its highest 16, which LZ4 treats as 12)."""
    if level == LZ4_DEFAULT_LEVEL:
        return 0
    return min(max(level, lz4.frame.COMPRESSIONLEVEL_MINHC), lz4.frame.COMPRESSIONLEVEL_MAX)


def _zstd_cctx(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``level`` (a ZstdCompressor is not thread-safe, and making one
    costs more than compressing a small batch)."""
    cctxs = getattr(_zstd_local, "cctxs", None)
    if cctxs is None:
        cctxs = _zstd_local.cctxs = {}
    cctx = cctxs.get(level)
    if cctx is None:
        cctx = cctxs[level] = zstandard.ZstdCompressor(level=level)
    return cctx


def decompress(codec: int, data: bytes | bytearray | memoryview, *,
               max_size: int | None = None) -> bytes | bytearray:
    """Decompress ``data`` written with ``codec``; raises CompressionError on malformed input.

    With ``max_size`` the output is produced in bounded steps and DecompressedTooLargeError is raised
    once it would exceed ``max_size`` bytes (memory stays about ``max_size``); the result may then be
    a bytearray. Without it the result is bytes.
    """
    kind = codec_of(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if len(data) == 0:
        # Every codec's stream has a header; gzip.decompress would quietly return b"".
        raise CompressionError(f"empty {kind.name.lower()} data")
    try:
        if max_size is not None:
            view = memoryview(data).cast("B")
            out = _FAST_BOUNDED[kind](view, max_size)
            return out if out is not None else _BOUNDED[kind](view, max_size)
        if kind is CompressionType.GZIP:
            return gzip.decompress(bytes(data))
        if kind is CompressionType.SNAPPY:
            return _snappy_decompress(memoryview(data).cast("B"))
        if kind is CompressionType.LZ4:
            return _lz4_decompress(bytes(data))
        return _zstd_decompress(bytes(data))
    except InvalidBatchError:  # CompressionError, DecompressedTooLargeError (ValueErrors themselves)
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


# ---------------------------------------------------------------------------------------------
# bounded (streaming) decompression: output in steps of at most _STEP bytes, checked against a cap

_STEP = 256 * 1024

# Most output one input byte can give: deflate's maximum ratio is 1032:1 (a 258-byte match per
# ~2 bits) and LZ4's about 255:1 (a match length grows by 255 per extra byte); each codec's stream
# overhead aside, kept as slack. Below these bounds the one-shot decompressors (_FAST_BOUNDED) are safe and faster.
_GZIP_RATIO, _GZIP_SLACK = 1040, 64 * 1024
_LZ4_RATIO, _LZ4_SLACK = 260, 4 * 1024 * 1024
_ZSTD_BLOCK_MAX = 128 * 1024  # RFC 8878: no block regenerates more than 128 KiB


def _gzip_fast(data: memoryview, max_size: int) -> bytes | None:
    if len(data) * _GZIP_RATIO + _GZIP_SLACK > max_size:
        return None
    return gzip.decompress(bytes(data))


def _lz4_fast(data: memoryview, max_size: int) -> bytes | None:
    if len(data) * _LZ4_RATIO + _LZ4_SLACK > max_size:
        return None
    raw = bytes(data)
    out = []
    pos = 0
    while pos < len(raw):
        # python-lz4 allocates the content size a frame declares (FLG bit 3: 8 bytes after FLG, BD).
        if len(raw) - pos >= 14 and raw[pos + 4] & 0x08 and int.from_bytes(raw[pos + 6:pos + 14], "little") > max_size:
            return None
        chunk, used = lz4.frame.decompress(raw[pos:] if pos else raw, return_bytes_read=True)
        out.append(chunk)
        pos += used
    return out[0] if len(out) == 1 else b"".join(out)


_zstd_local = threading.local()


def _zstd_dctx() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: making one costs ~15 us, more than decompressing a 16 KiB batch."""
    dctx = getattr(_zstd_local, "dctx", None)
    if dctx is None:
        dctx = _zstd_local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _zstd_fast(data: memoryview, max_size: int) -> bytes | None:
    frames, blocks, content_size = _check_zstd_frames(data)
    bound = blocks * _ZSTD_BLOCK_MAX
    if bound > max_size:
        return None
    if content_size > bound:
        raise CompressionError("cannot decompress zstd data: content size beyond what its blocks can hold")
    dctx = _zstd_dctx()
    if frames == 1:
        # One-shot: allocates the declared content size, else max_output_size (both <= bound).
        return dctx.decompress(bytes(data), max_output_size=bound)
    out = []
    rest = bytes(data)
    while rest:
        decompressor = dctx.decompressobj()
        out.append(decompressor.decompress(rest))
        if not decompressor.eof:
            raise CompressionError("truncated zstd frame")
        rest = decompressor.unused_data
    return b"".join(out)


def _snappy_fast(data: memoryview, max_size: int) -> None:
    return None  # the bounded path reads the length each block declares before decompressing it


def _too_large(max_size: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"records decompress to more than {max_size} bytes")


def _gzip_bounded(data: memoryview, max_size: int) -> bytearray:
    out = bytearray()
    rest = bytes(data)
    while True:  # one gzip member per round; Kafka's GZIPInputStream reads concatenated members
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not inflater.eof:
            chunk = inflater.decompress(rest, min(_STEP, max_size - len(out) + 1))
            rest = inflater.unconsumed_tail
            if not chunk and not rest and not inflater.eof:
                raise CompressionError("cannot decompress gzip data: truncated gzip stream")
            out += chunk
            if len(out) > max_size:
                raise _too_large(max_size)
        rest = inflater.unused_data
        if not rest:
            return out


def _lz4_bounded(data: memoryview, max_size: int) -> bytearray:
    out = bytearray()
    rest = bytes(data)
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        chunk = decompressor.decompress(rest, min(_STEP, max_size - len(out) + 1))
        while True:
            out += chunk
            if len(out) > max_size:
                raise _too_large(max_size)
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise CompressionError("truncated lz4 frame")
            chunk = decompressor.decompress(b"", min(_STEP, max_size - len(out) + 1))
        rest = decompressor.unused_data
        if not rest:
            return out


def _zstd_bounded(data: memoryview, max_size: int) -> bytearray:
    # python-zstandard's stream reader bounds each read but does not report a frame cut short, so
    # walk the frames' block headers first (cheap: a few bytes per 128 KiB block).
    _check_zstd_frames(data)
    out = bytearray()
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    while True:
        chunk = reader.read(min(_STEP, max_size - len(out) + 1))
        if not chunk:
            return out
        out += chunk
        if len(out) > max_size:
            raise _too_large(max_size)


_ZSTD_MAGIC = 0xFD2FB528


def _check_zstd_frames(data: memoryview) -> tuple[int, int, int]:
    """(frames, blocks, content size the first frame declares or -1) of ``data``; CompressionError
    unless it is whole zstd frames (RFC 8878 section 3.1)."""
    pos, end, frames, blocks, content_size = 0, len(data), 0, 0, -1
    while pos < end:
        frames += 1
        if end - pos < 4:
            raise CompressionError("truncated zstd frame")
        magic = int.from_bytes(data[pos:pos + 4], "little")
        pos += 4
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: int32 size, then that many bytes
            if end - pos < 4:
                raise CompressionError("truncated zstd frame")
            pos += 4 + int.from_bytes(data[pos:pos + 4], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise CompressionError("cannot decompress zstd data: not a zstd frame")
        if pos >= end:
            raise CompressionError("truncated zstd frame")
        descriptor = data[pos]
        single_segment = descriptor >> 5 & 1
        pos += 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
        if size_bytes and frames == 1:
            if end - pos < size_bytes:
                raise CompressionError("truncated zstd frame")
            content_size = int.from_bytes(data[pos:pos + size_bytes], "little") + (256 if size_bytes == 2 else 0)
        pos += size_bytes
        while True:
            if end - pos < 3:
                raise CompressionError("truncated zstd frame")
            block = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            kind, size = block >> 1 & 3, block >> 3
            if kind == 3:
                raise CompressionError("cannot decompress zstd data: reserved block type")
            pos += 3 + (1 if kind == 1 else size)
            blocks += 1
            if block & 1:
                break
        pos += 4 if descriptor & 4 else 0  # content checksum
    if pos > end:
        raise CompressionError("truncated zstd frame")
    return frames, blocks, content_size


def _snappy_bounded(data: memoryview, max_size: int) -> bytearray:
    # Each raw snappy block starts with its uncompressed length (a varint): check the total first.
    blocks = _snappy_blocks(data)
    total = 0
    for block in blocks:
        total += _snappy_length(block)
        if total > max_size:
            raise _too_large(max_size)
    out = bytearray()
    for block in blocks:
        out += cramjam.snappy.decompress_raw(block)
    return out


def _snappy_blocks(data: memoryview) -> list[memoryview]:
    """The raw snappy blocks of ``data``: itself, or the blocks of Kafka's xerial framing (an 8-byte
    magic and two int32 versions, then blocks each behind its int32 length)."""
    if len(data) < len(XERIAL_HEADER) or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return [data]
    blocks = []
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if len(data) - pos < 4:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or size > len(data) - pos:
            raise CompressionError(f"xerial snappy block length {size} beyond the data")
        blocks.append(data[pos: pos + size])
        pos += size
    return blocks


def _snappy_length(block: memoryview) -> int:
    value = shift = 0
    for pos in range(min(len(block), 5)):
        value |= (block[pos] & 0x7F) << shift
        if block[pos] < 0x80:
            return value
        shift += 7
    raise CompressionError("cannot decompress snappy data: bad length preamble")


_FAST_BOUNDED = {
    CompressionType.GZIP: _gzip_fast,
    CompressionType.SNAPPY: _snappy_fast,
    CompressionType.LZ4: _lz4_fast,
    CompressionType.ZSTD: _zstd_fast,
}

_BOUNDED = {
    CompressionType.GZIP: _gzip_bounded,
    CompressionType.SNAPPY: _snappy_bounded,
    CompressionType.LZ4: _lz4_bounded,
    CompressionType.ZSTD: _zstd_bounded,
}


def _xerial_compress(data: memoryview) -> bytes:
    out = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + XERIAL_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: memoryview) -> bytes:
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in _snappy_blocks(data))


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
