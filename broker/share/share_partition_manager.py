"""``SharePartitionManager``: the share-partitions this broker leads and the share sessions that read
them (Kafka 4.4's SharePartitionManager and ShareSessionCache, behind ShareFetch and ShareAcknowledge).

A ShareFetch, per partition of its session: acknowledgements first, then, unless the session is
closing, the read. A read starts at the share-partition's first acquirable offset
(``SharePartition.fetch_offset``), takes the partition's whole batches below the high watermark
from the log as a ``FetchSlice`` (file bytes, sent with sendfile as a Fetch's are), and looks at
the batches' 61-byte headers only - one pread each - for their offset ranges, which
``SharePartition.acquire`` locks to the member. The records are never parsed: the slice sent may
hold offsets the member did not acquire (another member's, or acknowledged ones), and the response's
``acquired_records`` tells the client which it may deliver, as Kafka's does.

A fetch answers at once when the bytes it could acquire reach ``min_bytes`` (Kafka's
DelayedShareFetch.isMinBytesSatisfied: from each share-partition's first acquirable offset to
the high watermark, at most ``max_bytes``) and it acquired something. Otherwise it waits, without
polling, as a ``DelayedShareFetch`` (broker/share/delayed_share_fetch.py) in the replica manager's
share fetch purgatory, until an append moves a partition's high watermark, records of its
share-partitions become acquirable again (``_wake``: a release, an acknowledgement that moves the
window, an expired lock, a closed session or connection) or ``max_wait_ms`` passes; then it
acquires what there is.

Locks expire lazily, before each request touches a share-partition, and on a timer while a fetch
waits on it (nobody else can acquire in between, so nobody can tell the difference). A member's
connection closing releases its records when the socket server reports it (``on_disconnect``).

Durable state: with a ``ShareStateStore`` every change Kafka 4.4 writes (an acknowledgement, a
release, an expired lock - not an acquisition, a renewed lock or a log start offset passing the
SPSO) writes the share-partition's durable state (``SharePartition.durable_state``: the SPSO as it
stood before that change, as Kafka's write carries it) to ``__share_group_state``, and a
share-partition created here (after a restart or a leader change) starts from the state stored
there. While the state's partition loads here a
ShareFetch acquires nothing (it waits, as Kafka's share-partition does while it initializes).
Before ``__share_group_state`` exists no state is stored anywhere: the share-partition starts at
once and is written from its first change after the topic is loaded.

An acknowledgement is answered once the write carrying it is durable (``acknowledged``), as Kafka's
SharePartition answers after its persister's write: a client told NONE will not see the records
again after a crash. A write the share coordinator refuses answers Kafka's error for it
(SharePartition.fetchPersisterError: a newer leader's epoch is NOT_LEADER_OR_FOLLOWER); one not
durable within ``ACK_WRITE_TIMEOUT_S`` answers UNKNOWN_SERVER_ERROR (Kafka's persister gives up
after its retries). Kafka also rolls the share-partition's in-memory change back then; Odradek keeps
it, and a later write carries it. An acknowledgement that wrote nothing (the state partition not
served here yet, or no durable change such as a renewed lock) is answered at once.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.group.group_overrides import group_bool, group_int, group_str
from odradek.broker.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.share.delayed_share_fetch import DelayedShareFetch
from odradek.broker.share.share_metrics import ShareMetrics
from odradek.broker.share.share_partition import (
    InvalidAcknowledgement,
    InvalidRecordState,
    RecordState,
    SharePartition,
)
from odradek.broker.share.share_persister import READ_REFUSALS, SharePersister, write_outcome
from odradek.broker.share.share_session import ShareSession, ShareSessionCache
from odradek.broker.share.share_state_records import ShareState, delivery_complete_count
from odradek.broker.share.share_state_store import ShareStateStore, Where
from odradek.controller.group_configs import duration_ms
from odradek.protocol.batch_header import HEADER_SIZE, parse_header
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import monotonic_ms, now_ms
from odradek.storage.results import FetchSlice

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager

# While a share-partition's stored state loads (rare: the first fetch after a restart or a
# leadership move), a waiting fetch looks again this often: the store reports no load's end.
LOADING_RECHECK_S = 0.05
# An acknowledgement whose write is not durable by then is answered UNKNOWN_SERVER_ERROR: well
# inside the clients' request.timeout.ms (30 s by default), so the answer reaches them.
ACK_WRITE_TIMEOUT_S = 15.0
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

SharePartitionId = tuple[str, str, int]  # (group id, topic name, partition)


class StateNotReady(KafkaApiError):
    """The share-partition's stored state is not loaded yet (its __share_group_state partition is
    being created or loaded here): nothing can be acquired or acknowledged until it is."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the share-partition state is loading")


@dataclass(frozen=True)
class ShareConfig:
    """The broker-level share-group settings a share-partition follows (Kafka's defaults); a group's
    own configs (GROUP resources) override the lock duration, the delivery count limit, the
    auto offset reset and the isolation level (SharePartitionManager._lock_duration_ms and those
    below it; share.isolation.level is a group config only, read_uncommitted by default)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000
    max_sessions: int = 2000
    auto_offset_reset: str = "latest"

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> ShareConfig:
        return cls(record_lock_duration_ms=cfg["group.share.record.lock.duration.ms"],
                   delivery_count_limit=cfg["group.share.delivery.count.limit"],
                   max_in_flight=cfg["group.share.partition.max.record.locks"],
                   max_sessions=cfg["group.share.max.share.sessions"])


@dataclass
class PartitionResult:
    """One partition's part of a ShareFetch or ShareAcknowledge answer."""

    topic_id: uuid.UUID
    partition: int
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    acknowledge_error_code: int = ErrorCode.NONE
    acknowledge_error_message: str | None = None
    records: FetchSlice | None = None
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


Acks = list[tuple[int, int, list[int]]]


@dataclass
class ShareFetchRequestState:
    """What one ShareFetch asks for, kept while it waits (DelayedShareFetch)."""

    session: ShareSession
    wanted: list[PartitionResult]
    topics: dict[uuid.UUID, str]
    max_bytes: int
    max_records: int
    strict: bool
    min_bytes: int = 1
    loading: bool = False  # a share-partition's state was loading at the last look


def _settle(waiter: asyncio.Future[None], written: asyncio.Future[None]) -> None:
    """``waiter`` answers as ``written`` did."""
    if not waiter.done():
        if (error := write_outcome(written)) is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)


class SharePartitionManager:
    def __init__(self, config: ShareConfig, replica_manager: ReplicaManager, metadata: BrokerMetadata,
                 clock_ms: Callable[[], int] = now_ms,
                 store: ShareStateStore | SharePersister | None = None,
                 lock_clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.store = store
        # What was last written per stored share-partition: a change that Kafka does not persist
        # (a renewed lock) or none at all writes nothing.
        self._written: dict[SharePartitionId, tuple[int, list[tuple[int, int, int, int]]]] = {}
        # Share-partitions changed since the last write: written once at the end of the loop turn,
        # so a ShareFetch that acknowledges and acquires appends one snapshot, not two.
        self._dirty: dict[SharePartitionId, SharePartition] = {}
        # The SPSO the share coordinator holds per share-partition (restored or last written): a
        # write carries the SPSO before its change, so this trails the one in memory.
        self._stored_start: dict[SharePartitionId, int] = {}
        # The latest write per share-partition, until it is durable; and the acknowledgements
        # waiting for the write of the coming flush (``acknowledged``).
        self._last_write: dict[SharePartitionId, asyncio.Future[None]] = {}
        self._flush_waiters: dict[SharePartitionId, asyncio.Future[None]] = {}
        self.replica_manager = replica_manager
        self.metadata = metadata
        # Two clocks, as Kafka's: the wall clock for what is a date (the state's timestamps,
        # share.auto.offset.reset=by_duration), and a monotonic one for acquisition locks (Kafka's
        # SharePartition times them with Time.hiResClockMs), so that a step of the system clock
        # neither expires a live member's records at once nor keeps them locked for the step.
        self.clock_ms = clock_ms
        self.lock_clock_ms = lock_clock_ms
        self.sessions = ShareSessionCache(config.max_sessions)
        self.partitions: dict[SharePartitionId, SharePartition] = {}
        # Kafka's share metrics (broker/share/share_metrics.py), served when /metrics is on.
        self.metrics = ShareMetrics()

    # ------------------------------------------------------------------------------------------
    # sessions

    def open_session(self, group_id: str, member_id: str, conn: Any) -> ShareSession:
        self.release_closed_sessions()
        # A session the member had is replaced, not closed: what it holds stays its own, to
        # acknowledge on the new one (Kafka's newContext drops the old session and releases nothing).
        session = self.sessions.open(group_id, member_id, conn)
        self._drop_idle(group_id, session)
        return session

    def _drop_idle(self, group_id: str, session: ShareSession) -> None:
        """A member opens a session: the group's share-partitions that nobody else reads, that hold
        nothing acquired and whose state is all written are dropped, to be read again from the
        share coordinator on first use. Their state may have been replaced there meanwhile: an
        AlterShareGroupOffsets of the empty group, served by its group coordinator on another
        broker, initializes it anew (with the next state epoch) - as Kafka's leaders drop an
        empty group's share-partitions and read them again."""
        if any(s.group_id == group_id and s is not session for s in self.sessions.sessions.values()):
            return
        for key in [k for k in self.partitions if k[0] == group_id]:
            sp = self.partitions[key]
            state_key = self._state_key(key)
            if (key in self._dirty or any(r.state is RecordState.ACQUIRED for r in sp.ranges)
                    or self._written.get(key) != sp.durable_state()
                    or state_key is None or (isinstance(self.store, SharePersister) and not self.store.idle(state_key))):
                continue
            del self.partitions[key]
            self._written.pop(key, None)
            self._stored_start.pop(key, None)

    def continue_session(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        self.release_closed_sessions()
        return self.sessions.get(group_id, member_id, epoch)

    def close_session(self, session: ShareSession) -> None:
        """The member closed its session (epoch -1): what it still holds goes back at once."""
        self.sessions.remove(session)
        self._release_session(session)

    def forget(self, session: ShareSession, topic: str, partition: int) -> None:
        """A partition the member no longer fetches from here. What it holds there stays its own
        until it acknowledges it, its session closes or the locks expire, as in Kafka: a client
        forgets a partition the assignment moved away and still acknowledges the records it
        already handed out - released here, they would be delivered twice."""
        session.partitions.pop((topic, partition), None)

    def on_disconnect(self) -> None:
        """A client connection closed (the socket server's disconnect listener): a member's records
        go back now, so that fetches waiting on them get them (Kafka's ShareSessionCache
        ConnectionDisconnectListener). Without waiting fetches the next request does it."""
        if self.purgatory.delayed:
            self.release_closed_sessions()

    def release_closed_sessions(self) -> None:
        for session in self.sessions.closed_connections():
            self._release_session(session)

    def _release_session(self, session: ShareSession) -> None:
        for topic, partition in session.partitions:
            sp = self.partitions.get((session.group_id, topic, partition))
            if sp is not None and sp.release_member(session.member_id):
                self._persist(sp)
                self._wake(sp)

    # ------------------------------------------------------------------------------------------
    # acknowledging

    def acknowledge(self, session: ShareSession, topic: str, partition: int, acks: Acks) -> tuple[int, str | None]:
        """Apply one partition's acknowledgement batches; (error code, message) of the outcome."""
        try:
            sp = self._share_partition(session.group_id, topic, partition)
            sp.acknowledge(session.member_id, acks, self.lock_clock_ms(), self._lock_duration_ms(session.group_id),
                           self._renew_enabled(session.group_id))
            self.metrics.records_acknowledged(acks)
            self._persist(sp)
            self._wake(sp)  # released records, or room in the in-flight window
        except InvalidRecordState as exc:
            return ErrorCode.INVALID_RECORD_STATE, str(exc)
        except InvalidAcknowledgement as exc:
            return ErrorCode.INVALID_REQUEST, str(exc)
        except KafkaApiError as exc:
            return exc.code, exc.message
        return ErrorCode.NONE, None

    def durability(self, group_id: str, topic: str, partition: int) -> asyncio.Future[None] | None:
        """What an acknowledgement applied in this loop turn waits for before it is answered: the
        write of the share-partition's coming flush (or the one still in flight, when the flush has
        nothing new to write); None when nothing is to be written."""
        if self.store is None:
            return None
        key = (group_id, topic, partition)
        if key in self._dirty:
            waiter = self._flush_waiters.get(key)
            if waiter is None:
                waiter = self._flush_waiters[key] = asyncio.get_running_loop().create_future()
            return waiter
        return self._in_flight(key)

    def _in_flight(self, key: SharePartitionId) -> asyncio.Future[None] | None:
        """The share-partition's latest write, while it is not yet durable."""
        last = self._last_write.get(key)
        return last if last is not None and not last.done() else None

    async def acknowledged(self, durable: asyncio.Future[None] | None, deadline: float) -> tuple[int, str | None]:
        """The answer to an acknowledgement once ``durable`` (from ``durability``) is settled, by
        ``deadline`` (time.monotonic())."""
        if durable is None:
            return ErrorCode.NONE, None
        try:
            await asyncio.wait_for(asyncio.shield(durable), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return (ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"the share state was not written within {ACK_WRITE_TIMEOUT_S:.0f} s")
        except KafkaApiError as exc:
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:  # (_flush: the share-partition left)
                return exc.code, exc.message
            # Kafka's SharePartition.fetchPersisterError, with the coordinator's message.
            return READ_REFUSALS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR), exc.message
        return ErrorCode.NONE, None

    # ------------------------------------------------------------------------------------------
    # fetching

    @property
    def purgatory(self) -> DelayedOperationPurgatory[DelayedOperation]:
        """Where waiting ShareFetches wait (the replica manager's, which appends check)."""
        return self.replica_manager.share_fetch_purgatory

    async def fetch(self, session: ShareSession, wanted: list[PartitionResult], topics: dict[uuid.UUID, str],
                    max_wait_ms: int, max_bytes: int, max_records: int, strict: bool,
                    min_bytes: int = 1) -> list[PartitionResult]:
        """Acquire records of ``wanted`` for the session's member, waiting up to ``max_wait_ms``
        for ``min_bytes`` to acquire; fills each result's records/acquired or error."""
        self.release_closed_sessions()
        state = ShareFetchRequestState(session, wanted, topics, max_bytes, max_records, strict, max(1, min_bytes))
        keys: list[Hashable] = []
        for result in wanted:
            if result.error_code == ErrorCode.NONE:
                topic = topics[result.topic_id]
                keys += [(topic, result.partition), (session.group_id, topic, result.partition)]
        if not keys:
            if not wanted and max_wait_ms > 0:
                await asyncio.sleep(max_wait_ms / 1000)  # nothing to fetch from: Kafka waits too
            return wanted
        if max_wait_ms <= 0:
            self.try_share_fetch(state, True)
            return wanted
        op = DelayedShareFetch(state, max_wait_ms, self.try_share_fetch)
        if not self.purgatory.try_complete_else_watch(op, keys):
            self._arm_wake(op)
            await op.answer
        return wanted

    def try_share_fetch(self, state: ShareFetchRequestState, final: bool) -> bool:
        """One look of a (possibly waiting) fetch: True when it should answer now. Acquires when
        ``min_bytes`` could be acquired, or, ``final`` (max_wait_ms passed), whatever there is."""
        session = state.session
        if (self.sessions.sessions.get((session.group_id, session.member_id)) is not session
                or getattr(session.conn, "closed", False)):
            return True  # the session was closed or replaced, or its connection went: answer empty
        if not final and state.min_bytes > 1:
            available = self._acquirable_bytes(state)
            if available is not None and available < state.min_bytes:
                return False
        got, state.loading = self._read_all(session, state.wanted, state.topics, state.max_bytes, state.max_records,
                                            state.strict)
        return got

    def _acquirable_bytes(self, state: ShareFetchRequestState) -> int | None:
        """The bytes from each share-partition's first acquirable offset to the high watermark, at
        most max_bytes in all; None when a partition has an error to answer at once."""
        total = 0
        for result in state.wanted:
            if result.error_code != ErrorCode.NONE or result.acquired:
                return None
            try:
                sp = self._share_partition(state.session.group_id, state.topics[result.topic_id], result.partition)
                part = self.replica_manager.leader_partition(sp.topic, sp.partition)
            except StateNotReady:
                continue
            except KafkaApiError:
                return None
            offset = sp.fetch_offset()
            isolation = self._isolation(state.session.group_id)
            if offset is not None and offset < part.fetch_bound(isolation):
                total += part.read(offset, state.max_bytes, isolation, True).size
        return total

    def _arm_wake(self, op: DelayedShareFetch[ShareFetchRequestState]) -> None:
        """While ``op`` waits: a timer for the earliest acquisition lock of its share-partitions
        (the records come back when it expires) or, while a state loads, a look again soon."""
        state = op.state
        deadlines = []
        for result in state.wanted:
            sp = self.partitions.get((state.session.group_id, state.topics.get(result.topic_id, ""), result.partition))
            deadline = sp.next_deadline() if sp is not None else None
            if deadline is not None:
                deadlines.append(deadline)
        delay_s = (min(deadlines) - self.lock_clock_ms()) / 1000 if deadlines else None
        if state.loading:
            delay_s = LOADING_RECHECK_S if delay_s is None else min(delay_s, LOADING_RECHECK_S)
        if delay_s is not None:
            op.wake_at(delay_s, lambda: self._on_wake(op))

    def _on_wake(self, op: DelayedShareFetch[ShareFetchRequestState]) -> None:
        if op.is_completed:
            return
        state = op.state
        now = self.lock_clock_ms()
        for result in state.wanted:
            sp = self.partitions.get((state.session.group_id, state.topics.get(result.topic_id, ""), result.partition))
            if sp is not None and sp.expire_locks(now):
                self._persist(sp)
                self._wake(sp)
        # (answer.done(): the wake-ups above may have completed it)
        if not op.answer.done() and state.loading:
            op.try_complete()
        if not op.answer.done():
            self._arm_wake(op)

    def _wake(self, sp: SharePartition) -> None:
        """Records of ``sp`` may be acquirable again: fetches waiting on it look (Kafka's
        DelayedShareFetchGroupKey)."""
        purgatory = self.purgatory
        if purgatory.delayed:
            purgatory.check_and_complete((sp.group_id, sp.topic, sp.partition))

    def _read_all(self, session: ShareSession, wanted: list[PartitionResult], topics: dict[uuid.UUID, str],
                  max_bytes: int, max_records: int, strict: bool) -> tuple[bool, bool]:
        """(acquired something or met an error, a share-partition's state is still loading)."""
        got = loading = False
        bytes_left, records_left = max_bytes, max_records
        for result in wanted:
            if result.error_code != ErrorCode.NONE or result.acquired or bytes_left <= 0 or records_left <= 0:
                got = got or bool(result.acquired) or result.error_code != ErrorCode.NONE
                continue
            try:
                self._read(session, result, topics[result.topic_id], bytes_left, records_left, strict)
            except StateNotReady:
                loading = True
                continue  # nothing to acquire yet: the fetch waits and looks again
            except KafkaApiError as exc:
                result.error_code, result.error_message = exc.code, exc.message
                got = True
                continue
            if result.acquired:
                got = True
                bytes_left -= result.records.size if result.records is not None else 0
                records_left -= sum(last - first + 1 for first, last, _ in result.acquired)
        return got, loading

    def _read(self, session: ShareSession, result: PartitionResult, topic: str, max_bytes: int, max_records: int,
              strict: bool) -> None:
        sp = self._share_partition(session.group_id, topic, result.partition)
        part = self.replica_manager.leader_partition(topic, result.partition)
        if sp.start_offset < part.log_start_offset:
            # Retention deleted records the group had not read. Kafka moves the SPSO without a
            # write; the next write carries it.
            sp.reset_start(part.log_start_offset)
        offset = sp.fetch_offset()
        isolation = self._isolation(session.group_id)
        if offset is None or offset >= part.fetch_bound(isolation):
            return
        piece = part.read(offset, max_bytes, isolation, True)
        if piece.size == 0 or piece.file is None:
            return
        batches = _batch_headers(piece)
        acquired = sp.acquire(session.member_id, ((base, last) for _, _, base, last in batches), max_records,
                              self.lock_clock_ms(), self._lock_duration_ms(session.group_id), strict)
        if acquired and isolation == READ_COMMITTED:
            acquired = self._archive_aborted(sp, session.member_id, part, offset, piece, acquired)
        if isolation == READ_COMMITTED:
            self._persist(sp)  # aborted records archived (nothing, unless the read met an aborted transaction)
        if not acquired:
            return
        # (An acquisition is not written: Kafka's share-partition persists none.)
        # Send the batches from the first to the last holding an acquired offset, no more.
        first, last = acquired[0][0], acquired[-1][1]
        inside = [b for b in batches if b[3] >= first and b[2] <= last]
        start, end = inside[0][0], inside[-1][0] + inside[-1][1]
        result.records = FetchSlice(piece.file, piece.position + start, end - start, inside[0][2], inside[-1][3] + 1)
        result.acquired = acquired

    def _share_partition(self, group_id: str, topic: str, partition: int) -> SharePartition:
        key = (group_id, topic, partition)
        sp = self.partitions.get(key)
        if sp is None:
            part = self.replica_manager.leader_partition(topic, partition)
            stored = self._stored_state(key)
            if stored is not None:
                sp = SharePartition.restore(group_id, topic, partition, stored.start_offset, stored.batches,
                                            self._delivery_count_limit(group_id), self._max_record_locks(group_id))
                self._written[key] = sp.durable_state()
                self._stored_start[key] = stored.start_offset
            else:
                self._stored_start.pop(key, None)
                start = self._initial_offset(group_id, part)
                sp = SharePartition(group_id, topic, partition, start, self._delivery_count_limit(group_id),
                                    self._max_record_locks(group_id))
            self.partitions[key] = sp
        if sp.expire_locks(self.lock_clock_ms()):
            self._persist(sp)
            self._wake(sp)
        elif key not in self._written:
            self._persist(sp)  # (not written yet: __share_group_state was still being created)
        return sp

    # The group's own configs (GROUP resources, odradek.broker.group.group_overrides) over the broker's,
    # read at each use as Kafka's GroupConfigManager is: the lock duration at each acquisition and
    # acknowledgement, whether RENEW is allowed at each acknowledgement, the isolation level at each
    # read, the delivery count limit, the in-flight record limit and the start offset when a
    # share-partition is created.
    def _lock_duration_ms(self, group_id: str) -> int:
        return group_int(self.metadata, group_id, "share.record.lock.duration.ms", self.config.record_lock_duration_ms)

    def _renew_enabled(self, group_id: str) -> bool:
        """share.renew.acknowledge.enable: a group config only, true by default (Kafka's
        ShareGroupConfigProvider.isRenewAcknowledgeEnabled)."""
        return group_bool(self.metadata, group_id, "share.renew.acknowledge.enable", True)

    def _delivery_count_limit(self, group_id: str) -> int:
        return group_int(self.metadata, group_id, "share.delivery.count.limit", self.config.delivery_count_limit)

    def _max_record_locks(self, group_id: str) -> int:
        return group_int(self.metadata, group_id, "share.partition.max.record.locks", self.config.max_in_flight)

    def _isolation(self, group_id: str) -> int:
        level = group_str(self.metadata, group_id, "share.isolation.level", "read_uncommitted")
        return READ_COMMITTED if level == "read_committed" else READ_UNCOMMITTED

    def _archive_aborted(self, sp: SharePartition, member_id: str, part: Any, offset: int, piece: FetchSlice,
                         acquired: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """share.isolation.level=read_committed (Kafka's filterAbortedTransactionalAcquiredRecords): the
        acquired offsets of aborted transactions' batches are archived, never delivered; the rest stay
        acquired. Only reads that overlap an aborted transaction look at the batches' producers."""
        aborted = part.aborted_transactions(offset, piece)
        if not aborted:
            return acquired
        ranges = _aborted_ranges(piece, aborted)
        dropped = [(max(f, a), min(t, b)) for a, b in ranges for f, t, _ in acquired if max(f, a) <= min(t, b)]
        if not dropped:
            return acquired
        sp.acknowledge(member_id, [(f, t, [0]) for f, t in dropped], self.lock_clock_ms(), 0)  # 0: GAP, archived
        kept: list[tuple[int, int, int]] = []
        for first, last, count in acquired:
            pieces = [(first, last)]
            for a, b in ranges:
                pieces = [p for lo, hi in pieces for p in ((lo, min(hi, a - 1)), (max(lo, b + 1), hi)) if p[0] <= p[1]]
            kept += [(lo, hi, count) for lo, hi in pieces]
        return kept

    def _initial_offset(self, group_id: str, part: Any) -> int:
        """share.auto.offset.reset: earliest, latest, or by_duration (the first record at most that old;
        the high watermark when there is none)."""
        reset = group_str(self.metadata, group_id, "share.auto.offset.reset", self.config.auto_offset_reset)
        if reset == "earliest":
            return int(part.log_start_offset)
        if reset.startswith("by_duration:"):
            since = self.clock_ms() - duration_ms(reset[len("by_duration:"):])
            offset = part.fetch_offset_for_timestamp(since, READ_UNCOMMITTED)[0]
            return int(offset) if offset >= 0 else int(part.high_watermark)
        return int(part.high_watermark)

    def _state_key(self, sp_key: SharePartitionId) -> tuple[str, uuid.UUID, int] | None:
        topic = self.metadata.image.topics.get(sp_key[1])
        return None if topic is None else (sp_key[0], topic.topic_id, sp_key[2])

    def _stored_state(self, key: SharePartitionId) -> ShareState | None:
        """The stored state of a share-partition about to be created here; StateNotReady while
        its __share_group_state partition is loading here; None when there is none (no store,
        no __share_group_state yet, or another broker leads its partition)."""
        state_key = self._state_key(key)
        if self.store is None or state_key is None:
            return None
        where = self.store.where(state_key)
        if where is Where.WAIT:
            raise StateNotReady()
        return self.store.read(state_key) if where is Where.READY else None

    def _persist(self, sp: SharePartition) -> None:
        """Write the share-partition's durable state, if it changed since the last write, once
        the current loop turn ends (before any other request runs)."""
        if self.store is None:
            return
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._flush)
        self._dirty[(sp.group_id, sp.topic, sp.partition)] = sp

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, {}
        waiters, self._flush_waiters = self._flush_waiters, {}
        for key, sp in dirty.items():
            waiter = waiters.get(key)
            if self.partitions.get(key) is not sp:  # resigned or deleted meanwhile
                if waiter is not None:
                    waiter.set_exception(KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                       "the share-partition left this broker before its state was written"))
                continue
            # Nothing new to write: the write in flight, if any, carries the change.
            written = self._write(key, sp) or self._in_flight(key)
            if waiter is not None:
                if written is None:
                    waiter.set_result(None)
                else:
                    written.add_done_callback(functools.partial(_settle, waiter))

    def _write(self, key: SharePartitionId, sp: SharePartition) -> asyncio.Future[None] | None:
        """Write the share-partition's durable state if it changed since the last write; the
        write's future (None: nothing was written)."""
        assert self.store is not None
        state_key = self._state_key(key)
        durable = sp.durable_state()
        if state_key is None or self._written.get(key) == durable:
            return None
        part = self.metadata.image.partition(sp.topic, sp.partition)
        now = self.clock_ms()
        written = self.store.write(state_key, ShareState(
            durable[0], leader_epoch=part.leader_epoch if part else 0, create_timestamp=now, write_timestamp=now,
            batches=durable[1], delivery_complete_count=delivery_complete_count(*durable)))
        if written is None:
            return None
        self._written[key] = durable
        self._stored_start[key] = durable[0]
        self._last_write[key] = written
        written.add_done_callback(functools.partial(self._write_done, key, durable))
        return written

    def _write_done(self, key: SharePartitionId, durable: tuple[int, list[tuple[int, int, int, int]]],
                    written: asyncio.Future[None]) -> None:
        if self._last_write.get(key) is written:
            del self._last_write[key]
        if (written.cancelled() or written.exception() is not None) and self._written.get(key) == durable:
            # Not durable: the next change writes the whole state again.
            self._written.pop(key, None)

    # ------------------------------------------------------------------------------------------
    # leadership

    def on_resign(self, topic: str, partition: int) -> None:
        """This broker no longer leads the partition: its share-partitions go (kept in memory only)."""
        for key in [k for k in self.partitions if k[1] == topic and k[2] == partition]:
            del self.partitions[key]
            self._written.pop(key, None)
            self._stored_start.pop(key, None)

    def alter_start_offset(self, group_id: str, topic: str, partition: int, offset: int) -> None:
        """AlterShareGroupOffsets on an empty group: the share-partition starts over at ``offset``
        (nothing is in flight: no member holds anything). KafkaApiError when this broker does not
        lead the partition."""
        part = self.replica_manager.leader_partition(topic, partition)
        if not part.log_start_offset <= offset <= part.high_watermark:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                f"start offset {offset} is outside {part.log_start_offset}-{part.high_watermark}")
        sp = self.partitions[(group_id, topic, partition)] = SharePartition(
            group_id, topic, partition, offset, self._delivery_count_limit(group_id), self._max_record_locks(group_id))
        self._stored_start.pop((group_id, topic, partition), None)
        self._persist(sp)
        self._wake(sp)

    def delete_state(self, group_id: str, topic: str) -> None:
        """DeleteShareGroupOffsets: the group's share-partitions of ``topic`` are forgotten; the next
        ShareFetch starts them again at share.auto.offset.reset."""
        for key in [k for k in self.partitions if k[0] == group_id and k[1] == topic]:
            del self.partitions[key]
            self._written.pop(key, None)
            self._stored_start.pop(key, None)
        image = self.metadata.image.topics.get(topic)
        if self.store is not None and image is not None:
            for partition in image.partitions:
                self.store.delete((group_id, image.topic_id, partition))

    def start_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """The SPSO of a share-partition this broker has (None: the group never read it here)."""
        sp = self.partitions.get((group_id, topic, partition))
        return None if sp is None else sp.start_offset

    def stored_start_offset(self, sp: SharePartition) -> int:
        """The SPSO the share coordinator holds for ``sp`` (what Kafka's DescribeShareGroupOffsets
        answers, from ReadShareGroupStateSummary): the one its last write carried, or the one it
        was restored from - behind ``sp.start_offset`` until a write catches up."""
        return self._stored_start.get((sp.group_id, sp.topic, sp.partition), sp.write_start)


def _aborted_ranges(piece: FetchSlice, aborted: list[Any]) -> list[tuple[int, int]]:
    """(base, last offset) of each transactional data batch of ``piece`` that an aborted transaction
    (AbortedTxn: producer id, first offset, the abort marker's offset) holds."""
    assert piece.file is not None
    out = []
    pos = 0
    while piece.size - pos >= HEADER_SIZE:
        header = parse_header(os.pread(piece.file.fd, HEADER_SIZE, piece.position + pos))
        if pos + header.size > piece.size:
            break
        base, last = header.base_offset, header.base_offset + header.last_offset_delta
        if header.is_transactional and not header.is_control and any(
                a.producer_id == header.producer_id and a.first_offset <= base <= a.last_offset for a in aborted):
            out.append((base, last))
        pos += header.size
    return out


def _batch_headers(piece: FetchSlice) -> list[tuple[int, int, int, int]]:
    """(position in the slice, size, base offset, last offset) of each whole batch of ``piece``,
    from the headers alone."""
    assert piece.file is not None
    out = []
    pos = 0
    fd = piece.file.fd
    while piece.size - pos >= HEADER_SIZE:
        raw = os.pread(fd, HEADER_SIZE, piece.position + pos)
        if len(raw) < HEADER_SIZE:
            break
        header = parse_header(raw)
        if pos + header.size > piece.size:
            break
        out.append((pos, header.size, header.base_offset, header.base_offset + header.last_offset_delta))
        pos += header.size
    return out
