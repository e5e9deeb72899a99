"""Turns for a transactions-v2 producer's Produce requests that wait for its coordinator.

From Produce v12 (KIP-890 part 2) the partition leader adds a partition to the producer's
transaction itself before appending the first batch there, asking the coordinator and waiting for
the answer (broker/api/handlers/produce.py ``_add_then_append``). A producer pipelines up to five
requests per connection; in Kafka they cannot overtake one another because its SocketServer reads
the next request of a connection only after the previous one has been handled (the channel is
muted meanwhile), so a request waiting for the coordinator holds back the ones behind it.

Here requests of one connection are handled concurrently, so without turns a later request could
get its coordinator answer first and reach the partition before an earlier one: its batch (sequence
63, say) finds no batch of the producer's new epoch and is refused OUT_OF_ORDER_SEQUENCE_NUMBER,
then the earlier batches (sequences 0-62) are appended and acknowledged, and the Java producer,
seeing the refused batch now next in sequence, fails for good ("Invalid sequence number ...
Expected sequence 0 for transactions v2 idempotent producer with no existing state", four runs in
four of Kafka's ProducerPerformance with 15 ms transactions).

So per producer id the requests that must wait for the coordinator, and every request of that
producer arriving while one of them waits, go one at a time in arrival order, each until its
batches are in the log (handed to ``ReplicaManager.append_records``; acks=all then waits outside
the turn). A request of a producer with nobody waiting pays one dict lookup and takes no turn.

Owned by the handler loop (asyncio, single thread); no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ProducerTurns:
    """The tail of each producer id's queue of requests taking turns."""

    def __init__(self) -> None:
        # producer id -> the future the last request in the queue resolves when its turn ends
        self._last: dict[int, asyncio.Future[None]] = {}

    def waiting(self, producer_id: int) -> bool:
        """Whether a request of the producer is taking or waiting for a turn now."""
        return producer_id in self._last

    @asynccontextmanager
    async def turn(self, producer_id: int) -> AsyncIterator[None]:
        """Wait until every earlier request of the producer that took a turn has finished its own,
        then hold the producer's turn until the block ends (also when it raises or is cancelled)."""
        before = self._last.get(producer_id)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[producer_id] = mine
        try:
            if before is not None:
                # shield: a cancelled waiter must not cancel the earlier request's future
                await asyncio.shield(before)
            yield
        finally:
            if before is not None and not before.done():
                # Cancelled while waiting: the requests behind this one still wait for the earlier one.
                before.add_done_callback(lambda _: self._end(producer_id, mine))
            else:
                self._end(producer_id, mine)

    def _end(self, producer_id: int, mine: asyncio.Future[None]) -> None:
        mine.set_result(None)
        if self._last.get(producer_id) is mine:
            del self._last[producer_id]
