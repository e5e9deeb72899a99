"""ReplicaManager on real temp-dir logs: append_records (acks, errors, DelayedProduce),
fetch_messages (DelayedFetch on HW moves, bytes accumulated, timeout), coordinator entry points."""

from __future__ import annotations

import time
from typing import Any

from odradek.broker.replica.fetch_params import FetchParams, FetchResult
from odradek.broker.replica.fetch_session import CachedPartition
from odradek.broker.replica.high_watermark_checkpoint import HIGH_WATERMARK_CHECKPOINT
from odradek.broker.replica.partition import READ_COMMITTED, READ_UNCOMMITTED
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.controller import CreatableTopic, ReplicaAssignment
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.results import AppendInfo, FetchSlice
from tests.unit.replica.conftest import Node, batch


def produce(node: Node, entries: list[tuple[str, int, Any]], acks: int = 1, timeout_ms: int = 1000) -> list[list[Any]]:
    calls: list[list[Any]] = []
    node.rm.append_records(entries, acks, timeout_ms, calls.append)
    return calls


def fetch(node: Node, *offsets: tuple[str, int, int], min_bytes: int = 1, max_wait_ms: int = 500,
          isolation: int = READ_UNCOMMITTED, max_bytes: int = 1 << 20) -> list[FetchResult]:
    calls: list[FetchResult] = []
    partitions = [CachedPartition(t, None, p, off, 1 << 20) for t, p, off in offsets]
    node.rm.fetch_messages(FetchParams(max_wait_ms, min_bytes, max_bytes, isolation, False), partitions,
                           calls.append)
    return calls


async def test_append_records_answers_each_partition_in_order(node: Node) -> None:
    (results,) = produce(node, [("t", 0, batch(2)), ("nope", 0, batch()), ("t", 9, batch()), ("t", 0, b"")])
    assert isinstance(results[0], AppendInfo) and results[0].first_offset == 0
    assert [r.code for r in results[1:]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.CORRUPT_MESSAGE]
    part = node.rm.leader_partition("t", 0)
    assert part.high_watermark == 2


async def test_acks_all_completes_at_once_on_one_node(node: Node) -> None:
    calls = produce(node, [("t", 0, batch(3))], acks=-1)
    assert len(calls) == 1 and calls[0][0].last_offset == 2
    assert node.rm.produce_purgatory.delayed == 0


async def test_delayed_produce_completes_when_the_high_watermark_passes(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.isr = (1, 2)  # a follower that has nothing yet holds the HW back
    part.update_follower_fetch_state(2, 0)
    calls = produce(node, [("t", 0, batch(3))], acks=-1)
    assert calls == [] and node.rm.produce_purgatory.delayed == 1
    assert part.update_follower_fetch_state(2, 2)  # not far enough: still waiting
    node.rm.try_complete_delayed_requests(("t", 0))
    assert calls == []
    assert part.update_follower_fetch_state(2, 3)
    node.rm.try_complete_delayed_requests(("t", 0))
    assert len(calls) == 1 and isinstance(calls[0][0], AppendInfo)
    assert node.rm.produce_purgatory.delayed == 0


async def test_delayed_produce_times_out(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.isr = (1, 2)
    part.update_follower_fetch_state(2, 0)
    calls = produce(node, [("t", 0, batch())], acks=-1, timeout_ms=100)
    node.advance(99)
    assert calls == []
    node.advance(5)
    assert len(calls) == 1 and isinstance(calls[0][0], KafkaApiError)
    assert calls[0][0].code == ErrorCode.REQUEST_TIMED_OUT


async def test_fetch_answers_at_once_with_data_or_error(node: Node) -> None:
    raw = batch(2)
    produce(node, [("t", 0, raw)])
    (result,) = fetch(node, ("t", 0, 0))
    (read,) = result.partitions
    assert read.error_code == 0 and read.size == len(raw) and isinstance(read.records, FetchSlice)
    assert read.records.read_bytes()[16:] == raw[16:]  # offset and epoch rewritten, the rest as sent
    assert (read.high_watermark, read.last_stable_offset, read.log_start_offset) == (2, 2, 0)
    assert result.bytes_by_topic == {"t": len(raw)}
    (result,) = fetch(node, ("t", 0, 7))
    assert result.has_error and result.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert result.partitions[0].high_watermark == 2


async def test_delayed_fetch_adds_up_bytes_and_reads_once(node: Node) -> None:
    reads = []
    real_read = node.rm.read_from_local_log

    def counting_read(*args: Any) -> FetchResult:
        reads.append(1)
        return real_read(*args)

    node.rm.read_from_local_log = counting_read  # type: ignore[method-assign,assignment]
    first, second = batch(1), batch(1)
    calls = fetch(node, ("t", 0, 0), min_bytes=len(first) + len(second))
    assert calls == [] and node.rm.fetch_purgatory.delayed == 1
    produce(node, [("t", 0, first)])
    assert calls == []  # below min_bytes: counted, not read
    produce(node, [("t", 0, second)])
    assert len(calls) == 1 and calls[0].total_bytes == len(first) + len(second)
    assert len(reads) == 2  # the first look and the completion, nothing per append


async def test_delayed_fetch_wakes_on_high_watermark_move_not_append(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.isr = (1, 2)
    part.update_follower_fetch_state(2, 0)
    calls = fetch(node, ("t", 0, 0))
    produce(node, [("t", 0, batch(2))])
    assert calls == []  # appended, but not below the HW yet
    part.update_follower_fetch_state(2, 2)
    node.rm.try_complete_delayed_requests(("t", 0))
    assert len(calls) == 1 and calls[0].partitions[0].size > 0


async def test_read_committed_fetch_waits_for_the_lso(node: Node) -> None:
    calls = fetch(node, ("t", 0, 0), isolation=READ_COMMITTED)
    produce(node, [("t", 0, batch())])
    assert len(calls) == 1 and calls[0].partitions[0].last_stable_offset == 1


async def test_delayed_fetch_times_out_with_what_there_is(node: Node) -> None:
    raw = batch()
    calls = fetch(node, ("t", 0, 0), min_bytes=10_000, max_wait_ms=200)
    produce(node, [("t", 0, raw)])
    assert calls == []
    node.advance(201)
    assert len(calls) == 1 and calls[0].total_bytes == len(raw)


async def test_delayed_fetch_answers_when_its_topic_is_deleted(node: Node) -> None:
    calls = fetch(node, ("t", 0, 0))
    (result,) = await node.controller.delete_topics(["t"])
    assert len(calls) == 1
    assert calls[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_coordinator_entry_points(node: Node) -> None:
    leaders: list[tuple[str, int, int]] = []
    node.rm.on_become_leader(lambda t, p, e: leaders.append((t, p, e)))
    await node.create_topic("u")
    assert leaders == [("u", 0, 0)]
    raw = batch(2)
    assert node.rm.append_internal("u", 0, raw).first_offset == 0
    reached: list[int] = []
    node.rm.wait_for_high_watermark("u", 0, 2, 1000, reached.append)  # one node: the HW is the log end
    node.rm.wait_for_high_watermark("nope", 0, 0, 1000, reached.append)  # no such partition here
    assert reached == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert node.rm.log_end_offset("u", 0) == 2 and node.rm.log_start_offset("u", 0) == 0
    assert node.rm.read_internal("u", 0, 0, 1 << 20)[16:] == raw[16:]


async def test_delete_records_and_list_offsets(node: Node) -> None:
    for _ in range(3):
        produce(node, [("t", 0, batch(2))])
    assert await node.rm.delete_records("t", 0, 4) == 4
    assert node.rm.fetch_offset_for_timestamp("t", 0, -1, -2, READ_UNCOMMITTED) == (4, -1, 0)
    assert node.rm.last_offset_for_leader_epoch("t", 0, -1, 0) == (0, 6)
    try:
        await node.rm.delete_records("t", 0, 99)
    except KafkaApiError as exc:
        assert exc.code == ErrorCode.OFFSET_OUT_OF_RANGE
    else:
        raise AssertionError("beyond the HW must be refused")


async def test_retention_deletes_an_expired_active_segment_once_the_high_watermark_reaches_its_end(
        node_factory) -> None:
    """Kafka's deletableSegments: the active segment is deleted by retention.ms too, but only once
    the high watermark reached the log end; a new empty segment then takes its place at the log end."""
    node = await node_factory()
    await node.create_topic("ret", **{"retention.ms": "1000"})  # segment.ms stays at 7 days
    part = node.rm.leader_partition("ret", 0)
    part.isr = (1, 2)  # a follower that has nothing yet holds the HW at 0
    part.update_follower_fetch_state(2, 0)
    produce(node, [("ret", 0, batch(3))])  # timestamps of 1970: expired
    assert (part.high_watermark, part.log_end_offset) == (0, 3)
    assert node.rm.periodic.retention() == 0
    assert part.update_follower_fetch_state(2, 3)
    assert node.rm.periodic.retention() == 1
    assert (part.log_start_offset, part.log_end_offset, part.high_watermark) == (3, 3, 3)
    assert [(s.base_offset, s.size) for s in part.log.segments] == [(3, 0)]
    assert node.rm.fetch_offset_for_timestamp("ret", 0, -1, -2, READ_UNCOMMITTED) == (3, -1, 0)
    (result,) = fetch(node, ("ret", 0, 0))
    assert result.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    (results,) = produce(node, [("ret", 0, batch(2))])  # producers go on at the same offsets
    assert results[0].first_offset == 3 and part.log_end_offset == 5
    assert part.update_follower_fetch_state(2, 5)
    # A log without its partition here (still being made, or its topic deleted) keeps its active segment.
    del node.rm.partitions[("ret", 0)]
    assert node.rm.periodic.retention() == 0 and part.log.active_segment.size > 0
    node.rm.partitions[("ret", 0)] = part
    assert node.rm.periodic.retention() == 1 and (part.log_start_offset, part.log_end_offset) == (5, 5)


async def test_describe_log_dirs(node: Node) -> None:
    produce(node, [("t", 0, batch())])
    (result,) = node.rm.describe_log_dirs(None)
    assert result["error_code"] == 0
    (topic,) = result["topics"]
    assert topic["name"] == "t" and topic["partitions"][0]["partition_size"] > 0
    assert topic["partitions"][0]["offset_lag"] == 0


async def _restarted(node: Node) -> ReplicaManager:
    """Stop the node's replica manager and start a new one on the same log dirs and metadata."""
    await node.rm.shutdown()
    rm = ReplicaManager(node.config, node.metadata, node.timer, node.io_pool, node.failures.append, lambda: False)
    await rm.start()
    node.rm = rm
    return rm


async def test_high_watermarks_survive_a_restart_in_replication_offset_checkpoint(node_factory) -> None:
    node = await node_factory()
    await node.controller.register_broker(2, "h2", 9093)
    (created,) = await node.controller.create_topics(
        [CreatableTopic("rep", assignments=[ReplicaAssignment(0, (1, 2))])])
    assert created.error_code == 0 and await node.rm.wait_for_logs(["rep"]) == {}
    # On this broker: with two brokers registered, Kafka's placer may put an RF-1 topic on either.
    (solo,) = await node.controller.create_topics([CreatableTopic("solo", assignments=[ReplicaAssignment(0, (1,))])])
    assert solo.error_code == 0 and await node.rm.wait_for_logs(["solo"]) == {}
    part = node.rm.leader_partition("rep", 0)
    part.update_follower_fetch_state(2, 0)
    produce(node, [("rep", 0, batch(2))])
    part.update_follower_fetch_state(2, 2)  # the follower has the first two
    produce(node, [("rep", 0, batch(3)), ("solo", 0, batch(4))])
    assert (part.high_watermark, part.log_end_offset) == (2, 5)
    rm = await _restarted(node)
    log_dir = node.rm.log_manager.log_dirs[0]
    assert "rep 0 2" in (log_dir / HIGH_WATERMARK_CHECKPOINT).read_text()
    # The unreplicated tail stays invisible to consumers: the HW is not taken from the log end.
    assert rm.leader_partition("rep", 0).high_watermark == 2
    # A partition whose ISR is this broker alone has its HW at the log end (Kafka's makeLeader).
    assert rm.leader_partition("solo", 0).high_watermark == 4


async def test_a_follower_fetch_completed_from_the_purgatory_does_not_report_its_position_again(node: Node) -> None:
    """Kafka's readFromLog(readFromPurgatory = true) reads without updateFetchState: a follower's
    position and fetch time are those of the fetch request, not of the append that completed it.
    So a follower that got one append when another followed at once counts as caught up as of
    its parked fetch (the leader's log end then), not as of that completion, when it had nothing
    yet (Kafka's Replica.updateFetchStateOrThrow with lastFetchLeaderLogEndOffset/lastFetchTimeMs)."""
    part = node.rm.leader_partition("t", 0)
    part.replicas = part.isr = (1, 2)
    parked: list[FetchResult] = []
    params = FetchParams(500, 1, 1 << 20, READ_UNCOMMITTED, False, replica_id=2)
    node.rm.fetch_messages(params, [CachedPartition("t", None, 0, 0, 1 << 20)], parked.append)
    assert parked == [] and node.rm.fetch_purgatory.delayed == 1
    parked_at = part.follower_state(2)[1]
    time.sleep(0.05)
    produce(node, [("t", 0, batch(3))])  # completes the parked fetch: offsets 0-2 go out
    assert len(parked) == 1 and parked[0].partitions[0].size > 0
    produce(node, [("t", 0, batch(3))])  # offsets 3-5, before the follower fetches again
    time.sleep(0.05)
    answered: list[FetchResult] = []
    node.rm.fetch_messages(params, [CachedPartition("t", None, 0, 3, 1 << 20)], answered.append)
    assert len(answered) == 1
    # It reached the log end its parked fetch saw (0): caught up as of that fetch. The old read
    # reported the fetch again at its completion (leader log end 3), which this fetch reached,
    # so the follower counted as caught up 50 ms later than it was.
    assert part.follower_state(2) == (3, parked_at)
