"""Kafka's RackAwareReplicaSelector rules over a real Partition (temp-dir log) and a metadata image."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.replica.partition import Partition
from odradek.broker.replica.replica_selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    RackAwareReplicaSelector,
    replica_selector,
)
from odradek.controller.image import BrokerRegistration, MetadataImage
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from tests.unit.replica.conftest import batch

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


@pytest.fixture
def part(tmp_path: Path) -> Iterator[Partition]:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, uuid.uuid4(), lg)
    p.leader, p.leader_epoch, p.replicas, p.isr = 1, 0, (1, 2, 3, 4), (1, 2, 3, 4)
    for _ in range(3):
        p.append_internal(batch(2))  # log end 6
    yield p
    lg.close()


def image(fenced: tuple[int, ...] = ()) -> MetadataImage:
    img = MetadataImage()
    for node, rack in RACKS.items():
        img.brokers[node] = BrokerRegistration(node, "h", 9000 + node, rack, fenced=node in fenced)
    return img


def test_the_most_caught_up_in_sync_follower_of_the_clients_rack(part: Partition) -> None:
    select = RackAwareReplicaSelector().preferred_read_replica
    part.update_follower_fetch_state(2, 4, now_ms=100)
    part.update_follower_fetch_state(3, 6, now_ms=100)
    part.update_follower_fetch_state(4, 6, now_ms=100)
    assert select(part, "b", 0, image(), 200) == 3  # rack b: 3 has more than 2
    assert select(part, "b", 5, image(), 200) == 3
    assert select(part, "a", 0, image(), 200) == -1  # the leader's own rack: read there
    assert select(part, "z", 0, image(), 200) == -1  # nobody in that rack: the leader
    assert select(part, "b", 0, image(fenced=(3,)), 200) == 2  # a fenced broker is no candidate
    part.isr = (1, 2, 4)
    assert select(part, "b", 5, image(), 200) == -1  # 3 left the ISR; 2 lacks offset 5
    assert select(part, "c", 6, image(), 200) == 4


def test_the_config_names_kafkas_class_or_nothing(tmp_path: Path) -> None:
    assert replica_selector(None) is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    with pytest.raises(Exception, match="replica.selector.class"):
        load_config(None, [f"log.dirs={tmp_path}", "node.id=1", "replica.selector.class=com.example.Mine"], environ={})
