"""A broker's metadata image in cluster mode: the committed metadata log read from etcd, then followed.

Format read: the batches ``odradek.controller.etcd_log_store`` writes under ``<metadata prefix>/log/`` (key
= base offset, 20 digits; value = one ``metadata_log`` frame) and its snapshot. The follower applies
every batch, in offset order, to its own ``MetadataImage`` (``odradek.controller.image.apply``, the code the
controller itself replays with) and publishes ``(image, delta)`` to the broker's ``BrokerMetadata``,
as the in-process controller does in single-node mode (Kafka's MetadataLoader feeding the broker's
publishers). When its offset is below the newest snapshot's end (a broker starting, or one that was
cut off while the controller snapshotted and deleted the batches it needed) it builds a new image
from the snapshot and the batches after it and publishes that, with the delta between the two
images (``odradek.controller.image_records.image_delta``), so listeners learn every change they missed.

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

from aetcd.rtypes import EventKind

from odradek.controller import metadata_format
from odradek.controller.etcd_client import EtcdError
from odradek.controller.etcd_log_store import EtcdMetadataKeys, read_from
from odradek.controller.image import MetadataDelta, MetadataImage, apply
from odradek.controller.image_records import image_delta, load_snapshot
from odradek.controller.metadata_format import UnsupportedMetadataFormatError
from odradek.controller.metadata_log import MetadataBatch, MetadataLogContents, MetadataLogCorruptError

log = logging.getLogger(__name__)

Publish = Callable[[MetadataImage, MetadataDelta], None]


class MetadataFollower:
    def __init__(self, client: Any, metadata_prefix: str, cluster_id: str, publish: Publish,
                 poll_interval_s: float = 1.0) -> None:
        self._client = client
        self._keys = EtcdMetadataKeys.under(metadata_prefix)
        self._log_prefix = self._keys.log_prefix
        self._publish = publish
        self._poll_interval_s = poll_interval_s
        self.image = MetadataImage(cluster_id=cluster_id)
        self.next_offset = 0
        self._wake = asyncio.Event()
        self._offset_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._outage_logged = False
        self._reading = asyncio.Lock()  # one catch_up at a time: batches are applied exactly once

    async def start(self) -> None:
        """Read the committed snapshot and log (raises ``EtcdError`` if etcd is unreachable), then follow."""
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
        """Apply every batch committed after ``next_offset`` (or load the snapshot that replaced them);
        returns how many records were applied."""
        async with self._reading:
            contents = await read_from(self._client, self._keys, self.next_offset)
            if contents.snapshot is not None:
                return self._replace(contents)
            return self._apply(list(contents.batches))

    def _replace(self, contents: MetadataLogContents) -> int:
        """A new image from the snapshot and the batches after it, published with what changed."""
        snapshot = contents.snapshot
        assert snapshot is not None
        metadata_format.check_readable(snapshot.records)
        for batch in contents.batches:
            metadata_format.check_readable(batch.records)
        image = MetadataImage(cluster_id=self.image.cluster_id)
        load_snapshot(image, snapshot.records, snapshot.end_offset)
        next_offset = snapshot.end_offset
        records = list(snapshot.records)
        for batch in contents.batches:
            next_offset = _apply_batch(image, batch, next_offset)
            records.extend(batch.records)
        log.info("metadata image loaded from the snapshot at offset %d (this broker stood at offset %d), then "
                 "%d batches", snapshot.end_offset, self.next_offset, len(contents.batches))
        delta = image_delta(self.image, image)
        delta.records = records
        self.image, self.next_offset = image, next_offset
        self._published(delta)
        return len(records)

    def _apply(self, batches: list[MetadataBatch]) -> int:
        for batch in batches:
            metadata_format.check_readable(batch.records)
        delta = MetadataDelta()
        applied = 0
        for batch in batches:
            self.next_offset = _apply_batch(self.image, batch, self.next_offset, delta)
            applied += len(batch.records)
        if applied:
            self._published(delta)
        return applied

    def _published(self, delta: MetadataDelta) -> None:
        self._publish(self.image, delta)
        for offset, future in self._offset_waiters:
            if self.next_offset >= offset and not future.done():
                future.set_result(None)

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
            except UnsupportedMetadataFormatError as exc:
                # A newer release raised the format while this broker was not registered (the
                # controller waits for every registered broker): it cannot follow, say so each time.
                log.error("cannot follow the cluster metadata: %s; serving the image at offset %d", exc,
                          self.next_offset)
                await asyncio.sleep(max(self._poll_interval_s, 10.0))
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
                # Puts only: a snapshot deletes thousands of batch keys at once, and a wake-up per
                # deleted key would be work for nothing (the follower reads batches, not deletions).
                watch = await self._client.watch_prefix(self._log_prefix, kind=EventKind.PUT)
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


def _apply_batch(image: MetadataImage, batch: MetadataBatch, next_offset: int,
                 delta: MetadataDelta | None = None) -> int:
    """Apply ``batch``, which must start at ``next_offset``; returns the offset after it."""
    if batch.base_offset != next_offset:
        raise MetadataLogCorruptError(f"metadata batch at offset {batch.base_offset} does not follow offset {next_offset}")
    for record in batch.records:
        apply(image, record, delta)
    return batch.next_offset
