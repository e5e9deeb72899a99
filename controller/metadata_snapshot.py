"""Metadata snapshots: the image at one log offset, written as records, in chunks that each check themselves.

A snapshot holds the records that rebuild the metadata image as it stood after every record below
``end_offset`` (``odradek.controller.image_records.image_records``), with ``controller_epoch`` the epoch of
the newest batch it covers. Kafka's shape: its ``<end offset>-<epoch>.checkpoint`` files hold the
image as record batches; a reader loads the newest snapshot and then the log from its end offset.

Format (all integers big-endian), one or more chunks, in order::

    chunk   := length:int32  crc:uint32  payload            length = len(payload)
    payload := version:int16  end_offset:int64  controller_epoch:int32
               chunk_index:int32  chunk_count:int32  record_count:int32  records_json:bytes

``crc`` is CRC32C over ``payload`` (the metadata log's frame check). ``version`` is the snapshot
format's version, ``SNAPSHOT_FORMAT_VERSION`` (1); a reader refuses a version it does not know rather
than guess. ``records_json`` is a UTF-8 JSON array of ``odradek.controller.records.record_to_dict`` objects,
as in the log's batches. Every chunk repeats the header, so a chunk read alone (one etcd key) says
which snapshot it belongs to and where it goes; a snapshot decodes only if chunks ``0 ..
chunk_count - 1`` are all there, in order, with the same version, end offset and epoch.

Why chunks: etcd refuses a request over ``--max-request-bytes`` (1.5 MiB by default), so the etcd
store puts each chunk under a key of its own; the local file is the chunks one after another. A chunk
holds about ``CHUNK_BYTES`` of JSON (one record more at most).

The local file (``odradek.controller.metadata_log``): ``<metadata dir>/__cluster_metadata-0/
<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` (Kafka's name), written to ``<name>.tmp``,
fsynced, renamed, and the directory fsynced (``write_checkpoint``, through
``odradek.storage.checkpoint_file.write_atomically``): a crash leaves either the
complete file under its name or a ``.tmp`` that readers ignore and the next writer removes.

Pure data and file functions; the store that owns a directory serializes its calls.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from odradek.controller.records import MetadataRecord, record_from_dict, record_to_dict
from odradek.protocol.checksum import crc32c
from odradek.storage.checkpoint_file import write_atomically

SNAPSHOT_FORMAT_VERSION = 1
CHUNK_BYTES = 512 * 1024  # of JSON per chunk: a third of etcd's default 1.5 MiB request limit
CHECKPOINT_SUFFIX = ".checkpoint"
_CHECKPOINT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

_FRAME = struct.Struct(">iI")  # length, crc32c
_HEADER = struct.Struct(">hqiiii")  # version, end_offset, controller_epoch, chunk_index, chunk_count, record_count
# A corrupt length field must read as corruption, not as a request to allocate gigabytes.
_MAX_CHUNK_PAYLOAD = 256 * 1024 * 1024


class SnapshotCorruptError(ValueError):
    """A snapshot that does not decode: bad CRC, missing or foreign chunks, unknown version."""


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    end_offset: int  # the log offset after the last record it covers (the next offset)
    controller_epoch: int  # epoch of the newest batch it covers
    records: tuple[MetadataRecord, ...]


def encode_snapshot(snapshot: MetadataSnapshot, chunk_bytes: int = CHUNK_BYTES) -> list[bytes]:
    """The snapshot's chunks (at least one, even for an empty image)."""
    groups: list[list[str]] = [[]]
    size = 0
    for record in snapshot.records:
        text = json.dumps(record_to_dict(record), separators=(",", ":"))
        if groups[-1] and size + len(text) > chunk_bytes:
            groups.append([])
            size = 0
        groups[-1].append(text)
        size += len(text) + 1
    chunks = []
    for index, texts in enumerate(groups):
        body = ("[" + ",".join(texts) + "]").encode()
        payload = _HEADER.pack(SNAPSHOT_FORMAT_VERSION, snapshot.end_offset, snapshot.controller_epoch, index,
                               len(groups), len(texts)) + body
        chunks.append(_FRAME.pack(len(payload), crc32c(payload)) + payload)
    return chunks


def decode_snapshot(chunks: Iterable[bytes]) -> MetadataSnapshot:
    """Decode chunks given in order (a file's data may be passed as one piece holding them all)."""
    records: list[MetadataRecord] = []
    header: tuple[int, int, int] | None = None
    expected_index = 0
    count = -1
    for piece in chunks:
        pos = 0
        while pos < len(piece):
            payload, pos = _frame_at(piece, pos)
            version, end_offset, epoch, index, chunk_count, record_count = _HEADER.unpack_from(payload, 0)
            if version != SNAPSHOT_FORMAT_VERSION:
                raise SnapshotCorruptError(f"snapshot format version {version}; this build reads version "
                                           f"{SNAPSHOT_FORMAT_VERSION}")
            if header is None:
                header, count = (version, end_offset, epoch), chunk_count
            if (version, end_offset, epoch) != header or chunk_count != count or index != expected_index:
                raise SnapshotCorruptError(f"snapshot chunk {index}/{chunk_count} at offset {end_offset} epoch "
                                           f"{epoch} does not continue chunk {expected_index - 1}/{count} at offset "
                                           f"{header[1]} epoch {header[2]}")
            try:
                decoded = [record_from_dict(r) for r in json.loads(payload[_HEADER.size:])]
            except (ValueError, TypeError, KeyError) as e:
                raise SnapshotCorruptError(f"undecodable snapshot chunk {index}: {e}") from e
            if len(decoded) != record_count:
                raise SnapshotCorruptError(f"snapshot chunk {index} declares {record_count} records, holds "
                                           f"{len(decoded)}")
            records.extend(decoded)
            expected_index += 1
    if header is None or expected_index != count:
        raise SnapshotCorruptError(f"snapshot incomplete: {expected_index} of {max(count, 1)} chunks")
    return MetadataSnapshot(header[1], header[2], tuple(records))


def _frame_at(data: bytes, pos: int) -> tuple[bytes, int]:
    if len(data) - pos < _FRAME.size:
        raise SnapshotCorruptError(f"torn snapshot chunk header at byte {pos}")
    length, crc = _FRAME.unpack_from(data, pos)
    if length < _HEADER.size or length > _MAX_CHUNK_PAYLOAD:
        raise SnapshotCorruptError(f"invalid snapshot chunk length {length} at byte {pos}")
    start = pos + _FRAME.size
    payload = data[start:start + length]
    if len(payload) != length:
        raise SnapshotCorruptError(f"torn snapshot chunk at byte {pos}")
    if crc32c(payload) != crc:
        raise SnapshotCorruptError(f"snapshot chunk at byte {pos} fails its CRC32C")
    return payload, start + length


# --- files --------------------------------------------------------------------------------------


def checkpoint_name(end_offset: int, controller_epoch: int) -> str:
    return f"{end_offset:020d}-{controller_epoch:010d}{CHECKPOINT_SUFFIX}"


def parse_checkpoint_name(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a checkpoint file name; None for any other name (``.tmp`` included)."""
    m = _CHECKPOINT_NAME.match(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def checkpoints(directory: Path) -> list[tuple[int, int, Path]]:
    """The checkpoint files in ``directory``, oldest (lowest end offset) first."""
    found = []
    for entry in os.scandir(directory):
        parsed = parse_checkpoint_name(entry.name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], Path(entry.path)))
    return sorted(found)


def read_checkpoint(path: Path, data: bytes | None = None) -> MetadataSnapshot:
    """Decode one checkpoint file (``data``: its bytes, already read); its name must agree with its contents."""
    snapshot = decode_snapshot([path.read_bytes() if data is None else data])
    if parse_checkpoint_name(path.name) != (snapshot.end_offset, snapshot.controller_epoch):
        raise SnapshotCorruptError(f"{path.name} holds the snapshot at offset {snapshot.end_offset} epoch "
                                   f"{snapshot.controller_epoch}")
    return snapshot


def write_checkpoint(directory: Path, snapshot: MetadataSnapshot, chunks: Sequence[bytes] | None = None) -> Path:
    """Write the snapshot durably under its checkpoint name (temp file, fsync, rename, directory fsync)."""
    path = directory / checkpoint_name(snapshot.end_offset, snapshot.controller_epoch)
    write_atomically(path, b"".join(chunks if chunks is not None else encode_snapshot(snapshot)))
    return path


def remove_stale_files(directory: Path, keep: Path) -> None:
    """Delete every checkpoint but ``keep`` and any leftover ``.checkpoint.tmp`` (a crashed write)."""
    for entry in os.scandir(directory):
        stale_tmp = entry.name.endswith(CHECKPOINT_SUFFIX + ".tmp")
        if (stale_tmp or parse_checkpoint_name(entry.name) is not None) and entry.name != keep.name:
            os.unlink(entry.path)

