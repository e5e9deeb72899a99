"""Metadata snapshots through the ``MetadataLogStore`` contract, on local files and on a real etcd; what only etcd has.

``test_contract_*`` run against ``LocalMetadataLogStore`` (temp dir) and ``EtcdMetadataLogStore`` (one
throwaway etcd per module, each test under its own prefix). ``test_etcd_*``: the covered batch keys
are deleted and etcd's history is compacted (``etcdctl get --rev`` of an old revision is refused),
a snapshot over etcd's 1.5 MiB request limit goes in chunks, a half-written snapshot is ignored and
cleaned up, a fenced controller cannot snapshot, and a broker's ``MetadataFollower`` that stands
below the snapshot replaces its image and tells its listeners what changed. The etcd cases SKIP
when no etcd binary is found (tests/support/etcd.py says where it looks).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.cluster.metadata_follower import MetadataFollower
from odradek.broker.launcher.etcd_binary import find_etcd_binary
from odradek.controller.etcd_client import EtcdError, etcd_client
from odradek.controller.etcd_lease import EtcdLeaseStore
from odradek.controller.etcd_log_store import EtcdMetadataLogStore, LeaseFencedError
from odradek.controller.image import MetadataDelta, MetadataImage, apply
from odradek.controller.image_records import image_records, load_snapshot
from odradek.controller.log_store import (
    LocalMetadataLogStore,
    MetadataLogStore,
    MetadataStoreUnavailableError,
)
from odradek.controller.metadata_log import MetadataLogContents, StaleControllerEpochError
from odradek.controller.metadata_snapshot import MetadataSnapshot, encode_snapshot
from odradek.controller.records import (
    ConfigRecord,
    LeaderChangeRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tests.support.etcd import EtcdServer, etcd_server  # noqa: F401 (fixture)

TOPIC = 2


class Log:
    """One store and the image its committed records make (what a controller holds)."""

    def __init__(self, store: MetadataLogStore) -> None:
        self.store = store
        self.image = MetadataImage()

    async def open(self) -> MetadataLogContents:
        contents = await self.store.open()
        self.image = _image(contents)
        return contents

    async def commit(self, records: list[MetadataRecord], epoch: int) -> int:
        result = await self.store.append(records, epoch)
        for batch in result.caught_up:
            for record in batch.records:
                apply(self.image, record)
        for record in records:
            apply(self.image, record)
        return result.base_offset

    def snapshot(self) -> MetadataSnapshot:
        return MetadataSnapshot(self.store.next_offset, self.store.newest_epoch, tuple(image_records(self.image)))


def _image(contents: MetadataLogContents, base: MetadataImage | None = None) -> MetadataImage:
    image = MetadataImage() if contents.snapshot is not None or base is None else base
    if contents.snapshot is not None:
        load_snapshot(image, contents.snapshot.records, contents.snapshot.end_offset)
    for batch in contents.batches:
        for record in batch.records:
            apply(image, record)
    return image


def _topic(name: str) -> list[MetadataRecord]:
    topic_id = uuid.uuid4()
    return [TopicRecord(name, topic_id), PartitionRecord(0, topic_id, (1,), (1,), leader=1),
            ConfigRecord(TOPIC, name, "retention.ms", "1000")]


@pytest.fixture(params=["local", "etcd"])
async def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], MetadataLogStore]]:
    opened: list[MetadataLogStore] = []
    if request.param == "local":
        def make() -> MetadataLogStore:
            opened.append(LocalMetadataLogStore(tmp_path))
            return opened[-1]
    else:
        server: EtcdServer = request.getfixturevalue("etcd_server")
        prefix = f"/odradek/test-{uuid.uuid4()}/metadata"

        def make() -> MetadataLogStore:
            opened.append(EtcdMetadataLogStore(server.endpoint, prefix))
            return opened[-1]
    yield make
    for store in opened:
        await store.close()


async def test_contract_snapshot_then_open_read_and_append(new_store: Callable[[], MetadataLogStore]) -> None:
    log = Log(new_store())
    assert await log.open() == MetadataLogContents(None, ())
    await log.commit([LeaderChangeRecord(1, 1)], 1)
    for i in range(4):
        await log.commit(_topic(f"t{i}"), 1)
    assert log.store.bytes_since_snapshot > 0
    snapshot = log.snapshot()
    assert snapshot.end_offset == 13
    assert await log.store.write_snapshot(snapshot)
    assert log.store.bytes_since_snapshot == 0
    assert (log.store.next_offset, log.store.newest_epoch) == (13, 1)
    assert await log.commit(_topic("after"), 2) == 13
    assert log.store.bytes_since_snapshot > 0
    # A reader below the snapshot gets it and everything after; at or past it, batches only.
    below = await log.store.read(0)
    assert below.snapshot == snapshot and [b.base_offset for b in below.batches] == [13]
    assert _image(below) == log.image
    assert (await log.store.read(12)).snapshot == snapshot
    at = await log.store.read(13)
    assert at.snapshot is None and [b.base_offset for b in at.batches] == [13]
    assert await log.store.read(16) == MetadataLogContents(None, ())

    reopened = Log(new_store())
    contents = await reopened.open()
    assert contents.snapshot == snapshot and [b.base_offset for b in contents.batches] == [13]
    assert reopened.image == log.image
    assert (reopened.store.next_offset, reopened.store.newest_epoch) == (16, 2)
    assert reopened.store.bytes_since_snapshot > 0  # the tail counts towards the next snapshot
    assert await reopened.commit(_topic("later"), 2) == 16


async def test_contract_a_snapshot_that_missed_another_writers_batch_is_not_taken(
        new_store: Callable[[], MetadataLogStore]) -> None:
    mine, theirs = Log(new_store()), Log(new_store())
    await mine.open()
    await theirs.open()
    await mine.commit([LeaderChangeRecord(1, 1)], 1)
    await theirs.commit(_topic("theirs"), 1)  # after catching up on mine
    stale_view = mine.snapshot()  # offset 1: misses their batch
    assert await mine.store.write_snapshot(stale_view) is False
    assert (await new_store().open()).snapshot is None  # nothing changed
    # The batch it read on the way is handed out by its next append, so its image stays whole.
    await mine.commit(_topic("mine"), 1)
    assert set(mine.image.topics) == {"theirs", "mine"}
    assert await mine.store.write_snapshot(mine.snapshot())


async def test_contract_a_writer_compacted_beneath_must_not_append(new_store: Callable[[], MetadataLogStore]) -> None:
    old, new = Log(new_store()), Log(new_store())
    await old.open()
    await new.open()
    await old.commit([LeaderChangeRecord(1, 1)], 1)
    await new.commit([LeaderChangeRecord(2, 2)], 2)
    await new.commit(_topic("t"), 2)
    assert await new.store.write_snapshot(new.snapshot())
    with pytest.raises(StaleControllerEpochError) as e:
        await old.commit(_topic("late"), 1)
    assert e.value.newest_epoch == 2
    # Not stale but behind a snapshot: the batches it missed exist only there, so it must replay.
    with pytest.raises(MetadataStoreUnavailableError, match="compacted"):
        await old.commit(_topic("late"), 3)
    assert set(_image(await new.store.read(0)).topics) == {"t"}


# --- etcd only -------------------------------------------------------------------------------------


def _etcdctl(server: EtcdServer, *args: str) -> subprocess.CompletedProcess[str]:
    binary, why = find_etcd_binary("etcdctl")
    if binary is None:
        pytest.skip(why)
    return subprocess.run([binary, f"--endpoints={server.endpoint}", *args], capture_output=True, text=True, errors="replace",
                          timeout=30)


async def _keys(client: Any, prefix: str) -> list[bytes]:
    return sorted(bytes(kv.key) for kv in await client.get_prefix(prefix.encode()))


async def test_etcd_snapshot_deletes_covered_keys_and_compacts_history(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}/metadata"
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
    raw = etcd_client(etcd_server.endpoint)
    try:
        await log.open()
        await log.commit([LeaderChangeRecord(1, 1)], 1)
        for i in range(50):
            await log.commit(_topic(f"t{i}"), 1)
        first_batch = log.store.batch_key(0)  # type: ignore[attr-defined]
        old_revision = (await raw.get(first_batch)).mod_revision
        assert len(await _keys(raw, prefix)) == 52  # head + 51 batches
        assert _etcdctl(etcd_server, "get", first_batch.decode(), f"--rev={old_revision}").returncode == 0
        assert await log.store.write_snapshot(log.snapshot())
        keys = await _keys(raw, prefix)
        # head, the manifest, one chunk: every batch key is gone.
        assert [k.decode().removeprefix(prefix) for k in keys][:2] == ["/head", "/snapshot"] and len(keys) == 3
        old = _etcdctl(etcd_server, "get", first_batch.decode(), f"--rev={old_revision}")
        assert old.returncode != 0 and "compacted" in old.stderr  # the old revisions are gone too
        await log.commit(_topic("after"), 1)
        assert len(await _keys(raw, prefix)) == 4
    finally:
        await log.store.close()
        await raw.close()


async def test_etcd_snapshot_larger_than_a_request_goes_in_chunks(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}/metadata"
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
    raw = etcd_client(etcd_server.endpoint)
    try:
        await log.open()
        await log.commit([LeaderChangeRecord(1, 1)], 1)
        records: list[MetadataRecord] = []
        for i in range(8000):
            records += _topic(f"topic-with-a-longer-name-{i:05d}")
        for start in range(0, len(records), 3000):
            await log.commit(records[start:start + 3000], 1)
        snapshot = log.snapshot()
        whole = b"".join(encode_snapshot(snapshot))
        assert len(whole) > 1_572_864
        with pytest.raises(EtcdError, match="too large|larger than max"):  # etcd's request limit is real
            await raw.put(f"{prefix}-probe".encode(), whole)
        assert await log.store.write_snapshot(snapshot)
        chunk_keys = [k for k in await _keys(raw, prefix) if b"/snapshots/" in k]
        assert len(chunk_keys) >= 3
        reopened = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
        assert (await reopened.open()).snapshot == snapshot
        assert reopened.image == log.image
        await reopened.store.close()
    finally:
        await log.store.close()
        await raw.close()


async def test_etcd_half_written_snapshot_is_ignored_then_cleaned_up(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}/metadata"
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
    raw = etcd_client(etcd_server.endpoint)
    try:
        await log.open()
        await log.commit([LeaderChangeRecord(1, 1)], 1)
        await log.commit(_topic("a"), 1)
        # A controller died after putting its chunks (step 1) and before the Txn (step 2).
        orphan = log.snapshot()
        orphan_key = f"{prefix}/snapshots/{orphan.end_offset:020d}-deadbeef/0000000000".encode()
        await raw.put(orphan_key, encode_snapshot(orphan)[0])
        reader = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
        contents = await reader.open()
        assert contents.snapshot is None and reader.image == log.image
        await reader.store.close()
        await log.commit(_topic("b"), 1)
        assert await log.store.write_snapshot(log.snapshot())
        assert orphan_key not in await _keys(raw, prefix)
    finally:
        await log.store.close()
        await raw.close()


async def test_etcd_fenced_controller_cannot_snapshot(etcd_server: EtcdServer) -> None:  # noqa: F811
    prefix = f"/odradek/test-{uuid.uuid4()}"
    leases = EtcdLeaseStore(etcd_server.endpoint, prefix)
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, f"{prefix}/metadata", fence=leases.fence(1)))
    raw = etcd_client(etcd_server.endpoint)
    try:
        lease = await leases.try_acquire(1, ttl_ms=2000, now_ms=0)
        assert lease is not None
        await log.open()
        await log.commit([LeaderChangeRecord(1, lease.epoch)], lease.epoch)
        await log.commit(_topic("a"), lease.epoch)
        before = await _keys(raw, f"{prefix}/metadata")
        await leases.release(lease)  # the lease is gone: this controller is deposed
        with pytest.raises(LeaseFencedError):
            await log.store.write_snapshot(log.snapshot())
        assert await _keys(raw, f"{prefix}/metadata") == before  # no manifest, no deletion, no chunks left
    finally:
        await log.store.close()
        await leases.close()
        await raw.close()


async def test_etcd_follower_below_the_snapshot_replaces_its_image(etcd_server: EtcdServer) -> None:  # noqa: F811
    """A broker's follower that stood at an offset the snapshot deleted (it was cut off, or is starting)
    must load the snapshot, not stop at a gap; its listeners learn what changed meanwhile."""
    prefix = f"/odradek/test-{uuid.uuid4()}/metadata"
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
    client = etcd_client(etcd_server.endpoint)
    published: list[tuple[MetadataImage, MetadataDelta]] = []
    follower = MetadataFollower(client, prefix, "cluster-1", lambda image, delta: published.append((image, delta)))
    try:
        await log.open()
        await log.commit([LeaderChangeRecord(1, 1)], 1)
        await log.commit(_topic("kept"), 1)
        await log.commit(_topic("deleted"), 1)
        assert await follower.catch_up() == 7 and follower.next_offset == 7
        deleted_id = follower.image.topics["deleted"].topic_id
        # While the follower is away: a topic is deleted, one is created, then a snapshot deletes
        # the batches it would have read.
        await log.commit([RemoveTopicRecord(deleted_id)], 1)
        await log.commit(_topic("created"), 1)
        assert await log.store.write_snapshot(log.snapshot())
        await log.commit([ConfigRecord(TOPIC, "kept", "retention.ms", "2000")], 1)
        old_image = follower.image
        await follower.catch_up()
        image, delta = published[-1]
        assert image is follower.image and image is not old_image
        assert follower.next_offset == log.store.next_offset == 12
        expected = MetadataImage(cluster_id="cluster-1")
        load_snapshot(expected, image_records(log.image), 12)
        assert image == expected
        assert set(delta.deleted_topics) == {"deleted"} and delta.created_topics == {"created"}
        assert "kept" in delta.changed_topic_configs and not delta.is_empty()
        # A follower starting now (a broker's start-up) loads the snapshot and the tail too.
        fresh = MetadataFollower(client, prefix, "cluster-1", lambda image, delta: None)
        await fresh.catch_up()
        assert fresh.image == expected and fresh.next_offset == 12
        # And from there it follows batches as before.
        await log.commit(_topic("next"), 1)
        await fresh.catch_up()
        assert "next" in fresh.image.topics and fresh.next_offset == 15
    finally:
        await log.store.close()
        await client.close()


async def test_etcd_follower_is_woken_by_new_batches_not_only_by_its_poll(etcd_server: EtcdServer) -> None:  # noqa: F811
    """The follower's watch (puts under log/ only, so a snapshot's mass deletion wakes nobody) still
    brings a new batch at once: its poll is 60 s here."""
    prefix = f"/odradek/test-{uuid.uuid4()}/metadata"
    log = Log(EtcdMetadataLogStore(etcd_server.endpoint, prefix))
    client = etcd_client(etcd_server.endpoint)
    follower = MetadataFollower(client, prefix, "cluster-1", lambda image, delta: None, poll_interval_s=60.0)
    try:
        await log.open()
        await log.commit([LeaderChangeRecord(1, 1)], 1)
        await follower.start()
        await asyncio.sleep(1.0)  # the watch is in place
        for i in range(3):
            await log.commit(_topic(f"t{i}"), 1)
            assert await follower.wait_for_offset(log.store.next_offset, timeout_s=5.0)
        assert await log.store.write_snapshot(log.snapshot())
        await log.commit(_topic("after-snapshot"), 1)
        assert await follower.wait_for_offset(log.store.next_offset, timeout_s=5.0)
        assert "after-snapshot" in follower.image.topics
    finally:
        # Bounded: on a machine at load 20 aetcd's watch teardown was once seen never to return
        # (its request queue); that is not what this test is about.
        for closing in (follower.stop(), log.store.close(), client.close()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing, 30)
