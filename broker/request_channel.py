"""The shared request queue between the network loops and the request handler loop.

Network loops (one or more threads, each with its own event loop) frame requests and ``submit``
them here; the handler loop, which owns all broker state, drains the queue in arrival order. The
queue is bounded by ``queued.max.requests`` (Kafka's name): when it is full, connections stop
reading from their sockets (TCP pushes back on the clients) and are told when space frees up.

With a single network loop the handler loop *is* that loop and the hand-off is a plain
``call_soon``; with several, ``call_soon_threadsafe`` wakes the handler loop once per burst, not
once per request. ``collections.deque`` append/popleft are atomic under the GIL, so the queue
itself needs no lock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.connection import Connection, _Slot


class RequestChannel:
    def __init__(
        self,
        handler_loop: asyncio.AbstractEventLoop,
        max_queued: int,
        process: Callable[[Connection, Any, bytes], None],
    ) -> None:
        self.handler_loop = handler_loop
        self.max_queued = max(1, max_queued)
        self.process = process
        self.queue: deque[tuple[Connection, _Slot, bytes]] = deque()
        self._scheduled = False
        # Connections paused on a full queue. A deque, not a set: network threads append while
        # the handler loop pops exactly the entries present when it looks (no swap to race with).
        self._waiters: deque[Connection] = deque()

    def submit(self, conn: Connection, slot: _Slot, frame: bytes) -> bool:
        """Queue a framed request (called on the connection's loop). Returns False if closed."""
        if conn.closed:
            return False
        self.queue.append((conn, slot, frame))
        if not self._scheduled:
            self._scheduled = True
            if conn.loop is self.handler_loop:
                self.handler_loop.call_soon(self._drain)
            else:
                self.handler_loop.call_soon_threadsafe(self._drain)
        return True

    def is_full(self) -> bool:
        return len(self.queue) >= self.max_queued

    def wait_for_space(self, conn: Connection) -> None:
        self._waiters.append(conn)

    def _drain(self) -> None:
        self._scheduled = False
        queue = self.queue
        process = self.process
        while queue:
            conn, slot, frame = queue.popleft()
            if not conn.closed:
                process(conn, slot, frame)
        waiters = self._waiters
        for _ in range(len(waiters)):
            conn = waiters.popleft()
            if conn.closed:
                continue
            if conn.loop is self.handler_loop:
                conn.on_queue_space()
            elif conn.loop is not None:
                conn.loop.call_soon_threadsafe(conn.on_queue_space)

    def close(self, conn: Connection) -> None:
        """Close a connection from the handler loop; transports may only be touched on their own loop."""
        if conn.loop is self.handler_loop:
            conn.close()
        elif conn.loop is not None and not conn.closed:
            conn.loop.call_soon_threadsafe(conn.close)

    def send(self, conn: Connection, slot: _Slot, chunks: list[Any] | None) -> None:
        """Hand a finished response back to the connection's own loop."""
        if conn.loop is self.handler_loop:
            conn.complete(slot, chunks)
        elif conn.loop is not None and not conn.closed:
            conn.loop.call_soon_threadsafe(conn.complete, slot, chunks)
