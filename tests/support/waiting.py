"""Waiting on a condition instead of sleeping: a test that sleeps a fixed time either waits longer
than it needs or, on a loaded machine, not long enough. These poll the condition itself until a
deadline and fail naming what was awaited (and the last value seen).

Plain functions for test threads (not for an event loop: they block).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout} s (last: {value!r})")
        time.sleep(interval)


def wait_until_settled(sample: Callable[[], T], ready: Callable[[T], bool], settle: float = 0.3,
                       timeout: float = 15.0, interval: float = 0.05, what: str = "value") -> T:
    """Poll ``sample`` until ``ready(value)`` holds and the value has not changed for ``settle``
    seconds (a peer that has stopped: a socket filled and the sender paused); return it."""
    deadline = time.monotonic() + timeout
    last = sample()
    since = time.monotonic()
    while True:
        time.sleep(interval)
        value = sample()
        now = time.monotonic()
        if value != last:
            last, since = value, now
        elif ready(value) and now - since >= settle:
            return value
        if now >= deadline:
            raise AssertionError(f"{what} did not settle within {timeout} s (last: {last!r})")
