"""Broker-side recompression: a topic's ``compression.type`` applied to produced batches (Kafka's
LogValidator.validateMessagesAndAssignOffsetsCompressed / buildRecordsAndAssignOffsets).

Kafka's rules (``BrokerCompressionType``): ``producer`` (the default) stores every batch as the
producer compressed it; ``uncompressed``, ``gzip``, ``snappy``, ``lz4`` and ``zstd`` store the
records with that codec, at the topic's ``compression.<codec>.level``. A batch whose codec already
is the target is kept as it is, whatever level it was written at (Kafka's in-place assignment);
so is an uncompressed control batch (transaction markers are never compressed). Followers never
recompress: they store the leader's bytes.

What a rebuilt batch is, against the v2 format (odradek.protocol.batch_header, odradek.protocol.records)::

    bytes 0-20    base offset, batch length, leader epoch, magic, crc
                  base offset and leader epoch are assigned by the log as for any batch; the length
                  is the new one; the CRC-32C is computed over the new bytes [21, end)
    attributes    bits 0-2 = the target codec; timestamp type, transactional and control bits kept
    bytes 23-60   last offset delta, base and max timestamp, producer id and epoch, base sequence,
                  record count: kept (the producer's sequence numbers and ids survive, so
                  duplicates are still detected and transactions still end where they began)
    records       the producer's records, byte for byte (decompressed when it compressed them),
                  compressed with the target codec

Kafka re-encodes each record through MemoryRecordsBuilder; the records' bytes already are what it
would write: a v2 record is relative to its batch (offset delta, timestamp delta from the base
timestamp) and both stay, and the records are checked first exactly as on every produce (framing,
offset deltas 0..n-1, keys on compacted topics: odradek.storage.record_validator), so they are kept
rather than decoded into objects and written again. LogAppendTime is stamped by the log
afterwards, as on any batch. A batch that grows past ``max.message.bytes`` by it (a compressed
batch stored ``uncompressed``) is refused by the log's size check on the rebuilt bytes, as Kafka
refuses a converted batch (RecordTooLargeException).

Pure functions over bytes: any thread may call them. The log calls :func:`recompress_batches`
from :meth:`odradek.storage.log.Log.recompress`, which the broker runs on its IO pool
(broker/replica/append_lane.py), or inline in :meth:`odradek.storage.log.Log.append` for callers that
did not.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from odradek.protocol.batch_header import (
    ATTRIBUTES_AT,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LENGTH_AT,
    LOG_OVERHEAD,
    BatchHeader,
)
from odradek.protocol.checksum import crc32c
from odradek.protocol.compression import compress
from odradek.protocol.record_scan import F_DELTAS, F_KEYS, scan
from odradek.storage.record_validator import decompress_records, record_error, uncompressed_limit

# compression.type -> codec id (Kafka's BrokerCompressionType); "producer" has none.
CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class Recompression(NamedTuple):
    """What a topic stores: ``codec`` (a codec id) at ``level`` (Kafka's level for that codec)."""

    codec: int
    level: int | None


def recompression_for(compression_type: str, gzip_level: int, lz4_level: int, zstd_level: int) -> Recompression | None:
    """The topic's target, or None for ``producer`` (batches stored as sent)."""
    codec = CODEC_IDS.get(compression_type)
    if codec is None:
        return None
    level = {1: gzip_level, 3: lz4_level, 4: zstd_level}.get(codec)
    return Recompression(codec, level)


def keeps(attributes: int, codec: int) -> bool:
    """True when a batch with these attributes is stored as it is under target ``codec``."""
    source = attributes & COMPRESSION_MASK
    return source == codec or (source == 0 and attributes & CONTROL_BIT != 0)


def needs_recompression(records: bytes | bytearray | memoryview, codec: int) -> bool:
    """True when some batch of the record set is not stored as it is (reads only the headers'
    attributes; a malformed set answers True, and the log's validation then refuses it)."""
    pos, total = 0, len(records)
    while total - pos >= HEADER_SIZE:
        if not keeps(records[pos + ATTRIBUTES_AT] << 8 | records[pos + ATTRIBUTES_AT + 1], codec):
            return True
        size = _INT32.unpack_from(records, pos + LENGTH_AT)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE:
            return True
        pos += size
    return pos != total


def recompress_batches(view: memoryview, batches: list[tuple[int, BatchHeader]], target: Recompression, *,
                       compact: bool, max_message_bytes: int, topic_partition: str) -> bytes:
    """The record set with every batch the target does not keep rebuilt with the target codec.

    ``batches`` are (position, header) of batches that passed the log's header and CRC checks.
    Every batch's records are checked as :func:`odradek.storage.record_validator.validate_records` checks
    them (same errors); kept batches are copied unchanged.
    """
    flags = F_DELTAS | (F_KEYS if compact else 0)
    out: list[bytes | bytearray | memoryview] = []
    for pos, header in batches:
        size = header[1] + LOG_OVERHEAD
        source = header[5] & COMPRESSION_MASK
        body = view[pos + HEADER_SIZE: pos + size]
        if source == 0:
            records: bytes | bytearray | memoryview = body
        else:
            records = decompress_records(body, source, uncompressed_limit(max_message_bytes, size))
        result = scan(records, 0, len(records), header[12], flags)
        if result is not None:
            raise record_error(result, topic_partition)
        if keeps(header[5], target.codec):
            out.append(view[pos: pos + size])
            continue
        payload = compress(target.codec, records, target.level)
        rebuilt = bytearray(view[pos: pos + HEADER_SIZE])
        _INT32.pack_into(rebuilt, LENGTH_AT, HEADER_SIZE - LOG_OVERHEAD + len(payload))
        _INT16.pack_into(rebuilt, ATTRIBUTES_AT, (header[5] & ~COMPRESSION_MASK) | target.codec)
        rebuilt += payload
        _UINT32.pack_into(rebuilt, CRC_AT, crc32c(memoryview(rebuilt)[CRC_START:]))
        out.append(rebuilt)
    return b"".join(out)
