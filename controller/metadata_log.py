"""The metadata log: an append-only, epoch-fenced file of metadata record batches.

Location: ``<metadata dir>/__cluster_metadata-0/metadata.log`` (the directory name is Kafka's
metadata topic-partition), beside the newest snapshot ``<end offset>-<epoch>.checkpoint``
(``odradek.controller.metadata_snapshot``). Every change to cluster metadata is a batch appended to the log;
the snapshot (if any) plus the log's batches from the snapshot's end offset rebuild the image.

Format (all integers big-endian)::

    frame   := length:int32  crc:uint32  payload            length = len(payload)
    payload := base_offset:int64  controller_epoch:int32  record_count:int32  records_json:bytes

``crc`` is CRC32C (Castagnoli, as in Kafka's record batch v2) over ``payload``. ``records_json`` is a
UTF-8 JSON array of ``odradek.controller.records.record_to_dict`` objects; record ``i`` of a batch has
offset ``base_offset + i``. Offsets are dense: each batch's base offset equals the previous batch's
base offset plus its record count. The file's first batch starts at 0, or at the end offset of the
snapshot beside it (the records below it are in the snapshot).

Why JSON payloads: metadata changes are rare and small, so compactness buys nothing; JSON lets a
person read the log with ``strings``/``jq`` while debugging, and adding a field with a default is a
compatible change without a version dance. A 10k-record replay decodes in well under a second.

Why batches: one controller operation (e.g. creating a topic = TopicRecord + ConfigRecords +
PartitionRecords) is one frame, so a crash can never leave half of it behind - the same atomicity
KRaft gets from ``ControllerResult.atomicOf``.

Epoch fencing: every batch carries the writer's controller epoch (its lease epoch). An append whose
epoch is older than the newest epoch in the log is refused with ``StaleControllerEpochError``
(STALE_CONTROLLER_EPOCH). Before checking, ``append`` takes an exclusive ``flock`` on the log file
and reads any frames other writers appended since this object last looked, so a deposed controller
sharing the directory learns the newer epoch and is fenced rather than trusting its stale view.
Batches found that way are kept for the owner (``take_caught_up``) so it can apply them in order.

Durability and crash story: ``append`` writes the frame and fsyncs before it returns, so an
acknowledged change survives a crash. A crash mid-append leaves a torn frame at the tail: on open,
frames are validated in order (complete header, sane length, complete payload, CRC32C, expected base
offset, non-decreasing epoch) and the file is truncated (and fsynced) at the first invalid frame;
everything before it is kept. A frame with a valid CRC that does not decode is a software bug, not a
torn write, and raises ``MetadataLogCorruptError`` instead of silently dropping acknowledged data.

Snapshots and the crash story of compaction (``write_snapshot``): the controller hands the store
the image at the log's end offset ``N`` as a snapshot; under the exclusive flock the log first
reads any frames another writer appended (if there are any, the snapshot misses them and is not
taken), then (1) the checkpoint file is written to a ``.tmp``, fsynced, renamed to its name and the
directory fsynced; (2) the log file is truncated to zero length and fsynced: the next batch is
written at position 0 with base offset ``N``; (3) older checkpoints and leftover ``.tmp`` files
are deleted. A crash before (1)'s rename leaves the old log and no new snapshot (same image: the
log holds everything); between (1) and (2) the new snapshot and the whole old log (``open`` skips
the batches the snapshot covers and finishes the truncation); during (2) truncation is one metadata
change, so the file is whole or empty; after (2) an older checkpoint beside the new one (``open``
loads the newest and deletes the others). Every step leaves a store that opens to the same image.
Why truncate in place rather than write a new segment file: the log keeps its inode, so the flock
that orders writers stays the same lock, and a writer that still holds the file open learns of the
compaction (a newer checkpoint than the one it knows: ``append`` refuses with
``StaleControllerEpochError``, or ``MetadataStoreUnavailableError`` so its controller replays)
instead of appending to an unlinked file. Only the newest checkpoint is kept: an older one is of no
use once the log prefix after it is gone (Kafka keeps more only for followers fetching them).

Ownership: one ``MetadataLog`` object per process, used by the controller through
``odradek.controller.log_store.LocalMetadataLogStore``, which runs its blocking I/O (write + fsync) on an
executor, one call at a time (calls on one object must not overlap: flock belongs to the open file).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from odradek.controller.metadata_snapshot import (
    MetadataSnapshot,
    SnapshotCorruptError,
    checkpoints,
    read_checkpoint,
    remove_stale_files,
    write_checkpoint,
)
from odradek.controller.records import MetadataRecord, record_from_dict, record_to_dict
from odradek.protocol.checksum import crc32c
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
LOG_FILE_NAME = "metadata.log"

_FRAME_HEADER = struct.Struct(">iI")  # length, crc32c
_PAYLOAD_HEADER = struct.Struct(">qii")  # base_offset, controller_epoch, record_count
FRAME_HEADER_SIZE = _FRAME_HEADER.size
PAYLOAD_HEADER_SIZE = _PAYLOAD_HEADER.size
# A sanity bound so a corrupt length field is recognised as corruption, not as a huge frame.
MAX_FRAME_PAYLOAD = 64 * 1024 * 1024


class StaleControllerEpochError(KafkaApiError):
    """An append from a controller epoch older than the newest epoch already in the log."""

    def __init__(self, epoch: int, newest_epoch: int) -> None:
        super().__init__(
            ErrorCode.STALE_CONTROLLER_EPOCH,
            f"Controller epoch {epoch} is older than the newest epoch {newest_epoch} in the metadata log.",
        )
        self.epoch = epoch
        self.newest_epoch = newest_epoch


class MetadataLogCorruptError(Exception):
    """A frame passed its CRC check but could not be decoded: a bug, never silently truncated."""


class MetadataStoreUnavailableError(KafkaApiError):
    """An append whose outcome is unknown: the store could not be reached or did not answer (or it was
    compacted beneath this writer, so the batches it missed exist only in a snapshot).

    The controller steps down (Kafka's QuorumController renounces after a failed write), so a
    successor, or this node again, starts from a replay of what the store really holds; the client
    gets NOT_CONTROLLER, which Kafka's clients retry.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NOT_CONTROLLER, message)


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    base_offset: int
    controller_epoch: int
    records: tuple[MetadataRecord, ...]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


@dataclass(frozen=True, slots=True)
class MetadataLogContents:
    """What a store's ``open`` or ``read`` returns: a snapshot to load first (None: start from an empty
    image, or from where the reader stands) and the batches after it, oldest first."""

    snapshot: MetadataSnapshot | None
    batches: tuple[MetadataBatch, ...]

    @property
    def next_offset(self) -> int | None:
        """The offset after the last record it holds (None when it holds nothing)."""
        if self.batches:
            return self.batches[-1].next_offset
        return None if self.snapshot is None else self.snapshot.end_offset


def encode_batch(base_offset: int, controller_epoch: int, records: Sequence[MetadataRecord]) -> bytes:
    body = json.dumps([record_to_dict(r) for r in records], separators=(",", ":")).encode()
    payload = _PAYLOAD_HEADER.pack(base_offset, controller_epoch, len(records)) + body
    return _FRAME_HEADER.pack(len(payload), crc32c(payload)) + payload


def _scan(
    data: bytes, start: int, next_offset: int | None, newest_epoch: int
) -> tuple[list[MetadataBatch], int, str | None]:
    """Decode frames from ``data[start:]``; return the batches, the end of the last valid frame and
    why scanning stopped early (``None`` when it reached the end cleanly). ``next_offset`` None: the
    first frame may start at any offset (a log that begins after a snapshot)."""
    batches: list[MetadataBatch] = []
    pos = start
    end = len(data)
    while pos < end:
        if end - pos < FRAME_HEADER_SIZE:
            return batches, pos, "torn frame header"
        length, crc = _FRAME_HEADER.unpack_from(data, pos)
        if length < PAYLOAD_HEADER_SIZE or length > MAX_FRAME_PAYLOAD:
            return batches, pos, f"invalid frame length {length}"
        payload_start = pos + FRAME_HEADER_SIZE
        payload_end = payload_start + length
        if payload_end > end:
            return batches, pos, "torn frame payload"
        payload = data[payload_start:payload_end]
        if crc32c(payload) != crc:
            return batches, pos, "CRC32C mismatch"
        base_offset, epoch, count = _PAYLOAD_HEADER.unpack_from(payload, 0)
        if next_offset is not None and base_offset != next_offset:
            return batches, pos, f"base offset {base_offset}, expected {next_offset}"
        if epoch < newest_epoch:
            return batches, pos, f"epoch {epoch} older than {newest_epoch}"
        try:
            raw = json.loads(payload[PAYLOAD_HEADER_SIZE:])
            records = tuple(record_from_dict(r) for r in raw)
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataLogCorruptError(f"undecodable metadata batch at position {pos}: {e}") from e
        if len(records) != count:
            raise MetadataLogCorruptError(
                f"metadata batch at position {pos} declares {count} records but holds {len(records)}"
            )
        batches.append(MetadataBatch(base_offset, epoch, records))
        next_offset = base_offset + count
        newest_epoch = epoch
        pos = payload_end
    return batches, pos, None


def decode_batches(data: bytes, next_offset: int = 0, newest_epoch: int = -1) -> list[MetadataBatch]:
    """Decode concatenated frames that must all be valid (a store whose writes are atomic, such as
    etcd, has no torn tail to cut off): any invalid frame raises ``MetadataLogCorruptError``."""
    batches, _, problem = _scan(data, 0, next_offset, newest_epoch)
    if problem is not None:
        raise MetadataLogCorruptError(f"invalid metadata batch after offset {next_offset}: {problem}")
    return batches


class MetadataLog:
    """An open metadata log. Create with ``MetadataLog.open(metadata_dir)``."""

    def __init__(self, path: Path, fd: int, end_position: int, next_offset: int, newest_epoch: int,
                 snapshot: MetadataSnapshot | None) -> None:
        self._path = path
        self._fd = fd
        self._end_position = end_position
        self._next_offset = next_offset
        self._newest_epoch = newest_epoch
        self._snapshot = snapshot
        # End offset of the newest checkpoint this object wrote or loaded (-1: none): a newer one on
        # disk means another writer compacted the log beneath it.
        self._snapshot_end = -1 if snapshot is None else snapshot.end_offset
        self._caught_up: list[MetadataBatch] = []
        # Bytes of batches written since the snapshot (the whole file: in the rare crash case where
        # the file still holds batches the snapshot covers, they count too, and go at the next one).
        self.bytes_since_snapshot = end_position

    @classmethod
    def open(cls, metadata_dir: Path) -> tuple[MetadataLog, list[MetadataBatch]]:
        """Open (creating if needed) the log under ``metadata_dir``, truncating any invalid tail.

        Returns the log and every valid batch after its snapshot (``snapshot``) in order, for the
        caller to replay after loading the snapshot.
        """
        part_dir = Path(metadata_dir) / METADATA_PARTITION_DIR
        part_dir.mkdir(parents=True, exist_ok=True)
        path = part_dir / LOG_FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # do not read while another writer is mid-append
            try:
                newest = _newest_snapshot(part_dir)
                snapshot = None if newest is None else newest[0]
                with open(path, "rb") as f:
                    data = f.read()
                batches, valid_end, problem = _scan(data, 0, None, -1)
                if problem is not None:
                    log.warning(
                        "metadata log %s: truncating %d bytes at position %d (%s)",
                        path, len(data) - valid_end, valid_end, problem,
                    )
                    os.ftruncate(fd, valid_end)
                    os.fsync(fd)
                tail = _after_snapshot(path, snapshot, batches)
                if batches and not tail and snapshot is not None:
                    # A crash between a snapshot's rename and the log's truncation: finish it.
                    log.info("metadata log %s: dropping %d batches the snapshot at offset %d covers",
                             path, len(batches), snapshot.end_offset)
                    os.ftruncate(fd, 0)
                    os.fsync(fd)
                    valid_end = 0
                if newest is not None:
                    remove_stale_files(part_dir, newest[1])
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        if tail:
            next_offset, newest_epoch = tail[-1].next_offset, tail[-1].controller_epoch
        elif snapshot is not None:
            next_offset, newest_epoch = snapshot.end_offset, snapshot.controller_epoch
        else:
            next_offset, newest_epoch = 0, -1
        return cls(path, fd, valid_end, next_offset, newest_epoch, snapshot), tail

    @property
    def path(self) -> Path:
        return self._path

    @property
    def snapshot(self) -> MetadataSnapshot | None:
        """The newest snapshot this object loaded or wrote (None: the log starts at offset 0)."""
        return self._snapshot

    @property
    def next_offset(self) -> int:
        """Offset the next appended record will get (= number of records ever appended)."""
        return self._next_offset

    @property
    def newest_epoch(self) -> int:
        """Newest controller epoch seen in the log (-1 when empty)."""
        return self._newest_epoch

    def _catch_up(self) -> None:
        """Read what other writers appended since this object last looked (caller holds LOCK_EX).

        Raises ``MetadataStoreUnavailableError`` when another writer compacted the log meanwhile: the
        batches this object missed now exist only in that writer's snapshot, and its file position
        means nothing any more. ``newest_epoch`` then includes the snapshot's epoch.
        """
        found = checkpoints(self._path.parent)
        if found and found[-1][0] > self._snapshot_end:
            end_offset, epoch, _ = found[-1]
            self._newest_epoch = max(self._newest_epoch, epoch)
            raise MetadataStoreUnavailableError(
                f"metadata log {self._path} was compacted to a snapshot at offset {end_offset} by another writer")
        size = os.fstat(self._fd).st_size
        if size == self._end_position:
            return
        data = os.pread(self._fd, size - self._end_position, self._end_position)
        batches, valid_len, problem = _scan(data, 0, self._next_offset, self._newest_epoch)
        if problem is not None:
            # Another writer left a torn frame (it crashed mid-append) or wrote garbage. Appending
            # after it would make our frame unreachable on replay, so cut it off here as open() would.
            log.warning("metadata log %s: truncating foreign tail at %d (%s)",
                        self._path, self._end_position + valid_len, problem)
            os.ftruncate(self._fd, self._end_position + valid_len)
            os.fsync(self._fd)
        if batches:
            self._caught_up.extend(batches)
            self._next_offset = batches[-1].next_offset
            self._newest_epoch = batches[-1].controller_epoch
        self._end_position += valid_len
        self.bytes_since_snapshot += valid_len

    def read(self, from_offset: int = 0) -> MetadataLogContents:
        """What a reader at ``from_offset`` needs: the complete batches whose records reach
        ``from_offset`` or later, oldest first, and before them the newest snapshot when
        ``from_offset`` is below its end offset (the batches it covers are gone).

        Reads under a shared lock, so a concurrent writer's frame or snapshot is seen whole or not at
        all; an invalid tail is left alone here (``open`` and ``append`` are the ones that truncate).
        """
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            found = checkpoints(self._path.parent)
            newest = found[-1] if found else None
            snapshot_data = None
            if newest is not None and from_offset < newest[0] and not self._is_cached(newest):
                snapshot_data = newest[2].read_bytes()
            size = os.fstat(self._fd).st_size
            data = os.pread(self._fd, size, 0) if size else b""
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        batches, _, _ = _scan(data, 0, None, -1)
        if newest is None:
            return MetadataLogContents(None, tuple(b for b in batches if b.next_offset > from_offset))
        batches = [b for b in batches if b.base_offset >= newest[0]]  # a crash may have left covered ones
        if from_offset >= newest[0]:
            return MetadataLogContents(None, tuple(b for b in batches if b.next_offset > from_offset))
        if snapshot_data is None:
            assert self._snapshot is not None
            return MetadataLogContents(self._snapshot, tuple(batches))
        return MetadataLogContents(_decode_checkpoint(newest[2], snapshot_data), tuple(batches))

    def _is_cached(self, checkpoint: tuple[int, int, Path]) -> bool:
        s = self._snapshot
        return s is not None and (s.end_offset, s.controller_epoch) == checkpoint[:2]

    def take_caught_up(self) -> list[MetadataBatch]:
        """Batches other writers appended that this object read while appending; oldest first."""
        batches, self._caught_up = self._caught_up, []
        return batches

    def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> int:
        """Append ``records`` as one batch stamped with ``controller_epoch``; fsync; return the base offset.

        Raises ``StaleControllerEpochError`` (nothing written) when ``controller_epoch`` is older than
        the newest epoch in the log or in a snapshot another writer took.
        """
        if not records:
            raise ValueError("a metadata batch needs at least one record")
        frame_records = tuple(records)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up_or_refuse(controller_epoch)
            if controller_epoch < self._newest_epoch:
                raise StaleControllerEpochError(controller_epoch, self._newest_epoch)
            base_offset = self._next_offset
            frame = encode_batch(base_offset, controller_epoch, frame_records)
            try:
                written = os.pwrite(self._fd, frame, self._end_position)
                if written != len(frame):
                    raise OSError(f"short write to metadata log: {written} of {len(frame)} bytes")
                os.fsync(self._fd)
            except BaseException:
                # Leave no partial frame behind for the next append to be hidden behind.
                os.ftruncate(self._fd, self._end_position)
                raise
            self._end_position += len(frame)
            self.bytes_since_snapshot += len(frame)
            self._next_offset = base_offset + len(frame_records)
            self._newest_epoch = controller_epoch
            return base_offset
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _catch_up_or_refuse(self, controller_epoch: int) -> None:
        try:
            self._catch_up()
        except MetadataStoreUnavailableError:
            if controller_epoch < self._newest_epoch:
                raise StaleControllerEpochError(controller_epoch, self._newest_epoch) from None
            raise

    def write_snapshot(self, snapshot: MetadataSnapshot, chunks: Sequence[bytes] | None = None) -> bool:
        """Make ``snapshot`` the log's start (the module docstring's compaction steps); False, with nothing
        written, when it is not at the log's end offset (another writer appended batches it lacks:
        they are handed out by the next ``append``). ``chunks``: the snapshot already encoded."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up_or_refuse(snapshot.controller_epoch)
            if self._caught_up or snapshot.end_offset != self._next_offset or snapshot.end_offset <= self._snapshot_end:
                return False
            path = write_checkpoint(self._path.parent, snapshot, chunks)
            self._snapshot_end = snapshot.end_offset  # on disk now, whatever happens next
            self._snapshot = snapshot
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
            self._end_position = 0
            self.bytes_since_snapshot = 0
            remove_stale_files(self._path.parent, path)
            return True
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _newest_snapshot(part_dir: Path) -> tuple[MetadataSnapshot, Path] | None:
    found = checkpoints(part_dir)
    if not found:
        return None
    path = found[-1][2]
    return _decode_checkpoint(path, path.read_bytes()), path


def _decode_checkpoint(path: Path, data: bytes) -> MetadataSnapshot:
    """The checkpoint's snapshot; a bad one is corruption, not something to skip: the log prefix it
    replaced is gone."""
    try:
        return read_checkpoint(path, data)
    except SnapshotCorruptError as e:
        raise MetadataLogCorruptError(f"metadata snapshot {path}: {e}") from e


def _after_snapshot(path: Path, snapshot: MetadataSnapshot | None, batches: list[MetadataBatch]) -> list[MetadataBatch]:
    """The batches of the file that follow ``snapshot``; raises if the two do not join up."""
    if snapshot is None:
        if batches and batches[0].base_offset != 0:
            raise MetadataLogCorruptError(f"{path} starts at offset {batches[0].base_offset} and there is no "
                                          "snapshot to hold the records before it")
        return batches
    end = snapshot.end_offset
    for b in batches:
        if b.base_offset < end < b.next_offset:
            raise MetadataLogCorruptError(f"{path}: the batch at offset {b.base_offset} straddles the snapshot's "
                                          f"end offset {end}")
    tail = [b for b in batches if b.base_offset >= end]
    if tail and tail[0].base_offset != end:
        raise MetadataLogCorruptError(f"{path} resumes at offset {tail[0].base_offset} after the snapshot at "
                                      f"offset {end}: the records between them are missing")
    if tail and tail[0].controller_epoch < snapshot.controller_epoch:
        raise MetadataLogCorruptError(f"{path}: epoch {tail[0].controller_epoch} after the snapshot's epoch "
                                      f"{snapshot.controller_epoch}")
    return tail
