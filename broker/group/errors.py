"""How a failed __consumer_offsets write is answered (Kafka's appendGroupMetadataErrorToResponseError
and OffsetMetadataManager's commit mapping)."""

from __future__ import annotations

from odradek.broker.coordinator.runtime import CoordinatorWriteError
from odradek.protocol.errors import ErrorCode, KafkaApiError


def append_error(code: int) -> ErrorCode:
    """What a failed coordinator write answers."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode(code)


def write_error(exc: KafkaApiError) -> ErrorCode:
    """What a write operation that failed with ``exc`` answers: a failed or timed-out write
    (CoordinatorWriteError) as :func:`append_error`, the operation's own error as it is."""
    return append_error(exc.code) if isinstance(exc, CoordinatorWriteError) else ErrorCode(exc.code)


def commit_append_error(code: int) -> ErrorCode:
    """A failed offset commit write."""
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return append_error(code)
