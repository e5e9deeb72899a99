"""The coordinator runtime: state machines that live in a partition of an internal topic.

Shared by the group coordinator (classic groups, KIP-848 consumer groups, committed offsets) and,
next, the transaction coordinator. Kafka's model is coordinator-common's CoordinatorRuntime,
CoordinatorShard and CoordinatorLoader; this is our own, smaller version of it.

What it owns:

1. Ownership by leadership. Partition ``p`` of the runtime's topic is served here while this
   broker leads it. ``on_become_leader`` creates a fresh shard (``shard_factory(p)``) and *loads*
   it: the partition's records from log start to log end are replayed into the shard, a chunk at
   a time, yielding to the loop between chunks; a transactional batch's records go with their
   producer id and epoch, a COMMIT/ABORT marker through ``replay_end_transaction_marker`` (Kafka's
   CoordinatorLoaderImpl). A repeated notification for a partition already loading or loaded only
   moves its leader epoch, as Kafka's. A new leader may hold records the
   old one wrote that its high watermark does not cover yet (its followers have not fetched under
   it): the load first waits until the HW reaches the log end, so an acknowledged write is never
   left out and an unreplicated one never read. Until the load ends requests for ``p`` get
   COORDINATOR_LOAD_IN_PROGRESS; partitions not led here get NOT_COORDINATOR; before ``start`` and
   after ``shutdown`` everything gets COORDINATOR_NOT_AVAILABLE. ``on_resign`` unloads the shard
   (``shard.on_unloaded``) and fails the writes still queued or awaiting durability with
   NOT_COORDINATOR: the new leader rebuilds the state from the log. ``reload`` unloads and loads
   again every partition held here (what a shard loads changed: the partition rule).
2. The write path: write -> await durable -> apply. A write operation is a function of the shard
   that *computes* (without changing the shard) the records to append, the response, and an
   ``apply`` action that changes the state. The records go to the partition writer as one batch;
   only when the writer reports them durable (the high watermark passed them: every in-sync
   replica has them) is ``apply`` run and the response delivered. A failed append runs nothing
   and answers ``CoordinatorWriteError`` with the storage error, for the caller to map to its
   API's error. So the in-memory state is always the replay of the durable log, and reads
   (``shard``) only ever see applied state. A caller waits at most ``write_timeout_ms`` from its
   submission (Kafka's write timeout, ``offsets.commit.timeout.ms``), then gets
   ``CoordinatorWriteError(REQUEST_TIMED_OUT)``; an operation already appended is still applied
   when its records become durable (they are in the log: memory must follow), one not yet computed
   is dropped.
3. Serialization per partition (Kafka's one event queue per shard). The operations of one
   partition run one after another in submission order; an operation is not even computed until
   the previous one has been applied, so it always computes from the state the log holds. When
   the writer's durability is immediate (one node today) a write completes inside ``write``, on
   the caller's stack, and the returned future is already done; when it is delayed the queue
   waits for it without blocking other partitions.

Threading: everything runs on the handler loop (requests, timer callbacks, leadership callbacks).
No locks: the queue is a deque and a busy flag.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import (
    ControlRecordType,
    InvalidRecordError,
    Record,
    RecordBatch,
    encode_batch,
    iter_batches,
    parse_control_type,
)
from odradek.storage.clock import now_ms

log = logging.getLogger(__name__)

T = TypeVar("T")

KeyValue = tuple[bytes, "bytes | None"]
NO_PRODUCER_ID = -1  # Kafka's RecordBatch.NO_PRODUCER_ID: a record outside any transaction


class PartitionWriter(Protocol):
    """What the runtime needs from storage: the leader side of the internal topic's partitions."""

    def append(self, topic: str, partition: int, records: bytes) -> Awaitable[int]:
        """Append one record batch as leader; the awaitable resolves to the batch's last offset once
        the batch is durable, or raises KafkaApiError. May also raise KafkaApiError at once."""

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Record batches from ``offset`` (for loading), at most about ``max_bytes``."""

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        """Register ``callback(topic, partition, leader_epoch)`` for every partition this broker
        becomes leader of."""

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        """Register ``callback(topic, partition)`` for every partition it stops leading."""

    def wait_for_high_watermark(self, topic: str, partition: int, offset: int) -> Awaitable[int]:
        """Resolves once the partition's high watermark reached ``offset`` (at once if it has);
        raises KafkaApiError if this broker stops leading it first."""


class CoordinatorShard(Protocol):
    """The state machine of one partition (Kafka's CoordinatorShard)."""

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        """Apply one record while the partition loads (the newest record per key wins).
        ``producer_id`` is the batch's producer for a transactional batch (NO_PRODUCER_ID
        otherwise): its records take effect only when the transaction's COMMIT marker is replayed."""

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id``'s transaction, replayed in log order (Kafka's
        CoordinatorShard.replayEndTransactionMarker)."""

    def on_loaded(self) -> None:
        """The load ended: the shard starts serving (timers are armed here, not during replay)."""

    def on_unloaded(self) -> None:
        """The partition is no longer led here: answer waiting requests, cancel timers."""


S = TypeVar("S", bound=CoordinatorShard)


@dataclass
class CoordinatorResult(Generic[T]):
    """What a write operation computed: records to append, the response, and the state change."""

    records: list[KeyValue] = field(default_factory=list)
    response: T | None = None
    apply: Callable[[], None] | None = None  # runs once the records are durable (or at once if none)
    # Like ``apply``, given the offset of the last record written (-1 when there are none): for
    # state that must know where its record sits in the log (Kafka's replay(recordOffset, ...)).
    apply_at: Callable[[int], None] | None = None


class CoordinatorWriteError(KafkaApiError):
    """The append of a write operation's records failed; ``code`` is the storage error."""


class PartitionState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    CLOSED = "closed"


class _Context(Generic[S]):
    """One partition: its shard, its state and its queue of write operations."""

    def __init__(self, partition: int, leader_epoch: int, shard: S) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.shard = shard
        self.state = PartitionState.LOADING
        self.queue: deque[tuple[Callable[[S], CoordinatorResult[Any]], asyncio.Future[Any]]] = deque()
        self.busy = False  # an operation's records are awaiting durability
        self.draining = False  # _drain is on the stack: a write queued by an apply waits its turn
        self.load_task: asyncio.Task[None] | None = None


class CoordinatorRuntime(Generic[S]):
    """Shards of the partitions of ``topic`` this broker leads, and their write queues."""

    def __init__(self, topic: str, writer: PartitionWriter, shard_factory: Callable[[int], S], *,
                 compression: int = 0, load_buffer_size: int = 5 * 1024 * 1024,
                 time_ms: Callable[[], int] = now_ms,
                 load_summary: Callable[[], str] | None = None, write_timeout_ms: int | None = None) -> None:
        """``write_timeout_ms``: how long a caller of ``write`` waits (None: until the write is
        durable or fails)."""
        self.topic = topic
        self.writer = writer
        self.shard_factory = shard_factory
        self.compression = compression
        self.load_buffer_size = load_buffer_size
        self.time_ms = time_ms
        self.load_summary = load_summary  # e.g. ": 12 groups", for the one INFO line per burst of loads
        self.write_timeout_ms = write_timeout_ms
        self.active = False
        self._contexts: dict[int, _Context[S]] = {}
        # One INFO line per burst of loads (start-up loads every partition: 50 lines otherwise).
        self._loads_since: float | None = None
        self._loads_done = 0

    # ==========================================================================================
    # lifecycle and ownership

    def start(self, led_partitions: Iterable[tuple[int, int]] = ()) -> None:
        """Register for leadership changes, then load ``led_partitions`` ((partition, leader epoch)
        whose leadership was decided before we registered, at start-up)."""
        self.writer.on_become_leader(self.on_become_leader)
        self.writer.on_resign(self.on_resign)
        self.active = True
        for partition, epoch in led_partitions:
            if partition not in self._contexts:
                self.on_become_leader(self.topic, partition, epoch)

    def shutdown(self) -> None:
        self.active = False
        for partition in list(self._contexts):
            self._unload(partition)

    def on_become_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != self.topic or not self.active:
            return
        current = self._contexts.get(partition)
        if current is not None:
            # Already loading or loaded here (Kafka's scheduleLoadOperation): the state is the
            # log's either way; only the epoch moves.
            current.leader_epoch = max(current.leader_epoch, leader_epoch)
            return
        ctx = _Context(partition, leader_epoch, self.shard_factory(partition))
        self._contexts[partition] = ctx
        if self._loads_since is None:
            self._loads_since = time.monotonic()
        ctx.load_task = asyncio.get_running_loop().create_task(self._load(ctx))
        ctx.load_task.add_done_callback(lambda task: self._load_done(ctx, task))

    def on_resign(self, topic: str, partition: int) -> None:
        if topic == self.topic:
            self._unload(partition)

    def reload(self) -> None:
        """Unload every partition held here and load it again with a fresh shard, at once (what a
        shard loads changed: broker/coordinator/partition_rule.py). Waiting writes get NOT_COORDINATOR,
        requests COORDINATOR_LOAD_IN_PROGRESS until the new load ends; a write already appended is
        in the log, so the new load reads it."""
        for partition, ctx in list(self._contexts.items()):
            epoch = ctx.leader_epoch
            self._unload(partition)
            self.on_become_leader(self.topic, partition, epoch)

    def _unload(self, partition: int) -> None:
        ctx = self._contexts.pop(partition, None)
        if ctx is None:
            return
        was_loading = ctx.state is PartitionState.LOADING
        ctx.state = PartitionState.CLOSED
        if ctx.load_task is not None:
            ctx.load_task.cancel()
        while ctx.queue:
            _, future = ctx.queue.popleft()
            if not future.done():
                future.set_exception(KafkaApiError(ErrorCode.NOT_COORDINATOR))
        if not was_loading:
            ctx.shard.on_unloaded()

    async def _load(self, ctx: _Context[S]) -> None:
        """Replay the partition from its log start into the shard."""
        topic, partition = self.topic, ctx.partition
        end = self.writer.log_end_offset(topic, partition)
        # Nothing is written while loading, so the end stays; the HW catches up with it as the
        # followers fetch from this new leader (no wait on one node).
        await self.writer.wait_for_high_watermark(topic, partition, end)
        offset = self.writer.log_start_offset(topic, partition)
        while offset < end:
            data = self.writer.read(topic, partition, offset, self.load_buffer_size)
            if not data:
                break
            for batch in iter_batches(data):
                self._replay_batch(ctx.shard, batch)
                offset = batch.next_offset
            await asyncio.sleep(0)  # let other requests through while a big partition loads
        if ctx.state is not PartitionState.LOADING:
            return  # resigned meanwhile
        ctx.shard.on_loaded()
        ctx.state = PartitionState.ACTIVE
        log.debug("loaded %s-%d", topic, partition)
        self._loads_done += 1
        if not any(c.state is PartitionState.LOADING for c in self._contexts.values()):
            started = self._loads_since if self._loads_since is not None else time.monotonic()
            log.info("loaded %d %s partition%s%s in %.0f ms", self._loads_done, topic,
                     "" if self._loads_done == 1 else "s", self.load_summary() if self.load_summary else "",
                     (time.monotonic() - started) * 1000)
            self._loads_since, self._loads_done = None, 0

    @staticmethod
    def _replay_batch(shard: S, batch: RecordBatch) -> None:
        """One batch into the shard, as Kafka's CoordinatorLoaderImpl hands it: a transaction
        marker (control batch) to ``replay_end_transaction_marker``, a transactional batch's records
        with their producer (pending until its marker), any other batch's records as they are."""
        if batch.is_control:
            for rec in batch.records:
                try:
                    control_type = parse_control_type(rec.key)
                except InvalidRecordError as exc:
                    log.error("skipping an unreadable control record at offset %s: %s", batch.base_offset, exc)
                    continue
                if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    shard.replay_end_transaction_marker(batch.producer_id, batch.producer_epoch,
                                                        control_type is ControlRecordType.COMMIT)
            return
        producer_id = batch.producer_id if batch.is_transactional else NO_PRODUCER_ID
        for rec in batch.records:
            shard.replay(batch.base_offset if rec.offset is None else rec.offset, rec.key, rec.value,
                         producer_id, batch.producer_epoch)

    def _load_done(self, ctx: _Context[S], task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, KafkaApiError) and exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                log.info("stopped loading %s-%d: no longer its leader", self.topic, ctx.partition)
            else:
                log.error("loading %s-%d failed", self.topic, ctx.partition, exc_info=exc)
            if self._contexts.get(ctx.partition) is ctx:
                del self._contexts[ctx.partition]
                ctx.state = PartitionState.CLOSED

    # ==========================================================================================
    # reads

    def state(self, partition: int) -> PartitionState | None:
        ctx = self._contexts.get(partition)
        return None if ctx is None else ctx.state

    def active_partitions(self) -> set[int]:
        return {p for p, ctx in self._contexts.items() if ctx.state is PartitionState.ACTIVE}

    def is_loading(self) -> bool:
        return any(ctx.state is PartitionState.LOADING for ctx in self._contexts.values())

    def check(self, partition: int) -> None:
        """Kafka's coordinator errors for a request addressed to ``partition``."""
        self._active_context(partition)

    def shard(self, partition: int) -> S:
        """The applied state of a loaded partition (for reads); Kafka's errors otherwise."""
        return self._active_context(partition).shard

    def _active_context(self, partition: int) -> _Context[S]:
        if not self.active:
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        ctx = self._contexts.get(partition)
        if ctx is None:
            raise KafkaApiError(ErrorCode.NOT_COORDINATOR)
        if ctx.state is PartitionState.LOADING:
            raise KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return ctx

    # ==========================================================================================
    # writes

    def write(self, partition: int, op: Callable[[S], CoordinatorResult[T]]) -> asyncio.Future[T]:
        """Queue a write operation; the future answers its response once its records are durable
        and applied, or its error (the op's own KafkaApiError, CoordinatorWriteError for a failed
        append, NOT_COORDINATOR if the partition is unloaded first). Already done on return when
        nothing is queued before it and durability is immediate."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            ctx = self._active_context(partition)
        except KafkaApiError as exc:
            future.set_exception(exc)
            return future
        ctx.queue.append((op, future))
        if not ctx.busy and not ctx.draining:
            self._drain(ctx)
        if not future.done() and self.write_timeout_ms is not None:
            # Only a write that waits (replication, or a queue ahead of it) pays for a timer.
            timer = asyncio.get_running_loop().call_later(self.write_timeout_ms / 1000, self._time_out, future)
            future.add_done_callback(lambda _f: timer.cancel())
        return future

    def _time_out(self, future: asyncio.Future[Any]) -> None:
        if not future.done():
            future.set_exception(CoordinatorWriteError(
                ErrorCode.REQUEST_TIMED_OUT, f"the write to {self.topic} was not durable within {self.write_timeout_ms} ms"))

    def schedule_write(self, partition: int, op: Callable[[S], CoordinatorResult[T]], what: str) -> None:
        """A write nobody awaits (timer-driven: expiry, fencing, a classic group's stored state);
        a failure is logged as ``could not <what>``."""
        def done(f: asyncio.Future[T]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("could not %s: %s", what, f.exception())

        self.write(partition, op).add_done_callback(done)

    def _drain(self, ctx: _Context[S]) -> None:
        """Run queued operations until one waits for durability or the queue is empty."""
        ctx.draining = True
        try:
            self._drain_queue(ctx)
        finally:
            ctx.draining = False

    def _drain_queue(self, ctx: _Context[S]) -> None:
        while ctx.queue and not ctx.busy and ctx.state is PartitionState.ACTIVE:
            op, future = ctx.queue.popleft()
            if future.done():
                continue  # cancelled by its caller, or timed out before its turn
            try:
                result = op(ctx.shard)
            except KafkaApiError as exc:
                future.set_exception(exc)
                continue
            except Exception as exc:
                log.exception("coordinator operation on %s-%d failed", self.topic, ctx.partition)
                future.set_exception(exc)
                continue
            if not result.records:
                self._complete(ctx, result, future, -1)
                continue
            # From here on the operation is applied once durable even if its caller goes away.
            batch = encode_batch([Record(timestamp=self.time_ms(), key=k, value=v) for k, v in result.records],
                                 compression=self.compression)
            try:
                durable = asyncio.ensure_future(self.writer.append(self.topic, ctx.partition, batch))
            except KafkaApiError as exc:
                future.set_exception(CoordinatorWriteError(exc.code, exc.message))
                continue
            if durable.done():
                self._on_durable(ctx, result, future, durable)
                continue
            ctx.busy = True
            durable.add_done_callback(functools.partial(self._on_durable_later, ctx, result, future))

    def _on_durable_later(self, ctx: _Context[S], result: CoordinatorResult[Any], future: asyncio.Future[Any],
                          durable: asyncio.Future[Any]) -> None:
        ctx.busy = False
        ctx.draining = True  # writes queued by the apply wait their turn behind the queue
        try:
            self._on_durable(ctx, result, future, durable)
            self._drain_queue(ctx)
        finally:
            ctx.draining = False

    def _on_durable(self, ctx: _Context[S], result: CoordinatorResult[Any], future: asyncio.Future[Any],
                    durable: asyncio.Future[Any]) -> None:
        # A caller that went away (its future cancelled) does not stop the apply: the records are
        # in the log, so memory must follow.
        if ctx.state is not PartitionState.ACTIVE:
            # Unloaded while the append was in flight: the next leader owns the state now.
            if not future.done():
                future.set_exception(KafkaApiError(ErrorCode.NOT_COORDINATOR))
            return
        exc = durable.exception() if not durable.cancelled() else KafkaApiError(ErrorCode.REQUEST_TIMED_OUT)
        if exc is not None:
            code = exc.code if isinstance(exc, KafkaApiError) else ErrorCode.UNKNOWN_SERVER_ERROR
            if not future.done():
                future.set_exception(CoordinatorWriteError(code, str(exc) if not isinstance(exc, KafkaApiError)
                                                           else exc.message))
            return
        self._complete(ctx, result, future, durable.result())

    @staticmethod
    def _complete(ctx: _Context[S], result: CoordinatorResult[Any], future: asyncio.Future[Any], last_offset: int) -> None:
        try:
            if result.apply is not None:
                result.apply()
            if result.apply_at is not None:
                result.apply_at(last_offset)
        except Exception as exc:
            log.exception("applying a coordinator write to partition %d failed", ctx.partition)
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result.response)
