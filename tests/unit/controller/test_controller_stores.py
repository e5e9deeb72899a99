"""The controller's stores through their async interfaces: LocalLeaseStore and LocalMetadataLogStore.

Real files in temp dirs; the blocking work runs on a real executor. Fencing is the point: a stale
lease cannot be renewed and a stale epoch's append is refused without writing anything.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.lease import Lease, LeaseLostError, LeaseStore, LocalLeaseStore
from odradek.controller.log_store import LocalMetadataLogStore, MetadataLogStore
from odradek.controller.metadata_log import MetadataLogContents, StaleControllerEpochError
from odradek.controller.records import LeaderChangeRecord, TopicRecord
from odradek.protocol.errors import ErrorCode


class _RecordingExecutor(ThreadPoolExecutor):
    """A real thread pool that remembers which threads ran the submitted calls."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="store-io")
        self.threads: set[str] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def run() -> Any:
            self.threads.add(threading.current_thread().name)
            return fn(*args, **kwargs)

        return super().submit(run)


@pytest.fixture
def executor():
    pool = _RecordingExecutor()
    yield pool
    pool.shutdown(wait=True)


async def test_lease_store_epochs_renewal_and_release(tmp_path: Path, executor: _RecordingExecutor) -> None:
    store: LeaseStore = LocalLeaseStore(tmp_path / "controller.lease", executor)
    lease = await store.try_acquire(1, ttl_ms=100, now_ms=0)
    assert lease == Lease(1, 1, 100)
    assert await store.current(now_ms=50) == lease
    renewed = await store.renew(lease, now_ms=50)
    assert renewed == Lease(1, 1, 150)
    await store.release(renewed)
    assert await store.current(now_ms=60) is None
    again = await store.try_acquire(1, ttl_ms=100, now_ms=70)
    assert again is not None and again.epoch == 2  # an epoch is never handed out twice
    with pytest.raises(LeaseLostError) as e:
        await store.renew(lease, now_ms=80)  # the stale epoch cannot come back
    assert e.value.code == ErrorCode.NOT_CONTROLLER
    await store.close()
    assert executor.threads and all(t.startswith("store-io") for t in executor.threads)


async def test_lease_store_excludes_second_holder_until_released(tmp_path: Path) -> None:
    path = tmp_path / "controller.lease"
    a, b = LocalLeaseStore(path), LocalLeaseStore(path)
    lease = await a.try_acquire(1, ttl_ms=1000, now_ms=0)
    assert lease is not None
    assert await b.try_acquire(2, ttl_ms=1000, now_ms=5000) is None  # expired TTL: the lock still fences
    await a.close()  # like process death: no release, the epoch stays on disk
    taken = await b.try_acquire(2, ttl_ms=1000, now_ms=6000)
    assert taken is not None and taken.holder_id == 2 and taken.epoch == lease.epoch + 1
    with pytest.raises(LeaseLostError):
        await a.renew(lease, now_ms=6001)
    assert b.holder_pid() is not None
    await b.release(taken)


async def test_lease_store_expired_lease_is_not_renewed(tmp_path: Path) -> None:
    store = LocalLeaseStore(tmp_path / "controller.lease")
    lease = await store.try_acquire(1, ttl_ms=100, now_ms=0)
    assert lease is not None
    with pytest.raises(LeaseLostError):
        await store.renew(lease, now_ms=100)
    await store.close()


def _topic(name: str) -> TopicRecord:
    return TopicRecord(name, uuid.uuid4())


async def test_log_store_appends_reads_back_and_replays(tmp_path: Path, executor: _RecordingExecutor) -> None:
    store: MetadataLogStore = LocalMetadataLogStore(tmp_path, executor)
    assert await store.open() == MetadataLogContents(None, ())
    assert store.next_offset == 0 and store.newest_epoch == -1
    a, b = _topic("a"), _topic("b")
    assert (await store.append([LeaderChangeRecord(1, 1)], 1)).base_offset == 0
    assert (await store.append([a, b], 1)).base_offset == 1
    assert store.next_offset == 3 and store.newest_epoch == 1
    assert [batch.base_offset for batch in (await store.read()).batches] == [0, 1]
    (tail,) = (await store.read(from_offset=2)).batches  # the batch holding offset 2
    assert tail.records == (a, b)
    assert await store.read(from_offset=3) == MetadataLogContents(None, ())
    await store.close()
    assert executor.threads and all(t.startswith("store-io") for t in executor.threads)

    reopened = LocalMetadataLogStore(tmp_path)
    batches = (await reopened.open()).batches
    assert [(x.base_offset, x.controller_epoch, x.records) for x in batches] == [
        (0, 1, (LeaderChangeRecord(1, 1),)), (1, 1, (a, b))]
    assert reopened.next_offset == 3
    await reopened.close()


async def test_log_store_refuses_a_stale_epoch_and_catches_up(tmp_path: Path) -> None:
    old, new = LocalMetadataLogStore(tmp_path), LocalMetadataLogStore(tmp_path)
    await old.open()
    await new.open()
    assert (await old.append([LeaderChangeRecord(1, 1)], 1)).base_offset == 0
    # The successor appends with epoch 2 and learns, through caught_up, what the old one wrote.
    appended = await new.append([LeaderChangeRecord(1, 2)], 2)
    assert appended.base_offset == 1
    assert [b.records for b in appended.caught_up] == [(LeaderChangeRecord(1, 1),)]
    size = (tmp_path / "__cluster_metadata-0" / "metadata.log").stat().st_size
    with pytest.raises(StaleControllerEpochError) as e:
        await old.append([_topic("late")], 1)
    assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert (tmp_path / "__cluster_metadata-0" / "metadata.log").stat().st_size == size
    assert [b.controller_epoch for b in (await new.read()).batches] == [1, 2]
    await old.close()
    await new.close()
