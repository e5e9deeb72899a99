"""DelayedProduce: an acks=-1 produce waiting for the high watermark to pass its batches.

Kafka's kafka.server.DelayedProduce. Each appended partition must reach ``required_offset``
(its last offset + 1) in the high watermark: the replica manager checks the produce purgatory
whenever a partition's HW moves. On one node the HW moves with the append itself, so the check
made right after the append completes it; with replication it completes as followers catch up,
or answers REQUEST_TIMED_OUT for the partitions still short at ``timeout_ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.broker.runtime.purgatory import DelayedOperation
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.results import AppendInfo

# Per partition: an AppendInfo (appended) or the KafkaApiError it was refused with.
ProduceResult = AppendInfo | KafkaApiError
ProduceCallback = Callable[[list[ProduceResult]], Any]


class DelayedProduce(DelayedOperation):
    """Waits until every appended partition's HW reaches its required offset."""

    __slots__ = ("results", "waiting", "callback", "_lookup")

    def __init__(self, delay_ms: int, results: list[ProduceResult], waiting: list[tuple[int, Any]],
                 lookup: Callable[[Any], Any], callback: ProduceCallback) -> None:
        """``waiting``: (index into results, topic-partition key) of each appended partition;
        ``lookup(key)`` finds the partition (None once it is gone)."""
        super().__init__(delay_ms)
        self.results = results
        self.waiting = waiting
        self.callback = callback
        self._lookup = lookup

    def try_complete(self) -> bool:
        still: list[tuple[int, Any]] = []
        for i, key in self.waiting:
            part = self._lookup(key)
            if part is None:
                self.results[i] = KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            info = self.results[i]
            assert isinstance(info, AppendInfo)
            done, code = part.check_enough_replicas_reach_offset(info.last_offset + 1)
            if not done:
                still.append((i, key))
            elif code != ErrorCode.NONE:
                self.results[i] = KafkaApiError(code)
        self.waiting = still
        if not still:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        # Partitions still short of their offset at expiry answer REQUEST_TIMED_OUT (Kafka).
        for i, _key in self.waiting:
            self.results[i] = KafkaApiError(ErrorCode.REQUEST_TIMED_OUT)
        self.waiting = []
        self.callback(self.results)

    def on_expiration(self) -> None:
        pass
