"""Replica fetchers: the follower half of replication (Kafka's ReplicaFetcherManager,
AbstractFetcherThread and ReplicaFetcherThread).

For every partition this broker hosts as a follower, a fetcher copies the leader's log: one
:class:`ReplicaFetcher` (an asyncio task with one pipelined ``NodeClient`` connection) per source
broker and fetcher id (``num.replica.fetchers``, a partition's id by hash, as Kafka's
``getFetcherId``) multiplexes all partitions led there. A partition goes through two states:

1. **Truncating** (KIP-101/279): an OffsetForLeaderEpoch request asks the leader where our latest
   epoch ends in its log; the follower truncates to the smaller of that and its own end for that
   epoch (one more round when the leader answers an epoch the follower does not have), or to its
   high watermark when the leader has no answer or the follower's log has no epoch.
2. **Fetching**: Fetch requests (v15, this broker's id in ``replica_state``, KIP-903) from the log
   end, in a fetch session (KIP-227, broker/replica/follower_fetch_session.py: after the first
   Fetch only the partitions whose fetch state changed are named, and the leader answers only
   those with news); the batches are appended as they are (``Partition.append_records_to_follower``: offsets
   and epochs kept, no record is decoded) and the follower's HW becomes min(leader HW, own log
   end). The leader's log start offset is followed.

Errors as Kafka's fetcher treats them: OFFSET_OUT_OF_RANGE truncates (below the leader's log start:
start over there; above its log: back to the leader's HW) and fetches again; FENCED_LEADER_EPOCH
drops the partition until the next metadata gives it a new leader epoch; NOT_LEADER_OR_FOLLOWER,
UNKNOWN_LEADER_EPOCH and the like (the leader has not seen the metadata yet) and a lost
connection retry after ``replica.fetch.backoff.ms``.

The replica manager owns the manager (broker/replica/replica_manager.py): on each metadata change
it adds the partitions that became followers (or got a new leader epoch) and removes those that
became leaders or went away. Everything runs on the handler loop, as the leader's appends do; the
blocking truncations run on the IO pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.network.inter_broker_client import NodeClient, NodeUnavailableError
from odradek.broker.replica.follower_fetch_session import FollowerFetchSession
from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.replica.partition import Partition
    from odradek.protocol.messages import (
        FetchRequest,
        FetchRequestFetchPartition,
        FetchRequestFetchTopic,
        FetchRequestForgottenTopic,
        FetchResponse,
        FetchResponsePartitionData,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        OffsetForLeaderPartition,
    )

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

FETCH_KEY, FETCH_VERSION = 1, 15  # v15: replica_state (KIP-903), topic ids
OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION = 23, 4
UNDEFINED = -1

# The leader lost or refused this fetcher's fetch session: the next Fetch opens another.
_SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})

# The leader has not caught up with the metadata (or is moving): retry after the backoff.
_RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER,
})


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The replica.* settings a fetcher uses (Kafka's names)."""

    max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes, per partition
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000  # replica.socket.timeout.ms
    num_fetchers: int = 1  # num.replica.fetchers
    socket_receive_buffer_bytes: int = 64 * 1024  # replica.socket.receive.buffer.bytes (-1: OS default)

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> FetcherConfig:
        return cls(config["replica.fetch.max.bytes"], config["replica.fetch.min.bytes"],
                   config["replica.fetch.wait.max.ms"], config["replica.fetch.response.max.bytes"],
                   config["replica.fetch.backoff.ms"], config["replica.socket.timeout.ms"],
                   max(1, config["num.replica.fetchers"]), config["replica.socket.receive.buffer.bytes"])


class FollowerHost(Protocol):
    """What the fetchers need of the replica manager."""

    node_id: int

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if it is still a follower here under ``leader_epoch`` (else None)."""

    def broker_epoch(self) -> int:
        """This broker's registration epoch (KIP-903's replica_state.replica_epoch), -1 if unknown."""

    def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run ``fn`` on the IO pool."""

    def follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        """A followed partition's HW moved: wake what waits on it."""


@dataclass(slots=True)
class PartitionFetchState:
    """Where one follower partition stands (Kafka's PartitionFetchState)."""

    topic_id: uuid.UUID
    leader_epoch: int
    fetch_offset: int
    truncating: bool = True
    delayed_until: float = 0.0  # time.monotonic() before which it is not fetched (after an error)


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a source broker's fetchers serves ``tp`` (Kafka's getFetcherId: a stable hash)."""
    return (31 * zlib.crc32(tp[0].encode()) + tp[1]) % num_fetchers


class ReplicaFetcher:
    """Fetches every partition led by one source broker (Kafka's ReplicaFetcherThread)."""

    def __init__(self, source_broker: int, fetcher_index: int, host: str, port: int, config: FetcherConfig,
                 follower_host: FollowerHost) -> None:
        self.source_broker = source_broker
        self.host, self.port = host, port
        self.config = config
        self._follower_host = follower_host
        node_id = follower_host.node_id
        self.client = NodeClient(host, port, f"broker-{node_id}-fetcher-{fetcher_index}",
                                 timeout_s=config.socket_timeout_ms / 1000,
                                 receive_buffer_bytes=config.socket_receive_buffer_bytes)
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self.session = FollowerFetchSession()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.source_broker} at {self.host}:{self.port}, {len(self.partitions)} partitions)"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=repr(self))

    def add(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        self.partitions[tp] = state
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            # asyncio.wait_for (3.11) can swallow a cancellation that races its inner future's
            # completion: cancel until the task is really done (the flag ends its loop too).
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
        await self.client.close()

    # -- the loop (Kafka's AbstractFetcherThread.doWork) ---------------------------------------

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await self._do_work()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop replication for good: log, back off, go on
                log.exception("%r failed; retrying after replica.fetch.backoff.ms", self)
                self._delay(list(self.partitions.values()))
                await asyncio.sleep(self.config.backoff_ms / 1000)

    async def _do_work(self) -> None:
        if not self.partitions:
            self._wakeup.clear()
            await self._wakeup.wait()
            return
        now = time.monotonic()
        due = {tp: s for tp, s in self.partitions.items() if s.delayed_until <= now}
        truncating = {tp: s for tp, s in due.items() if s.truncating}
        if truncating:
            await self._truncate(truncating)
            return
        if due:
            await self._fetch(due)
            return
        # Every partition is backing off: sleep until the first is due (or one is added).
        self._wakeup.clear()
        wait = min(s.delayed_until for s in self.partitions.values()) - now
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), max(wait, 0.001))

    def _delay(self, states: list[PartitionFetchState]) -> None:
        until = time.monotonic() + self.config.backoff_ms / 1000
        for s in states:
            s.delayed_until = until

    def _current(self, tp: TopicPartition, state: PartitionFetchState) -> Partition | None:
        """The partition if ``state`` is still this fetcher's for it and it is still a follower."""
        if self.partitions.get(tp) is not state:
            return None
        part = self._follower_host.follower_partition(tp, state.leader_epoch)
        if part is None:
            self.partitions.pop(tp, None)
        return part

    async def _truncate_to(self, part: Partition, offset: int) -> None:
        if offset < part.log_end_offset:
            log.info("Truncating %s-%d to offset %d (log end %d)", part.topic, part.index, offset,
                     part.log_end_offset)
            await self._follower_host.run_blocking(part.truncate_to, offset)
        part.after_truncation()

    # -- truncation (KIP-101/279) ---------------------------------------------------------------

    async def _truncate(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        asked: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, state in states.items():
            part = self._current(tp, state)
            if part is None:
                continue
            latest = part.log.latest_epoch
            if latest < 0:
                # No epoch in our log (empty, or written before epochs): truncate to the HW.
                await self._finish_truncation(tp, state, part, part.high_watermark)
            else:
                asked[tp] = (state, latest)
        if not asked:
            return
        by_topic: dict[str, list[OffsetForLeaderPartition]] = {}
        for (topic, index), (state, latest) in asked.items():
            by_topic.setdefault(topic, []).append(
                {"partition": index, "current_leader_epoch": state.leader_epoch, "leader_epoch": latest})
        body: OffsetForLeaderEpochRequest = {"replica_id": self._follower_host.node_id,
                                              "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        try:
            response: OffsetForLeaderEpochResponse = await self.client.request(
                OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION, body)
        except NodeUnavailableError as exc:
            log.info("OffsetForLeaderEpoch to broker %d failed (%s); retrying", self.source_broker, exc)
            self._delay([s for s, _ in asked.values()])
            return
        for t in response["topics"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                entry = asked.get(tp)
                if entry is None:
                    continue
                state = entry[0]
                part = self._current(tp, state)
                if part is None:
                    continue
                code = p["error_code"]
                if code != ErrorCode.NONE:
                    self._on_partition_error(tp, state, code, "OffsetForLeaderEpoch")
                    continue
                await self._truncate_by_epoch(tp, state, part, p["leader_epoch"], p["end_offset"])

    async def _truncate_by_epoch(self, tp: TopicPartition, state: PartitionFetchState, part: Partition,
                                 leader_epoch: int, leader_end: int) -> None:
        """Kafka's getOffsetTruncationState."""
        log_end = part.log_end_offset
        log.info("%s-%d: the leader's epoch %d ends at offset %d (our log end %d)", *tp, leader_epoch,
                 leader_end, log_end)
        if leader_epoch == UNDEFINED or leader_end == UNDEFINED:
            # The leader does not know our epoch (KIP-101's fallback): the HW is safe.
            await self._finish_truncation(tp, state, part, part.high_watermark)
            return
        follower_epoch, follower_end = part.log.end_offset_for_epoch(leader_epoch)
        if follower_epoch == UNDEFINED:
            # We have nothing at or below the leader's epoch: its end offset bounds our log.
            await self._finish_truncation(tp, state, part, min(leader_end, log_end))
        elif follower_epoch != leader_epoch:
            # We do not have the epoch the leader answered: cut to where our largest smaller
            # epoch ends, and ask again with the epoch that leaves (KIP-279).
            await self._truncate_to(part, min(follower_end, log_end))
            state.fetch_offset = part.log_end_offset
        else:
            await self._finish_truncation(tp, state, part, min(follower_end, leader_end, log_end))

    async def _finish_truncation(self, tp: TopicPartition, state: PartitionFetchState, part: Partition,
                                 offset: int) -> None:
        await self._truncate_to(part, offset)
        if self.partitions.get(tp) is state:
            state.fetch_offset = part.log_end_offset
            state.truncating = False

    # -- fetching -------------------------------------------------------------------------------

    async def _fetch(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        cfg = self.config
        names: dict[uuid.UUID, str] = {}
        wanted: dict[TopicPartition, tuple[uuid.UUID, FetchRequestFetchPartition]] = {}
        asked: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, state in states.items():
            part = self._current(tp, state)
            if part is None:
                continue
            names[state.topic_id] = tp[0]
            wanted[tp] = (state.topic_id, {
                "partition": tp[1], "current_leader_epoch": state.leader_epoch, "fetch_offset": state.fetch_offset,
                "last_fetched_epoch": -1, "log_start_offset": part.log_start_offset,
                "partition_max_bytes": cfg.max_bytes, "replica_directory_id": ZERO_UUID,
            })
            asked[tp] = (state, state.fetch_offset)
        if not asked:
            return
        # The fetch session (KIP-227): after the first Fetch, only what changed is named; the
        # leader answers every partition of the session that has news, so ``asked`` keeps them all.
        session = self.session
        to_send, to_forget = session.build(wanted)
        topics: dict[uuid.UUID, FetchRequestFetchTopic] = {}
        for (topic, _), (topic_id, partition) in to_send.items():
            entry = topics.get(topic_id)
            if entry is None:
                entry = topics[topic_id] = {"topic": topic, "topic_id": topic_id, "partitions": []}
            entry["partitions"].append(partition)
        forgotten: dict[uuid.UUID, FetchRequestForgottenTopic] = {}
        for (topic, index), topic_id in to_forget.items():
            gone = forgotten.get(topic_id)
            if gone is None:
                gone = forgotten[topic_id] = {"topic": topic, "topic_id": topic_id, "partitions": []}
            gone["partitions"].append(index)
        body: FetchRequest = {
            "cluster_id": None, "replica_id": -1,
            "replica_state": {"replica_id": self._follower_host.node_id,
                              "replica_epoch": self._follower_host.broker_epoch()},
            "max_wait_ms": cfg.max_wait_ms, "min_bytes": cfg.min_bytes, "max_bytes": cfg.response_max_bytes,
            "isolation_level": 0, "session_id": session.session_id, "session_epoch": session.epoch,
            "topics": list(topics.values()), "forgotten_topics_data": list(forgotten.values()), "rack_id": "",
        }
        timeout_s = (cfg.socket_timeout_ms + cfg.max_wait_ms) / 1000
        try:
            response: FetchResponse = await self.client.request(FETCH_KEY, FETCH_VERSION, body, timeout_s=timeout_s)
        except NodeUnavailableError as exc:
            log.info("Fetch from broker %d failed (%s); retrying after %d ms", self.source_broker, exc,
                     cfg.backoff_ms)
            session.reset()
            self._delay([s for s, _ in asked.values()])
            return
        code = response["error_code"]
        if not session.answered(code, response["session_id"]):
            if code in _SESSION_ERRORS:
                # Kafka's FetchSessionHandler: the next Fetch is a full one, at once.
                log.info("Fetch from broker %d answered %s; opening a new fetch session", self.source_broker,
                         _error_name(code))
                return
            log.info("Fetch from broker %d answered %s", self.source_broker, _error_name(code))
            self._delay([s for s, _ in asked.values()])
            return
        for t in response["responses"]:
            name = names.get(t["topic_id"])
            if name is None:
                continue
            for data in t["partitions"]:
                tp = (name, data["partition_index"])
                requested = asked.get(tp)
                if requested is None:
                    continue
                state, offset = requested
                part = self._current(tp, state)
                if part is None or state.fetch_offset != offset or state.truncating:
                    continue  # changed while the fetch was out (Kafka checks the same)
                await self._process_partition(tp, state, part, data)

    async def _process_partition(self, tp: TopicPartition, state: PartitionFetchState, part: Partition,
                                 p: FetchResponsePartitionData) -> None:
        """Kafka's processPartitionData and the error cases of processFetchRequest."""
        code = p["error_code"]
        if code == ErrorCode.NONE:
            records = p["records"]
            if records:
                try:
                    part.append_records_to_follower(records)
                except KafkaStorageError as exc:
                    log.error("Follower append to %s-%d failed (%s); not fetching it any more", *tp, exc)
                    self.partitions.pop(tp, None)
                    return
                except Exception as exc:
                    log.error("Follower append to %s-%d at %d failed (%s); retrying", *tp, state.fetch_offset, exc)
                    self._delay([state])
                    return
                state.fetch_offset = part.log_end_offset
            if part.update_follower_high_watermark(p["high_watermark"]):
                self._follower_host.follower_high_watermark_moved(tp)  # consumers reading here (KIP-392)
            leader_start = min(p["log_start_offset"], part.log_end_offset)
            if leader_start > part.log_start_offset:
                # The leader's log start moved (retention, DeleteRecords): follow it.
                await self._follower_host.run_blocking(part.delete_records_before, leader_start)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._on_offset_out_of_range(tp, state, part, p)
        else:
            self._on_partition_error(tp, state, code, "Fetch")

    async def _on_offset_out_of_range(self, tp: TopicPartition, state: PartitionFetchState, part: Partition,
                                      p: FetchResponsePartitionData) -> None:
        """Kafka's handleOutOfRangeError: below the leader's log start, start over at it; past its
        log, truncate back to its HW (a safe point below its log end) and fetch from there."""
        leader_start, leader_hw = p["log_start_offset"], p["high_watermark"]
        if 0 <= leader_start and state.fetch_offset < leader_start:
            log.warning("%s-%d: fetch offset %d below the leader's log start %d; starting over there",
                        *tp, state.fetch_offset, leader_start)
            await self._follower_host.run_blocking(part.truncate_fully_and_start_at, leader_start)
            part.after_truncation()
        else:
            log.warning("%s-%d: fetch offset %d beyond the leader's log; truncating to its high watermark %d",
                        *tp, state.fetch_offset, leader_hw)
            await self._truncate_to(part, max(min(leader_hw, part.log_end_offset), 0))
        state.fetch_offset = part.log_end_offset

    def _on_partition_error(self, tp: TopicPartition, state: PartitionFetchState, code: int, what: str) -> None:
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            # Our leader epoch is older than the leader's: wait for the metadata that says so
            # (Kafka's onPartitionFenced: the partition leaves the fetcher until re-added).
            log.info("%s of %s-%d fenced (leader epoch %d is stale); waiting for new metadata", what, *tp,
                     state.leader_epoch)
            self.partitions.pop(tp, None)
            return
        if code not in _RETRIABLE:
            log.warning("%s of %s-%d from broker %d answered %s; retrying", what, *tp, self.source_broker,
                        _error_name(code))
        self._delay([state])


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ReplicaFetcherManager:
    """The fetchers of this broker, by (source broker, fetcher id) (Kafka's ReplicaFetcherManager)."""

    def __init__(self, follower_host: FollowerHost, config: FetcherConfig,
                 endpoint_of: Callable[[int], tuple[str, int] | None]) -> None:
        """``endpoint_of(broker_id)`` is a leader's registered (host, port), None if unknown."""
        self._follower_host = follower_host
        self.config = config
        self._endpoint_of = endpoint_of
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._fetcher_of: dict[TopicPartition, tuple[int, int]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def add_partitions(self, partitions: Mapping[TopicPartition, tuple[int, int, uuid.UUID, int]]) -> None:
        """Follow each tp -> (leader id, leader epoch, topic id, log end offset): (re)start with
        truncation, at the fetcher for its leader (Kafka's addFetcherForPartitions)."""
        for tp, (leader, epoch, topic_id, log_end) in partitions.items():
            self._remove(tp)
            endpoint = self._endpoint_of(leader) if leader >= 0 else None
            if endpoint is None:
                log.info("%s-%d: leader %d has no known endpoint; not fetching until it has", *tp, leader)
                continue
            key = (leader, fetcher_id(tp, self.config.num_fetchers))
            fetcher = self.fetchers.get(key)
            if fetcher is not None and (fetcher.host, fetcher.port) != endpoint:
                self._close(key)  # the leader re-registered elsewhere: a new connection
                fetcher = None
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(leader, key[1], endpoint[0], endpoint[1],
                                                              self.config, self._follower_host)
                fetcher.start()
            fetcher.add(tp, PartitionFetchState(topic_id, epoch, log_end))
            self._fetcher_of[tp] = key

    def remove_partitions(self, partitions: Any) -> None:
        """Stop following these partitions (they became leaders or went away)."""
        for tp in partitions:
            self._remove(tp)
        for key in [k for k, f in self.fetchers.items() if not f.partitions]:
            self._close(key)  # Kafka's shutdownIdleFetcherThreads

    def follows(self, tp: TopicPartition, endpoint: tuple[str, int]) -> bool:
        """True if a fetcher connected to ``endpoint`` follows ``tp``."""
        key = self._fetcher_of.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher is not None and (fetcher.host, fetcher.port) == endpoint

    def fetching(self, tp: TopicPartition) -> PartitionFetchState | None:
        """The fetch state of ``tp`` if a fetcher follows it."""
        key = self._fetcher_of.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher.partitions.get(tp) if fetcher is not None else None

    def _remove(self, tp: TopicPartition) -> None:
        key = self._fetcher_of.pop(tp, None)
        fetcher = self.fetchers.get(key) if key is not None else None
        if fetcher is not None:
            fetcher.remove(tp)

    def _close(self, key: tuple[int, int]) -> None:
        fetcher = self.fetchers.pop(key, None)
        if fetcher is None:
            return
        for tp in list(fetcher.partitions):
            self._fetcher_of.pop(tp, None)
        task = asyncio.get_running_loop().create_task(fetcher.stop())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def shutdown(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._fetcher_of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), *self._closing, return_exceptions=True)
