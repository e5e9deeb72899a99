"""``RehashMigrations``: steps 2-4 of broker/coordinator/rehash.py for the partitions one coordinator
(group or transaction) leads here: the SWITCHED marker, the copy of the moved ids' state from the
twin partition, the tombstones of the foreign records once the twin copied them.

One task per partition, started when its load ends (``on_loaded``, given the load's
``LoadFilter``) and cancelled when it is unloaded. Its writes go through the coordinator runtime
(serialized with the partition's other writes, applied once durable). While the copy is not done
``blocks(partition, id)`` is True for the ids that moved into the partition: the coordinator
answers them COORDINATOR_LOAD_IN_PROGRESS. The twin is read incrementally (a ``TwinScan`` kept
across reads) and polled with a growing pause (20 ms to 2 s) while its leader has not switched,
a transactional offset commit on it is still open, or it cannot be read (no leader, unreachable);
a wait of each kind that lasts 5 s is logged at INFO, so an operator sees what a partition waits for.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from odradek.broker.coordinator.rehash import (
    LoadFilter,
    TwinScan,
    migrated_record,
    moved,
    switched_record,
    twin_partition,
)
from odradek.broker.coordinator.runtime import CoordinatorResult, CoordinatorRuntime, KeyValue
from odradek.broker.coordinator.twin_reader import TwinReader
from odradek.broker.network.inter_broker_client import NodeUnavailableError
from odradek.protocol.errors import KafkaApiError
from odradek.protocol.records import iter_batches

log = logging.getLogger(__name__)


FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 2.0
COPY_BATCH_BYTES = 512 * 1024  # one coordinator batch of copied records at most about this big
REPORT_WAITS_AFTER_S = 5.0


class Installer(Protocol):
    def __call__(self, partition: int, records: list[KeyValue], last_offset: int, source_epoch: int) -> None:
        """Make the copied records (durable, the last one at ``last_offset``) live state of ``partition``;
        ``source_epoch``: the twin's leader epoch at its SWITCHED marker (the MIGRATED marker's)."""


class RehashMigrations:
    def __init__(self, runtime: CoordinatorRuntime[Any], reader: TwinReader, num_partitions: Callable[[], int],
                 partition_of: Callable[[str], int], key_id: Callable[[bytes], str | None],
                 leader_epoch: Callable[[int], int], install: Installer) -> None:
        self.runtime = runtime
        self.topic = runtime.topic
        self.reader = reader
        self.num_partitions = num_partitions
        self.partition_of = partition_of
        self.key_id = key_id
        self.leader_epoch = leader_epoch
        self.install = install
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._copying: set[int] = set()  # partitions whose moved ids wait for the copy

    @property
    def busy(self) -> bool:
        """Some partition still has a marker, a copy or tombstones to write."""
        return bool(self._tasks)

    def blocks(self, partition: int, key: str) -> bool:
        """``key`` (which belongs to ``partition``) moved into it and its state is not here yet."""
        return partition in self._copying and moved(key, self.num_partitions(), partition)

    def on_loaded(self, partition: int, loaded: LoadFilter) -> None:
        """The partition's load ended (it turns active right after): start what it still needs."""
        n = self.num_partitions()
        twin = twin_partition(partition, n)
        if twin == partition:
            return  # no id ever moved into or out of it: no marker is read or needed
        markers = loaded.markers
        foreign = loaded.live_foreign_keys()
        copy = not markers.migrated
        if markers.switched and not copy and not foreign:
            return
        self.on_unloaded(partition)  # a task of an earlier load, if its unload was missed
        if copy:
            self._copying.add(partition)
        task = asyncio.get_running_loop().create_task(
            self._run(partition, twin, n, not markers.switched, copy, foreign))
        self._tasks[partition] = task
        task.add_done_callback(functools.partial(self._done, partition))

    def on_unloaded(self, partition: int) -> None:
        task = self._tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self._copying.discard(partition)

    def shutdown(self) -> None:
        for partition in list(self._tasks):
            self.on_unloaded(partition)

    def _done(self, partition: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(partition) is task:
            del self._tasks[partition]
        if not task.cancelled() and task.exception() is not None:
            log.error("moving state into %s-%d failed", self.topic, partition, exc_info=task.exception())

    async def _run(self, partition: int, twin: int, n: int, switch: bool, copy: bool, foreign: list[bytes]) -> None:
        if switch:
            epoch = self.leader_epoch(partition)
            await self._write(partition, [switched_record(epoch)], "write the SWITCHED marker")
        if not copy and not foreign:
            return
        scan = self._new_scan(partition)
        pause = FIRST_PAUSE_S
        reported: set[str] = set()
        began = time.monotonic()

        def waiting(why: str, detail: str) -> None:
            # Only a wait that lasts: at a start every partition waits a moment for its twin's load.
            if why not in reported and time.monotonic() - began >= REPORT_WAITS_AFTER_S:
                reported.add(why)
                log.info("%s-%d waits for %s-%d: %s", self.topic, partition, self.topic, twin, detail)

        while copy or foreign:
            try:
                scan = await self._read_twin(twin, scan, partition)
            except (KafkaApiError, NodeUnavailableError) as exc:
                waiting("read", f"cannot read it now ({exc}); retrying")
            except Exception:
                # Unreadable records: the moved ids stay unserved (never served without their
                # state) and the partition's other ids are unaffected; said once, retried.
                if "error" not in reported:
                    reported.add("error")
                    log.exception("%s-%d cannot read %s-%d; retrying", self.topic, partition, self.topic, twin)
            else:
                if copy and not scan.markers.switched:
                    waiting("switched", "its leader does not run this release yet (the ids that moved from "
                                        "there are served there until it does)")
                elif copy and (open_txns := scan.open_transactions()):
                    waiting("txn", f"open transactions of producers {sorted(open_txns)} hold offsets of groups "
                                   "that moved here; their markers end them")
                elif copy:
                    await self._copy(partition, twin, n, scan)
                    copy = False
                    continue
                if foreign and scan.markers.migrated and scan.markers.migrated_from == partition:
                    await self._write(partition, [(k, None) for k in foreign],
                                      f"tombstone the {len(foreign)} records {self.topic}-{twin} took over")
                    log.info("%s-%d: removed the %d records of ids that belong to %s-%d now", self.topic, partition,
                             len(foreign), self.topic, twin)
                    foreign = []
                    continue
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)

    def _new_scan(self, partition: int) -> TwinScan:
        def belongs(key: bytes) -> bool:
            owner = self.key_id(key)
            return owner is not None and self.partition_of(owner) == partition

        return TwinScan(belongs)

    async def _read_twin(self, twin: int, scan: TwinScan, partition: int) -> TwinScan:
        """Feed ``scan`` everything below the twin's high watermark from where it stopped."""
        while True:
            data, start = await self.reader.read(self.topic, twin, scan.next_offset)
            if start > scan.next_offset:
                scan = self._new_scan(partition)  # records went (retention): read it all again
                scan.next_offset = start
                continue
            if not data:
                return scan
            for batch in iter_batches(data):
                scan.feed(batch)
            await asyncio.sleep(0)

    async def _copy(self, partition: int, twin: int, n: int, scan: TwinScan) -> None:
        records = scan.records()
        chunks: list[list[KeyValue]] = [[]]
        size = 0
        for key, value in records:
            if size >= COPY_BATCH_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append((key, value))
            size += len(key) + len(value or b"")
        for chunk in chunks[:-1]:
            await self._write(partition, chunk, f"copy {len(chunk)} records from {self.topic}-{twin}")
        source_epoch = scan.markers.switched_epoch

        def installed(last_offset: int) -> None:
            self.install(partition, records, last_offset, source_epoch)
            self._copying.discard(partition)

        last = [*chunks[-1], migrated_record(twin, n, source_epoch)]
        await self._write(partition, last, f"copy {len(last) - 1} records from {self.topic}-{twin}",
                          apply_at=installed)
        source = self.reader.last_source.get((self.topic, twin), -1)
        log.log(logging.INFO if records else logging.DEBUG, "%s-%d took over %d records of the ids that moved "
                "here from %s-%d (read from %s)", self.topic, partition, len(records), self.topic, twin,
                "this broker" if source == self.reader.node_id else f"broker {source}")

    async def _write(self, partition: int, records: list[KeyValue], what: str,
                     apply_at: Callable[[int], None] | None = None) -> None:
        """One coordinator write of ``records``; retried until it is durable (the partition's
        unload cancels the task, and with it the retries)."""
        pause = FIRST_PAUSE_S
        while True:
            try:
                await self.runtime.write(partition, lambda _shard: CoordinatorResult(records, None, apply_at=apply_at))
                return
            except KafkaApiError as exc:
                log.info("%s-%d: could not %s (%s); retrying", self.topic, partition, what, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)
