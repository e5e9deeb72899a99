"""Append lanes (broker/replica/append_lane.py): produce appends to a recompressing topic, rebuilt off the
handler loop, land in arrival order; what waits answers correctly when leadership goes or a rebuild fails.

A replica manager on real logs (tests/unit/replica/conftest.py) whose IO pool is replaced by one that
runs each rebuild only when the test says, in the order the test picks.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from odradek.controller import AlterableConfig, AlterConfigOp, AlterConfigsResource
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch, iter_batches
from odradek.storage.results import AppendInfo
from tests.support.bad_batches import catalogue
from tests.unit.replica.conftest import Node

LZ4, ZSTD = 3, 4


class HeldPool(Executor):
    """Holds every rebuild (Log.recompress) until ``run(i)``: rebuild i (in submission order) runs then,
    on the caller's thread. Other work goes to the node's own pool."""

    def __init__(self, real: Executor) -> None:
        self.real = real
        self.jobs: list[tuple[Future, Any, tuple]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        if getattr(fn, "__name__", "") != "recompress":
            return self.real.submit(fn, *args, **kwargs)
        future: Future = Future()
        self.jobs.append((future, fn, args))
        return future

    def run(self, i: int, fail: BaseException | None = None) -> None:
        future, fn, args = self.jobs[i]
        if fail is not None:
            future.set_exception(fail)
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the future, as an executor does
            future.set_exception(exc)


def values_batch(tag: str, n: int = 3, codec: int = LZ4, **kwargs: Any) -> bytes:
    return encode_batch([Record(timestamp=1000, key=b"k", value=f"{tag}-{i}".encode() * 20) for i in range(n)],
                        compression=codec, **kwargs)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def recompressing_node(node_factory: Any, **configs: str) -> tuple[Node, HeldPool]:
    node = await node_factory()
    pool = HeldPool(node.io_pool)
    node.rm.io_pool = node.rm.leadership.io_pool = pool  # the append lanes are made with the leadership's
    await node.create_topic("z", 1, **{"compression.type": "zstd", **configs})
    await node.create_topic("plain", 1)
    return node, pool


def stored(node: Node, topic: str) -> list:
    d = Path(node.config.log_dirs[0]) / f"{topic}-0"
    raw = b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
    return list(iter_batches(raw, allow_partial=False))


def produce(node: Node, entries: list[tuple[str, int, Any]], acks: int = 1) -> list[list[Any]]:
    calls: list[list[Any]] = []
    node.rm.append_records(entries, acks, 1000, calls.append)
    return calls


async def test_appends_land_in_arrival_order_whatever_order_the_rebuilds_finish(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    part = node.rm.leader_partition("z", 0)
    assert part.append_lane is not None and node.rm.leader_partition("plain", 0).append_lane is None
    answers = [produce(node, [("z", 0, values_batch("a"))]),
               produce(node, [("z", 0, values_batch("b"))]),
               produce(node, [("z", 0, values_batch("c", codec=ZSTD))]),  # no rebuild, but waits its turn
               produce(node, [("z", 0, values_batch("d"))])]
    assert answers == [[], [], [], []] and len(pool.jobs) == 3
    pool.run(2)  # d's rebuild first
    await settle()
    assert answers == [[], [], [], []] and part.log.log_end_offset == 0
    pool.run(1)
    pool.run(0)
    await settle()
    assert [[(r.first_offset, r.last_offset) for r in a[0]] for a in answers] == [[(0, 2)], [(3, 5)], [(6, 8)],
                                                                                 [(9, 11)]]
    batches = stored(node, "z")
    assert [(b.base_offset, b.compression) for b in batches] == [(0, ZSTD), (3, ZSTD), (6, ZSTD), (9, ZSTD)]
    assert [b.records[0].value[:3] for b in batches] == [b"a-0", b"b-0", b"c-0", b"d-0"]
    assert part.high_watermark == 12 and len(part.append_lane) == 0


async def test_a_batch_already_in_the_codec_appends_at_once_when_nothing_waits(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    (results,) = produce(node, [("z", 0, values_batch("a", codec=ZSTD))])
    assert isinstance(results[0], AppendInfo) and results[0].first_offset == 0 and pool.jobs == []


async def test_a_request_over_lane_and_plain_partitions_answers_once_in_entry_order(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    calls = produce(node, [("plain", 0, values_batch("p")), ("z", 0, values_batch("a")), ("nope", 0, b"x"),
                           ("z", 0, b"")], acks=-1)
    assert calls == []  # the z append waits for its rebuild; the others are decided
    assert node.rm.leader_partition("plain", 0).log.log_end_offset == 3
    pool.run(0)
    await settle()
    (results,) = calls
    assert isinstance(results[0], AppendInfo) and isinstance(results[1], AppendInfo)
    assert (results[1].first_offset, results[1].last_offset) == (0, 2)
    assert [r.code for r in results[2:]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.CORRUPT_MESSAGE]
    assert node.rm.produce_purgatory.delayed == 0


async def test_bad_records_waiting_in_the_lane_get_their_error_and_the_next_append_lands(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    good = values_batch("a")
    (bad,) = [b.batch for b in catalogue(LZ4) if b.name == "compressed bytes that do not decompress"]
    first, second = produce(node, [("z", 0, bad)]), produce(node, [("z", 0, good)])
    pool.run(1)
    pool.run(0)
    await settle()
    assert isinstance(first[0][0], KafkaApiError) and first[0][0].code == ErrorCode.CORRUPT_MESSAGE
    assert (second[0][0].first_offset, second[0][0].last_offset) == (0, 2)
    assert len(stored(node, "z")) == 1


async def test_a_rebuild_that_fails_answers_kafka_storage_error_and_nothing_lands(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    calls = produce(node, [("z", 0, values_batch("a"))])
    pool.run(0, fail=MemoryError())
    await settle()
    assert calls[0][0].code == ErrorCode.KAFKA_STORAGE_ERROR
    assert node.rm.leader_partition("z", 0).log.log_end_offset == 0


async def test_what_waits_when_the_topic_is_deleted_answers_not_leader_and_lands_nowhere(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    calls = produce(node, [("z", 0, values_batch("a"))])
    log = node.rm.leader_partition("z", 0).log
    await node.controller.delete_topics(["z"])
    await settle()
    pool.run(0)
    await settle()
    assert calls[0][0].code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert log.log_end_offset == 0


async def test_a_topic_back_to_producer_drains_its_lane_then_appends_plainly(node_factory) -> None:
    node, pool = await recompressing_node(node_factory)
    part = node.rm.leader_partition("z", 0)
    calls = produce(node, [("z", 0, values_batch("a"))])
    (result,) = await node.controller.incremental_alter_configs(
        [AlterConfigsResource(2, "z", [AlterableConfig("compression.type", AlterConfigOp.SET, "producer")])])
    assert result.error_code == 0
    await settle()
    later = produce(node, [("z", 0, values_batch("b"))])  # waits behind the queued one, not past it
    assert later == [] and part.append_lane is not None
    pool.run(0)
    await settle()
    assert [(r[0].first_offset, r[0].last_offset) for r in (calls[0], later[0])] == [(0, 2), (3, 5)]
    assert part.append_lane is None  # retired once empty
    (plain,) = produce(node, [("z", 0, values_batch("c"))])
    assert plain[0].first_offset == 6
    # Every batch as the producer sent it: the config the appends met says so (the first was rebuilt
    # while the topic still said zstd, and appended after the change).
    assert [b.compression for b in stored(node, "z")] == [LZ4, LZ4, LZ4]
    (result,) = await node.controller.incremental_alter_configs(
        [AlterConfigsResource(2, "z", [AlterableConfig("compression.type", AlterConfigOp.SET, "gzip")])])
    await settle()
    assert part.append_lane is not None
