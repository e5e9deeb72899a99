"""The coordinator runtime over a real temp-dir Log, with a writer whose durability the test decides.

The writer appends to a real ``odradek.storage.log.Log`` at once but reports the batch durable only when
the test releases it (as acks=all replication will), so the tests can look at the state between
"appended" and "durable". The shard is a tiny key/value state machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.broker.coordinator.runtime import (
    CoordinatorResult,
    CoordinatorRuntime,
    CoordinatorWriteError,
    KeyValue,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig

pytestmark = pytest.mark.timeout(10)

TOPIC = "__internal"


class DelayedWriter:
    """A PartitionWriter over one real Log per partition; durability is immediate unless ``hold``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[int, Log] = {}
        self.hold = False
        self.pending: list[tuple[asyncio.Future[int], int]] = []
        self.fail_with: ErrorCode | None = None  # the append itself fails (lost leadership...)
        self.leader_cbs: list[Callable[[str, int, int], None]] = []
        self.resign_cbs: list[Callable[[str, int], None]] = []

    def open(self, partition: int) -> Log:
        lg = self.logs[partition] = Log.open(self.root / f"{TOPIC}-{partition}", LogConfig())
        return lg

    def close(self) -> None:
        for lg in self.logs.values():
            lg.close()

    def append(self, topic: str, partition: int, records: bytes) -> asyncio.Future[int]:
        if self.fail_with is not None:
            raise KafkaApiError(self.fail_with)
        lg = self.logs[partition]
        lg.append(records, leader_epoch=0)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.hold:
            self.pending.append((future, lg.log_end_offset - 1))
        else:
            future.set_result(lg.log_end_offset - 1)
        return future

    def release(self, error: ErrorCode | None = None) -> None:
        """Make every held append durable (or fail it with ``error``)."""
        pending, self.pending = self.pending, []
        for future, last in pending:
            if error is None:
                future.set_result(last)
            else:
                future.set_exception(KafkaApiError(error))

    def wait_for_high_watermark(self, topic: str, partition: int, offset: int) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(offset)
        return future

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        return self.logs[partition].read(offset, max_bytes).read_bytes()

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.logs[partition].log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.logs[partition].log_end_offset

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self.leader_cbs.append(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self.resign_cbs.append(callback)


class KvShard:
    """key -> value; a None value deletes. ``calls`` records the order operations were computed in."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.kv: dict[bytes, bytes] = {}
        self.loaded = False
        self.unloaded = False
        self.calls: list[str] = []

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = -1, producer_epoch: int = -1) -> None:
        assert key is not None
        self.put(key, value)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.kv.pop(key, None)
        else:
            self.kv[key] = value

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass

    def on_loaded(self) -> None:
        self.loaded = True

    def on_unloaded(self) -> None:
        self.unloaded = True


def put(key: bytes, value: bytes | None, name: str = "") -> Callable[[KvShard], CoordinatorResult[str]]:
    """A write operation: the record, and (once durable) the state change; answers the old value."""
    def op(shard: KvShard) -> CoordinatorResult[str]:
        shard.calls.append(name)
        records: list[KeyValue] = [(key, value)]
        old = shard.kv.get(key, b"").decode()
        return CoordinatorResult(records, old, lambda: shard.put(key, value))
    return op


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[DelayedWriter]:
    w = DelayedWriter(tmp_path)
    w.open(0)
    w.open(1)
    yield w
    w.close()


async def loaded(writer: DelayedWriter, partitions: tuple[int, ...] = (0,),
                 write_timeout_ms: int | None = None) -> CoordinatorRuntime[KvShard]:
    runtime: CoordinatorRuntime[KvShard] = CoordinatorRuntime(TOPIC, writer, KvShard,
                                                              write_timeout_ms=write_timeout_ms)
    runtime.start([(p, 0) for p in partitions])
    for _ in range(50):
        if runtime.active_partitions() == set(partitions):
            return runtime
        await asyncio.sleep(0)
    raise AssertionError("partitions did not load")


async def test_a_write_is_not_visible_before_it_is_durable(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    writer.hold = True
    future = runtime.write(0, put(b"k", b"v1"))
    await asyncio.sleep(0)
    assert writer.logs[0].log_end_offset == 1  # in the log ...
    assert not future.done() and runtime.shard(0).kv == {}  # ... but neither applied nor answered
    writer.release()
    assert await future == "" and runtime.shard(0).kv == {b"k": b"v1"}


async def test_immediate_durability_completes_inside_write(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    future = runtime.write(0, put(b"k", b"v"))
    assert future.done() and future.result() == "" and runtime.shard(0).kv == {b"k": b"v"}


async def test_failed_append_changes_nothing_and_answers_the_error(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    await runtime.write(0, put(b"k", b"v1"))
    writer.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(CoordinatorWriteError) as info:
        await runtime.write(0, put(b"k", b"v2"))
    assert info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and runtime.shard(0).kv == {b"k": b"v1"}
    # Durability that fails later (replication gave up): the same.
    writer.fail_with = None
    writer.hold = True
    future = runtime.write(0, put(b"k", b"v3"))
    writer.release(ErrorCode.NOT_ENOUGH_REPLICAS)
    with pytest.raises(CoordinatorWriteError) as info:
        await future
    assert info.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and runtime.shard(0).kv == {b"k": b"v1"}


async def test_an_operation_error_is_answered_without_a_write(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)

    def refuse(shard: KvShard) -> CoordinatorResult[None]:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST)

    with pytest.raises(KafkaApiError) as info:
        await runtime.write(0, refuse)
    assert info.value.code == ErrorCode.INVALID_REQUEST and writer.logs[0].log_end_offset == 0


async def test_operations_of_one_partition_are_serialized(writer: DelayedWriter) -> None:
    runtime = await loaded(writer, (0, 1))
    writer.hold = True
    first = runtime.write(0, put(b"k", b"a", "first"))
    second = runtime.write(0, put(b"k", b"b", "second"))
    other = runtime.write(1, put(b"k", b"x", "other"))
    # The second is not even computed while the first awaits durability; partition 1 is not held up.
    assert runtime.shard(0).calls == ["first"] and runtime.shard(1).calls == ["other"]
    writer.release()
    assert await first == "" and await other == ""
    # It computed from the first's applied state (old value "a"), then waited for its own durability.
    assert runtime.shard(0).calls == ["first", "second"] and not second.done()
    writer.release()
    assert await second == "a" and runtime.shard(0).kv == {b"k": b"b"}


async def test_become_leader_loads_the_log_and_resign_unloads(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    for i in range(5):
        await runtime.write(0, put(b"k%d" % i, b"v%d" % i))
    await runtime.write(0, put(b"k0", None))  # a tombstone
    runtime.shutdown()
    with pytest.raises(KafkaApiError) as info:
        runtime.shard(0)
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    fresh: CoordinatorRuntime[KvShard] = CoordinatorRuntime(TOPIC, writer, KvShard, load_buffer_size=100)
    fresh.start()
    with pytest.raises(KafkaApiError) as info:
        fresh.shard(0)
    assert info.value.code == ErrorCode.NOT_COORDINATOR  # not led here
    writer.leader_cbs[-1](TOPIC, 0, 1)
    with pytest.raises(KafkaApiError) as info:
        fresh.shard(0)
    assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert fresh.write(0, put(b"x", b"y")).exception().code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for _ in range(50):
        await asyncio.sleep(0)
    shard = fresh.shard(0)
    assert shard.loaded and shard.kv == {b"k%d" % i: b"v%d" % i for i in range(1, 5)}

    # Resign with a write in flight: it fails with NOT_COORDINATOR and is never applied.
    writer.hold = True
    in_flight = fresh.write(0, put(b"late", b"1"))
    queued = fresh.write(0, put(b"later", b"2"))
    writer.resign_cbs[-1](TOPIC, 0)
    writer.release()
    for future in (in_flight, queued):
        with pytest.raises(KafkaApiError) as info:
            await future
        assert info.value.code == ErrorCode.NOT_COORDINATOR
    assert shard.unloaded and b"late" not in shard.kv
    with pytest.raises(KafkaApiError) as info:
        fresh.shard(0)
    assert info.value.code == ErrorCode.NOT_COORDINATOR


async def test_resign_during_load_stops_it(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    for i in range(20):
        await runtime.write(0, put(b"k%d" % i, b"v"))
    runtime.shutdown()
    fresh: CoordinatorRuntime[KvShard] = CoordinatorRuntime(TOPIC, writer, KvShard, load_buffer_size=100)
    fresh.start([(0, 1)])
    await asyncio.sleep(0)
    fresh.on_resign(TOPIC, 0)
    for _ in range(50):
        await asyncio.sleep(0)
    assert fresh.state(0) is None and fresh.active_partitions() == set()


async def test_a_repeated_become_leader_keeps_the_loaded_shard(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    await runtime.write(0, put(b"k", b"v"))
    shard = runtime.shard(0)
    writer.leader_cbs[-1](TOPIC, 0, 5)
    assert runtime.shard(0) is shard and shard.kv == {b"k": b"v"} and not shard.unloaded


async def test_a_durable_write_is_applied_even_if_its_caller_went_away(writer: DelayedWriter) -> None:
    runtime = await loaded(writer)
    writer.hold = True
    future = runtime.write(0, put(b"k", b"v"))
    future.cancel()  # e.g. the client disconnected while the append was replicating
    writer.release()
    await asyncio.sleep(0)
    assert runtime.shard(0).kv == {b"k": b"v"}  # memory follows the log


async def test_a_caller_times_out_but_a_write_in_the_log_is_applied_once_durable(writer: DelayedWriter) -> None:
    runtime = await loaded(writer, write_timeout_ms=50)
    writer.hold = True
    appended = runtime.write(0, put(b"k", b"v1", "appended"))
    queued = runtime.write(0, put(b"k", b"v2", "queued"))
    for future in (appended, queued):
        with pytest.raises(CoordinatorWriteError) as info:
            await future
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT  # Kafka's write timeout
    assert runtime.shard(0).kv == {}
    writer.release()  # replicated after all: the records are in the log, so memory follows them
    await asyncio.sleep(0)
    assert runtime.shard(0).kv == {b"k": b"v1"}
    # The queued operation timed out before its turn: it was never computed, nothing was written.
    assert runtime.shard(0).calls == ["appended"] and writer.logs[0].log_end_offset == 1
    # Immediate durability arms no timer and answers inside write.
    writer.hold = False
    assert runtime.write(0, put(b"k", b"v3")).result() == "v1"
