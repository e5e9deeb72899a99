"""Kafka protocol primitive types: the building blocks every message is made of.

Wire formats (all big-endian; see Kafka's protocol guide and types/Type.java):

    int8/int16/int32/int64     fixed width, two's complement
    uint16/uint32              fixed width, unsigned
    float64                    IEEE 754 double
    bool                       one byte, 0 = false, anything else = true
    uuid                       16 raw bytes
    unsigned_varint            7 bits per byte, low groups first, high bit = "more follows";
                               at most 5 bytes (Kafka reads an int32)
    varint/varlong             zigzag-encoded signed values in unsigned varint form (records)
    string                     int16 length (-1 = null) + UTF-8 bytes
    compact_string             unsigned_varint (length + 1; 0 = null) + UTF-8 bytes
    bytes / records            int32 length (-1 = null) + raw bytes
    compact_bytes              unsigned_varint (length + 1; 0 = null) + raw bytes
    array                      int32 count (-1 = null) + elements
    compact_array              unsigned_varint (count + 1; 0 = null) + elements
    tagged fields (flexible)   unsigned_varint count, then per field: unsigned_varint tag,
                               unsigned_varint size, size bytes of data; tags ascending

Sans-io: these functions take and return bytes and positions; nothing here does I/O. Decoders
raise :class:`DecodeError` on any short or malformed input so a hostile frame can never surface as
an IndexError or struct.error deep inside a handler.
"""

from __future__ import annotations

import struct


class DecodeError(ValueError):
    """The bytes do not form a valid message of the expected schema (a malformed request)."""


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

# struct format letter and width for every fixed-size type, used to fuse runs of fixed fields
# into one struct call in the generated codecs.
FIXED_FORMATS: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
}


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, new position)."""
    try:
        b = buf[pos]
    except IndexError:
        raise DecodeError("truncated varint") from None
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise DecodeError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            # Kafka's ByteUtils.readUnsignedVarint reads at most 5 bytes (an int32) and rejects
            # the rest as "Varint is too long": a compact length or tag padded with needless
            # continuation bytes is a malformed request, not a value to accept.
            raise DecodeError("unsigned varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot encode {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag-decoded signed varint (at most 5 bytes; record varlongs are protocol/records.py's)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 63))


def need(buf: bytes | bytearray | memoryview, pos: int, size: int) -> None:
    if size < 0 or pos + size > len(buf):
        raise DecodeError(f"field needs {size} bytes at position {pos}, frame has {len(buf)}")


def read_string(buf: bytes | bytearray | memoryview, pos: int) -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise DecodeError("truncated string length")
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid string length {n}")
        return None, pos
    need(buf, pos, n)
    try:
        return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string is not UTF-8: {exc}") from None


def read_compact_string(buf: bytes | bytearray | memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    need(buf, pos, n)
    try:
        return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string is not UTF-8: {exc}") from None


def read_bytes(buf: bytes | bytearray | memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise DecodeError("truncated bytes length")
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid bytes length {n}")
        return None, pos
    need(buf, pos, n)
    return bytes(buf[pos : pos + n]), pos + n


def read_compact_bytes(buf: bytes | bytearray | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    need(buf, pos, n)
    return bytes(buf[pos : pos + n]), pos + n


def read_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Records are returned as a zero-copy view into the request frame."""
    if pos + 4 > len(buf):
        raise DecodeError("truncated records length")
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid records length {n}")
        return None, pos
    need(buf, pos, n)
    return buf[pos : pos + n], pos + n


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    need(buf, pos, n)
    return buf[pos : pos + n], pos + n


def write_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
        return
    data = value.encode("utf-8")
    out += INT16.pack(len(data))
    out += data


def write_compact_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    data = value.encode("utf-8")
    write_uvarint(out, len(data) + 1)
    out += data


def write_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
        return
    out += INT32.pack(len(value))
    out += value


def write_compact_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        out.append(0)
        return
    write_uvarint(out, len(value) + 1)
    out += value


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a tagged-field section whose tags are all unknown to the reader."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        need(buf, pos, size)
        pos += size
    return pos
