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
full, the least recently used session is evicted (Kafka weighs session size too; LRU is enough
for one node and is what a client sees as FETCH_SESSION_ID_NOT_FOUND, which it recovers from by
starting a new session).

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
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


@dataclass
class FetchSession:
    session_id: int
    epoch: int
    uses_topic_ids: bool
    partitions: OrderedDict[tuple[Any, int], CachedPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0


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
    def __init__(self, max_slots: int) -> None:
        self.max_slots = max_slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 20))

    def _new_id(self) -> int:
        while True:
            sid = next(self._ids) & 0x7FFFFFFF
            if sid and sid not in self.sessions:
                return sid

    def new_context(self, body: FetchRequest, uses_topic_ids: bool) -> FetchContext:
        session_id = body["session_id"]
        epoch = body["session_epoch"]
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self.sessions.pop(session_id, None)
            partitions = [_cached(t, p) for t in body["topics"] for p in t["partitions"]]
            if epoch == FINAL_EPOCH or self.max_slots <= 0:
                return FetchContext(0, partitions, incremental=False)
            session = FetchSession(self._new_id(), 1, uses_topic_ids, last_used=time.monotonic())
            for c in partitions:
                key = (c.topic_id, c.partition) if uses_topic_ids else (c.topic, c.partition)
                session.partitions[key] = c
            if len(self.sessions) >= self.max_slots:
                self.sessions.popitem(last=False)
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
        session.last_used = time.monotonic()
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
        return FetchContext(session_id, list(session.partitions.values()), True, session)

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
