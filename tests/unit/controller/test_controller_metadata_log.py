"""MetadataLog: framing, fsynced appends, epoch fencing, torn/corrupt tail truncation."""

from __future__ import annotations

import os
import struct
import uuid
from pathlib import Path

import pytest

from odradek.controller.metadata_log import (
    FRAME_HEADER_SIZE,
    MetadataLog,
    MetadataLogCorruptError,
    StaleControllerEpochError,
    encode_batch,
)
from odradek.controller.records import ConfigRecord, LeaderChangeRecord, RemoveTopicRecord, TopicRecord
from odradek.protocol.errors import ErrorCode


def _topic(name: str) -> TopicRecord:
    return TopicRecord(name, uuid.uuid4())


def test_append_and_replay_round_trip(tmp_path: Path) -> None:
    log, batches = MetadataLog.open(tmp_path)
    assert batches == [] and log.next_offset == 0 and log.newest_epoch == -1
    t = _topic("a")
    assert log.append([LeaderChangeRecord(1, 1)], 1) == 0
    assert log.append([t, ConfigRecord(2, "a", "retention.ms", "5"), ConfigRecord(2, "a", "x", None)], 1) == 1
    assert log.append([RemoveTopicRecord(t.topic_id)], 2) == 4
    log.close()

    log2, batches = MetadataLog.open(tmp_path)
    assert [(b.base_offset, b.controller_epoch, len(b.records)) for b in batches] == [(0, 1, 1), (1, 1, 3), (4, 2, 1)]
    assert batches[1].records[0] == t
    assert batches[1].records[2].value is None
    assert log2.next_offset == 5 and log2.newest_epoch == 2
    log2.close()


def test_stale_epoch_append_rejected_and_nothing_written(tmp_path: Path) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.append([LeaderChangeRecord(1, 5)], 5)
    size = log.path.stat().st_size
    with pytest.raises(StaleControllerEpochError) as e:
        log.append([_topic("late")], 4)
    assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert log.path.stat().st_size == size
    # Same or newer epochs are fine.
    log.append([_topic("ok")], 5)
    log.append([_topic("ok2")], 6)
    log.close()


def test_stale_writer_sharing_the_file_is_fenced(tmp_path: Path) -> None:
    """Two writers on one log: the older one learns the newer epoch from the file and is refused."""
    old, _ = MetadataLog.open(tmp_path)
    old.append([LeaderChangeRecord(1, 1)], 1)
    new, batches = MetadataLog.open(tmp_path)
    assert len(batches) == 1
    new.append([LeaderChangeRecord(2, 2)], 2)
    with pytest.raises(StaleControllerEpochError) as e:
        old.append([_topic("from-the-past")], 1)
    assert e.value.newest_epoch == 2
    # The new controller keeps writing at the right offsets; the old one wrote nothing.
    assert new.append([_topic("fresh")], 2) == 2
    old.close()
    new.close()
    log, batches = MetadataLog.open(tmp_path)
    names = [r.name for b in batches for r in b.records if isinstance(r, TopicRecord)]
    assert names == ["fresh"]
    log.close()


def test_newer_writer_catches_up_on_foreign_batches(tmp_path: Path) -> None:
    a, _ = MetadataLog.open(tmp_path)
    b, _ = MetadataLog.open(tmp_path)
    a.append([LeaderChangeRecord(1, 1)], 1)
    assert b.append([LeaderChangeRecord(2, 2)], 2) == 1
    caught = b.take_caught_up()
    assert [x.base_offset for x in caught] == [0]
    assert b.take_caught_up() == []
    a.close()
    b.close()


@pytest.mark.parametrize("cut", [1, FRAME_HEADER_SIZE - 1, FRAME_HEADER_SIZE + 3, -1])
def test_torn_tail_truncated(tmp_path: Path, cut: int) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.append([LeaderChangeRecord(1, 1)], 1)
    log.append([_topic("kept")], 1)
    good_size = log.path.stat().st_size
    log.close()
    torn = encode_batch(2, 1, [_topic("torn")])
    with open(log.path, "ab") as f:
        f.write(torn[:cut] if cut > 0 else torn[: len(torn) + cut])
    log2, batches = MetadataLog.open(tmp_path)
    assert [b.base_offset for b in batches] == [0, 1]
    assert log2.path.stat().st_size == good_size
    # Appends continue after the cut and are readable.
    assert log2.append([_topic("next")], 1) == 2
    log2.close()
    _, batches = MetadataLog.open(tmp_path)
    assert batches[-1].records[0].name == "next"


def test_corrupt_crc_truncates_from_that_frame(tmp_path: Path) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.append([LeaderChangeRecord(1, 1)], 1)
    first_end = log.path.stat().st_size
    log.append([_topic("flipped")], 1)
    log.append([_topic("after")], 1)
    log.close()
    data = bytearray(log.path.read_bytes())
    data[first_end + FRAME_HEADER_SIZE + 20] ^= 0xFF
    log.path.write_bytes(bytes(data))
    log2, batches = MetadataLog.open(tmp_path)
    assert len(batches) == 1
    assert log2.path.stat().st_size == first_end
    log2.close()


@pytest.mark.parametrize("length", [-1, 3, 2**31 - 1])
def test_garbage_length_truncated(tmp_path: Path, length: int) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.append([LeaderChangeRecord(1, 1)], 1)
    size = log.path.stat().st_size
    log.close()
    with open(log.path, "ab") as f:
        f.write(struct.pack(">iI", length, 0) + b"x" * 64)
    log2, batches = MetadataLog.open(tmp_path)
    assert len(batches) == 1 and log2.path.stat().st_size == size
    log2.close()


def test_offset_gap_treated_as_corruption(tmp_path: Path) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.append([LeaderChangeRecord(1, 1)], 1)
    log.close()
    with open(log.path, "ab") as f:
        f.write(encode_batch(7, 1, [_topic("gap")]))
    _, batches = MetadataLog.open(tmp_path)
    assert len(batches) == 1


def test_valid_crc_but_undecodable_raises(tmp_path: Path) -> None:
    log, _ = MetadataLog.open(tmp_path)
    log.close()
    from odradek.protocol.checksum import crc32c
    payload = struct.pack(">qii", 0, 1, 1) + b'[{"type": "NoSuchRecord"}]'
    with open(log.path, "ab") as f:
        f.write(struct.pack(">iI", len(payload), crc32c(payload)) + payload)
    with pytest.raises(MetadataLogCorruptError):
        MetadataLog.open(tmp_path)
    assert os.path.getsize(log.path) > 0  # acknowledged data is never silently dropped


def test_empty_append_rejected(tmp_path: Path) -> None:
    log, _ = MetadataLog.open(tmp_path)
    with pytest.raises(ValueError):
        log.append([], 1)
    assert log.path.stat().st_size == 0
    log.close()
