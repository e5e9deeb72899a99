"""Record-level check for compacted topics: every record must have a key (Kafka's LogValidator).

A topic with ``cleanup.policy`` containing ``compact`` keeps the latest value per key, so a record
without a key can never be compacted; Kafka rejects such a produce with INVALID_RECORD and one
``record_errors`` entry per offending record (batch index = the record's index in its batch,
message "Compacted topic cannot accept message without key in topic partition <tp>.").

This is the only place the produce path looks inside batches, and only for compacted topics:
each batch is decompressed (protocol.compression) and its records walked just far enough to read
the key length. Batches must already be validated (size, CRC) by the caller.

Pure function, no state: any thread may call it (the log calls it before taking its lock).
"""

from __future__ import annotations

from protocol.batch_header import HEADER_SIZE, LOG_OVERHEAD, InvalidBatchError
from protocol.compression import codec_of, decompress
from protocol.records import read_varint, read_varlong
from storage.errors import CorruptRecordError, InvalidRecordError


def validate_keys_for_compaction(view: memoryview, batches: list, topic_partition: str = "") -> None:
    """Raise InvalidRecordError (with ``record_errors``) if any record of ``batches`` has a null key.

    ``batches`` is a list of (position in ``view``, BatchHeader). A batch whose records cannot be
    parsed raises CorruptRecordError (CORRUPT_MESSAGE), as Kafka does when it walks records.
    """
    errors: list[tuple[int, str]] = []
    message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
    for pos, header in batches:
        size = header.batch_length + LOG_OVERHEAD
        try:
            data = decompress(codec_of(header.compression), view[pos + HEADER_SIZE: pos + size])
            for index, has_key in enumerate(_keys_present(data, header.records_count)):
                if not has_key:
                    errors.append((index, message))
        except InvalidBatchError as exc:
            raise CorruptRecordError(f"cannot read the records of a batch: {exc}") from None
    if errors:
        exc = InvalidRecordError(message)
        exc.record_errors = errors
        raise exc


def _keys_present(data: bytes, count: int) -> list[bool]:
    """Whether each record in ``data`` has a key; checks record framing, not the fields after the key."""
    present = []
    pos = 0
    end_of_data = len(data)
    for _ in range(count):
        length, pos = read_varint(data, pos, end_of_data)
        end = pos + length
        if length <= 0 or end > end_of_data:
            raise InvalidBatchError(f"record size {length} beyond the batch")
        field = pos + 1  # attributes
        _, field = read_varlong(data, field, end)  # timestamp delta
        _, field = read_varint(data, field, end)  # offset delta
        key_length, field = read_varint(data, field, end)
        if key_length < -1 or key_length > end - field:
            raise InvalidBatchError(f"invalid key length {key_length}")
        present.append(key_length >= 0)
        pos = end
    if pos != end_of_data:
        raise InvalidBatchError("records do not fill the batch")
    return present
