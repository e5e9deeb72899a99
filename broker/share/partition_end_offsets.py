"""``PartitionEndOffsets``: a partition's latest offset (its high watermark) for the group
coordinator's share-group lag, wherever the partition is led (Kafka 4.4's
NetworkPartitionMetadataClient.listLatestOffsets).

A partition this broker leads answers from its replica; any other is a ListOffsets (timestamp -1,
LATEST; READ_UNCOMMITTED, so the high watermark, as Kafka's client asks) to its leader in the
metadata image over the inter-broker client. Kafka's DescribeShareGroupOffsets computes the lag
of a share-partition as this offset less the start offset and the delivery-complete count its share
coordinator holds.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from odradek.broker.network.inter_broker_client import NodeClient, NodeClients, NodeUnavailableError
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 7
LATEST_TIMESTAMP = -1


class PartitionEndOffsets:
    def __init__(self, replica_manager: ReplicaManager, metadata: BrokerMetadata, node_id: int) -> None:
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.node_id = node_id
        self._clients = NodeClients(f"broker-{node_id}-partition-end-offsets")

    async def latest(self, topic: str, partition: int, timeout_s: float = 5.0) -> int | None:
        """The partition's high watermark; None when its leader is unknown, does not answer within
        ``timeout_s`` or answers an error (Kafka's lag is then an error for the partition)."""
        led_here = self.replica_manager.partitions.get((topic, partition))
        if led_here is not None:
            return int(led_here.high_watermark)
        state = self.metadata.image.partition(topic, partition)
        if state is None or state.leader < 0:
            return None
        client = self._client(state.leader)
        if client is None:
            return None
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}]}]}
        try:
            response: Any = await asyncio.wait_for(client.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body), timeout_s)
        except (TimeoutError, NodeUnavailableError):
            return None
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition and p["error_code"] == ErrorCode.NONE:
                    return int(p["offset"])
        return None

    def _client(self, node: int) -> NodeClient | None:
        reg = self.metadata.image.brokers.get(node)
        if reg is None or reg.fenced:
            return None
        return self._clients.get(node, reg.host, reg.port)

    async def close(self) -> None:
        await self._clients.close()
