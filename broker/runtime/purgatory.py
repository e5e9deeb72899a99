"""Delayed operations and the purgatory that holds them (Kafka's DelayedOperation / Purgatory).

A request whose answer must wait (Fetch below min_bytes, Produce with acks=-1, JoinGroup, ...)
becomes a ``DelayedOperation``: it completes exactly once, either when an event makes it
satisfiable or when its ``delay_ms`` runs out.

Rules (as kafka.server.DelayedOperation / DelayedOperationPurgatory in Kafka 4.0):

1. ``force_complete()`` completes the operation if nobody did yet: it cancels the expiry timer
   and calls ``on_complete()``. It returns True only for the caller that completed it, so
   completion by event and by expiry can race and ``on_complete`` still runs exactly once.
2. ``try_complete()`` (subclass) checks whether the operation can complete now and, if so, returns
   ``force_complete()``.
3. On expiry the timer calls ``run()``: ``force_complete()`` and, if that call completed it,
   ``on_expiration()`` (after ``on_complete()``, Kafka's order).
4. ``try_complete_else_watch(op, keys)`` completes the op at once if it can (returns True);
   otherwise it watches the op under every key (e.g. a topic-partition) and schedules its expiry.
5. ``check_and_complete(key)`` is called on an event for the key (an append, a HW move, a member
   joining); it tries every op watched on that key and returns how many it completed.
6. An op watched under several keys stays in the other keys' lists after it completes. Those stale
   entries are dropped when their key is checked, and all lists are purged once more than
   ``purge_interval`` watched operations have completed since the last purge (Kafka: 1000).

Threading, and the difference from Kafka: Kafka's purgatory is called from many request-handler
threads, so it shards watcher lists under 512 locks, gives each operation a lock, and re-checks
``tryComplete`` after watching (an event on another thread may land between the first check and the
watch). Here a purgatory, its operations and its Timer belong to one asyncio event loop and every
method must be called on that loop: no locks, and the second check is unnecessary because nothing
can run between the check and the watch. Callbacks (``on_complete``...) run synchronously on the
loop and must not block; they may call back into the purgatory (re-entrant calls are safe).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from odradek.broker.runtime.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]

log = logging.getLogger(__name__)

DEFAULT_PURGE_INTERVAL = 1000  # Kafka's *.purgatory.purge.interval.requests default


class DelayedOperation(TimerTask, abc.ABC):
    """An operation that waits at most ``delay_ms`` for a condition; completes exactly once."""

    __slots__ = ("_completed", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        # Set while a purgatory watches this op, so completion can update its pending count.
        self._purgatory: DelayedOperationPurgatory[Any] | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now if not yet completed; True iff this call did it (rule 1)."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()  # the expiry timer must not fire later
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._operation_completed(self)
        self.on_complete()
        return True

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; if satisfied, ``return self.force_complete()``, else return False."""

    @abc.abstractmethod
    def on_complete(self) -> None:
        """Build and send the answer; called exactly once, by event or expiry."""

    @abc.abstractmethod
    def on_expiration(self) -> None:
        """Extra work when the op timed out (after on_complete), e.g. metrics."""

    def run(self) -> None:
        # Timer expiry (rule 3).
        if self.force_complete():
            self.on_expiration()


T = TypeVar("T", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[T]):
    """Book-keeping of delayed operations by watch key, with expiry on a shared Timer."""

    def __init__(
        self,
        name: str,
        timer: Timer,
        purge_interval: int = DEFAULT_PURGE_INTERVAL,
        timer_enabled: bool = True,
    ) -> None:
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self.timer_enabled = timer_enabled
        # key -> ops watched on it; a dict keeps insertion order (ops are tried oldest first, as
        # Kafka's queue) and removes a given op in O(1).
        self._watchers: dict[Hashable, dict[T, None]] = {}
        # Watched ops not yet completed (nor cancelled by cancel_for_key / shutdown).
        self._pending: dict[T, None] = {}
        # Ops watched since the last purge (Kafka's estimatedTotalOperations).
        self._estimated_total = 0
        self._closed = False

    # -- the two calls the broker makes ----------------------------------------------------------

    def try_complete_else_watch(self, operation: T, watch_keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if possible (True); else watch it on each key and schedule expiry.

        Raises ValueError for an empty key list or an op already watched, RuntimeError after
        shutdown; in those cases the op is left untouched (not completed, not watched, not timed).
        An op that is already completed is not watched and False is returned (it was not completed
        by this call).
        """
        keys = tuple(watch_keys)
        if not keys:
            raise ValueError("the watch key list can't be empty")
        if self._closed:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        if operation._purgatory is not None:
            raise ValueError(f"{operation!r} is already watched by purgatory {operation._purgatory.name}")
        if operation.is_completed:
            return False
        if operation.try_complete():
            return True
        if operation.is_completed:
            return False  # try_complete completed it yet reported False: nothing left to watch
        operation._purgatory = self
        watchers_by_key = self._watchers
        for key in keys:
            watchers = watchers_by_key.get(key)
            if watchers is None:
                watchers = watchers_by_key[key] = {}
            watchers[operation] = None
        self._pending[operation] = None
        self._estimated_total += 1
        if self.timer_enabled:
            self.timer.add(operation)
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete every op watched on ``key``; return how many this call completed.

        An op whose ``try_complete`` raises is logged and stays watched; the others are still tried.
        """
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        # Iterate a snapshot: callbacks may watch new ops on this key or check it re-entrantly.
        for op in list(watchers):
            if not op.is_completed:
                try:
                    if op.try_complete():
                        completed += 1
                except Exception:
                    log.exception("purgatory %s: try_complete of %r failed", self.name, op)
            if op.is_completed:
                watchers.pop(op, None)
        if not watchers and self._watchers.get(key) is watchers:
            del self._watchers[key]
        self._maybe_purge()
        return completed

    # -- less common calls -----------------------------------------------------------------------

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: its uncompleted ops lose their timer and are returned, not completed.

        For a partition that is deleted or moves away: the caller answers those requests itself.
        """
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        cancelled: list[T] = []
        for op in watchers:
            if op.is_completed:
                continue
            op.cancel()
            self._pending.pop(op, None)
            cancelled.append(op)
        return cancelled

    def purge_completed(self) -> int:
        """Drop completed ops from every watcher list now; return how many entries were dropped."""
        purged = 0
        for key, watchers in list(self._watchers.items()):
            done = [op for op in watchers if op.is_completed]
            for op in done:
                del watchers[op]
            purged += len(done)
            if not watchers:
                del self._watchers[key]
        self._estimated_total = len(self._pending)
        return purged

    def _maybe_purge(self) -> None:
        # Kafka's trigger: (ops watched since last purge) - (still pending) > purge interval.
        if self._estimated_total - len(self._pending) > self.purge_interval:
            purged = self.purge_completed()
            log.debug("purgatory %s: purged %d completed operations from watch lists", self.name, purged)

    def _operation_completed(self, operation: T) -> None:
        # From DelayedOperation.force_complete, whichever way it completed.
        self._pending.pop(operation, None)

    # -- introspection and lifecycle -------------------------------------------------------------

    @property
    def watched(self) -> int:
        """Total size of the watch lists (Kafka's PurgatorySize): may count completed ops not yet purged."""
        return sum(len(w) for w in self._watchers.values())

    @property
    def delayed(self) -> int:
        """Watched ops not yet completed (Kafka's NumDelayedOperations)."""
        return len(self._pending)

    def watched_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def shutdown(self) -> list[T]:
        """Stop: cancel every pending op's timer, forget all watches, return the ops left pending.

        The ops are not completed (as Kafka: their connections are going away); later
        ``try_complete_else_watch`` calls raise RuntimeError. The Timer is not shut down, since it
        may be shared by several purgatories; its owner shuts it down.
        """
        self._closed = True
        left = list(self._pending)
        for op in left:
            op.cancel()
            op._purgatory = None
        self._pending.clear()
        self._watchers.clear()
        self._estimated_total = 0
        return left
