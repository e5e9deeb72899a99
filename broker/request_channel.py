"""The shared request queue between the network loops and the request handler loop.

Network loops (one or more threads, each with its own event loop) frame requests and ``submit``
them here; the handler loop, which owns all broker state, drains the queue in arrival order. The
queue is bounded by ``queued.max.requests`` (Kafka's name): when it is full, connections stop
reading from their sockets (TCP pushes back on the clients) and are told when space frees up.

With a single network loop the handler loop *is* that loop and the hand-off is a plain
``call_soon``; with several, ``call_soon_threadsafe`` wakes the handler loop once per burst, not
once per request. ``collections.deque`` append/popleft are atomic under the GIL, so the queue
itself needs no lock.

``queued.max.request.bytes`` (> 0) bounds the bytes of the queued requests as well, like Kafka's
request memory pool in its non-strict mode: a connection may take a frame while the queued bytes
are below the bound (``try_reserve``, atomic under a lock), so the queue holds at most
bound - 1 + one request. The bytes are released once the handler loop has processed the request
(Kafka releases the request buffer when ``KafkaApis.handle`` returns). A full byte bound pauses
reading exactly like a full count bound (``is_full``), so the same wake-up applies: every reserved
frame is either queued (and its drain wakes the waiters) or released with a drain scheduled.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from broker.connection import Connection, _Slot
    from storage.results import FetchSlice

# One piece of an encoded response frame, as the dispatcher hands it over: bytes to write, or a file
# slice to sendfile (records of a Fetch). The connection sends them in order.
ResponseChunk: TypeAlias = "bytes | bytearray | memoryview | FetchSlice"


class RequestChannel:
    def __init__(
        self,
        handler_loop: asyncio.AbstractEventLoop,
        max_queued: int,
        process: Callable[[Connection, _Slot, bytes | memoryview], None],
        max_queued_bytes: int = -1,
    ) -> None:
        self.handler_loop = handler_loop
        self.max_queued = max(1, max_queued)
        # 0: no byte bound (queued.max.request.bytes <= 0, Kafka's MemoryPool.NONE).
        self.max_queued_bytes = max_queued_bytes if max_queued_bytes > 0 else 0
        self.queued_bytes = 0
        self._bytes_lock = threading.Lock()
        self.process = process
        self.queue: deque[tuple[Connection, _Slot, bytes | memoryview]] = deque()
        self._scheduled = False
        # Connections paused on a full queue. A deque, not a set: network threads append while
        # the handler loop pops exactly the entries present when it looks (no swap to race with).
        self._waiters: deque[Connection] = deque()

    def submit(self, conn: Connection, slot: _Slot, frame: bytes | memoryview) -> bool:
        """Queue a framed request (called on the connection's loop) whose bytes ``try_reserve``
        accounted for. Returns False if the connection is closed."""
        if conn.closed:
            if self.max_queued_bytes:
                # Released without a drain of its own: schedule one so that connections paused on
                # the byte bound are woken.
                self._release(len(frame))
                self._schedule(conn)
            return False
        self.queue.append((conn, slot, frame))
        self._schedule(conn)
        return True

    def _schedule(self, conn: Connection) -> None:
        if not self._scheduled:
            self._scheduled = True
            if conn.loop is self.handler_loop:
                self.handler_loop.call_soon(self._drain)
            else:
                self.handler_loop.call_soon_threadsafe(self._drain)

    def try_reserve(self, size: int) -> bool:
        """Account ``size`` bytes for a frame about to be submitted; False while the queued bytes
        are at queued.max.request.bytes (the caller stops framing and waits for space)."""
        if not self.max_queued_bytes:
            return True
        with self._bytes_lock:
            if self.queued_bytes >= self.max_queued_bytes:
                return False
            self.queued_bytes += size
            return True

    def _release(self, size: int) -> None:
        with self._bytes_lock:
            self.queued_bytes -= size

    def is_full(self) -> bool:
        return len(self.queue) >= self.max_queued or (
            self.max_queued_bytes > 0 and self.queued_bytes >= self.max_queued_bytes)

    def wait_for_space(self, conn: Connection) -> None:
        self._waiters.append(conn)

    def _drain(self) -> None:
        self._scheduled = False
        queue = self.queue
        process = self.process
        bounded = self.max_queued_bytes > 0
        while queue:
            conn, slot, frame = queue.popleft()
            try:
                if not conn.closed:
                    process(conn, slot, frame)
            finally:
                if bounded:
                    self._release(len(frame))
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

    def send(self, conn: Connection, slot: _Slot, chunks: list[ResponseChunk] | None) -> None:
        """Hand a finished response back to the connection's own loop."""
        if conn.loop is self.handler_loop:
            conn.complete(slot, chunks)
        elif conn.loop is not None and not conn.closed:
            conn.loop.call_soon_threadsafe(conn.complete, slot, chunks)
