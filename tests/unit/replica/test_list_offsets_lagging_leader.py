"""ListOffsets on a leader whose high watermark still lags the start of its leadership (KIP-207):
OFFSET_NOT_AVAILABLE, never an offset below what the previous leader had already shown clients.

Found by tests/integration/test_spark_cluster.py: a Spark batch read started right after a leader
was SIGKILLed asked the new leader for "latest", got its stale HW and silently left out 200
acknowledged records."""

from __future__ import annotations

import pytest

from odradek.broker.replica.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_UNCOMMITTED,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError
from tests.unit.replica.conftest import Node, batch


async def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_catches_up(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.replicas = part.isr = (1, 2)
    # Replicated from the old leader: 5 records, of which this broker knows only 2 are committed.
    part.append_records_to_leader(batch(5, ts=[100, 200, 300, 400, 500]), 1)
    part.update_follower_fetch_state(2, 2)
    assert part.high_watermark == 2
    part.reset_follower_states()  # it becomes leader with its log end (5) as the epoch's start

    for timestamp in (LATEST_TIMESTAMP, 450, MAX_TIMESTAMP):  # answers at or above the HW
        with pytest.raises(KafkaApiError) as e:
            part.fetch_offset_for_timestamp(timestamp, READ_UNCOMMITTED)
        assert e.value.code == ErrorCode.OFFSET_NOT_AVAILABLE
    # What lies below the HW is known for sure and is answered.
    assert part.fetch_offset_for_timestamp(150, READ_UNCOMMITTED)[:2] == (1, 200)
    assert part.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, READ_UNCOMMITTED)[0] == 0

    # The follower fetches up to the log end: the HW reaches the epoch start, latest is served.
    assert part.update_follower_fetch_state(2, 5) is True
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, READ_UNCOMMITTED)[0] == 5
    assert part.fetch_offset_for_timestamp(450, READ_UNCOMMITTED)[:2] == (4, 500)
    assert part.fetch_offset_for_timestamp(600, READ_UNCOMMITTED) == (-1, -1, -1)


async def test_a_leader_alone_in_its_isr_is_never_lagging(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.append_records_to_leader(batch(3), 1)
    part.reset_follower_states()
    part.maybe_increment_high_watermark()  # as makeLeader does: the ISR is this broker alone
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, READ_UNCOMMITTED)[0] == 3
    assert part.fetch_offset_for_timestamp(5000, READ_UNCOMMITTED) == (-1, -1, -1)
