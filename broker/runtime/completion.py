"""Completion: the result of a callback-style call, delivered now or later.

The replica manager answers ``append_records`` / ``fetch_messages`` through a callback (Kafka's
shape), at once or when a delayed operation completes. A handler passes a ``Completion``: when
the call answered at once the handler builds its response from ``value``; otherwise it awaits
``wait()`` in its own coroutine. Either way the response is built by the handler's own code on
its own turn — a Produce whose append completes a waiting Fetch only sets that Fetch's future,
and never runs the Fetch handler inside the producer's call.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Completion(Generic[T]):
    __slots__ = ("done", "value", "_future")

    value: T  # set (and ``done`` True) when the callback ran before ``wait()``

    def __init__(self) -> None:
        self.done = False
        self._future: asyncio.Future[T] | None = None

    def __call__(self, value: T) -> None:
        future = self._future
        if future is None:
            self.value = value
            self.done = True
        elif not future.done():
            future.set_result(value)

    def wait(self) -> asyncio.Future[T]:
        """A future for the value (call only when ``done`` is False, on the event loop)."""
        self._future = asyncio.get_running_loop().create_future()
        return self._future
