"""``partition.metadata``: the topic id of a partition directory (Kafka's PartitionMetadataFile).

Format (text)::

    version: 0
    topic_id: <22-character URL-safe base64 of the 16-byte UUID, no padding>

A topic id is Kafka's ``Uuid.toString()``; :func:`topic_id_to_str` / :func:`topic_id_from_str`
convert to and from ``uuid.UUID``. Written once when the log is created (atomically, fsynced) and
read on startup so a recreated topic with the same name is never mistaken for the old one.

Blocking file I/O: call from an IO thread.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from odradek.storage.checkpoint_file import write_atomically

FILE_NAME = "partition.metadata"


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes")
    return uuid.UUID(bytes=raw)


def write_partition_metadata(dir: Path, topic_id: str) -> None:
    topic_id_from_str(topic_id)  # refuse to persist garbage
    write_atomically(dir / FILE_NAME, f"version: 0\ntopic_id: {topic_id}".encode())


def read_partition_metadata(dir: Path) -> str | None:
    """The stored topic id, or None if the file is absent; ValueError if malformed."""
    try:
        text = (dir / FILE_NAME).read_text()
    except FileNotFoundError:
        return None
    fields = {}
    for line in text.splitlines():
        if ":" in line:
            name, _, value = line.partition(":")
            fields[name.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"malformed {dir / FILE_NAME}: {text!r}")
    topic_id_from_str(fields["topic_id"])
    return fields["topic_id"]
