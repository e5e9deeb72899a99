"""What a fetch asks of the replica manager, and what one read of its partitions found.

Kafka's FetchParams / LogReadResult / FetchPartitionData, reduced to what a consumer's or a
follower's fetch uses. The handler builds :class:`FetchParams` from the request; the replica manager answers with
one :class:`FetchResult` (one :class:`LogReadResult` per partition, in request order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.broker.replica.fetch_session import CachedPartition
from odradek.storage.errors import SegmentTruncatedError
from odradek.storage.results import FetchSlice
from odradek.storage.txn_index import AbortedTxn


class FetchParams:
    """One fetch request's limits (Kafka's FetchParams)."""

    __slots__ = ("max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "uses_topic_ids", "client_gone",
                 "replica_id", "replica_epoch", "client_rack")

    def __init__(self, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                 uses_topic_ids: bool, client_gone: Callable[[], bool] | None = None,
                 replica_id: int = -1, replica_epoch: int = -1, client_rack: str | None = None) -> None:
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes  # the response budget: min(request max_bytes, fetch.max.bytes)
        self.isolation_level = isolation_level
        self.uses_topic_ids = uses_topic_ids  # Fetch v13+: partitions name topics by id
        # True once nobody waits for the answer (the connection closed): a waiting fetch ends.
        self.client_gone = client_gone
        # A follower's broker id (>= 0): it reads up to the log end and reports its position.
        self.replica_id = replica_id
        # Its broker (registration) epoch, Fetch v15+ (KIP-903); -1 when not given.
        self.replica_epoch = replica_epoch
        # A consumer's Fetch v11+ rack_id (KIP-392; "" when it set no client.rack), None before v11
        # and for followers. Kafka's clientMetadata: with it a consumer may read from a follower.
        self.client_rack = client_rack

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_from_leader(self) -> bool:
        """Kafka's FetchParams.fetchOnlyFromLeader: followers' fetches, and consumers' before v11."""
        return self.client_rack is None


class LogReadResult:
    """One partition of a fetch: an error, or its offsets and records.

    ``records`` is a :class:`~odradek.storage.results.FetchSlice` (sent with sendfile), bytes (when
    ``odradek.fetch.sendfile`` is off), or ``b""``; ``size`` is its byte count.
    """

    __slots__ = ("partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "records", "size", "aborted_transactions", "preferred_read_replica")

    def __init__(self, partition: CachedPartition, error_code: int, high_watermark: int = -1,
                 last_stable_offset: int = -1, log_start_offset: int = -1,
                 records: FetchSlice | bytes = b"", size: int = 0,
                 aborted_transactions: list[AbortedTxn] | None = None, preferred_read_replica: int = -1) -> None:
        self.partition = partition
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.records = records
        self.size = size
        # read_committed only: the aborted transactions overlapping ``records`` (None otherwise).
        self.aborted_transactions = aborted_transactions
        # KIP-392: the replica the consumer should fetch this partition from (no records then).
        self.preferred_read_replica = preferred_read_replica


class FetchResult:
    """The outcome of reading a fetch's partitions once."""

    __slots__ = ("partitions", "total_bytes", "has_error", "truncated", "bytes_by_topic", "redirected")

    def __init__(self) -> None:
        self.partitions: list[LogReadResult] = []
        self.total_bytes = 0
        self.has_error = False
        # A segment was cut short under the broker: nothing of this response may be sent (the
        # handler closes the connection, Kafka's "truncated during read").
        self.truncated: SegmentTruncatedError | None = None
        self.bytes_by_topic: dict[str, int] = {}  # record bytes read, by topic name (for metrics)
        self.redirected = False  # a partition named a preferred read replica: answer at once (Kafka)


FetchCallback = Callable[[FetchResult], Any]
