"""Metadata snapshots on local files: the chunk format, the checkpoint file beside the log, compaction's crash story.

Each crash point of ``MetadataLog.write_snapshot`` (controller/metadata_log.py's docstring) is built
on disk as the crash leaves it - a torn ``.tmp``, the new checkpoint beside the whole old log, an
older checkpoint beside the newer - and must open to the same image. A child process appending and
snapshotting in a loop is also SIGKILLed at random moments: every batch it had acknowledged must be
there after the restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from odradek.controller.image import MetadataImage, apply
from odradek.controller.image_records import image_records, load_snapshot
from odradek.controller.log_store import LocalMetadataLogStore, MetadataStoreUnavailableError
from odradek.controller.metadata_log import (
    LOG_FILE_NAME,
    METADATA_PARTITION_DIR,
    MetadataBatch,
    MetadataLog,
    MetadataLogContents,
    MetadataLogCorruptError,
    StaleControllerEpochError,
    encode_batch,
)
from odradek.controller.metadata_snapshot import (
    SNAPSHOT_FORMAT_VERSION,
    MetadataSnapshot,
    SnapshotCorruptError,
    checkpoint_name,
    decode_snapshot,
    encode_snapshot,
    parse_checkpoint_name,
    write_checkpoint,
)
from odradek.controller.records import ConfigRecord, LeaderChangeRecord, MetadataRecord, TopicRecord

REPO = Path(__file__).resolve().parents[3]


def _topic(name: str) -> TopicRecord:
    return TopicRecord(name, uuid.uuid4())


def _image(snapshot: MetadataSnapshot | None, batches: list[MetadataBatch] | tuple[MetadataBatch, ...]) -> MetadataImage:
    image = MetadataImage()
    if snapshot is not None:
        load_snapshot(image, snapshot.records, snapshot.end_offset)
    for batch in batches:
        for record in batch.records:
            apply(image, record)
    return image


def _snapshot_of(log: MetadataLog, image: MetadataImage) -> MetadataSnapshot:
    return MetadataSnapshot(log.next_offset, log.newest_epoch, tuple(image_records(image)))


def _filled(tmp_path: Path) -> tuple[MetadataLog, MetadataImage]:
    """A log of offsets 0-5 at epoch 1 (a leader change, a topic with a config, three more topics) and
    the image it makes."""
    log, _ = MetadataLog.open(tmp_path)
    records: list[list[MetadataRecord]] = [[LeaderChangeRecord(1, 1)],
                                           [_topic("t0"), ConfigRecord(2, "t0", "retention.ms", "5")]]
    records += [[_topic(f"t{i}")] for i in range(1, 4)]
    image = MetadataImage()
    for batch in records:
        log.append(batch, 1)
        for record in batch:
            apply(image, record)
    return log, image


def _part(tmp_path: Path) -> Path:
    return tmp_path / METADATA_PARTITION_DIR


def _files(tmp_path: Path) -> list[str]:
    return sorted(os.listdir(_part(tmp_path)))


# --- the format -----------------------------------------------------------------------------------


def test_snapshot_chunks_round_trip_and_each_names_its_snapshot() -> None:
    records = tuple(_topic(f"topic-{i:04d}") for i in range(300))
    snapshot = MetadataSnapshot(1234, 7, records)
    chunks = encode_snapshot(snapshot, chunk_bytes=4096)
    assert len(chunks) > 3 and all(len(c) < 4096 + 200 for c in chunks)
    assert decode_snapshot(chunks) == snapshot
    assert decode_snapshot([b"".join(chunks)]) == snapshot  # a file: the chunks one after another
    # Every chunk carries the version, the end offset and the epoch (big-endian, after length + CRC).
    for index, chunk in enumerate(chunks):
        assert int.from_bytes(chunk[8:10], "big") == SNAPSHOT_FORMAT_VERSION
        assert int.from_bytes(chunk[10:18], "big") == 1234 and int.from_bytes(chunk[18:22], "big") == 7
        assert int.from_bytes(chunk[22:26], "big") == index and int.from_bytes(chunk[26:30], "big") == len(chunks)
    assert decode_snapshot(encode_snapshot(MetadataSnapshot(0, -1, ()))) == MetadataSnapshot(0, -1, ())


def test_bad_snapshots_are_refused() -> None:
    chunks = encode_snapshot(MetadataSnapshot(10, 2, tuple(_topic(f"t{i}") for i in range(100))), chunk_bytes=1024)
    with pytest.raises(SnapshotCorruptError, match="incomplete"):
        decode_snapshot(chunks[:-1])  # the last chunk missing
    with pytest.raises(SnapshotCorruptError, match="does not continue"):
        decode_snapshot([chunks[1], chunks[0], *chunks[2:]])
    flipped = bytearray(chunks[0])
    flipped[-3] ^= 0x01
    with pytest.raises(SnapshotCorruptError, match="CRC32C"):
        decode_snapshot([bytes(flipped), *chunks[1:]])
    with pytest.raises(SnapshotCorruptError, match="torn"):
        decode_snapshot([b"".join(chunks)[:-5]])
    # A newer format version is refused, not guessed at (the CRC is recomputed so only the version differs).
    from odradek.protocol.checksum import crc32c

    payload = bytearray(chunks[0][8:])
    payload[0:2] = (SNAPSHOT_FORMAT_VERSION + 1).to_bytes(2, "big")
    newer = len(payload).to_bytes(4, "big") + crc32c(bytes(payload)).to_bytes(4, "big") + bytes(payload)
    with pytest.raises(SnapshotCorruptError, match="version 2"):
        decode_snapshot([newer, *chunks[1:]])
    with pytest.raises(SnapshotCorruptError):
        decode_snapshot([])


def test_checkpoint_names_are_kafkas() -> None:
    assert checkpoint_name(123, 4) == "00000000000000000123-0000000004.checkpoint"
    assert parse_checkpoint_name("00000000000000000123-0000000004.checkpoint") == (123, 4)
    assert parse_checkpoint_name("00000000000000000123-0000000004.checkpoint.tmp") is None
    assert parse_checkpoint_name(LOG_FILE_NAME) is None


# --- the local store ------------------------------------------------------------------------------


def test_snapshot_truncates_the_log_and_open_returns_snapshot_plus_tail(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    snapshot = _snapshot_of(log, image)
    assert log.bytes_since_snapshot == log.path.stat().st_size > 0
    assert log.write_snapshot(snapshot)
    assert log.path.stat().st_size == 0 and log.bytes_since_snapshot == 0
    assert _files(tmp_path) == [checkpoint_name(6, 1), LOG_FILE_NAME]
    assert log.write_snapshot(snapshot) is False  # nothing new since
    late = _topic("late")
    assert log.append([late], 2) == 6  # offsets go on from the snapshot's end
    apply(image, late)
    log.close()

    reopened, tail = MetadataLog.open(tmp_path)
    assert reopened.snapshot == snapshot
    assert [(b.base_offset, b.controller_epoch) for b in tail] == [(6, 2)]
    assert _image(reopened.snapshot, tail) == image
    assert (reopened.next_offset, reopened.newest_epoch) == (7, 2)
    # A reader below the snapshot gets it and the whole tail; a reader past it gets the tail only.
    assert reopened.read(0) == MetadataLogContents(snapshot, tuple(tail))
    assert reopened.read(5) == MetadataLogContents(snapshot, tuple(tail))
    assert reopened.read(6) == MetadataLogContents(None, tuple(tail))
    assert reopened.read(7) == MetadataLogContents(None, ())
    reopened.close()


def test_a_second_snapshot_replaces_the_first(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    assert log.write_snapshot(_snapshot_of(log, image))
    more = _topic("more")
    log.append([more], 1)
    apply(image, more)
    second = _snapshot_of(log, image)
    assert log.write_snapshot(second)
    assert _files(tmp_path) == [checkpoint_name(7, 1), LOG_FILE_NAME]  # Kafka deletes the older one too
    log.close()
    reopened, tail = MetadataLog.open(tmp_path)
    assert reopened.snapshot == second and tail == []
    assert _image(reopened.snapshot, tail) == image
    reopened.close()


def test_crash_before_the_rename_leaves_the_old_log(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    size = log.path.stat().st_size
    snapshot = _snapshot_of(log, image)
    log.close()
    # The crash left a half-written temp file: it has no checkpoint name, so nothing reads it.
    data = b"".join(encode_snapshot(snapshot))
    (_part(tmp_path) / (checkpoint_name(6, 1) + ".tmp")).write_bytes(data[: len(data) // 2])
    reopened, batches = MetadataLog.open(tmp_path)
    assert reopened.snapshot is None and len(batches) == 5 and reopened.path.stat().st_size == size
    assert _image(None, batches) == image
    assert reopened.write_snapshot(snapshot)  # the next snapshot clears the leftover away
    assert _files(tmp_path) == [checkpoint_name(6, 1), LOG_FILE_NAME]
    reopened.close()


def test_crash_between_the_rename_and_the_truncation(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    snapshot = _snapshot_of(log, image)
    log.close()
    write_checkpoint(_part(tmp_path), snapshot)  # step (1) done, step (2) not: the whole old log is there
    reopened, tail = MetadataLog.open(tmp_path)
    assert reopened.snapshot == snapshot and tail == []
    assert _image(reopened.snapshot, tail) == image
    assert reopened.path.stat().st_size == 0  # open finished the truncation
    assert reopened.append([_topic("next")], 1) == 6
    reopened.close()
    again, tail = MetadataLog.open(tmp_path)
    assert [b.base_offset for b in tail] == [6]
    again.close()


def test_crash_before_the_old_checkpoint_is_deleted(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    first = _snapshot_of(log, image)
    assert log.write_snapshot(first)
    more = _topic("more")
    log.append([more], 1)
    apply(image, more)
    second = _snapshot_of(log, image)
    log.close()
    write_checkpoint(_part(tmp_path), second)  # the older checkpoint is still there
    os.truncate(_part(tmp_path) / LOG_FILE_NAME, 0)
    reopened, tail = MetadataLog.open(tmp_path)
    assert reopened.snapshot == second and tail == []
    assert _image(reopened.snapshot, tail) == image
    assert _files(tmp_path) == [checkpoint_name(7, 1), LOG_FILE_NAME]
    reopened.close()


def test_a_corrupt_snapshot_or_a_gap_after_it_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    log, image = _filled(tmp_path)
    assert log.write_snapshot(_snapshot_of(log, image))
    log.close()
    checkpoint = _part(tmp_path) / checkpoint_name(6, 1)
    good = checkpoint.read_bytes()
    checkpoint.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    with pytest.raises(MetadataLogCorruptError, match="CRC32C"):
        MetadataLog.open(tmp_path)
    checkpoint.write_bytes(good)
    # A log that resumes at offset 9 after a snapshot ending at 6: three records are missing.
    (_part(tmp_path) / LOG_FILE_NAME).write_bytes(encode_batch(9, 1, [_topic("x")]))
    with pytest.raises(MetadataLogCorruptError, match="missing"):
        MetadataLog.open(tmp_path)
    # A log without a snapshot must start at offset 0.
    checkpoint.unlink()
    with pytest.raises(MetadataLogCorruptError, match="no snapshot"):
        MetadataLog.open(tmp_path)


def test_a_snapshot_missing_another_writers_batches_is_not_taken(tmp_path: Path) -> None:
    mine, image = _filled(tmp_path)
    other, _ = MetadataLog.open(tmp_path)
    other.append([_topic("theirs")], 2)
    stale_view = _snapshot_of(mine, image)  # at offset 6; the log is at 7 now
    assert mine.write_snapshot(stale_view) is False
    assert mine.snapshot is None and _files(tmp_path) == [LOG_FILE_NAME]
    assert [b.base_offset for b in mine.take_caught_up()] == [6]  # handed out, not skipped
    mine.close()
    other.close()


def test_a_writer_compacted_beneath_is_refused(tmp_path: Path) -> None:
    """Another writer snapshotted (and truncated the log) since this one looked: its file position
    means nothing now, so it must not append there; it is stale, or must replay."""
    old, image = _filled(tmp_path)
    new, _ = MetadataLog.open(tmp_path)
    new.append([LeaderChangeRecord(2, 2)], 2)
    apply(image, LeaderChangeRecord(2, 2))
    assert new.write_snapshot(_snapshot_of(new, image))
    new.append([_topic("after")], 2)
    with pytest.raises(StaleControllerEpochError) as e:
        old.append([_topic("late")], 1)
    assert e.value.newest_epoch == 2
    with pytest.raises(MetadataStoreUnavailableError, match="compacted"):
        old.append([_topic("late")], 3)  # not stale, but it missed batches that only the snapshot holds
    old.close()
    reopened, tail = MetadataLog.open(tmp_path)
    assert [b.base_offset for b in tail] == [7] and tail[0].records[0].name == "after"  # type: ignore[union-attr]
    reopened.close()
    new.close()


async def test_local_store_reads_below_a_snapshot(tmp_path: Path) -> None:
    store = LocalMetadataLogStore(tmp_path)
    await store.open()
    image = MetadataImage()
    for records in ([LeaderChangeRecord(1, 1)], [_topic("a")], [_topic("b")]):
        await store.append(records, 1)
        for record in records:
            apply(image, record)
    snapshot = MetadataSnapshot(store.next_offset, store.newest_epoch, tuple(image_records(image)))
    assert store.bytes_since_snapshot > 0
    assert await store.write_snapshot(snapshot)
    assert store.bytes_since_snapshot == 0
    (await store.append([_topic("c")], 1))
    assert store.bytes_since_snapshot > 0
    below = await store.read(1)
    assert below.snapshot == snapshot and [b.base_offset for b in below.batches] == [3]
    assert (await store.read(3)).snapshot is None
    await store.close()
    reopened = LocalMetadataLogStore(tmp_path)
    contents = await reopened.open()
    assert contents.snapshot == snapshot and [b.base_offset for b in contents.batches] == [3]
    await reopened.close()


_CHILD = r"""
import sys, uuid
from odradek.controller.image import MetadataImage, apply
from odradek.controller.image_records import image_records, load_snapshot
from odradek.controller.metadata_log import MetadataLog
from odradek.controller.metadata_snapshot import MetadataSnapshot
from odradek.controller.records import TopicRecord

log, tail = MetadataLog.open(sys.argv[1])
image = MetadataImage()
if log.snapshot is not None:
    load_snapshot(image, log.snapshot.records, log.snapshot.end_offset)
for batch in tail:
    for record in batch.records:
        apply(image, record)
i = len(image.topics)
while True:
    record = TopicRecord(f"t{i:06d}", uuid.uuid4())
    log.append([record], 1)
    apply(image, record)
    print(i, flush=True)  # acknowledged
    i += 1
    if i % 7 == 0:
        log.write_snapshot(MetadataSnapshot(log.next_offset, 1, tuple(image_records(image))))
"""


def test_sigkill_at_any_moment_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    acknowledged = -1
    for round_ in range(8):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                                 text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert child.stdout is not None
        target = acknowledged + 20 + 3 * round_  # a different moment of the append/snapshot cycle each time
        deadline = time.monotonic() + 60
        while acknowledged < target and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
        child.send_signal(signal.SIGKILL)
        child.wait()
        log, tail = MetadataLog.open(tmp_path)
        image = _image(log.snapshot, tail)
        names = sorted(image.topics)
        # Every acknowledged topic is there, nothing twice, no gap (more may have committed after the
        # last acknowledgement this test read).
        assert len(names) >= acknowledged + 1
        assert names == [f"t{i:06d}" for i in range(len(names))]
        assert log.next_offset == len(names) == image.offset + 1
        acknowledged = len(names) - 1
        log.close()
    assert any(parse_checkpoint_name(n) for n in _files(tmp_path))
