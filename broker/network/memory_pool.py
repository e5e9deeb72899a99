"""The request memory pool: ``queued.max.request.bytes`` (Kafka's SimpleMemoryPool, non-strict).

What it counts: the bytes of every request from the moment its 4-byte size prefix is read until the
handler loop has processed it. A connection reserves the request's whole announced size before it
reads the body (Kafka's NetworkReceive.readFrom calls ``tryAllocate(size)`` as soon as the size is
known), so a request still arriving holds its memory exactly like one waiting in the queue.

Rules (Kafka's, from SimpleMemoryPool and the Selector):
1. Non-strict: a reservation succeeds while any memory is left (``used < size``), whatever its own
   size, so ``used`` peaks at ``size - 1 + one request`` (a request is at most
   ``socket.request.max.bytes``). A request larger than the whole pool is therefore never refused
   for good: it waits only until the pool is not spent.
2. Spent (``used >= size``, Kafka's ``isOutOfMemory``): connections that need memory for their next
   request stop reading (broker/network/connection.py); those whose request already holds its memory keep
   reading, so a request that has its memory always completes.
3. Released exactly once: by the handler loop after processing, or by the connection when it
   closes mid-request (Kafka's NetworkReceive.close). The request channel wakes the waiting
   connections after every release (broker/network/request_channel.py).
4. ``size`` <= 0: no bound (Kafka's MemoryPool.NONE): every reservation succeeds and nothing is
   counted, which keeps the unbounded default free of the lock.

Threads: network threads reserve, the handler loop and network threads release; the lock makes
check-and-add atomic. ``spent`` reads without it: a stale answer is corrected by the register,
then look again, order of Connection._update_reading.
"""

from __future__ import annotations

import threading

# What Kafka's MemoryPool.NONE reports as available memory (Long.MAX_VALUE).
UNBOUNDED_AVAILABLE = 2**63 - 1


class MemoryPool:
    def __init__(self, size: int) -> None:
        # 0: no bound (rule 4).
        self.size = size if size > 0 else 0
        self.used = 0
        self._lock = threading.Lock()

    def try_reserve(self, n: int) -> bool:
        """Take ``n`` bytes for a request whose size prefix was just read; False while the pool is
        spent (the caller stops reading and waits for a release)."""
        if not self.size:
            return True
        with self._lock:
            if self.used >= self.size:
                return False
            self.used += n
            return True

    def release(self, n: int) -> None:
        if not self.size:
            return
        with self._lock:
            self.used -= n

    def spent(self) -> bool:
        return self.size > 0 and self.used >= self.size

    def available(self) -> int:
        """Kafka's MemoryPoolAvailable: negative while a non-strict reservation overshoots."""
        return self.size - self.used if self.size else UNBOUNDED_AVAILABLE
