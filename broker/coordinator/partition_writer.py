"""``ReplicaManagerWriter``: the coordinator runtime's PartitionWriter over the replica manager.

The replica manager's internal-topic calls (``append_internal``, ``read_internal``, the log start
and end offsets, the leadership listeners) are synchronous today: an append is durable when it
returns, because one node is its own ISR. The writer still answers appends with a future so the
runtime never relies on that; when acks=all replication arrives, ``append`` resolves the future
when the high watermark passes the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from protocol.errors import KafkaApiError


class InternalTopicReplicas(Protocol):
    """The replica manager's surface for internal topics (the names it keeps after its move)."""

    def append_internal(self, topic: str, partition: int, records: bytes) -> int: ...

    def read_internal(self, topic: str, partition: int, start_offset: int, max_bytes: int) -> bytes: ...

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None: ...

    def on_resign(self, callback: Callable[[str, int], None]) -> None: ...


class ReplicaManagerWriter:
    """PartitionWriter over a replica manager (see broker.coordinator.runtime.PartitionWriter)."""

    def __init__(self, replicas: InternalTopicReplicas) -> None:
        self.replicas = replicas

    def append(self, topic: str, partition: int, records: bytes) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        try:
            self.replicas.append_internal(topic, partition, records)
        except KafkaApiError as exc:
            future.set_exception(exc)
            return future
        # Durable at once on one node: the append is the whole ISR's.
        future.set_result(self.replicas.log_end_offset(topic, partition) - 1)
        return future

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        return self.replicas.read_internal(topic, partition, offset, max_bytes)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.replicas.log_start_offset(topic, partition)

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.replicas.log_end_offset(topic, partition)

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self.replicas.on_become_leader(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self.replicas.on_resign(callback)
