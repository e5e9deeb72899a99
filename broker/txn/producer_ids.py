"""Producer id allocation for idempotent producers (InitProducerId without a transactional id).

Ids are handed out from blocks of ``BLOCK_SIZE``; before the first id of a block is used, the end
of that block is persisted (write-temp, fsync, rename) in ``<metadata dir>/producer-id-block``.
After a crash or restart allocation continues after the persisted block end, so an id is never
given out twice — the property idempotence depends on (a reused id would be treated as a
duplicate or out-of-order producer by partitions that remember it). Kafka's KRaft controller does
the same with ProducerIdsRecord blocks in its metadata log; in cluster mode the blocks come from
etcd instead (``odradek.broker.cluster.producer_id_blocks``), behind the same async ``next_id``.

Owned by the handler loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from odradek.storage.checkpoint_file import write_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdSource(Protocol):
    """Where InitProducerId takes ids from: this file (one node) or etcd (a cluster)."""

    async def next_id(self) -> int: ...


class ProducerIdManager:
    def __init__(self, metadata_dir: Path) -> None:
        self.path = Path(metadata_dir) / FILE_NAME
        self._next = 0
        self._block_end = 0
        if self.path.exists():
            text = self.path.read_text().strip()
            if text:
                self._next = self._block_end = int(text)

    async def next_id(self) -> int:
        if self._next >= self._block_end:
            self._persist(self._next + BLOCK_SIZE)
        pid = self._next
        self._next += 1
        return pid

    def _persist(self, block_end: int) -> None:
        write_atomically(self.path, f"{block_end}\n".encode())
        self._block_end = block_end
