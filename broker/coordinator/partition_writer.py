"""``ReplicaManagerWriter``: the coordinator runtime's PartitionWriter over the replica manager.

A coordinator write is durable when the partition's high watermark passes it: every in-sync
replica has it, so the next leader will too. ``append`` appends as the leader with acks=-1's
check (NOT_ENOUGH_REPLICAS below min.insync.replicas, before anything is written) and resolves
once the HW passed the batch, through the replica manager's DelayedProduce in the produce
purgatory (the acks=-1 machinery; on one node the HW moves with the append, so the future is done
on return and nothing waits). The future fails only when this broker stopped leading the
partition (NOT_LEADER_OR_FOLLOWER) - never on a timeout: the records are in the log, so the
runtime must apply them once they are durable whatever the caller was told. The runtime bounds
how long a caller waits (``offsets.commit.timeout.ms``); the wait here is re-armed every
``wait_ms`` while the partition is still led here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.results import AppendInfo

# How long one DelayedProduce of a coordinator write waits before it is re-armed.
DEFAULT_WAIT_MS = 30_000


class InternalTopicReplicas(Protocol):
    """The replica manager's surface for internal topics."""

    def append_internal(self, topic: str, partition: int, records: bytes, required_acks: int = 1) -> AppendInfo: ...

    def wait_for_high_watermark(self, topic: str, partition: int, required_offset: int, timeout_ms: int,
                                callback: Callable[[int], Any]) -> None: ...

    def read_internal(self, topic: str, partition: int, start_offset: int, max_bytes: int) -> bytes: ...

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None: ...

    def on_resign(self, callback: Callable[[str, int], None]) -> None: ...

    async def delete_records(self, topic: str, index: int, offset: int) -> int: ...


class ReplicaManagerWriter:
    """PartitionWriter over a replica manager (see odradek.broker.coordinator.runtime.PartitionWriter)."""

    def __init__(self, replicas: InternalTopicReplicas, wait_ms: int = DEFAULT_WAIT_MS) -> None:
        self.replicas = replicas
        self.wait_ms = wait_ms

    def append(self, topic: str, partition: int, records: bytes) -> asyncio.Future[int]:
        """Raises KafkaApiError at once when nothing was appended."""
        info = self.replicas.append_internal(topic, partition, records, required_acks=-1)
        return self._when_replicated(topic, partition, info.last_offset + 1, info.last_offset)

    def wait_for_high_watermark(self, topic: str, partition: int, offset: int) -> asyncio.Future[int]:
        return self._when_replicated(topic, partition, offset, offset)

    def _when_replicated(self, topic: str, partition: int, required_offset: int, result: int) -> asyncio.Future[int]:
        """A future answering ``result`` once the HW reached ``required_offset``."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def done(code: int) -> None:
            if future.done():
                return
            if code == ErrorCode.NONE:
                future.set_result(result)
            elif code == ErrorCode.REQUEST_TIMED_OUT:
                # Still leader, followers slow (or one left the ISR only now): keep waiting.
                self.replicas.wait_for_high_watermark(topic, partition, required_offset, self.wait_ms, done)
            else:
                future.set_exception(KafkaApiError(ErrorCode(code)))

        self.replicas.wait_for_high_watermark(topic, partition, required_offset, self.wait_ms, done)
        return future

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        return self.replicas.read_internal(topic, partition, offset, max_bytes)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.replicas.log_start_offset(topic, partition)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords as the leader (Kafka's PartitionWriter.deleteRecords, the share
        coordinator's pruning): the log start offset moves to ``offset`` here, and on the
        followers as they fetch; the new log start offset."""
        return await self.replicas.delete_records(topic, partition, offset)

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.replicas.log_end_offset(topic, partition)

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self.replicas.on_become_leader(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self.replicas.on_resign(callback)
