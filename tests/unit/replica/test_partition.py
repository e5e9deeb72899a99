"""Partition on a real log: leader appends and their errors, HW/LSO, isolation-bounded reads,
offset for timestamp, offset for leader epoch, delete records, fencing."""

from __future__ import annotations

import pytest

from odradek.broker.replica.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Partition,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError
from tests.unit.replica.conftest import Node, batch


def part_of(node: Node, topic: str = "t", index: int = 0) -> Partition:
    return node.rm.leader_partition(topic, index)


async def test_leader_append_moves_high_watermark_and_lso(node: Node) -> None:
    part = part_of(node)
    assert (part.high_watermark, part.last_stable_offset, part.high_watermark_bytes) == (0, 0, 0)
    raw = batch(3)
    info = part.append_records_to_leader(raw, 1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    # The append alone does not move the HW: the caller does, as Kafka's Partition.
    assert part.high_watermark == 0 and part.log_end_offset == 3
    assert part.maybe_increment_high_watermark() is True
    assert (part.high_watermark, part.last_stable_offset) == (3, 3)
    assert part.high_watermark_bytes == part.last_stable_bytes == len(raw)
    assert part.maybe_increment_high_watermark() is False


async def test_follower_offsets_bound_the_high_watermark(node: Node) -> None:
    part = part_of(node)
    part.isr = (1, 2)
    part.update_follower_fetch_state(2, 1)
    raw = batch(3)
    part.append_records_to_leader(raw, 1)
    assert part.maybe_increment_high_watermark() is True
    assert part.high_watermark == 1
    assert part.check_enough_replicas_reach_offset(3) == (False, ErrorCode.NONE)
    assert part.update_follower_fetch_state(2, 3) is True
    assert part.high_watermark == 3 and part.high_watermark_bytes == len(raw)
    assert part.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NONE)


async def test_high_watermark_bytes_are_exact_when_the_high_watermark_lags_the_log_end(node: Node) -> None:
    part = part_of(node)
    part.replicas = part.isr = (1, 2)
    first, second = batch(2), batch(3, value_size=50)
    for raw in (first, second):
        part.append_records_to_leader(raw, 1)
        assert part.maybe_increment_high_watermark() is False  # follower 2 has not fetched yet
    assert part.update_follower_fetch_state(2, 2) is True
    assert (part.high_watermark, part.high_watermark_bytes, part.last_stable_bytes) == (2, len(first), len(first))
    assert part.update_follower_fetch_state(2, 5) is True
    assert part.high_watermark_bytes == len(first) + len(second)
    # A new leadership: followers' positions are unknown until they fetch again.
    part.reset_follower_states()
    part.append_records_to_leader(batch(), 1)
    assert part.maybe_increment_high_watermark() is False and part.high_watermark == 5


@pytest.mark.parametrize(("records", "acks", "code"), [
    (b"", 1, ErrorCode.CORRUPT_MESSAGE),
    (None, 1, ErrorCode.CORRUPT_MESSAGE),
    (b"x" * 2048, 1, ErrorCode.RECORD_LIST_TOO_LARGE),
])
async def test_leader_append_refusals(node_factory, records: bytes | None, acks: int, code: int) -> None:
    node = await node_factory()
    await node.create_topic("small", **{"segment.bytes": "1024"})
    part = part_of(node, "small")
    with pytest.raises(KafkaApiError) as e:
        part.append_records_to_leader(records, acks)
    assert e.value.code == code
    assert part.log_end_offset == 0


async def test_internal_topic_and_min_insync_replicas(node_factory) -> None:
    node = await node_factory()
    await node.create_topic("strict", **{"min.insync.replicas": "2"})
    part = part_of(node, "strict")
    with pytest.raises(KafkaApiError) as e:
        part.append_records_to_leader(batch(), -1)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    part.append_records_to_leader(batch(), 1)  # acks=1 does not need the ISR
    part.is_internal = True
    with pytest.raises(KafkaApiError) as e:
        part.append_records_to_leader(batch(), 1)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    part.append_internal(batch())  # coordinators write internal topics without the client checks


async def test_record_check_runs_after_partition_checks(node: Node) -> None:
    part = part_of(node)
    seen: list[int] = []

    def check(records: bytes) -> None:
        seen.append(len(records))
        raise KafkaApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)

    with pytest.raises(KafkaApiError) as e:
        part.append_records_to_leader(b"", 1, check)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and seen == []
    with pytest.raises(KafkaApiError) as e:
        part.append_records_to_leader(batch(), 1, check)
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE and len(seen) == 1
    assert part.log_end_offset == 0


async def test_reads_stop_at_the_isolation_bound(node: Node) -> None:
    part = part_of(node)
    first = batch(2)
    part.append_records_to_leader(first, 1)
    part.maybe_increment_high_watermark()
    part.append_records_to_leader(batch(2), 1)  # above the HW until it is moved
    assert part.read(0, 1 << 20, READ_UNCOMMITTED, True).size == len(first)
    # An open transaction would hold the LSO back; read_committed stops there.
    part.last_stable_offset = 0
    assert part.read(0, 1 << 20, READ_COMMITTED, True).size == 0
    assert part.fetch_bound(READ_COMMITTED) == 0 and part.fetch_bound(READ_UNCOMMITTED) == 2
    with pytest.raises(KafkaApiError) as e:
        part.read(5, 1 << 20, READ_UNCOMMITTED, True)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_offset_for_timestamp(node: Node) -> None:
    part = part_of(node)
    part.append_records_to_leader(batch(3, ts=[100, 300, 200]), 1)
    part.maybe_increment_high_watermark()
    assert part.fetch_offset_for_timestamp(150, READ_UNCOMMITTED) == (1, 300, 0)
    assert part.fetch_offset_for_timestamp(400, READ_UNCOMMITTED) == (-1, -1, -1)
    assert part.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, READ_UNCOMMITTED) == (0, -1, 0)
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, READ_UNCOMMITTED) == (3, -1, 0)
    assert part.fetch_offset_for_timestamp(MAX_TIMESTAMP, READ_UNCOMMITTED) == (1, 300, 0)
    part.last_stable_offset = 1
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, READ_COMMITTED) == (1, -1, 0)
    assert part.fetch_offset_for_timestamp(150, READ_COMMITTED) == (-1, -1, -1)
    with pytest.raises(KafkaApiError) as e:
        part.fetch_offset_for_timestamp(-9, READ_UNCOMMITTED)
    assert e.value.code == ErrorCode.INVALID_REQUEST


async def test_offset_for_leader_epoch_and_fencing(node: Node) -> None:
    part = part_of(node)
    part.append_records_to_leader(batch(2), 1)
    part.maybe_increment_high_watermark()
    assert part.last_offset_for_leader_epoch(-1, 0) == (0, 2)
    assert part.last_offset_for_leader_epoch(0, 7) == (-1, -1)  # newer than any epoch known
    part.append_records_to_leader(batch(2), 1)
    # Not capped at the HW (2), as Kafka: a new leader's HW lags, and a capped answer below a
    # consumer's position would read as truncation.
    assert part.high_watermark == 2 and part.last_offset_for_leader_epoch(0, 0) == (0, 4)
    part.leader_epoch = 2
    with pytest.raises(KafkaApiError) as e:
        part.check_leader_epoch(1)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaApiError) as e:
        part.last_offset_for_leader_epoch(3, 0)
    assert e.value.code == ErrorCode.UNKNOWN_LEADER_EPOCH
    part.check_leader_epoch(2)
    part.check_leader_epoch(-1)


async def test_delete_records(node: Node) -> None:
    part = part_of(node)
    for _ in range(3):
        part.append_records_to_leader(batch(2), 1)
    part.maybe_increment_high_watermark()
    assert part.delete_records_target(-1) == 6
    for bad in (7, -5):
        with pytest.raises(KafkaApiError) as e:
            part.delete_records_target(bad)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert part.delete_records_before(4) == 4
    assert part.delete_records_before(2) == 4  # backwards: a no-op answering the low watermark
    assert part.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, READ_UNCOMMITTED)[0] == 4
    with pytest.raises(KafkaApiError) as e:
        part.read(0, 1 << 20, READ_UNCOMMITTED, True)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_follower_append_keeps_offsets(node: Node) -> None:
    leader = part_of(node)
    leader.append_records_to_leader(batch(2), 1)
    fetched = leader.log.read(0, 1 << 20).read_bytes()
    # A second partition's log, as a follower would have: the batches keep their offsets.
    await node.create_topic("f")
    follower = part_of(node, "f")
    info = follower.append_records_to_follower(fetched)
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 1, 2)
