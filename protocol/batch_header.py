"""Record batch v2 header: the fixed 61-byte prefix of every batch (KIP-98 message format v2).

This is the only part of a batch the broker's hot path ever reads. Records after the header stay
opaque bytes: Produce checks the header and the CRC once, rewrites ``base_offset`` (and
``partition_leader_epoch``), and appends; Fetch sends file bytes as they are.

Layout (big-endian)::

    offset  size  field
         0     8  base_offset               first offset in the batch (assigned by the leader)
         8     4  batch_length              bytes after this field (total size = batch_length + 12)
        12     4  partition_leader_epoch    stamped by the leader on append
        16     1  magic                     2 for this format
        17     4  crc                       CRC-32C (Castagnoli) of bytes [21, end)
        21     2  attributes                bits 0-2 compression codec, 3 timestamp type
                                            (1 = LogAppendTime), 4 transactional, 5 control,
                                            6 has delete horizon (compaction)
        23     4  last_offset_delta         offset of the last record relative to base_offset
        27     8  base_timestamp            first record's timestamp (delete horizon if bit 6)
        35     8  max_timestamp             largest record timestamp in the batch
        43     8  producer_id               -1 when not idempotent
        51     2  producer_epoch
        53     4  base_sequence             sequence number of the first record, -1 if none
        57     4  records_count
        61        records ...

Because the CRC starts at ``attributes``, rewriting ``base_offset`` and
``partition_leader_epoch`` never invalidates it; rewriting ``max_timestamp`` (LogAppendTime)
does, so :func:`set_log_append_time` recomputes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from odradek.protocol.checksum import crc32c

HEADER_SIZE = 61
# Everything up to and including batch_length: what a reader needs to find the batch's end.
LOG_OVERHEAD = 12
MAGIC_V2 = 2
CRC_START = 21

BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
MAX_TIMESTAMP_AT = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


class InvalidBatchError(ValueError):
    """The bytes are not a well-formed v2 record batch (maps to CORRUPT_MESSAGE)."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at 2**31 like Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``pos``; raises InvalidBatchError if it is short or not v2."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatchError("record batch shorter than its 61-byte header")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise InvalidBatchError(f"unsupported record batch magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatchError(f"batch length {header.batch_length} below the header size")
    return header


def pack_header(header: BatchHeader) -> bytes:
    """The 61 header bytes for ``header``, fields as given (the caller computes the CRC after)."""
    return _HEADER.pack(*header)


def peek_offset_and_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(base_offset, total size) of the batch at ``pos`` without reading the rest of the header."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size])


def crc_is_valid(buf: bytes | bytearray | memoryview, pos: int = 0, header: BatchHeader | None = None) -> bool:
    header = header or parse_header(buf, pos)
    if len(buf) - pos < header.size:
        return False
    return compute_crc(buf, pos, header.size) == header.crc


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    _INT64.pack_into(buf, pos + BASE_OFFSET_AT, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    _INT32.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


def set_log_append_time(buf: bytearray | memoryview, timestamp_ms: int, pos: int = 0) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and max_timestamp, then re-CRC the batch.

    Kafka sets max_timestamp (and, for v2, the timestamp type bit) and leaves per-record deltas
    alone; consumers read LogAppendTime batches' record timestamps as max_timestamp.
    """
    header = parse_header(buf, pos)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_AT, header.attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp_ms)
    _UINT32.pack_into(buf, pos + CRC_AT, compute_crc(buf, pos, header.size))


def iter_headers(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in ``buf[pos:end]``; stops at a partial one."""
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size
