"""BrokerMetadata as the controller's publisher: the image it holds, the listeners it tells.

A real Controller on a temp dir publishes to it; listeners must see the new image when they get
the delta, and stop hearing once unsubscribed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.controller import Controller, CreatableTopic, LocalLeaseStore, MetadataDelta, MetadataImage
from odradek.controller.records import LeaderChangeRecord


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Controller]:
    c = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"), default_num_partitions=2)
    await c.start(host="localhost", port=9092)
    yield c
    await c.stop()


async def test_publisher_gets_the_image_and_listeners_see_it_with_the_delta(
        tmp_path: Path, controller: Controller) -> None:
    metadata = BrokerMetadata(tmp_path)
    assert metadata.metadata_dir == tmp_path and metadata.image.topics == {}
    remove = controller.add_publisher(metadata)
    assert metadata.image is controller.image  # installed: the current image at once
    assert metadata.cluster_id == controller.image.cluster_id != ""

    seen: list[tuple[set[str], set[str]]] = []
    metadata.subscribe(lambda delta: seen.append((set(delta.created_topics), set(metadata.image.topics))))
    await controller.create_topics([CreatableTopic("a")])
    assert seen == [({"a"}, {"a"})]  # the image was already updated when the listener ran
    assert len(metadata.image.topics["a"].partitions) == 2

    remove()
    await controller.create_topics([CreatableTopic("b")])
    assert len(seen) == 1


async def test_unsubscribe_stops_one_listener_and_a_failing_one_hides_nothing(tmp_path: Path) -> None:
    metadata = BrokerMetadata(tmp_path)
    first: list[MetadataDelta] = []
    second: list[MetadataDelta] = []

    def broken(delta: MetadataDelta) -> None:
        raise RuntimeError("listener bug")

    metadata.subscribe(broken)
    unsubscribe = metadata.subscribe(first.append)
    metadata.subscribe(second.append)
    image = MetadataImage(cluster_id="c1")
    delta = MetadataDelta(records=[LeaderChangeRecord(1, 1)], controller_changed=True)
    metadata.publish(image, delta)
    assert metadata.image is image and first == [delta] and second == [delta]

    unsubscribe()
    unsubscribe()  # twice is harmless
    metadata.publish(image, delta)
    assert first == [delta] and second == [delta, delta]


async def test_an_empty_delta_updates_the_image_without_waking_listeners(tmp_path: Path) -> None:
    metadata = BrokerMetadata(tmp_path)
    seen: list[MetadataDelta] = []
    metadata.subscribe(seen.append)
    image = MetadataImage(cluster_id="c2")
    metadata.publish(image, MetadataDelta())
    assert metadata.image is image and seen == []


async def test_a_publisher_installed_before_start_gets_the_replayed_image(tmp_path: Path) -> None:
    first = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"))
    await first.start(host="localhost", port=9092)
    await first.create_topics([CreatableTopic("kept")])
    await first.stop()

    restarted = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"))
    metadata = BrokerMetadata(tmp_path)
    restarted.add_publisher(metadata)
    created: list[set[str]] = []
    metadata.subscribe(lambda delta: created.append(set(delta.created_topics)))
    await restarted.start()
    assert "kept" in metadata.image.topics
    assert created[0] == {"kept"}  # the replay is published as one delta
    await restarted.stop()
