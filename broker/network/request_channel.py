"""The shared request queue between the network loops and the request handler loop.

Network loops (one or more threads, each with its own event loop) frame requests and ``submit``
them here; the handler loop, which owns all broker state, drains the queue in arrival order. The
queue is bounded by ``queued.max.requests`` (Kafka's name): when it is full, connections stop
reading from their sockets (TCP pushes back on the clients) and are told when space frees up.

With a single network loop the handler loop *is* that loop and the hand-off is a plain
``call_soon``; with several, ``call_soon_threadsafe`` wakes the handler loop once per burst, not
once per request. ``collections.deque`` append/popleft are atomic under the GIL, so the queue
itself needs no lock.

``queued.max.request.bytes`` (> 0) bounds the bytes of requests being read and queued, through the
request memory pool (broker/network/memory_pool.py, Kafka's non-strict SimpleMemoryPool): a connection
reserves a request's announced size as soon as its size prefix is read, and stops reading while the
pool is spent. The bytes are released once the handler loop has processed the request (Kafka
releases the request buffer when ``KafkaApis.handle`` returns), or by a connection that closes
before its request was queued (``give_back``). Every release is followed by a drain, and a drain
wakes the waiting connections, so memory freed always reaches the connections waiting for it:
the same wake-up as for a full queue (``wait_for_space``), which waits for either.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from odradek.broker.network.memory_pool import MemoryPool

if TYPE_CHECKING:
    from odradek.broker.network.connection import Connection, _Slot
    from odradek.storage.results import FetchSlice

# One piece of an encoded response frame, as the dispatcher hands it over: bytes to write, or a file
# slice to sendfile (records of a Fetch). The connection sends them in order.
ResponseChunk: TypeAlias = "bytes | bytearray | memoryview | FetchSlice"


def _no_dispatcher(conn: Connection, slot: _Slot, frame: bytes | memoryview) -> None:
    raise RuntimeError("a request reached a request channel that no dispatcher consumes")


class RequestChannel:
    def __init__(
        self,
        handler_loop: asyncio.AbstractEventLoop,
        max_queued: int,
        process: Callable[[Connection, _Slot, bytes | memoryview], None] | None = None,
        max_queued_bytes: int = -1,
    ) -> None:
        """``process`` handles each queued request on the handler loop; None: the Dispatcher built on
        this channel names itself (its constructor), as Kafka's request handler pool is given the
        channel it polls, so neither needs the other wired in afterwards."""
        self.handler_loop = handler_loop
        self.max_queued = max(1, max_queued)
        # queued.max.request.bytes: reserved by the connections, released here (or by give_back).
        self.pool = MemoryPool(max_queued_bytes)
        self.process: Callable[[Connection, _Slot, bytes | memoryview], None] = process or _no_dispatcher
        self.queue: deque[tuple[Connection, _Slot, bytes | memoryview]] = deque()
        self._scheduled = False
        # Connections paused on a full queue or a spent memory pool. A deque, not a set: network threads append while
        # the handler loop pops exactly the entries present when it looks (no swap to race with).
        self._waiters: deque[Connection] = deque()

    def submit(self, conn: Connection, slot: _Slot, frame: bytes | memoryview) -> bool:
        """Queue a framed request (called on the connection's loop) whose bytes the connection
        reserved in the pool. Returns False if the connection is closed."""
        if conn.closed:
            self.give_back(conn, len(frame))
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

    def give_back(self, conn: Connection, size: int) -> None:
        """Release a reservation whose request will never be queued (its connection closed before
        the request was whole or queued; called on the connection's loop). It has no drain of its
        own: schedule one, so that the connections waiting for memory are woken."""
        if self.pool.size:
            self.pool.release(size)
            try:
                self._schedule(conn)
            except RuntimeError:
                pass  # the handler loop is closed: shutting down, nobody waits

    def is_full(self) -> bool:
        """The queue holds ``queued.max.requests`` requests (the byte bound is the pool's)."""
        return len(self.queue) >= self.max_queued

    def wait_for_space(self, conn: Connection) -> None:
        """Wake ``conn`` (``on_queue_space``) after the next drain: queue space or memory freed."""
        self._waiters.append(conn)

    def _drain(self) -> None:
        self._scheduled = False
        queue = self.queue
        process = self.process
        pool = self.pool
        bounded = pool.size > 0
        while queue:
            conn, slot, frame = queue.popleft()
            try:
                if not conn.closed:
                    process(conn, slot, frame)
            finally:
                if bounded:
                    pool.release(len(frame))
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
