"""Fetch sessions (KIP-227): full and incremental fetch requests.

A client may ask the broker to remember which partitions it fetches, so later requests carry only
what changed and responses carry only partitions with news. The request's (session_id, epoch)
select the mode, exactly as Kafka's FetchManager.newContext does:

    session_id  epoch   meaning
    0           -1      sessionless full fetch (no session kept; response session_id 0)
    any         -1      close session ``session_id`` if it exists, then a sessionless full fetch
    any          0      close ``session_id`` if non-zero, then a full fetch that creates a session
                        (response session_id = the new id, 0 if the cache has no room)
    id         >0       incremental fetch on session ``id``: its partitions are updated with the
                        request's partitions, minus ``forgotten_topics_data``; unknown id ->
                        FETCH_SESSION_ID_NOT_FOUND, wrong epoch -> INVALID_FETCH_SESSION_EPOCH

An incremental response lists a session partition only if something about it changed since the
last response: records returned, an error, or a new high watermark, last stable offset or log
start offset (a partition just added has no previous values, so it is always listed once).

Partitions are keyed by (topic id, partition) from Fetch v13 (KIP-516), by (name, partition)
before. The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions; when it is
full, a new session takes a slot only as Kafka's FetchSessionCache.tryEvict allows: the least
recently used session goes if unused for 2 minutes (stale); else a follower's new session evicts
a consumer's (followers' sessions are privileged), and any new session evicts one older than 2
minutes with fewer partitions - the evictable session with the least (privileged, size, id) goes,
and only if the new one's (privileged, size) is greater. Otherwise the new fetch gets no
session (session id 0) and the others keep theirs, so consumers opening sessions cannot push
the followers' out. An evicted session's client sees FETCH_SESSION_ID_NOT_FOUND and starts a
new one. Whether a session may be evicted, and its size, are taken when it was last used (Kafka's
touch).

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        FetchRequest,
        FetchRequestFetchPartition,
        FetchRequestFetchTopic,
        FetchRequestForgottenTopic,
        FetchResponsePartitionData,
    )

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
class CachedPartition:
    """One partition of a fetch: what the client asked for and what it was last told."""

    topic: str | None
    topic_id: Any
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # Last values sent to the client (-1 = never sent): an incremental response repeats a
    # partition only when one of these changes or it has records or an error.
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1

    def update_from_request(self, p: FetchRequestFetchPartition) -> None:
        self.fetch_offset = p["fetch_offset"]
        self.partition_max_bytes = p["partition_max_bytes"]
        self.log_start_offset = p["log_start_offset"]
        self.current_leader_epoch = p["current_leader_epoch"]
        self.last_fetched_epoch = p["last_fetched_epoch"]

    def must_respond(self, response: FetchResponsePartitionData, has_records: bool) -> bool:
        """Whether an incremental response includes this partition; records what was sent."""
        changed = (
            has_records
            or response["error_code"] != ErrorCode.NONE
            or response["high_watermark"] != self.sent_high_watermark
            or response["last_stable_offset"] != self.sent_last_stable_offset
            or response["log_start_offset"] != self.sent_log_start_offset
        )
        self.sent_high_watermark = response["high_watermark"]
        self.sent_last_stable_offset = response["last_stable_offset"]
        self.sent_log_start_offset = response["log_start_offset"]
        return changed


# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long is stale; one
# created longer ago than this may be evicted by a larger one.
EVICTION_S = 120.0


@dataclass
class FetchSession:
    session_id: int
    epoch: int
    uses_topic_ids: bool
    partitions: OrderedDict[tuple[Any, int], CachedPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0
    privileged: bool = False  # a follower's
    created: float = 0.0
    # Taken at the last use (Kafka's touch): its size then, and whether it was old enough to be
    # evicted by any new session (by a follower's: also any consumer's session).
    size: int = 0
    old: bool = False

    def touch(self, now: float) -> None:
        self.last_used = now
        self.size = len(self.partitions)
        self.old = now - self.created > EVICTION_S

    def eviction_key(self) -> tuple[bool, int, int]:
        return self.privileged, self.size, self.session_id


@dataclass
class FetchContext:
    """What one Fetch request reads, and how its response is shaped."""

    session_id: int
    partitions: list[CachedPartition]
    incremental: bool
    session: FetchSession | None = None
    error: ErrorCode = ErrorCode.NONE


def partition_key(uses_topic_ids: bool, topic: FetchRequestFetchTopic | FetchRequestForgottenTopic,
                  p: FetchRequestFetchPartition | int) -> tuple[Any, int]:
    index = p if isinstance(p, int) else p["partition"]
    return (topic["topic_id"] if uses_topic_ids else topic["topic"], index)


def _cached(topic: FetchRequestFetchTopic, p: FetchRequestFetchPartition) -> CachedPartition:
    c = CachedPartition(topic["topic"], topic["topic_id"], p["partition"], p["fetch_offset"], p["partition_max_bytes"])
    c.update_from_request(p)
    return c


class FetchSessionCache:
    def __init__(self, max_slots: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        # In order of last use (the least recent first).
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 20))
        self._clock = clock

    def _new_id(self) -> int:
        while True:
            sid = next(self._ids) & 0x7FFFFFFF
            if sid and sid not in self.sessions:
                return sid

    def _make_room(self, privileged: bool, size: int, now: float) -> bool:
        """Kafka's tryEvict: whether a slot was freed for a new session of ``size`` partitions."""
        lru = next(iter(self.sessions.values()), None)
        if lru is None:
            return False
        if now - lru.last_used > EVICTION_S:
            del self.sessions[lru.session_id]
            return True
        candidates = [s for s in self.sessions.values() if s.old or (privileged and not s.privileged)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.eviction_key)
        if (privileged, size, 0) < victim.eviction_key():
            return False
        del self.sessions[victim.session_id]
        return True

    def new_context(self, body: FetchRequest, uses_topic_ids: bool, privileged: bool = False) -> FetchContext:
        """The request's context; ``privileged`` for a follower's fetch (its session outranks
        consumers' when the cache is full)."""
        session_id = body["session_id"]
        epoch = body["session_epoch"]
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self.sessions.pop(session_id, None)
            partitions = [_cached(t, p) for t in body["topics"] for p in t["partitions"]]
            if epoch == FINAL_EPOCH or self.max_slots <= 0:
                return FetchContext(0, partitions, incremental=False)
            now = self._clock()
            if len(self.sessions) >= self.max_slots and not self._make_room(privileged, len(partitions), now):
                return FetchContext(0, partitions, incremental=False)
            session = FetchSession(self._new_id(), 1, uses_topic_ids, privileged=privileged, created=now)
            for c in partitions:
                key = (c.topic_id, c.partition) if uses_topic_ids else (c.topic, c.partition)
                session.partitions[key] = c
            session.touch(now)
            self.sessions[session.session_id] = session
            # A full response lists every partition; reading goes through the session's entries
            # so what is sent is remembered for the first incremental response.
            return FetchContext(session.session_id, list(session.partitions.values()), False, session)
        found = self.sessions.get(session_id)
        if found is None:
            return FetchContext(0, [], False, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        session = found
        if session.epoch != epoch or session.uses_topic_ids != uses_topic_ids:
            return FetchContext(0, [], False, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        self.sessions.move_to_end(session_id)
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        for t in body["topics"]:
            for p in t["partitions"]:
                key = partition_key(uses_topic_ids, t, p)
                existing = session.partitions.get(key)
                if existing is None:
                    session.partitions[key] = _cached(t, p)
                else:
                    existing.update_from_request(p)
        for forgotten in body["forgotten_topics_data"]:
            for index in forgotten["partitions"]:
                session.partitions.pop(partition_key(uses_topic_ids, forgotten, index), None)
        session.touch(self._clock())
        return FetchContext(session_id, list(session.partitions.values()), True, session)

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
