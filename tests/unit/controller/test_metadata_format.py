"""The metadata format level (odradek.controller.metadata_format): new stores at the newest level, stores an
older release wrote kept at theirs until every registered broker reads the next, snapshots only from
the level that has them, a broker that cannot read the level kept fenced, a level above this release
refused.

Real controllers on real local stores. The "older release" store is what 0.1.0 wrote: batches with no
FeatureLevelRecord (tests/integration/test_upgrade.py opens one the 0.1.0 release itself wrote).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from odradek.broker.cluster.registration import decode_registration, encode_registration
from odradek.broker.metadata.broker_registration import BrokerEndpoint
from odradek.controller import metadata_format
from odradek.controller.image import MetadataImage, apply
from odradek.controller.log_store import LocalMetadataLogStore
from odradek.controller.metadata_format import UnsupportedMetadataFormatError
from odradek.controller.records import FeatureLevelRecord, LeaderChangeRecord, RegisterBrokerRecord
from tests.unit.controller.conftest import make_controller

FORMAT = metadata_format.FEATURE
OLD_RELEASE: tuple[tuple[str, int, int], ...] = ()  # what a 0.1.0 broker registers (nothing)


async def _write_old_store(metadata_dir: Path, brokers: list[int]) -> None:
    """A log as 0.1.0 left it: its controller's epoch and registrations, no format record (epoch 0: the
    lease file that went with it is not kept, so the next controller's lease starts at 1)."""
    store = LocalMetadataLogStore(metadata_dir)
    await store.open()
    await store.append([LeaderChangeRecord(1, 0)], 0)
    for n in brokers:
        await store.append([RegisterBrokerRecord(n, n, uuid.uuid4(), f"h{n}", 9090 + n)], 0)
    await store.close()


async def test_a_new_store_is_formatted_at_the_newest_level(tmp_path: Path) -> None:
    c = make_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    try:
        assert c.image.metadata_format == metadata_format.LATEST
        first = (await c._log_store.read(0)).batches[0]
        assert FeatureLevelRecord(FORMAT, metadata_format.LATEST) in first.records
    finally:
        await c.stop()


async def test_an_old_store_stays_at_its_level_until_every_registered_broker_reads_the_next(tmp_path: Path) -> None:
    await _write_old_store(tmp_path, [1, 2])
    c = make_controller(tmp_path, snapshot_max_new_record_bytes=1)
    await c.start()
    try:
        assert c.image.metadata_format == 1 and c.image.features == {}
        # Broker 1 restarts on this release; broker 2 still runs 0.1.0 (its registration has no features).
        await c.register_broker(1, "h1", 9091)
        await c.register_broker(2, "h2", 9092, features=OLD_RELEASE)
        assert c.image.metadata_format == 1
        assert not c.image.brokers[2].fenced  # an old broker reads level 1: it serves on
        assert await c.take_snapshot() is False  # broker 2 could not follow a log that starts later
        assert (await c._log_store.read(0)).batches[0].base_offset == 0
        # Broker 2 upgraded: the level moves up by itself, and snapshots may be taken.
        await c.register_broker(2, "h2", 9092)
        assert c.image.metadata_format == metadata_format.LATEST
        if c._snapshot_task is not None:  # the commit that raised it started one (1-byte threshold)
            await asyncio.wait_for(asyncio.shield(c._snapshot_task), 10)
        assert (await c._log_store.read(0)).snapshot is not None
    finally:
        await c.stop()
    again = make_controller(tmp_path)
    await again.start()
    try:
        assert again.image.metadata_format == metadata_format.LATEST  # finalized: never goes back
    finally:
        await again.stop()


async def test_a_broker_that_cannot_read_the_level_is_kept_fenced(tmp_path: Path) -> None:
    c = make_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    try:
        await c.register_broker(2, "h2", 9093, features=OLD_RELEASE)
        assert c.image.brokers[2].fenced
        await c.unfence_broker(2)
        assert c.image.brokers[2].fenced
        assert c.image.metadata_format == metadata_format.LATEST  # an old broker never lowers it
        await c.register_broker(2, "h2", 9093)  # upgraded
        assert not c.image.brokers[2].fenced
    finally:
        await c.stop()


async def test_a_level_above_this_release_is_refused(tmp_path: Path) -> None:
    store = LocalMetadataLogStore(tmp_path)
    await store.open()
    await store.append([LeaderChangeRecord(1, 1), FeatureLevelRecord(FORMAT, metadata_format.LATEST + 1)], 1)
    await store.close()
    c = make_controller(tmp_path)
    with pytest.raises(UnsupportedMetadataFormatError, match=f"level {metadata_format.LATEST + 1}"):
        await c.start()
    with pytest.raises(UnsupportedMetadataFormatError):
        apply(MetadataImage(), FeatureLevelRecord(FORMAT, metadata_format.LATEST + 1))


def test_registrations_carry_the_levels_this_release_reads() -> None:
    endpoint = BrokerEndpoint("h", 9092, "PLAINTEXT", None, (("PLAINTEXT", "h", 9092),))
    reg = decode_registration(encode_registration(3, endpoint, uuid.uuid4()))
    assert set(metadata_format.SUPPORTED) <= set(reg["features"])
    # 0.1.0 wrote its registrations without features: it reads level 1 only.
    old = b'{"node_id": 3, "host": "h", "port": 9092, "listener_name": "PLAINTEXT", "rack": null, ' \
          b'"endpoints": [["PLAINTEXT", "h", 9092]], "incarnation_id": "' + str(uuid.uuid4()).encode() + \
          b'", "offline_replicas": []}'
    assert decode_registration(old)["features"] == ()
    assert metadata_format.max_readable(()) == 1


def test_meta_properties_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    """Kafka's meta.properties versions are 0 and 1; a newer one is not read as if it were one of them."""
    from odradek.controller.meta_properties import MetaPropertiesError, read_cluster_id

    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAQ\nnode.id=1\n")
    assert read_cluster_id(tmp_path, 1) == "AAAAAAAAAAAAAAAAAAAAAQ"
    (tmp_path / "meta.properties").write_text("version=2\ncluster.id=AAAAAAAAAAAAAAAAAAAAAQ\nnode.id=1\n")
    with pytest.raises(MetaPropertiesError, match="version 2"):
        read_cluster_id(tmp_path, 1)
