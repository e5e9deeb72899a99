"""Share sessions (KIP-932, Kafka 4.4's ShareSessionCache): which share-partitions one member of a
share group fetches from this broker, so that each ShareFetch need only name what changed.

Keyed by (group id, member id). The epochs, as Kafka's ShareRequestMetadata:

- 0 opens a session (a new one replaces the member's old one; the records the member holds stay
  its own, as in Kafka); it may carry no acknowledgements;
- -1 closes it after the acknowledgements it carries: the member's records still acquired on its
  partitions are released at once;
- any other epoch must be the session's next one (INVALID_SHARE_SESSION_EPOCH otherwise), and a
  member without a session gets SHARE_SESSION_NOT_FOUND. Every ShareFetch and ShareAcknowledge on
  an open session moves its epoch on by one.

A session remembers the connection it was opened on: when that connection closes, the session
ends and the member's acquired records are released (as Kafka's broker does on a disconnect), not
only when their locks expire.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import ErrorCode, KafkaApiError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

SessionKey = tuple[str, str]  # (group id, member id)
SharePartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    conn: Any  # the connection it was opened on (``closed`` is read to end it)
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[SharePartitionKey, Any] = field(default_factory=dict)  # -> topic id

    def bump(self) -> None:
        self.epoch = 1 if self.epoch == 2**31 - 1 else self.epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def open(self, group_id: str, member_id: str, conn: Any) -> ShareSession:
        """A new session for the member, in place of the one it had (whose connection closing
        later then ends nothing)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            raise KafkaApiError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                "The limit of share sessions has been reached.")
        session = self.sessions[key] = ShareSession(group_id, member_id, conn)
        return session

    def get(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The open session a request with ``epoch`` (not 0) continues or closes."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise KafkaApiError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session not found for member {member_id}.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise KafkaApiError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                f"Share session epoch {epoch} does not match the expected {session.epoch}.")
        return session

    def remove(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def closed_connections(self) -> Iterator[ShareSession]:
        """Sessions whose connection has closed (removed as they are yielded)."""
        for session in [s for s in self.sessions.values() if getattr(s.conn, "closed", False)]:
            self.remove(session)
            yield session
