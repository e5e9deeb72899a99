"""DelayedShareFetch: a ShareFetch waiting for records to acquire (Kafka 4.4's
kafka.server.share.DelayedShareFetch).

A ShareFetch that cannot answer at once waits in the replica manager's share fetch purgatory,
watched under two keys per partition, as Kafka's DelayedShareFetchPartitionKey and
DelayedShareFetchGroupKey:

- ``(topic, partition)``: checked when the partition's high watermark or last stable offset
  moves (a produce appended, a follower caught up, a transaction ended) or it stops being led
  here - the same events that wake a waiting Fetch;
- ``(group id, topic, partition)``: checked by the ``SharePartitionManager`` when records of the
  share-partition become acquirable again (released by an acknowledgement, a closed session or
  connection, an expired acquisition lock) or its in-flight window moves (acknowledged records
  make room, the start offset is altered).

A check asks the manager (``SharePartitionManager.try_share_fetch``) whether the bytes that could
be acquired reach ``min_bytes``; if so the records are acquired and the fetch answers. Acquisition
locks expire on a timer armed here for the earliest lock among the watched share-partitions (only
while the fetch waits: a lock nobody waits on is expired lazily, when a request next touches its
share-partition). At ``max_wait_ms`` the fetch acquires what there is and answers, as Kafka's
onComplete does.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from odradek.broker.runtime.purgatory import DelayedOperation

# What the fetch asks for (the manager's ShareFetchRequestState), opaque here.
S = TypeVar("S")


class DelayedShareFetch(DelayedOperation, Generic[S]):
    __slots__ = ("state", "answer", "_attempt", "_timer")

    def __init__(self, state: S, max_wait_ms: int, attempt: Callable[[S, bool], bool]) -> None:
        super().__init__(max_wait_ms)
        self.state = state
        # Set when the fetch completes (the handler awaits it).
        self.answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # attempt(state, final): acquire if min_bytes can be met (or, final, whatever there is);
        # True when the fetch should answer now.
        self._attempt = attempt
        self._timer: asyncio.TimerHandle | None = None

    def try_complete(self) -> bool:
        if self._attempt(self.state, False):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.answer.done():
            self.answer.set_result(None)

    def on_expiration(self) -> None:
        pass

    def run(self) -> None:
        # max_wait_ms passed: acquire what there is, then answer (Kafka's onComplete reads
        # whatever is available when the wait expires).
        if self.is_completed:
            return
        self._attempt(self.state, True)
        super().run()

    def wake_at(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_s`` while this fetch still waits (an acquisition lock's
        expiry, a share-partition's state loading); replaces any earlier wake-up."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, delay_s), callback)
