"""Kafka's text checkpoint files (``CheckpointFile``): replace-by-rename, fsynced.

Format (version 0)::

    0                      <- version
    2                      <- number of entries
    <entry fields ...>     <- one entry per line, fields separated by one space

Used for ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (entries
``<topic> <partition> <offset>``) and ``leader-epoch-checkpoint`` (entries ``<epoch> <offset>``).

Crash story: the new content is written to ``<name>.tmp``, fsynced, renamed over ``<name>``, and
the directory fsynced, so a reader sees either the old or the new file, never a torn one. A
leftover ``.tmp`` is ignored (and overwritten by the next write).

Blocking file I/O: call from an IO thread. Not thread-safe per file; each file has one writer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

VERSION = 0


class CheckpointFormatError(ValueError):
    """The file exists but is not a well-formed version-0 checkpoint."""


def write_checkpoint(path: Path, entries: Iterable[Iterable[object]], version: int = VERSION) -> None:
    lines = [" ".join(str(f) for f in entry) for entry in entries]
    text = f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    write_atomically(path, text.encode())


def read_checkpoint(path: Path, fields: int) -> list[list[str]]:
    """Entries as lists of ``fields`` strings; [] when the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointFormatError(f"{path}: missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise CheckpointFormatError(f"{path}: unknown checkpoint version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFormatError(f"{path}: bad entry count {lines[1]!r}") from None
    entries = [line.split(" ") for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointFormatError(f"{path}: expected {count} entries, found {len(entries)}")
    for entry in entries:
        if len(entry) != fields:
            raise CheckpointFormatError(f"{path}: malformed entry {' '.join(entry)!r}")
    return entries


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: a crash leaves either the old or the new content.

    Temp file, fsync, rename over the target, fsync the directory (so the rename survives). The
    one helper every small state file uses: checkpoints, snapshots, lease state, meta.properties.
    With ``durable=False`` the two fsyncs are left to the caller (a producer snapshot at a roll is
    fsynced later by the background flush, as in Kafka): the file is still whole or absent after a
    process crash, only not after a power loss until then.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
