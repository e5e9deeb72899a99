"""Record batch v2 (KIP-98, message format v2): decode and encode whole batches, records included.

The 61-byte batch header is :mod:`odradek.protocol.batch_header`'s business; this module adds the
records that follow it. After the header, the batch holds ``records_count`` records, compressed
as one block when the codec (``attributes & 7``) is not 0 (see :mod:`odradek.protocol.compression`).
Each record is (varint = zigzag base-128 int32, varlong = zigzag base-128 int64)::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestamp_delta varlong  timestamp - batch base_timestamp
    offset_delta    varint   offset - batch base_offset
    key_length      varint   -1 = null key
    key             bytes
    value_length    varint   -1 = null value
    value           bytes
    headers_count   varint
    headers         header_key_length varint (>= 0), header_key utf-8,
                    header_value_length varint (-1 = null), header_value bytes

Reading rules (Kafka's DefaultRecordBatch / DefaultRecord): the CRC-32C covers everything from
``attributes`` to the end; a negative record count, a record whose fields overrun its declared
length or do not fill it exactly, and bytes left over after the last record are all corrupt.
For LogAppendTime batches every record's timestamp is the batch's ``max_timestamp`` (the
leader stamps only the header). A control batch (attributes bit 5) holds control records whose
key is (version int16, type int16); transaction markers (ABORT 0, COMMIT 1) have the value
(version int16, coordinator_epoch int32).

Every malformed input raises :class:`~odradek.protocol.batch_header.InvalidBatchError` (CORRUPT_MESSAGE)
or a subclass — never IndexError or struct.error.

This is not the broker's hot path: Produce and Fetch treat batches as opaque bytes (see
batch_header). Decoding here does per-record Python work and is for the log cleaner,
transaction markers, coordinators reading their internal topics, and tests. Pure functions
over bytes with no shared state: any thread or loop may call them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from odradek.protocol.batch_header import (
    CONTROL_BIT,
    CRC_AT,
    CRC_START,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidBatchError,
    compute_crc,
    iter_headers,
    pack_header,
    parse_header,
)
from odradek.protocol.checksum import crc32c
from odradek.protocol.compression import codec_of, compress, decompress
from odradek.protocol.errors import ErrorCode

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MASK = 2**64 - 1

_UINT32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class InvalidRecordError(InvalidBatchError):
    """A record inside a batch is malformed (Kafka's InvalidRecordException; CORRUPT_MESSAGE)."""

    code = ErrorCode.CORRUPT_MESSAGE


@dataclass(slots=True)
class Record:
    """One record. ``offset`` is absolute; ``None`` lets encode_batch number records in order."""

    offset: int | None = None
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: its header as read from the wire and its records (decompressed)."""

    header: BatchHeader
    records: list[Record]

    # Header fields under Kafka's names, so callers need not reach into .header.
    base_offset = property(lambda self: self.header.base_offset)
    last_offset = property(lambda self: self.header.last_offset)
    next_offset = property(lambda self: self.header.next_offset)
    last_offset_delta = property(lambda self: self.header.last_offset_delta)
    partition_leader_epoch = property(lambda self: self.header.partition_leader_epoch)
    crc = property(lambda self: self.header.crc)
    attributes = property(lambda self: self.header.attributes)
    base_timestamp = property(lambda self: self.header.base_timestamp)
    max_timestamp = property(lambda self: self.header.max_timestamp)
    producer_id = property(lambda self: self.header.producer_id)
    producer_epoch = property(lambda self: self.header.producer_epoch)
    base_sequence = property(lambda self: self.header.base_sequence)
    last_sequence = property(lambda self: self.header.last_sequence)
    records_count = property(lambda self: self.header.records_count)
    size = property(lambda self: self.header.size)
    compression = property(lambda self: self.header.compression)
    is_transactional = property(lambda self: self.header.is_transactional)
    is_control = property(lambda self: self.header.is_control)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.header.is_log_append_time else CREATE_TIME

    @property
    def delete_horizon_ms(self) -> int | None:
        """Set by the log cleaner (KIP-534); it then occupies base_timestamp."""
        if self.header.attributes & DELETE_HORIZON_BIT:
            return self.header.base_timestamp
        return None


# ---------------------------------------------------------------------------------------------
# varints (zigzag, little-endian base 128, as protobuf)


def _read_varint(buf: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    limit = pos + max_bytes
    while True:
        if pos >= end:
            raise InvalidRecordError("record ends inside a varint")
        if pos >= limit:
            raise InvalidRecordError(f"varint longer than {max_bytes} bytes")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def read_varint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, next position) of the zigzag int32 varint at ``pos``."""
    value, pos = _read_varint(buf, pos, len(buf) if end is None else end, 5)
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise InvalidRecordError(f"varint {value} outside int32")
    return value, pos


def read_varlong(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, next position) of the zigzag int64 varlong at ``pos``."""
    value, pos = _read_varint(buf, pos, len(buf) if end is None else end, 10)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidRecordError(f"varlong {value} outside int64")
    return value, pos


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` zigzag-encoded. Zigzag of an in-range int32 equals its int64 zigzag,
    so one encoder serves varint and varlong."""
    raw = ((value << 1) ^ (value >> 63)) & _UINT64_MASK
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


# ---------------------------------------------------------------------------------------------
# decoding


def decode_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True,
    max_uncompressed: int | None = None,
) -> RecordBatch:
    """Decode the whole batch at ``pos``: header, CRC (unless ``verify_crc`` is False), records.

    ``max_uncompressed`` caps the decompressed records (odradek.protocol.compression's
    DecompressedTooLargeError beyond it); readers of stored batches pass one so that a compression
    bomb stored before records were validated cannot exhaust memory.
    """
    header = parse_header(buf, pos)
    if len(buf) - pos < header.size:
        raise InvalidBatchError(
            f"batch of {header.size} bytes extends beyond the {len(buf) - pos} bytes available"
        )
    view = memoryview(buf)
    if verify_crc:
        computed = crc32c(view[pos + CRC_START : pos + header.size])
        if computed != header.crc:
            raise InvalidBatchError(
                f"record batch is corrupt (stored crc = {header.crc}, computed crc = {computed})"
            )
    if header.records_count < 0:
        raise InvalidRecordError(f"invalid record count {header.records_count}")
    body = view[pos + HEADER_SIZE : pos + header.size]
    data = decompress(codec_of(header.compression), body, max_size=max_uncompressed)
    if type(data) is not bytes:
        data = bytes(data)  # records' keys and values are bytes (the cleaner hashes keys)
    log_append_time = header.max_timestamp if header.is_log_append_time else None
    records = _decode_records(data, header, log_append_time)
    return RecordBatch(header, records)


def _decode_records(data: bytes, header: BatchHeader, log_append_time: int | None) -> list[Record]:
    # Each record needs at least 7 bytes, so a count beyond that is corrupt before we allocate.
    if header.records_count > len(data):
        raise InvalidRecordError(
            f"record count {header.records_count} larger than the {len(data)} bytes of records"
        )
    records = []
    pos = 0
    end_of_data = len(data)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    for _ in range(header.records_count):
        length, pos = read_varint(data, pos, end_of_data)
        if length < 0 or length > end_of_data - pos:
            raise InvalidRecordError(
                f"record size {length} beyond the {end_of_data - pos} bytes remaining in the batch"
            )
        end = pos + length
        if pos >= end:
            raise InvalidRecordError("empty record")
        pos += 1  # attributes: unused in v2
        timestamp_delta, pos = read_varlong(data, pos, end)
        offset_delta, pos = read_varint(data, pos, end)
        key, pos = _read_bytes(data, pos, end, "key")
        value, pos = _read_bytes(data, pos, end, "value")
        count, pos = read_varint(data, pos, end)
        if count < 0 or count > end - pos:
            raise InvalidRecordError(f"invalid number of record headers {count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            header_key, pos = _read_bytes(data, pos, end, "header key")
            if header_key is None:
                raise InvalidRecordError("invalid negative header key size")
            header_value, pos = _read_bytes(data, pos, end, "header value")
            # Java decodes header keys with replacement of malformed UTF-8; so do we.
            headers.append((header_key.decode("utf-8", "replace"), header_value))
        if pos != end:
            raise InvalidRecordError(f"record size {length} but its fields take {length - (end - pos)}")
        timestamp = log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end_of_data:
        raise InvalidRecordError("incorrect declared batch size, records still remaining")
    return records


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    size, pos = read_varint(data, pos, end)
    if size < 0:
        if size != -1:
            raise InvalidRecordError(f"invalid {what} length {size}")
        return None, pos
    if size > end - pos:
        raise InvalidRecordError(f"{what} of {size} bytes extends beyond its record")
    return data[pos : pos + size], pos + size


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, allow_partial: bool = True
) -> Iterator[RecordBatch]:
    """Decode each batch of a record set in turn.

    A Fetch response may end in a partial batch (the broker cuts at max_bytes); with
    ``allow_partial`` it is skipped, as clients do. Otherwise trailing bytes are corrupt.
    """
    end = 0
    for pos, _header in iter_headers(buf):
        yield decode_batch(buf, pos, verify_crc=verify_crc)
        end = pos + _header.size
    if not allow_partial and end != len(buf):
        raise InvalidBatchError(f"{len(buf) - end} trailing bytes are not a whole record batch")


def decode_records(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, allow_partial: bool = False
) -> list[RecordBatch]:
    """All batches of a whole record set (e.g. a Produce request's partition data)."""
    return list(iter_batches(buf, verify_crc=verify_crc, allow_partial=allow_partial))


# ---------------------------------------------------------------------------------------------
# encoding


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> None:
    """Append one record (length prefix included) to ``out``."""
    body = bytearray(b"\x00")  # attributes
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    for field_bytes in (key, value):
        if field_bytes is None:
            write_varint(-1, body)
        else:
            write_varint(len(field_bytes), body)
            body += field_bytes
    headers = list(headers)
    write_varint(len(headers), body)
    for header_key, header_value in headers:
        if header_key is None:
            raise ValueError("record header keys cannot be null")
        raw_key = header_key.encode("utf-8")
        write_varint(len(raw_key), body)
        body += raw_key
        if header_value is None:
            write_varint(-1, body)
        else:
            write_varint(len(header_value), body)
            body += header_value
    write_varint(len(body), out)
    out += body


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    log_append_time: int | None = None,
    partition_leader_epoch: int = -1,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Build one v2 batch as the Java producer would (deltas, lengths, compression, CRC-32C).

    Records with ``offset=None`` get offsets ``base_offset + index``; explicit offsets must
    increase and may leave gaps (compacted batches). ``timestamp_type=LOG_APPEND_TIME`` stamps
    ``log_append_time`` as max_timestamp, as the leader does. ``last_offset_delta`` overrides the
    computed one, for the empty batches the cleaner keeps to remember a producer's sequence.
    """
    deltas: list[int] = []
    previous = -1
    for index, record in enumerate(records):
        delta = index if record.offset is None else record.offset - base_offset
        if delta <= previous or delta > _INT32_MAX:
            raise ValueError(f"record offset delta {delta} does not follow {previous}")
        deltas.append(delta)
        previous = delta
    if last_offset_delta is None:
        last_offset_delta = deltas[-1] if deltas else 0
    elif deltas and last_offset_delta < deltas[-1]:
        raise ValueError("last_offset_delta below the last record's offset delta")

    timestamps = [record.timestamp for record in records]
    first_timestamp = timestamps[0] if timestamps else NO_TIMESTAMP
    base_timestamp = delete_horizon_ms if delete_horizon_ms is not None else first_timestamp
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime batches need log_append_time")
        max_timestamp = log_append_time
    else:
        max_timestamp = max(timestamps, default=NO_TIMESTAMP)

    body = bytearray()
    for record, delta in zip(records, deltas, strict=True):
        encode_record(
            body, delta, record.timestamp - base_timestamp, record.key, record.value, record.headers
        )
    payload = compress(compression, body)

    attributes = int(codec_of(compression))
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT

    header = BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    out = bytearray(pack_header(header))
    out += payload
    _UINT32.pack_into(out, CRC_AT, compute_crc(out, 0, len(out)))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# control records (transaction markers; KRaft's own types are listed for recognition only)


class ControlRecordType(IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    control_type: ControlRecordType  # ABORT or COMMIT
    coordinator_epoch: int


def encode_control_key(control_type: int) -> bytes:
    return _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)


def parse_control_type(key: bytes | None) -> ControlRecordType:
    """The type in a control record's key; unknown types come back as UNKNOWN (readers skip them)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError(f"control record key needs {_CONTROL_KEY.size} bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(record: Record) -> EndTransactionMarker:
    """Read a COMMIT/ABORT control record; raises InvalidRecordError for anything else."""
    control_type = parse_control_type(record.key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control record type {control_type.name} is not a transaction marker")
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError(f"end transaction marker value needs {_END_TXN_VALUE.size} bytes")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"invalid end transaction marker version {version}")
    return EndTransactionMarker(control_type, coordinator_epoch)


def encode_end_txn_marker_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The one-record control batch a partition leader appends to end a transaction
    (Kafka's MemoryRecords.withEndTransactionMarker): transactional, control, no sequence."""
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = Record(
        offset=None,
        timestamp=timestamp,
        key=encode_control_key(control_type),
        value=encode_end_txn_marker_value(coordinator_epoch),
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
