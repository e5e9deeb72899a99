"""The two clocks in milliseconds, each defined once.

``now_ms``: the wall clock (Kafka's ``Time.milliseconds()``), the one definition of "now" for
everything that stamps or ages data — LogAppendTime, retention, segment rolls, producer expiry,
group and offset expiry, controller records.

``monotonic_ms``: a clock that never steps (Kafka's ``Time.hiResClockMs()``), for what measures a
duration that must not jump when the system clock is set — leases, locks, intervals, timers.

They live in storage, the lowest package the broker and the controller both import, so neither
needs the other for them. Integer nanoseconds divided down, never ``time.time() * 1000``: the float
product can land one millisecond off, and two formulas disagreeing by one at a boundary is exactly
the kind of bug a retention or expiry test trips over. The timing wheel
(odradek.broker.runtime.timing_wheel) and asyncio's loop.time() run on the monotonic one.
"""

from __future__ import annotations

import time

__all__ = ["monotonic_ms", "now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, as an int."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """A monotonic millisecond count (the source of asyncio's loop.time()); only differences mean anything."""
    return time.monotonic_ns() // 1_000_000
