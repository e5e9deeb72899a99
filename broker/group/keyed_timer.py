"""Named timeouts on the broker's timing wheel (Kafka 4.0's CoordinatorTimer).

Kafka's group coordinator keeps one timeout per name — ``heartbeat-<group>-<member>`` (session
timeout), ``join-<group>`` (the join phase: rebalance timeout or initial delay), ``sync-<group>``
(pending SyncGroups) — and scheduling a name again replaces its previous timeout. That is what
the classic protocol needs: every heartbeat pushes the member's session deadline out, every state
change re-arms or cancels the group's join/sync timeout. Kafka 4.0 dropped the purgatory-based
DelayedJoin/DelayedHeartbeat of the old Scala coordinator for this; we follow 4.0. The entries
are ``CallbackTask``s on a ``odradek.broker.runtime.timing_wheel.Timer`` driven by an ``AsyncReaper``.

Owned by the handler loop (as the Timer). A callback that raises is logged and forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from odradek.broker.runtime.timing_wheel import CallbackTask, Timer

log = logging.getLogger(__name__)


class KeyedTimer:
    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self._tasks: dict[Hashable, CallbackTask] = {}

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], object]) -> None:
        """Run ``fn`` in ``delay_ms`` unless ``key`` is scheduled again or cancelled first."""
        self.cancel(key)
        task: CallbackTask

        def fire() -> None:
            if self._tasks.get(key) is task:
                del self._tasks[key]
            try:
                fn()
            except Exception:
                log.exception("timeout %r failed", key)

        task = CallbackTask(max(0, delay_ms), fire)
        self._tasks[key] = task
        self.timer.add(task)

    def cancel(self, key: Hashable) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._tasks

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
