"""The metadata log: an append-only, epoch-fenced file of metadata record batches.

Location: ``<metadata dir>/__cluster_metadata-0/metadata.log`` (the directory name is Kafka's
metadata topic-partition). One file; every change to cluster metadata is a batch appended to it, and
replaying the file from the start rebuilds the metadata image.

Format (all integers big-endian)::

    frame   := length:int32  crc:uint32  payload            length = len(payload)
    payload := base_offset:int64  controller_epoch:int32  record_count:int32  records_json:bytes

``crc`` is CRC32C (Castagnoli, as in Kafka's record batch v2) over ``payload``. ``records_json`` is a
UTF-8 JSON array of ``controller.records.record_to_dict`` objects; record ``i`` of a batch has
offset ``base_offset + i``. Offsets are dense: each batch's base offset equals the previous batch's
base offset plus its record count (the first batch starts at 0).

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

TODO(snapshot): the log is never compacted. KRaft periodically writes a snapshot of the image and
deletes the log prefix; until we do, start-up reads the whole file into memory.

Ownership: one ``MetadataLog`` object per process, used by the controller through
``controller.log_store.LocalMetadataLogStore``, which runs its blocking I/O (write + fsync) on an
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

from controller.records import MetadataRecord, record_from_dict, record_to_dict
from protocol.checksum import crc32c
from protocol.errors import ErrorCode, KafkaApiError

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


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    base_offset: int
    controller_epoch: int
    records: tuple[MetadataRecord, ...]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


def encode_batch(base_offset: int, controller_epoch: int, records: Sequence[MetadataRecord]) -> bytes:
    body = json.dumps([record_to_dict(r) for r in records], separators=(",", ":")).encode()
    payload = _PAYLOAD_HEADER.pack(base_offset, controller_epoch, len(records)) + body
    return _FRAME_HEADER.pack(len(payload), crc32c(payload)) + payload


def _scan(
    data: bytes, start: int, next_offset: int, newest_epoch: int
) -> tuple[list[MetadataBatch], int, str | None]:
    """Decode frames from ``data[start:]``; return the batches, the end of the last valid frame and
    why scanning stopped early (``None`` when it reached the end cleanly)."""
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
        if base_offset != next_offset:
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

    def __init__(self, path: Path, fd: int, end_position: int, next_offset: int, newest_epoch: int) -> None:
        self._path = path
        self._fd = fd
        self._end_position = end_position
        self._next_offset = next_offset
        self._newest_epoch = newest_epoch
        self._caught_up: list[MetadataBatch] = []

    @classmethod
    def open(cls, metadata_dir: Path) -> tuple[MetadataLog, list[MetadataBatch]]:
        """Open (creating if needed) the log under ``metadata_dir``, truncating any invalid tail.

        Returns the log and every valid batch in order, for the caller to replay.
        """
        part_dir = Path(metadata_dir) / METADATA_PARTITION_DIR
        part_dir.mkdir(parents=True, exist_ok=True)
        path = part_dir / LOG_FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # do not read while another writer is mid-append
            try:
                with open(path, "rb") as f:
                    data = f.read()
                batches, valid_end, problem = _scan(data, 0, 0, -1)
                if problem is not None:
                    log.warning(
                        "metadata log %s: truncating %d bytes at position %d (%s)",
                        path, len(data) - valid_end, valid_end, problem,
                    )
                    os.ftruncate(fd, valid_end)
                    os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        next_offset = batches[-1].next_offset if batches else 0
        newest_epoch = batches[-1].controller_epoch if batches else -1
        return cls(path, fd, valid_end, next_offset, newest_epoch), batches

    @property
    def path(self) -> Path:
        return self._path

    @property
    def next_offset(self) -> int:
        """Offset the next appended record will get (= number of records ever appended)."""
        return self._next_offset

    @property
    def newest_epoch(self) -> int:
        """Newest controller epoch seen in the log (-1 when empty)."""
        return self._newest_epoch

    def _catch_up(self) -> None:
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

    def read_batches(self, from_offset: int = 0) -> list[MetadataBatch]:
        """Every complete batch in the file whose records reach ``from_offset`` or later, oldest first.

        Reads under a shared lock, so a concurrent writer's frame is seen whole or not at all; an
        invalid tail is left alone here (``open`` and ``append`` are the ones that truncate).
        """
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            size = os.fstat(self._fd).st_size
            data = os.pread(self._fd, size, 0) if size else b""
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        batches, _, _ = _scan(data, 0, 0, -1)
        return [b for b in batches if b.next_offset > from_offset]

    def take_caught_up(self) -> list[MetadataBatch]:
        """Batches other writers appended that this object read while appending; oldest first."""
        batches, self._caught_up = self._caught_up, []
        return batches

    def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> int:
        """Append ``records`` as one batch stamped with ``controller_epoch``; fsync; return the base offset.

        Raises ``StaleControllerEpochError`` (nothing written) when ``controller_epoch`` is older than
        the newest epoch in the log.
        """
        if not records:
            raise ValueError("a metadata batch needs at least one record")
        frame_records = tuple(records)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up()
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
            self._next_offset = base_offset + len(frame_records)
            self._newest_epoch = controller_epoch
            return base_offset
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
