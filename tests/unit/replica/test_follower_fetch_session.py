"""The follower's fetch session (broker/replica/follower_fetch_session.py) as Kafka's
FetchSessionHandler builds requests and reads answers (KIP-227): full, then incremental with only
what changed, forgotten partitions, and the resets."""

from __future__ import annotations

import uuid
from typing import Any

from odradek.broker.replica.follower_fetch_session import FollowerFetchSession
from odradek.protocol.errors import ErrorCode

T = uuid.UUID(int=7)


def part(index: int, offset: int, epoch: int = 0) -> tuple[uuid.UUID, Any]:
    return T, {"partition": index, "current_leader_epoch": epoch, "fetch_offset": offset, "last_fetched_epoch": -1,
               "log_start_offset": 0, "partition_max_bytes": 1 << 20, "replica_directory_id": uuid.UUID(int=0)}


def test_the_first_fetch_is_full_and_opens_a_session() -> None:
    s = FollowerFetchSession()
    assert s.request_fields() == {"session_id": 0, "session_epoch": 0}
    sent, forgotten = s.build({("t", 0): part(0, 5), ("t", 1): part(1, 9)})
    assert list(sent) == [("t", 0), ("t", 1)] and forgotten == {}
    assert s.answered(ErrorCode.NONE, 42)
    assert s.request_fields() == {"session_id": 42, "session_epoch": 1}


def test_incremental_fetches_name_only_what_changed_and_forget_what_left() -> None:
    s = FollowerFetchSession()
    s.build({("t", 0): part(0, 5), ("t", 1): part(1, 9), ("t", 2): part(2, 1)})
    s.answered(ErrorCode.NONE, 42)
    sent, forgotten = s.build({("t", 0): part(0, 5), ("t", 1): part(1, 12), ("t", 3): part(3, 0)})
    assert sent == {("t", 1): part(1, 12), ("t", 3): part(3, 0)}  # moved, and new
    assert forgotten == {("t", 2): T}
    assert s.answered(ErrorCode.NONE, 42)
    assert s.request_fields() == {"session_id": 42, "session_epoch": 2}
    # Nothing moved: an empty incremental Fetch (the leader still reads the whole session).
    sent, forgotten = s.build({("t", 0): part(0, 5), ("t", 1): part(1, 12), ("t", 3): part(3, 0)})
    assert sent == {} and forgotten == {}
    # A new leader epoch is a change too.
    s.answered(ErrorCode.NONE, 42)
    sent, _ = s.build({("t", 0): part(0, 5, epoch=1), ("t", 1): part(1, 12), ("t", 3): part(3, 0)})
    assert list(sent) == [("t", 0)]


def test_an_unknown_session_starts_over_without_an_id() -> None:
    s = FollowerFetchSession()
    s.build({("t", 0): part(0, 5)})
    s.answered(ErrorCode.NONE, 42)
    s.build({("t", 0): part(0, 6)})
    assert not s.answered(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert s.request_fields() == {"session_id": 0, "session_epoch": 0}
    sent, _ = s.build({("t", 0): part(0, 6)})
    assert list(sent) == [("t", 0)]  # full again


def test_a_wrong_epoch_or_a_failed_request_closes_the_session_with_the_next_full_fetch() -> None:
    for fail in ("epoch", "connection"):
        s = FollowerFetchSession()
        s.build({("t", 0): part(0, 5)})
        s.answered(ErrorCode.NONE, 42)
        s.build({("t", 0): part(0, 6)})
        if fail == "epoch":
            assert not s.answered(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
        else:
            s.reset()
        # Session 42 with epoch 0: the leader closes it and opens another (KIP-227).
        assert s.request_fields() == {"session_id": 42, "session_epoch": 0}
        sent, _ = s.build({("t", 0): part(0, 6)})
        assert list(sent) == [("t", 0)]


def test_a_leader_without_room_for_a_session_gets_full_fetches() -> None:
    s = FollowerFetchSession()
    s.build({("t", 0): part(0, 5)})
    assert s.answered(ErrorCode.NONE, 0)
    assert s.request_fields() == {"session_id": 0, "session_epoch": 0}
    sent, _ = s.build({("t", 0): part(0, 5)})
    assert list(sent) == [("t", 0)]
