"""Record-level validation of produced batches (Kafka's LogValidator reading every record).

The log checks each batch's header and CRC itself (odradek.storage.log); this module checks what is inside:
the records' framing against the header (odradek.protocol.record_scan: lengths, counts, header fields, no
bytes left over), offset deltas 0..n-1, and on compacted topics that every record has a key.
Compressed batches are decompressed with an output cap (:func:`uncompressed_limit`) so a small
compression bomb cannot exhaust memory.

Errors, as Kafka answers them:
* framing — INVALID_RECORD (87) with Kafka's InvalidRecordException message, no record_errors;
* compressed bytes that do not decompress — CORRUPT_MESSAGE (2);
* records decompressing beyond the cap — MESSAGE_TOO_LARGE (10);
* per-record findings (null key on a compacted topic, a wrong offset delta) — INVALID_RECORD with
  one record_errors entry (batch_index = the record's index in its batch, KIP-467) per record and
  Kafka's summary message (LogValidator.processRecordErrors).

Pure functions, no state: the log calls them before taking its lock.
"""

from __future__ import annotations

from odradek.protocol.batch_header import COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD, InvalidBatchError
from odradek.protocol.compression import DecompressedTooLargeError, codec_of, decompress
from odradek.protocol.record_scan import F_DELTAS, F_KEYS, R_NULL_KEY, describe, scan
from odradek.storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

# Records may decompress to this many times the larger of max.message.bytes and the batch's own
# size (64 MiB for the default 1 MiB limit). Kafka has no such cap (it streams); legitimate
# batches stay far below it, and a producer refused with MESSAGE_TOO_LARGE splits its batch.
MAX_COMPRESSION_RATIO = 64


def uncompressed_limit(max_message_bytes: int, batch_size: int) -> int:
    return max(max_message_bytes, batch_size) * MAX_COMPRESSION_RATIO


def validate_records(view: memoryview, batches: list, topic_partition: str, *, compact: bool,
                     max_message_bytes: int) -> None:
    """Check the records of each (position, BatchHeader) in ``batches``; raise on the first bad batch.

    Batches must already have passed the header and CRC checks (odradek.storage.log._validate).
    """
    flags = F_DELTAS | (F_KEYS if compact else 0)
    for pos, header in batches:
        size = header[1] + LOG_OVERHEAD
        codec = header[5] & COMPRESSION_MASK
        if codec == 0:
            result = scan(view, pos + HEADER_SIZE, pos + size, header[12], flags)
        else:
            data = decompress_records(view[pos + HEADER_SIZE: pos + size], codec,
                                      uncompressed_limit(max_message_bytes, size))
            result = scan(data, 0, len(data), header[12], flags)
        if result is not None:
            raise record_error(result, topic_partition)


def decompress_records(body: memoryview, codec: int, limit: int) -> bytes | bytearray:
    """The batch's records decompressed with at most ``limit`` bytes of output, or the storage error."""
    try:
        return decompress(codec_of(codec), body, max_size=limit)
    except DecompressedTooLargeError as exc:
        raise RecordTooLargeError(f"{exc}: the batch is refused (at most {MAX_COMPRESSION_RATIO} times "
                                  "max.message.bytes of records per batch)") from None
    except InvalidBatchError as exc:
        raise CorruptRecordError(f"cannot read the records of a batch: {exc}") from None


def record_error(result: tuple | list, topic_partition: str) -> InvalidRecordError:
    """The exception for a non-None :func:`odradek.protocol.record_scan.scan` result."""
    if isinstance(result, tuple):
        return InvalidRecordError(describe(result))
    errors = []
    for index, kind, value in result:
        if kind == R_NULL_KEY:
            message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
        else:
            message = (f"Record at batch index {index} has offset delta {value}; the records of a batch must "
                       f"have offset deltas 0, 1, 2, ... in topic partition {topic_partition}.")
        errors.append((index, message))
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    exc = InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in "
                             f"total, and only showing the first three errors at most: [{shown}]")
    exc.record_errors = errors
    return exc


def plain_records_ok(view: memoryview, size: int, attributes: int, count: int, max_message_bytes: int) -> bool:
    """True when the one batch in ``view`` passes :func:`validate_records` on a topic that is not compacted.

    For the log's single-batch fast path, which lets the general path raise the precise error.
    """
    codec = attributes & COMPRESSION_MASK
    if codec == 0:
        return scan(view, HEADER_SIZE, size, count, F_DELTAS) is None
    try:
        data = decompress(codec_of(codec), view[HEADER_SIZE:size], max_size=uncompressed_limit(max_message_bytes, size))
    except InvalidBatchError:
        return False
    return scan(data, 0, len(data), count, F_DELTAS) is None
