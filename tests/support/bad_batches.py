"""Hand-built v2 record batches whose records do not add up, each with the answer Kafka gives.

Every batch here has a valid header CRC-32C (so only the records are wrong) and a header whose
record count matches its last offset delta (so only the record walk can notice). Used by the
storage unit tests and the wire-level Produce tests.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from odradek.protocol.batch_header import CRC_START, pack_header
from odradek.protocol.batch_header import BatchHeader as Header
from odradek.protocol.checksum import crc32c
from odradek.protocol.compression import compress
from odradek.protocol.records import write_varint

INVALID_RECORD = 87
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
BASE_TIMESTAMP = 1_700_000_000_000


def varint(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v",
           headers: Sequence[tuple[bytes, bytes | None]] = (), *, length_adjust: int = 0,
           length: int | None = None, body: bytes | None = None) -> bytes:
    """One record; ``body`` replaces everything after the length, ``length``/``length_adjust`` lie."""
    if body is None:
        body = b"\x00" + varint(offset_delta) + varint(offset_delta) + field(key) + field(value)
        body += varint(len(headers)) + b"".join(varint(len(k)) + k + field(v) for k, v in headers)
    size = len(body) + length_adjust if length is None else length
    return varint(size) + body


def records(n: int, value_size: int = 10) -> list[bytes]:
    return [record(i, b"key-%d" % i, bytes([65 + i % 26]) * value_size) for i in range(n)]


def wrap(body: bytes | Iterable[bytes], count: int, *, codec: int = 0, last_offset_delta: int | None = None,
         compressed: bytes | None = None) -> bytes:
    """A batch around ``body`` (the records, compressed with ``codec`` unless ``compressed`` is given)."""
    raw = body if isinstance(body, bytes) else b"".join(body)
    payload = compressed if compressed is not None else compress(codec, raw) if codec else raw
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    header = Header(0, 49 + len(payload), -1, 2, 0, codec, lod, BASE_TIMESTAMP, BASE_TIMESTAMP + max(lod, 0),
                    -1, -1, -1, count)
    out = bytearray(pack_header(header)) + payload
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


@dataclass(frozen=True)
class Bad:
    name: str
    batch: bytes
    code: int
    message: str  # a substring of the answer's error_message
    record_errors: tuple[int, ...] = ()  # batch_index of each record error


def _varint_too_long() -> bytes:
    return b"\xff\xff\xff\xff\xff\x01"


def catalogue(codec: int = 0) -> list[Bad]:
    """The malformed batches (records compressed with ``codec``) and Kafka's answer to each."""
    good = records(3)
    r = [record(i, b"k%d" % i, b"v") for i in range(3)]
    out = [
        Bad("count above the records", wrap(good, 4, codec=codec), INVALID_RECORD,
            "Incorrect declared batch size, premature EOF reached"),
        Bad("count below the records", wrap(good, 2, codec=codec), INVALID_RECORD,
            "Incorrect declared batch size, records still remaining in file"),
        Bad("count 2^31-1 with one record", wrap(good[:1], 2**31 - 1, codec=codec), INVALID_RECORD,
            "Incorrect declared batch size, premature EOF reached"),
        Bad("record length beyond the batch", wrap([r[0], r[1], record(2, length=500)], 3, codec=codec),
            INVALID_RECORD, "Invalid record size: expected 500 bytes in record payload, but instead the buffer "
            "has only"),
        Bad("negative record length", wrap([r[0], record(1, length=-3)], 2, codec=codec), INVALID_RECORD,
            "Invalid record size: expected -3 bytes"),
        Bad("record length one short", wrap([record(0, length_adjust=-1), r[1]], 2, codec=codec), INVALID_RECORD,
            "Found invalid record structure"),
        Bad("record length one long", wrap([record(0, length_adjust=1), r[1]], 2, codec=codec), INVALID_RECORD,
            "Invalid record size: expected to read 9 bytes in record payload, but instead read 8"),
        Bad("key length beyond its record", wrap([record(0, body=b"\x00\x00\x00" + varint(50) + b"kv")], 1,
                                                 codec=codec), INVALID_RECORD, "Found invalid record structure"),
        Bad("key length -2", wrap([record(0, body=b"\x00\x00\x00" + varint(-2) + field(b"v") + varint(0))], 1,
                                  codec=codec), INVALID_RECORD, "Found invalid record structure"),
        Bad("negative header count", wrap([record(0, body=b"\x00\x00\x00" + field(b"k") + field(b"v") + varint(-1))],
                                          1, codec=codec), INVALID_RECORD, "Found invalid number of record headers -1"),
        Bad("header count beyond the record", wrap([record(0, body=b"\x00\x00\x00" + field(b"k") + field(b"v")
                                                           + varint(1000))], 1, codec=codec), INVALID_RECORD,
            "Found invalid number of record headers. 1000 is larger than the remaining size of the buffer"),
        Bad("negative header key length", wrap([record(0, body=b"\x00\x00\x00" + field(b"k") + field(b"v") + varint(1)
                                                       + varint(-1) + field(b"x"))], 1, codec=codec),
            INVALID_RECORD, "Invalid negative header key size -1"),
        Bad("header value beyond the record", wrap([record(0, body=b"\x00\x00\x00" + field(b"k") + field(b"v")
                                                           + varint(1) + field(b"h") + varint(40) + b"x")], 1,
                                                   codec=codec), INVALID_RECORD, "Found invalid record structure"),
        Bad("varint longer than 5 bytes", wrap([r[0], _varint_too_long() + b"\x00" * 8], 2, codec=codec),
            INVALID_RECORD, "Found invalid record structure"),
        Bad("trailing bytes after the last record", wrap(good + [b"\x00\x00"], 3, codec=codec), INVALID_RECORD,
            "Incorrect declared batch size, records still remaining in file"),
        Bad("offset deltas out of order", wrap([record(0), record(2), record(1)], 3, codec=codec), INVALID_RECORD,
            "One or more records have been rejected due to 2 record errors", (1, 2)),
        Bad("offset deltas not from 0", wrap([record(5), record(6)], 2, codec=codec), INVALID_RECORD,
            "has offset delta 5", (0, 1)),
    ]
    if codec:
        out.append(Bad("compressed bytes that do not decompress",
                       wrap(b"", 1, codec=codec, compressed=b"\x00garbage, not a compressed stream\xff" * 4),
                       CORRUPT_MESSAGE, "cannot "))
    return out


@functools.lru_cache(maxsize=2)
def gzip_bomb(uncompressed: int = 400 * 1024 * 1024) -> bytes:
    """A one-record gzip batch (about 400 KiB on the wire) whose record claims ``uncompressed`` bytes of zeros."""
    value = uncompressed - 32
    head = b"\x00\x00\x00" + field(b"bomb") + varint(value)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(varint(len(head) + value + 1) + head)]
    chunk = bytes(1 << 20)
    left = value
    while left > 0:
        parts.append(compressor.compress(chunk[: min(left, len(chunk))]))
        left -= len(chunk)
    parts.append(compressor.compress(varint(0)))
    parts.append(compressor.flush())
    return wrap(b"", 1, codec=1, compressed=b"".join(parts))

