"""The controller snapshots its image on Kafka's two settings, and a restart loads the snapshot plus the tail.

Real controllers on real files (the local stores). ``metadata.log.max.record.bytes.between.snapshots``:
once the batches since the last snapshot reach it, a snapshot follows the commit and the log
shrinks back, so 3,000 config changes leave a log of at most one threshold and a restart that
replays only that. ``metadata.log.max.snapshot.interval.ms``: with batches since the last snapshot
and the interval passed, ``maybe_snapshot`` takes one; 0 turns that off (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from odradek.controller import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    Controller,
    CreatableTopic,
)
from odradek.controller.metadata_log import LOG_FILE_NAME, METADATA_PARTITION_DIR
from odradek.controller.metadata_snapshot import parse_checkpoint_name
from tests.unit.controller.conftest import make_controller

TOPIC = ConfigResourceType.TOPIC


def _checkpoints(metadata_dir: Path) -> list[tuple[int, int]]:
    found = (parse_checkpoint_name(n) for n in os.listdir(metadata_dir / METADATA_PARTITION_DIR))
    return sorted(c for c in found if c is not None)


def _log_size(metadata_dir: Path) -> int:
    return (metadata_dir / METADATA_PARTITION_DIR / LOG_FILE_NAME).stat().st_size


async def _set(c: Controller, topic: str, key: str, value: str) -> None:
    (result,) = await c.incremental_alter_configs(
        [AlterConfigsResource(TOPIC, topic, [AlterableConfig(key, AlterConfigOp.SET, value)])])
    assert result.error_code == 0


async def _settled(c: Controller) -> None:
    """Let a snapshot the last commit started finish (it runs in a task of its own)."""
    task = c._snapshot_task
    if task is not None:
        await asyncio.wait_for(asyncio.shield(task), 10)


async def test_snapshot_by_size_keeps_the_log_bounded_and_restart_loads_it(tmp_path: Path) -> None:
    threshold = 8 * 1024
    c = make_controller(tmp_path, default_num_partitions=3, snapshot_max_new_record_bytes=threshold)
    await c.start(host="localhost", port=9092)
    (created,) = await c.create_topics([CreatableTopic("orders", configs={"cleanup.policy": "compact"})])
    assert created.error_code == 0
    largest_log = 0
    for i in range(3000):
        await _set(c, "orders", "retention.ms", str(1000 + i))
        largest_log = max(largest_log, _log_size(tmp_path))
    await _settled(c)
    checkpoints = _checkpoints(tmp_path)
    assert len(checkpoints) == 1  # only the newest is kept
    assert checkpoints[0][0] > 3000 - threshold // 100  # a recent one (each change is ~100 bytes)
    # The log never grew much past the threshold (a snapshot follows the commit that crossed it).
    assert largest_log < 2 * threshold
    image_before = c.image
    offset_before = c.committed_offset
    await c.stop()

    restarted = make_controller(tmp_path, default_num_partitions=3, snapshot_max_new_record_bytes=threshold)
    await restarted.start(host="localhost", port=9092)
    try:
        img = restarted.image
        assert img.topics["orders"].configs == {"cleanup.policy": "compact", "retention.ms": "3999"}
        assert img.topics.keys() == image_before.topics.keys()
        assert img.topics["orders"].partitions == image_before.topics["orders"].partitions
        assert img.topics["orders"].topic_id == image_before.topics["orders"].topic_id
        assert img.brokers.keys() == {1}
        # Offsets go on from where the log stood: the restart's LeaderChangeRecord and registration
        # come right after the records before the stop.
        assert restarted.committed_offset == offset_before + 2
        assert img.offset == restarted.committed_offset - 1
        assert img.controller_epoch == restarted.controller_epoch
    finally:
        await restarted.stop()


async def test_snapshot_by_time(tmp_path: Path) -> None:
    now = [1_000_000]
    c = make_controller(tmp_path, snapshot_max_interval_ms=60_000, clock=lambda: now[0], lease_ttl_ms=10**12)
    await c.start(host="localhost", port=9092)
    try:
        await c.create_topics([CreatableTopic("t")])
        now[0] += 59_999
        assert await c.maybe_snapshot() is False and _checkpoints(tmp_path) == []
        now[0] += 1
        assert await c.maybe_snapshot() is True
        assert _checkpoints(tmp_path) == [(c.committed_offset, c.controller_epoch)]
        assert _log_size(tmp_path) == 0
        now[0] += 120_000
        assert await c.maybe_snapshot() is False  # nothing committed since: nothing to snapshot
        await _set(c, "t", "retention.ms", "5")
        assert await c.maybe_snapshot() is True
    finally:
        await c.stop()


async def test_interval_zero_turns_snapshots_by_time_off(tmp_path: Path) -> None:
    now = [0]
    c = make_controller(tmp_path, snapshot_max_interval_ms=0, clock=lambda: now[0], lease_ttl_ms=10**12)
    await c.start(host="localhost", port=9092)
    try:
        await c.create_topics([CreatableTopic("t")])
        now[0] += 10 * 365 * 86_400_000
        assert await c.maybe_snapshot() is False and _checkpoints(tmp_path) == []
        assert await c.take_snapshot() is True  # an explicit one still works
    finally:
        await c.stop()


async def test_a_controller_that_is_not_active_takes_no_snapshot(tmp_path: Path) -> None:
    now = [0]
    c = make_controller(tmp_path, snapshot_max_interval_ms=1, clock=lambda: now[0])
    await c.start(host="localhost", port=9092)
    await c.create_topics([CreatableTopic("t")])
    await c.stop()
    now[0] += 10
    assert await c.maybe_snapshot() is False and await c.take_snapshot() is False
    assert _checkpoints(tmp_path) == []


def test_snapshot_settings_are_validated_as_kafka_does(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_controller(tmp_path, snapshot_max_new_record_bytes=0)
    with pytest.raises(ValueError):
        make_controller(tmp_path, snapshot_max_interval_ms=-1)
