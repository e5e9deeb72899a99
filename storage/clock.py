"""The wall clock in milliseconds (Kafka's ``Time.milliseconds()``): the one definition of "now" for
everything that stamps or ages data — LogAppendTime, retention, segment rolls, producer expiry,
group and offset expiry, controller records.

It lives in storage, the lowest package the broker and the controller both import, so neither
needs the other for it. Integer nanoseconds divided down, never ``time.time() * 1000``: the float
product can land one millisecond off, and two formulas disagreeing by one at a boundary is exactly
the kind of bug a retention or expiry test trips over. Timeouts and intervals use the monotonic
clock instead (odradek.broker.runtime.timing_wheel.monotonic_ms, asyncio's loop.time()).
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, as an int."""
    return time.time_ns() // 1_000_000
