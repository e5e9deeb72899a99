"""One contract, two implementations: the controller's stores on local files and on a real etcd.

Every ``test_contract_*`` runs against ``LocalLeaseStore``/``LocalMetadataLogStore`` (temp dir) and
``EtcdLeaseStore``/``EtcdMetadataLogStore`` (one throwaway etcd server per module, each test under
its own key prefix). The ``etcd`` cases SKIP when no etcd binary is found (tests/support/etcd.py says
where it looks). ``test_etcd_*`` cover what only etcd has: a lease lapsing by its TTL after its
holder dies, and epochs and batches surviving an etcd restart on the same data dir.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from odradek.controller.etcd_client import etcd_client
from odradek.controller.etcd_lease import EtcdLeaseStore
from odradek.controller.etcd_log_store import EtcdMetadataLogStore, LeaseFencedError
from odradek.controller.lease import Lease, LeaseLostError, LeaseStore, LocalLeaseStore
from odradek.controller.log_store import AppendResult, LocalMetadataLogStore, MetadataLogStore
from odradek.controller.metadata_log import MetadataBatch, MetadataLogContents, StaleControllerEpochError
from odradek.controller.records import LeaderChangeRecord, TopicRecord
from odradek.protocol.errors import ErrorCode
from tests.support.etcd import EtcdServer, etcd_binary_or_skip, etcd_server  # noqa: F401 (fixture)

EMPTY = MetadataLogContents(None, ())
TTL_MS = 2000  # whole seconds, so etcd grants exactly this and expires_at_ms is the same for both kinds


@dataclass
class Stores:
    """Makes store objects that share one place (a directory, or an etcd key prefix)."""

    kind: str
    new_lease_store: Callable[[], LeaseStore]
    new_log_store: Callable[[], MetadataLogStore]
    opened: list[LeaseStore | MetadataLogStore] = field(default_factory=list)

    def lease_store(self) -> LeaseStore:
        store = self.new_lease_store()
        self.opened.append(store)
        return store

    def log_store(self) -> MetadataLogStore:
        store = self.new_log_store()
        self.opened.append(store)
        return store


@pytest.fixture(params=["local", "etcd"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    if request.param == "local":
        made = Stores("local", lambda: LocalLeaseStore(tmp_path / "controller.lease"),
                      lambda: LocalMetadataLogStore(tmp_path))
    else:
        server: EtcdServer = request.getfixturevalue("etcd_server")
        prefix = f"/odradek/test-{uuid.uuid4()}"
        made = Stores("etcd", lambda: EtcdLeaseStore(server.endpoint, prefix),
                      lambda: EtcdMetadataLogStore(server.endpoint, f"{prefix}/metadata"))
    yield made
    for store in made.opened:
        await store.close()


def _shape(lease: Lease | None) -> tuple[int, int, int] | None:
    """What both kinds must agree on (``lease_id`` is the etcd lease's own id)."""
    return None if lease is None else (lease.holder_id, lease.epoch, lease.expires_at_ms)


async def _acquire_within(store: LeaseStore, holder_id: int, seconds: float) -> tuple[Lease, float]:
    start = time.monotonic()
    while True:
        lease = await store.try_acquire(holder_id, ttl_ms=TTL_MS, now_ms=int(time.monotonic() * 1000))
        if lease is not None:
            return lease, time.monotonic() - start
        assert time.monotonic() - start < seconds, f"holder {holder_id} not admitted within {seconds} s"
        await asyncio.sleep(0.05)


async def test_contract_lease_acquire_renew_release(stores: Stores) -> None:
    store = stores.lease_store()
    lease = await store.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
    assert _shape(lease) == (1, 1, TTL_MS)
    assert lease is not None
    seen = await store.current(now_ms=50)
    # etcd reports the remaining TTL in whole seconds: "some time after now, within the TTL".
    assert seen is not None and (seen.holder_id, seen.epoch) == (1, 1)
    assert 50 < seen.expires_at_ms <= 50 + TTL_MS
    renewed = await store.renew(lease, now_ms=500)
    assert _shape(renewed) == (1, 1, 500 + TTL_MS)
    await store.release(renewed)
    assert await store.current(now_ms=600) is None
    again = await store.try_acquire(1, ttl_ms=TTL_MS, now_ms=700)
    assert again is not None and again.epoch == 2  # an epoch is never handed out twice
    with pytest.raises(LeaseLostError) as e:
        await store.renew(lease, now_ms=800)  # the released epoch cannot come back
    assert e.value.code == ErrorCode.NOT_CONTROLLER
    assert _shape(await store.renew(again, now_ms=900)) == (1, 2, 900 + TTL_MS)
    await store.release(again)


async def test_contract_lease_refuses_second_holder_until_first_dies(stores: Stores) -> None:
    a, b = stores.lease_store(), stores.lease_store()
    lease = await a.try_acquire(1, ttl_ms=TTL_MS, now_ms=int(time.monotonic() * 1000))
    assert lease is not None
    assert await b.try_acquire(2, ttl_ms=TTL_MS, now_ms=int(time.monotonic() * 1000)) is None
    await a.close()  # process death: no release; the local lock drops at once, an etcd lease lapses
    taken, _ = await _acquire_within(b, 2, seconds=TTL_MS / 1000 + 3)
    assert taken.holder_id == 2 and taken.epoch == lease.epoch + 1
    assert _shape(await b.current(int(time.monotonic() * 1000)))[:2] == (2, taken.epoch)  # type: ignore[index]
    with pytest.raises(LeaseLostError):
        await a.renew(lease, now_ms=int(time.monotonic() * 1000))  # the deposed holder is fenced
    await b.release(taken)


async def test_contract_lease_expired_by_callers_clock_is_not_renewed(stores: Stores) -> None:
    store = stores.lease_store()
    lease = await store.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
    assert lease is not None
    with pytest.raises(LeaseLostError):
        await store.renew(lease, now_ms=TTL_MS)
    # A holder that stalled past its TTL must acquire again, and gets a newer epoch.
    again = await store.try_acquire(1, ttl_ms=TTL_MS, now_ms=TTL_MS + 1)
    assert _shape(again) == (1, 2, 2 * TTL_MS + 1)
    assert again is not None
    await store.release(again)


async def test_contract_lease_racing_candidates_get_one_winner(stores: Stores) -> None:
    candidates = [stores.lease_store() for _ in range(4)]
    won = await asyncio.gather(*(c.try_acquire(i, ttl_ms=TTL_MS, now_ms=0) for i, c in enumerate(candidates)))
    winners = [lease for lease in won if lease is not None]
    assert len(winners) == 1 and winners[0].epoch == 1


def _topic(name: str) -> TopicRecord:
    return TopicRecord(name, uuid.uuid4())


def _rows(batches: Sequence[MetadataBatch]) -> list[tuple[int, int, tuple[object, ...]]]:
    return [(b.base_offset, b.controller_epoch, b.records) for b in batches]


async def test_contract_log_appends_reads_back_and_replays(stores: Stores) -> None:
    store = stores.log_store()
    assert await store.open() == EMPTY
    assert store.next_offset == 0 and store.newest_epoch == -1
    a, b = _topic("a"), _topic("b")
    assert await store.append([LeaderChangeRecord(1, 1)], 1) == _result(0)
    assert await store.append([a, b], 1) == _result(1)
    assert store.next_offset == 3 and store.newest_epoch == 1
    assert [batch.base_offset for batch in (await store.read()).batches] == [0, 1]
    (tail,) = (await store.read(from_offset=2)).batches  # the batch holding offset 2
    assert tail.records == (a, b)
    assert await store.read(from_offset=3) == EMPTY
    await store.close()

    reopened = stores.log_store()
    assert _rows((await reopened.open()).batches) == [(0, 1, (LeaderChangeRecord(1, 1),)), (1, 1, (a, b))]
    assert reopened.next_offset == 3 and reopened.newest_epoch == 1
    assert await reopened.append([_topic("c")], 2) == _result(3)


def _result(base_offset: int) -> AppendResult:
    return AppendResult(base_offset)


async def test_contract_log_refuses_stale_epoch_writing_nothing(stores: Stores) -> None:
    old, new, observer = stores.log_store(), stores.log_store(), stores.log_store()
    for store in (old, new, observer):
        await store.open()
    assert (await old.append([LeaderChangeRecord(1, 1)], 1)).base_offset == 0
    # The successor appends with epoch 2 and learns, through caught_up, what the old one wrote.
    appended = await new.append([LeaderChangeRecord(2, 2)], 2)
    assert appended.base_offset == 1
    assert [b.records for b in appended.caught_up] == [(LeaderChangeRecord(1, 1),)]
    before = (await observer.read()).batches
    with pytest.raises(StaleControllerEpochError) as e:
        await old.append([_topic("late")], 1)
    assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert e.value.newest_epoch == 2
    assert (await observer.read()).batches == before and [b.controller_epoch for b in before] == [1, 2]
    assert old.newest_epoch == 2  # the refused writer caught up on the way...
    resumed = await old.append([LeaderChangeRecord(1, 3)], 3)
    # ...and the batch it read then is handed out by its next append that succeeds, not lost.
    assert resumed.base_offset == 2 and [b.base_offset for b in resumed.caught_up] == [1]


async def test_contract_log_interleaved_writers_catch_up(stores: Stores) -> None:
    x, y = stores.log_store(), stores.log_store()
    await x.open()
    await y.open()
    assert await x.append([_topic("x1")], 3) == _result(0)
    first = await y.append([_topic("y1")], 3)  # same epoch: allowed, after catching up on x1
    assert first.base_offset == 1 and [b.base_offset for b in first.caught_up] == [0]
    await x.append([_topic("x2"), _topic("x3")], 3)
    await x.append([_topic("x4")], 3)
    second = await y.append([_topic("y2")], 4)
    assert second.base_offset == 5
    assert [(b.base_offset, len(b.records)) for b in second.caught_up] == [(2, 2), (4, 1)]
    # x has not seen y's epoch-4 batch; its epoch-3 append is refused once it looks.
    with pytest.raises(StaleControllerEpochError):
        await x.append([_topic("x5")], 3)
    assert [b.next_offset for b in (await x.read()).batches] == [1, 2, 4, 5, 6]


async def test_contract_log_must_be_open(stores: Stores) -> None:
    store = stores.log_store()
    with pytest.raises(RuntimeError):
        await store.append([_topic("a")], 1)
    await store.open()
    with pytest.raises(RuntimeError):
        await store.open()
    await store.close()
    await store.close()  # closing twice is harmless
    assert await store.open() == EMPTY  # and the store opens again


async def test_etcd_lease_lapses_by_ttl_when_holder_dies(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}"
    holder, watcher = EtcdLeaseStore(etcd_server.endpoint, prefix), EtcdLeaseStore(etcd_server.endpoint, prefix)
    lease = await holder.try_acquire(1, ttl_ms=1000, now_ms=0)  # 1 s: the test server's minimum TTL
    assert lease is not None and lease.lease_id != 0
    assert (await watcher.current(now_ms=0)) is not None
    await holder.close()  # dies without revoking
    start = time.monotonic()
    while await watcher.current(now_ms=0) is not None:
        assert time.monotonic() - start < 4, "the dead holder's lease did not lapse by its TTL"
        await asyncio.sleep(0.05)
    assert time.monotonic() - start > 0.3  # it lapsed by the TTL, not at close
    taken = await watcher.try_acquire(2, ttl_ms=1000, now_ms=0)
    assert taken is not None and taken.epoch == 2
    await watcher.close()


async def test_etcd_epochs_and_batches_survive_an_etcd_restart(tmp_path: Path) -> None:
    server = EtcdServer(etcd_binary_or_skip(), tmp_path / "etcd").start()
    try:
        prefix = "/odradek/restart"
        leases, log = EtcdLeaseStore(server.endpoint, prefix), EtcdMetadataLogStore(server.endpoint, f"{prefix}/metadata")
        lease = await leases.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
        assert lease is not None and lease.epoch == 1
        await log.open()
        await log.append([LeaderChangeRecord(1, lease.epoch)], lease.epoch)
        await leases.release(lease)
        await leases.close()
        await log.close()

        server.restart()
        leases, log = EtcdLeaseStore(server.endpoint, prefix), EtcdMetadataLogStore(server.endpoint, f"{prefix}/metadata")
        again = await leases.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
        assert again is not None and again.epoch == 2  # never 1 again
        assert _rows((await log.open()).batches) == [(0, 1, (LeaderChangeRecord(1, 1),))]
        with pytest.raises(StaleControllerEpochError):
            await log.append([_topic("t")], 0)
        await leases.release(again)
        await leases.close()
        await log.close()
    finally:
        server.stop()


async def test_etcd_fenced_append_needs_the_live_lease_at_its_epoch(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}"
    one, two = EtcdLeaseStore(etcd_server.endpoint, prefix), EtcdLeaseStore(etcd_server.endpoint, prefix)
    log_one = EtcdMetadataLogStore(etcd_server.endpoint, f"{prefix}/metadata", fence=one.fence(1))
    log_two = EtcdMetadataLogStore(etcd_server.endpoint, f"{prefix}/metadata", fence=two.fence(2))
    observer = EtcdMetadataLogStore(etcd_server.endpoint, f"{prefix}/metadata")
    try:
        for log in (log_one, log_two, observer):
            await log.open()
        lease = await one.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
        assert lease is not None
        assert (await log_one.append([LeaderChangeRecord(1, lease.epoch)], lease.epoch)).base_offset == 0
        with pytest.raises(StaleControllerEpochError):
            await log_two.append([_topic("not-mine")], lease.epoch)  # right epoch, wrong holder
        # The lease goes (revoked here; lapsing by TTL deletes the same key): no successor has
        # written anything, yet the old holder's next write is refused by etcd.
        await one.release(lease)
        with pytest.raises(LeaseFencedError) as e:
            await log_one.append([_topic("late")], lease.epoch)
        assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH and "no holder" in str(e.value)
        taken = await two.try_acquire(2, ttl_ms=TTL_MS, now_ms=0)
        assert taken is not None and taken.epoch == 2
        appended = await log_two.append([LeaderChangeRecord(2, taken.epoch)], taken.epoch)
        assert appended.base_offset == 1 and [b.base_offset for b in appended.caught_up] == [0]
        with pytest.raises(StaleControllerEpochError) as e:
            await log_one.append([_topic("later")], lease.epoch)
        assert e.value.newest_epoch == 2
        assert [b.controller_epoch for b in (await observer.read()).batches] == [1, 2]  # nothing else written
        await two.release(taken)
    finally:
        for store in (one, two, log_one, log_two, observer):
            await store.close()


async def test_etcd_renew_checks_the_leader_key_not_only_the_lease(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}"
    store = EtcdLeaseStore(etcd_server.endpoint, prefix)
    raw = etcd_client(etcd_server.endpoint)
    try:
        lease = await store.try_acquire(1, ttl_ms=TTL_MS, now_ms=0)
        assert lease is not None
        await raw.delete(store.leader_key)  # an operator (or a bug) removed the key; the lease lives on
        with pytest.raises(LeaseLostError, match="superseded"):
            await store.renew(lease, now_ms=1)
        # The holder revoked its lease on the way out: a new acquisition is admitted at once.
        assert (await store.try_acquire(2, ttl_ms=TTL_MS, now_ms=2)) is not None
    finally:
        await store.close()
        await raw.close()


async def test_etcd_unreachable_during_an_append_makes_the_controller_step_down(tmp_path: Path) -> None:
    # An append that etcd never answered may still have committed: the controller must not go on
    # validating requests against an image that may lack it. It steps down with NOT_CONTROLLER
    # (retriable; the broker's router then waits for the next controller) instead of surfacing
    # the gRPC error as UNKNOWN_SERVER_ERROR, and a new term replays what etcd really holds.
    from odradek.controller.controller import Controller
    from odradek.controller.log_store import MetadataStoreUnavailableError
    from odradek.protocol.errors import KafkaApiError

    server = EtcdServer(etcd_binary_or_skip(), tmp_path / "etcd").start()
    prefix = "/odradek/unreachable"
    leases = EtcdLeaseStore(server.endpoint, prefix)
    log = EtcdMetadataLogStore(server.endpoint, f"{prefix}/metadata", timeout_s=2.0, fence=leases.fence(1))
    controller = Controller(1, tmp_path / "meta", leases, log_store=log, lease_ttl_ms=30_000)
    try:
        await controller.start()
        await controller.register_broker(1, "127.0.0.1", 9092)
        server.stop()
        with pytest.raises(KafkaApiError) as e:
            await controller.register_broker(2, "127.0.0.1", 9093)
        assert isinstance(e.value, MetadataStoreUnavailableError) and e.value.code == ErrorCode.NOT_CONTROLLER
        assert "unknown outcome" in str(e.value.message)
        assert not controller.is_active
        with pytest.raises(KafkaApiError) as e:  # and it stays down: no write goes on from this image
            await controller.register_broker(3, "127.0.0.1", 9094)
        assert e.value.code == ErrorCode.NOT_CONTROLLER
    finally:
        await controller.stop()
        await leases.close()
        server.stop()
