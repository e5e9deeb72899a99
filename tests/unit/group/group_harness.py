"""A real GroupCoordinator over real odradek.storage.log.Log files, driven by a hand-cranked Timer.

Not a mock of the broker: the coordinator writes and reloads real __consumer_offsets segments.
The adapter offers exactly the replica-manager calls the coordinator uses (append_internal,
wait_for_high_watermark, read_internal, log_start_offset, log_end_offset, on_become_leader,
on_resign); one node is its own ISR, so the high watermark is always the log end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
from odradek.broker.coordinator.runtime import PartitionWriter
from odradek.broker.group.context import GroupConfig
from odradek.broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.broker.runtime.timing_wheel import Timer
from odradek.controller import metadata_format
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.results import AppendInfo

NUM_PARTITIONS = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class LocalLogs:
    """The replica-manager surface over one Log per partition in a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[tuple[str, int], Log] = {}
        self.fail_with: int | None = None  # make appends fail, as a lost leadership would
        self.leader_cbs: list = []
        self.resign_cbs: list = []

    def open(self, topic: str, partition: int) -> Log:
        lg = self.logs[(topic, partition)] = Log.open(self.root / f"{topic}-{partition}", LogConfig())
        return lg

    def close(self) -> None:
        for lg in self.logs.values():
            lg.close()
        self.logs.clear()

    def _log(self, topic: str, partition: int) -> Log:
        lg = self.logs.get((topic, partition))
        if lg is None:
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return lg

    def append_internal(self, topic: str, partition: int, records: bytes, required_acks: int = 1) -> AppendInfo:
        if self.fail_with is not None:
            raise KafkaApiError(self.fail_with)
        return self._log(topic, partition).append(records, leader_epoch=0)

    def wait_for_high_watermark(self, topic: str, partition: int, required_offset: int, timeout_ms: int,
                                callback: Callable[[int], object]) -> None:
        callback(ErrorCode.NONE if required_offset <= self._log(topic, partition).log_end_offset
                 else ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def read_internal(self, topic: str, partition: int, start_offset: int, max_bytes: int) -> bytes:
        return self._log(topic, partition).read(start_offset, max_bytes).read_bytes()

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self._log(topic, partition).log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self._log(topic, partition).log_end_offset

    def on_become_leader(self, cb) -> None:
        self.leader_cbs.append(cb)

    def on_resign(self, cb) -> None:
        self.resign_cbs.append(cb)


class _Metadata:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image


class Node:
    """What a broker hands the GroupCoordinator: config, timer, metadata, node id and the replica manager."""

    def __init__(self, root: Path, clock: Clock, **overrides: str) -> None:
        props = {"node.id": "1", "log.dirs": str(root), "group.min.session.timeout.ms": "100",
                 "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": str(NUM_PARTITIONS)}
        props.update(overrides)
        self.config = BrokerConfig.from_props(props)
        self.node_id = 1
        self.timer = Timer(clock=clock, start_ms=clock.now)
        image = MetadataImage()
        # A new cluster is formatted at the newest metadata format level: Kafka's partition rule.
        image.features[metadata_format.FEATURE] = metadata_format.LATEST
        image.topics[OFFSETS_TOPIC] = TopicImage(OFFSETS_TOPIC, uuid.uuid4(), {
            p: PartitionState(p, 1, 0, 0, (1,), (1,)) for p in range(NUM_PARTITIONS)}, is_internal=True)
        image.topics["t"] = TopicImage("t", uuid.uuid4(), {p: PartitionState(p, 1, 0, 0, (1,), (1,)) for p in range(4)})
        image.topics["u"] = TopicImage("u", uuid.uuid4(), {0: PartitionState(0, 1, 0, 0, (1,), (1,))})
        self.metadata = _Metadata(image)
        self.replica_manager = LocalLogs(root / "logs")
        for p in range(NUM_PARTITIONS):
            self.replica_manager.open(OFFSETS_TOPIC, p)


async def started(node: Node, writer: PartitionWriter | None = None) -> GroupCoordinator:
    """A coordinator that has loaded every partition (through ``writer``: by default the
    replica-manager adapter over the node's logs)."""
    import asyncio

    coordinator = GroupCoordinator(GroupConfig.from_broker_config(node.config),
                                   writer if writer is not None else ReplicaManagerWriter(node.replica_manager),
                                   node.timer, node.metadata, node.node_id)
    await coordinator.start()
    # Loaded, and done with the first start's SWITCHED/MIGRATED markers (broker/coordinator/rehash.py),
    # so a test's writes are the only ones.
    for _ in range(500):
        if all(state == "active" for state in coordinator.partitions.values()) and \
                len(coordinator.partitions) == NUM_PARTITIONS and not coordinator.migrations.busy:
            return coordinator
        await asyncio.sleep(0.002)
    raise AssertionError(f"partitions did not load: {coordinator.partitions}")


def tick(node: Node, clock: Clock, ms: int) -> None:
    """Move the hand-driven clock and fire whatever the timing wheel has due."""
    clock.now += ms
    node.timer.advance_clock(clock.now)
