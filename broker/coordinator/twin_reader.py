"""``TwinReader``: another partition of a coordinator's internal topic, read from its committed log
(for broker/coordinator/rehash.py: the twin whose old state a partition takes over).

Where this broker leads the partition, through the PartitionWriter (``read``: batches below the
high watermark); elsewhere with Fetch (api 1, v12: topic names, flexible) from its leader on the
inter-broker listener, as a consumer would (replica id -1, read_uncommitted: transactional
batches and their markers both come, the scan decides), also below the high watermark. Either way
only records every in-sync replica holds, the same ones whoever leads next.

``read`` returns one chunk of whole batches from ``offset`` (empty: nothing more below the high
watermark now) and raises KafkaApiError or NodeUnavailableError when it cannot read now (no
leader, leadership moving, unreachable): the caller retries later. Owned by the handler loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from odradek.broker.network.inter_broker_client import NodeClients
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.coordinator.runtime import PartitionWriter
    from odradek.controller.image import MetadataImage

FETCH = 1
FETCH_VERSION = 12


class ImageView(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class TwinReader:
    def __init__(self, writer: PartitionWriter, metadata: ImageView, node_id: int, max_bytes: int) -> None:
        self.writer = writer
        self.metadata = metadata
        self.node_id = node_id
        self.max_bytes = max_bytes
        self._clients = NodeClients(f"broker-{node_id}-coordinator-rehash")
        self.last_source: dict[tuple[str, int], int] = {}  # (topic, partition) -> the broker last read from

    async def read(self, topic: str, partition: int, offset: int) -> tuple[bytes, int]:
        """(whole batches from ``offset``, the log start offset); raises when it cannot read now."""
        state = self.metadata.image.partition(topic, partition)
        if state is None or state.leader < 0:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        self.last_source[(topic, partition)] = state.leader
        if state.leader == self.node_id:
            start = self.writer.log_start_offset(topic, partition)
            return (self.writer.read(topic, partition, offset, self.max_bytes) if offset >= start else b""), start
        return await self._fetch(state.leader, topic, partition, offset)

    async def _fetch(self, leader: int, topic: str, partition: int, offset: int) -> tuple[bytes, int]:
        reg = self.metadata.image.brokers.get(leader)
        if reg is None:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {leader} is not registered")
        client = self._clients.get(leader, reg.host, reg.port)
        body = {"cluster_id": None, "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": self.max_bytes,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": self.max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        response = await client.request(FETCH, FETCH_VERSION, body)
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaApiError(ErrorCode(response["error_code"]))
        data = response["responses"][0]["partitions"][0]
        start = data["log_start_offset"]
        if data["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and start > offset:
            return b"", start  # the caller starts over from the log start
        if data["error_code"] != ErrorCode.NONE:
            raise KafkaApiError(ErrorCode(data["error_code"]))
        return bytes(data["records"] or b""), start

    async def close(self) -> None:
        await self._clients.close()
