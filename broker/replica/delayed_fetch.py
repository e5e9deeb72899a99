"""DelayedFetch: a long-poll fetch waiting for ``min_bytes`` to become readable.

Kafka's kafka.server.DelayedFetch. When the fetch starts to wait it notes, per partition, how
many bytes below the fetch bound (HW, or LSO under read_committed) its partition had appended
minus what the first read found there (``Partition.high_watermark_bytes``); a check then only
subtracts two integers per partition, capped at the partition's ``partition_max_bytes``, and
never touches the log. The logs are read once, when the fetch completes.

A follower's fetch (``params.is_from_follower``) counts bytes below the log end instead, and is
also checked after each leader append that did not move the HW (Kafka: LeaderHwChange.SAME).

It is checked when a watched partition's HW or LSO moves (the replica manager calls
``check_and_complete`` then; on a follower serving a consumer, KIP-392, when the replica
fetcher moved its HW), when it is deleted, loses leadership or goes offline, and at
``max_wait_ms``. It completes as soon as:
- the bytes readable reach ``min_bytes``;
- a partition is gone, no longer led here, offline, fenced by a new leader epoch, or its fetch
  offset is no longer on the log (Kafka's cases A-D): the read at completion reports the error;
- the client went away.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.broker.replica.fetch_params import FetchCallback, FetchParams, FetchResult
from odradek.broker.replica.fetch_session import CachedPartition
from odradek.broker.runtime.purgatory import DelayedOperation

# (partition key, what the client asked, its partition's byte count at the start) per partition.
FetchStatus = tuple[Any, CachedPartition, int]


class DelayedFetch(DelayedOperation):
    __slots__ = ("params", "partitions", "status", "callback", "_lookup", "_read", "_node_id")

    def __init__(self, params: FetchParams, partitions: list[CachedPartition], status: list[FetchStatus],
                 lookup: Callable[[Any], Any], read: Callable[[FetchParams, list[CachedPartition]], FetchResult],
                 node_id: int, callback: FetchCallback) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self.partitions = partitions
        self.status = status
        self.callback = callback
        self._lookup = lookup
        self._read = read
        self._node_id = node_id

    def try_complete(self) -> bool:
        params = self.params
        gone = params.client_gone
        if gone is not None and gone():
            return self.force_complete()
        isolation = params.isolation_level
        follower = params.replica_id >= 0
        # KIP-392: a consumer's Fetch v11+ may wait on a partition this broker follows.
        leader_only = params.client_rack is None
        accumulated = 0
        node_id = self._node_id
        for key, cp, start_bytes in self.status:
            part = self._lookup(key)
            if part is None or part.offline:
                return self.force_complete()
            led = part.leader == node_id
            if leader_only and not led:
                return self.force_complete()
            if 0 <= cp.current_leader_epoch != part.leader_epoch:
                return self.force_complete()
            # A consumer reading a follower may be ahead of that follower's HW (it learnt offsets
            # from the leader): only past the log end is it truncated (Kafka's case F).
            bound = part.log_end_offset if follower or not led else part.fetch_bound(isolation)
            if cp.fetch_offset > bound or cp.fetch_offset < part.log_start_offset:
                if not follower and isolation and part.log_start_offset <= cp.fetch_offset <= part.high_watermark:
                    continue  # read_committed past the LSO (an open transaction): wait, as Kafka
                return self.force_complete()  # truncated, or deleted from the start: an error now
            available = (part.appended_bytes if follower else part.bytes_below_bound(isolation)) - start_bytes
            if available > 0:
                accumulated += min(available, cp.partition_max_bytes)
        if accumulated >= params.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.callback(self._read(self.params, self.partitions))

    def on_expiration(self) -> None:
        pass
