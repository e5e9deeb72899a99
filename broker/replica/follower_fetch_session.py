"""The follower's half of a fetch session (KIP-227; Kafka's FetchSessionHandler).

A replica fetcher talks to one leader over one connection, one Fetch at a time. Its first Fetch is
full (session id 0, epoch 0: every partition it follows there) and asks the leader for a session;
from then on each Fetch is incremental (the session's id, epoch 1, 2, ...) and names only the
partitions whose fetch state changed since the last request (a new fetch offset, log start
offset, leader epoch or size limit), plus, as ``forgotten_topics_data``, those no longer fetched
(backing off, truncating, gone). The leader reads every partition of the session each time and
answers only those with news (records, an error, a new high watermark or log start offset), so a
fetcher following many partitions of one leader sends and decodes per Fetch only what moved.

What resets the session (the next Fetch is full again):
- FETCH_SESSION_ID_NOT_FOUND (the leader evicted it, or restarted): a new one is asked for;
- INVALID_FETCH_SESSION_EPOCH or any other top-level error: the full Fetch names the old id with
  epoch 0, which closes it on the leader and opens another;
- a failed request (connection lost, timeout): the same, as the leader may or may not have seen it;
- a full Fetch answered with session id 0 (the leader keeps no session: its cache is full or off):
  every Fetch stays full.

Owned by its fetcher's task on the handler loop; no locks.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import FetchRequestFetchPartition

TopicPartition = tuple[str, int]

INITIAL_EPOCH = 0  # a full Fetch that opens a session (closing the one named, if any)
_MAX_EPOCH = 0x7FFFFFFF


class FollowerFetchSession:
    """What the leader's session holds for this fetcher, and the (id, epoch) of the next Fetch."""

    __slots__ = ("session_id", "epoch", "_sent")

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        # Per partition in the leader's session: its topic id and the fields last sent for it.
        self._sent: dict[TopicPartition, tuple[uuid.UUID, FetchRequestFetchPartition]] = {}

    @property
    def full(self) -> bool:
        """The next Fetch names every partition (no session yet, or it was reset)."""
        return self.epoch == INITIAL_EPOCH

    def build(self, wanted: dict[TopicPartition, tuple[uuid.UUID, FetchRequestFetchPartition]]
              ) -> tuple[dict[TopicPartition, tuple[uuid.UUID, FetchRequestFetchPartition]],
                         dict[TopicPartition, uuid.UUID]]:
        """(partitions to send, partitions to forget, with their topic ids) for a Fetch of
        ``wanted``; the session then holds ``wanted``."""
        sent = self._sent
        if self.full:
            to_send = dict(wanted)
            forget: dict[TopicPartition, uuid.UUID] = {}
        else:
            to_send = {tp: entry for tp, entry in wanted.items() if sent.get(tp) != entry}
            forget = {tp: topic_id for tp, (topic_id, _) in sent.items() if tp not in wanted}
        self._sent = dict(wanted)
        return to_send, forget

    def answered(self, error_code: int, session_id: int) -> bool:
        """The leader answered the Fetch just built: move to the next epoch (False, and the
        session is reset, on a top-level error)."""
        if error_code != ErrorCode.NONE:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self.reset()
            return False
        if self.full:
            self.session_id = session_id
            self.epoch = 1 if session_id else INITIAL_EPOCH
        else:
            self.epoch = self.epoch + 1 if self.epoch < _MAX_EPOCH else 1
        return True

    def reset(self) -> None:
        """The next Fetch is full; it names the current session id (if any) to close it."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}

    def request_fields(self) -> dict[str, Any]:
        """The Fetch's session_id and session_epoch."""
        return {"session_id": self.session_id, "session_epoch": self.epoch}
