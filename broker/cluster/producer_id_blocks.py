"""Producer ids in cluster mode: blocks handed out by one etcd counter, so no two brokers share an id.

Key ``/odradek/<cluster-id>/producer_id_block_end`` (decimal): the end of the last block handed
out. A broker takes the next block with a compare-and-swap (value still what it read → value +
``BLOCK_SIZE``), retrying when another broker got in first - Kafka's controller does the same with
AllocateProducerIds and ProducerIdsRecord. Ids are never reused, across brokers and restarts: a
block taken and not used up is simply skipped. While etcd cannot be reached InitProducerId answers
COORDINATOR_LOAD_IN_PROGRESS, as Kafka's broker does while it waits for a block.
"""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker.cluster.keys import ClusterKeys
from odradek.broker.txn.producer_ids import BLOCK_SIZE
from odradek.controller.etcd_client import EtcdError
from odradek.protocol.errors import ErrorCode, KafkaApiError


class EtcdProducerIdManager:
    def __init__(self, client: Any, keys: ClusterKeys) -> None:
        self._client = client
        self._key = f"{keys.prefix}/producer_id_block_end".encode()
        self._next = 0
        self._block_end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._block_end:
                try:
                    self._next, self._block_end = await self._take_block()
                except EtcdError as exc:
                    # Kafka's RPCProducerIdManager answers COORDINATOR_LOAD_IN_PROGRESS while it waits
                    # for a block: retriable for every client, and an idempotent producer retries
                    # InitProducerId without looking up a coordinator it does not have.
                    raise KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                        f"cannot allocate producer ids: metadata store unreachable ({exc})") from exc
            pid = self._next
            self._next += 1
            return pid

    async def _take_block(self) -> tuple[int, int]:
        t = self._client.transactions
        while True:
            kv = await self._client.get(self._key)
            start = 0 if kv is None else int(kv.value)
            unchanged = t.create(self._key) == 0 if kv is None else t.value(self._key) == str(start)
            succeeded, _ = await self._client.transaction(
                compare=[unchanged], success=[t.put(self._key, str(start + BLOCK_SIZE).encode())], failure=[])
            if succeeded:
                return start, start + BLOCK_SIZE
