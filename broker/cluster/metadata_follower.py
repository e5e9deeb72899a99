"""A broker's metadata image in cluster mode: the committed metadata log read from etcd, then followed.

Format read: the batches ``controller.etcd_log_store`` writes under ``<metadata prefix>/log/`` (key
= base offset, 20 digits; value = one ``metadata_log`` frame). The follower applies every batch, in
offset order, to its own ``MetadataImage`` (``controller.image.apply``, the code the controller
itself replays with) and publishes ``(image, delta)`` to the broker's ``BrokerMetadata``, as the
in-process controller does in single-node mode (Kafka's MetadataLoader feeding the broker's
publishers).

How it follows: a Watch on the log prefix only says "something was written"; each wake-up then
reads the batches from ``next_offset`` on with one Range and checks they continue the log exactly
(base offset = next offset; a gap or a bad frame re-reads from ``next_offset`` after a pause). A
poll every ``poll_interval_s`` covers a watch that died silently. When etcd cannot be reached the
image simply stays as it is (the broker keeps serving what it knows), the error is logged once per
outage, and the follower resumes from its offset when etcd answers again.

Ownership: the broker's handler loop; ``publish`` runs there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aetcd.utils import prefix_range_end

from controller.etcd_client import EtcdError
from controller.etcd_log_store import OFFSET_DIGITS
from controller.image import MetadataDelta, MetadataImage, apply
from controller.metadata_log import MetadataBatch, MetadataLogCorruptError, decode_batches

log = logging.getLogger(__name__)

Publish = Callable[[MetadataImage, MetadataDelta], None]


class MetadataFollower:
    def __init__(self, client: Any, metadata_prefix: str, cluster_id: str, publish: Publish,
                 poll_interval_s: float = 1.0) -> None:
        self._client = client
        self._log_prefix = f"{metadata_prefix.rstrip('/')}/log/".encode()
        self._publish = publish
        self._poll_interval_s = poll_interval_s
        self.image = MetadataImage(cluster_id=cluster_id)
        self.next_offset = 0
        self._wake = asyncio.Event()
        self._offset_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._outage_logged = False

    def _batch_key(self, offset: int) -> bytes:
        return self._log_prefix + str(offset).zfill(OFFSET_DIGITS).encode()

    async def start(self) -> None:
        """Read the whole committed log (raises ``EtcdError`` if etcd is unreachable), then follow."""
        if not await self.catch_up():
            self._publish(self.image, MetadataDelta())  # the broker gets the cluster id even from an empty log
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow()), loop.create_task(self._watch())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Wait until the image includes every record below ``offset``; False on timeout."""
        if self.next_offset >= offset:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._offset_waiters.append((offset, future))
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self._offset_waiters = [(o, f) for o, f in self._offset_waiters if f is not future]

    async def catch_up(self) -> int:
        """Apply every batch committed after ``next_offset``; returns how many records were applied."""
        rng = await self._client.get_range(self._batch_key(self.next_offset), prefix_range_end(self._log_prefix))
        if not rng:
            return 0
        batches = decode_batches(b"".join(bytes(kv.value) for kv in rng), self.next_offset, -1)
        applied = self._apply(batches)
        return applied

    def _apply(self, batches: list[MetadataBatch]) -> int:
        delta = MetadataDelta()
        applied = 0
        for batch in batches:
            if batch.base_offset != self.next_offset:
                raise MetadataLogCorruptError(
                    f"metadata batch at offset {batch.base_offset} does not follow offset {self.next_offset}")
            for record in batch.records:
                apply(self.image, record, delta)
            self.next_offset = batch.next_offset
            applied += len(batch.records)
        if applied:
            self._publish(self.image, delta)
            for offset, future in self._offset_waiters:
                if self.next_offset >= offset and not future.done():
                    future.set_result(None)
        return applied

    async def _follow(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_interval_s)
            self._wake.clear()
            try:
                await self.catch_up()
                if self._outage_logged:
                    log.info("metadata store reachable again; metadata image at offset %d", self.next_offset)
                    self._outage_logged = False
            except (EtcdError, MetadataLogCorruptError) as exc:
                if not self._outage_logged:
                    log.error("cannot read the cluster metadata from the metadata store (%s); serving the "
                              "image at offset %d until it answers", exc, self.next_offset)
                    self._outage_logged = True
                await asyncio.sleep(self._poll_interval_s)

    async def _watch(self) -> None:
        """Wake the follower whenever a batch key is written (a hint; ``catch_up`` reads the truth)."""
        while True:
            try:
                watch = await self._client.watch_prefix(self._log_prefix)
                try:
                    async for _ in watch:
                        self._wake.set()
                finally:
                    with contextlib.suppress(Exception):
                        await watch.cancel()
            except asyncio.CancelledError:
                raise
            except Exception:  # etcd gone or the watch broken: the poll keeps going, retry later
                pass
            await asyncio.sleep(self._poll_interval_s)
