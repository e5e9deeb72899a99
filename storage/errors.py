"""Storage exceptions, each carrying the Kafka error code a handler should answer with.

Raised by :mod:`odradek.storage.log`, :mod:`odradek.storage.log_manager` and :mod:`odradek.storage.log_config`; any thread
may catch them. All subclass :class:`odradek.protocol.errors.KafkaApiError`, so a handler can turn any of
them into a response with ``exc.code`` without knowing the storage layer — except
:class:`CleaningAbortedError`, which never leaves storage (the cleaner catches it).
"""

from __future__ import annotations

from pathlib import Path

from odradek.protocol.errors import ErrorCode, KafkaApiError


class StorageError(KafkaApiError):
    """Base class; ``code`` is the Kafka error code for the response."""

    default_code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str | None = None) -> None:
        super().__init__(self.default_code, message)


class CorruptRecordError(StorageError):
    """A produced batch is malformed, short, not magic v2, or fails its CRC32C check."""

    default_code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLargeError(StorageError):
    """A produced batch is larger than the topic's max.message.bytes."""

    default_code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(StorageError):
    """A fetch or lookup offset outside [log_start_offset, log_end_offset]."""

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE


class KafkaStorageError(StorageError):
    """The partition's log directory is offline (an earlier disk error) or the log is closed."""

    default_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogDirOfflineError(KafkaStorageError):
    """A disk operation failed (ENOSPC, EIO, ...); the log dir ``log_dir`` must be taken offline."""

    def __init__(self, log_dir: Path | str, message: str | None = None) -> None:
        super().__init__(message or f"log directory {log_dir} is offline")
        self.log_dir = Path(log_dir)


class SegmentTruncatedError(KafkaStorageError):
    """A segment's .log file is shorter than the bytes the log has indexed: something outside the
    broker cut it. Kafka's FileRecords fails such a read ("has been truncated"), the network layer
    logs an error and closes the fetching connection; the log dir stays online."""

    def __init__(self, path: Path | str, position: int, expected: int) -> None:
        super().__init__(f"segment {path} was truncated under the broker: file ends at {position}, "
                         f"the log has {expected} bytes")
        self.path = str(path)


class InvalidConfigError(StorageError):
    """A topic config key is unknown or its value is invalid."""

    default_code = ErrorCode.INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"Invalid value for configuration {key}: {message}")
        self.key = key


class InvalidRecordError(StorageError):
    """A batch is well-formed but breaks a rule (offset range vs record count, control batch from a client,
    a record without a key on a compacted topic).

    ``record_errors`` lists (batch_index, message) for ProduceResponse's RecordErrors (KIP-467);
    empty when the error concerns the whole batch.
    """

    default_code = ErrorCode.INVALID_RECORD

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message)
        self.record_errors: list[tuple[int, str]] = []


class InvalidTimestampError(StorageError):
    """A CreateTime batch's timestamps are outside message.timestamp.before/after.max.ms."""

    default_code = ErrorCode.INVALID_TIMESTAMP


class CleaningAbortedError(Exception):
    """The log changed (truncated, retention, deleted, closed) or the cleaner stopped while a group
    of segments was being cleaned; nothing was swapped. Raised by odradek.storage.log.Log.replace_segments
    and the cleaner itself, caught by odradek.storage.cleaner.LogCleaner.clean_once: not a Kafka error."""
