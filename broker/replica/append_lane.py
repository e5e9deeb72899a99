"""Produce appends to a partition whose topic recompresses: in arrival order, the compression off the
handler loop.

A topic whose ``compression.type`` names a codec stores every produced batch in it
(storage/recompression.py): a batch in another codec is decompressed, checked and compressed
again, which costs milliseconds per MiB (gzip several times more). Kafka does it in its request
handler threads. Here the handler loop owns the partitions and serves every client, so the
rebuild (:meth:`odradek.storage.log.Log.recompress`, which changes nothing) runs on the IO pool and the
append itself (:meth:`odradek.storage.log.Log.append` of the rebuilt bytes) stays on the loop, as every
append does.

Order: the appends of one partition land in the order their requests arrived, as Kafka's log lock
and muted channels give (an idempotent producer pipelines up to 5 requests per connection, and a
reordered pair would be OUT_OF_ORDER_SEQUENCE_NUMBER). The lane is one FIFO per partition: while
it exists every produce to the partition goes through it, rebuilds of several entries run in
parallel on the pool, and an entry is appended only after every entry before it. An entry whose
batches need no rebuild (the producer already used the topic's codec) is appended at once, with
no hand-off, when nothing waits before it.

What the request of an entry gets: its AppendInfo, or the KafkaApiError of the checks made at
once (:meth:`Partition.check_leader_append`, raised to the caller as for any produce), of the
rebuild (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, ... exactly what an inline append
raises), of the append, or NOT_LEADER_OR_FOLLOWER when the partition's leadership changed while
the entry waited (the log may be a follower's by then). An unexpected failure of the rebuild
itself (not bad input: a bug, or memory) answers KAFKA_STORAGE_ERROR, which clients retry.

Life: the replica manager gives a partition a lane when its topic recompresses
(``ReplicaManager._sync_append_lane``); a lane whose topic no longer does takes itself off its
partition once empty. Owned by the handler loop; only a rebuild's completion crosses threads
(``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from odradek.broker.replica.delayed_produce import ProduceResult
from odradek.broker.replica.partition import Partition, RecordCheck
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.log_config import LogConfig
from odradek.storage.recompression import needs_recompression
from odradek.storage.results import AppendInfo

log = logging.getLogger(__name__)

Deliver = Callable[[ProduceResult], None]


class _Entry:
    __slots__ = ("records", "rebuild", "leader_epoch", "deliver")

    def __init__(self, records: Any, rebuild: Future[tuple[bytes, LogConfig]] | None, leader_epoch: int,
                 deliver: Deliver) -> None:
        self.records = records
        self.rebuild = rebuild
        self.leader_epoch = leader_epoch
        self.deliver = deliver


class AppendLane:
    """The queue of produce appends of one partition (see the module docstring)."""

    __slots__ = ("_part", "_pool", "_loop", "_leads", "_after_append", "_queue")

    def __init__(self, part: Partition, pool: Executor, loop: asyncio.AbstractEventLoop,
                 leads: Callable[[Partition, int], bool],
                 after_append: Callable[[Partition, AppendInfo], None]) -> None:
        """``leads(part, epoch)``: the partition is still led here at that leader epoch;
        ``after_append(part, info)``: metrics, HW and waiting requests after an append."""
        self._part = part
        self._pool = pool
        self._loop = loop
        self._leads = leads
        self._after_append = after_append
        self._queue: deque[_Entry] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def append(self, records: Any, required_acks: int, record_check: RecordCheck | None,
               deliver: Deliver) -> AppendInfo | None:
        """Append ``records`` now and return the AppendInfo (the caller does the after-append
        work), or queue them and return None: ``deliver(result)`` then runs on a later turn of
        the loop, after the append (and its after-append work). Raises KafkaApiError for the
        checks made at once."""
        part = self._part
        part.check_leader_append(records, required_acks, record_check)
        target = part.log.config.recompression
        rebuild = target is not None and needs_recompression(records, target.codec)
        if not rebuild and not self._queue:
            if target is None:
                self._retire()
                return part.append_checked(records)
            return part.append_kept(records)
        job = self._pool.submit(part.log.recompress, records) if rebuild else None
        self._queue.append(_Entry(records, job, part.leader_epoch, deliver))
        if job is not None:
            job.add_done_callback(self._wake)
        return None

    def _wake(self, _job: Future[Any]) -> None:
        """On the pool thread that finished a rebuild: drain on the loop."""
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            pass  # the loop is closed: the broker stopped, nobody waits for an answer

    def _drain(self) -> None:
        """Append, in order, every entry at the head whose rebuild is done."""
        queue = self._queue
        part = self._part
        while queue and (queue[0].rebuild is None or queue[0].rebuild.done()):
            entry = queue.popleft()
            try:
                info = self._append(entry)
            except KafkaApiError as exc:
                entry.deliver(exc)
                continue
            if not info.duplicate:
                self._after_append(part, info)
            entry.deliver(info)
        if not queue and part.log.config.recompression is None:
            self._retire()

    def _append(self, entry: _Entry) -> AppendInfo:
        part = self._part
        if not self._leads(part, entry.leader_epoch):
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                f"{part.topic}-{part.index} changed leadership while the append waited")
        if entry.rebuild is None:
            return part.append_checked(entry.records)
        try:
            records, config = entry.rebuild.result()
        except KafkaApiError:
            raise
        except Exception as exc:  # not bad input (that raised a KafkaApiError): the rebuild itself failed
            log.exception("recompressing a batch of %s-%d failed", part.topic, part.index)
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"the batch could not be recompressed: {exc!r}") from exc
        if config is not part.log.config:
            # The topic's config changed since the rebuild: the append decides again from the producer's
            # batches (Kafka applies the config the append meets).
            return part.append_checked(entry.records)
        return part.append_checked(records, recompressed_for=config)

    def _retire(self) -> None:
        if self._part.append_lane is self:
            self._part.append_lane = None


# A produce result not known yet: its append waits in the partition's lane (replaced before the callback).
IN_LANE = KafkaApiError(ErrorCode.REQUEST_TIMED_OUT, "the append waited in its partition's append lane")


class LaneWaits:
    """One produce request's appends queued in append lanes: ``then`` runs once all are delivered."""

    __slots__ = ("results", "waiting", "then")

    def __init__(self, results: list[ProduceResult]) -> None:
        self.results = results
        self.waiting = 0
        self.then: Callable[[], None] | None = None

    def deliverer(self, index: int) -> Deliver:
        def deliver(result: ProduceResult) -> None:
            self.results[index] = result
            self.waiting -= 1
            if self.waiting == 0 and self.then is not None:
                self.then()
        return deliver
