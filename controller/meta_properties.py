"""``meta.properties``: the cluster id and node id stamped on a metadata directory, and Kafka-style ids.

Format (Kafka's, a Java properties file; we write and read only ``key=value`` lines and ``#``
comments)::

    #Written by Odradek
    version=1
    cluster.id=<22-char base64url uuid>
    node.id=<int>

Written once, on the first start, by write-temp + fsync + rename (+ fsync of the directory), so a
crash leaves either no file (the next start generates a fresh id - nothing was written under the old
one yet, since the file is written before the metadata log is opened) or the complete file.

``new_kafka_uuid`` is Kafka's ``Uuid.randomUuid``: a random UUIDv4 that is never the zero UUID and
whose base64url form does not start with '-' (so it cannot be mistaken for a command-line flag).

Called by the controller at start-up; blocking file I/O.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from odradek.controller.lease import write_file_atomically

META_PROPERTIES = "meta.properties"
ZERO_UUID = uuid.UUID(int=0)


class MetaPropertiesError(Exception):
    """meta.properties is unreadable or belongs to a different node."""


def uuid_to_base64(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def new_kafka_uuid() -> uuid.UUID:
    while True:
        u = uuid.uuid4()
        if u != ZERO_UUID and not uuid_to_base64(u).startswith("-"):
            return u


def new_cluster_id() -> str:
    return uuid_to_base64(new_kafka_uuid())


def _parse(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def read_cluster_id(metadata_dir: Path, node_id: int) -> str | None:
    """The directory's cluster id, None when it has no ``meta.properties`` yet."""
    path = Path(metadata_dir) / META_PROPERTIES
    if not path.exists():
        return None
    props = _parse(path.read_text())
    if props.get("version", "0") not in ("0", "1"):
        # Kafka's MetaPropertiesVersion knows 0 (ZooKeeper) and 1 (KRaft); a newer one is not ours to guess.
        raise MetaPropertiesError(f"{path} has version {props['version']}; this release reads versions 0 and 1")
    cluster_id = props.get("cluster.id")
    if not cluster_id:
        raise MetaPropertiesError(f"{path} has no cluster.id")
    stored_node = props.get("node.id")
    if stored_node is not None and int(stored_node) != node_id:
        raise MetaPropertiesError(f"{path} belongs to node {stored_node}, not node {node_id}")
    return cluster_id


def load_or_create_cluster_id(metadata_dir: Path, node_id: int, new_id: str | None = None) -> str:
    """Return the directory's cluster id; on first use persist ``new_id`` (default: a fresh one)."""
    existing = read_cluster_id(metadata_dir, node_id)
    if existing is not None:
        return existing
    path = Path(metadata_dir) / META_PROPERTIES
    cluster_id = new_id or new_cluster_id()
    Path(metadata_dir).mkdir(parents=True, exist_ok=True)
    text = f"#Written by Odradek\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
    write_file_atomically(path, text.encode())
    return cluster_id
