"""The controller this broker process runs: its stores, its lease renewal, its start and stop.

In single-node mode the controller runs inside the broker process on the handler loop (Kafka's
combined mode, ``process.roles=broker,controller``): it takes its epoch-fenced lease from a
``LocalLeaseStore`` in the metadata directory, replays the ``LocalMetadataLogStore`` there, and
publishes each committed image to the broker's ``BrokerMetadata``. Both stores do their file I/O on
the controller's own one-thread executor, not on the broker's IO pool: a lease renewal must never
wait behind log loading or segment work (a renewal late by a TTL loses the lease), and one thread
also keeps the stores' calls in order. The lease is renewed on a timer; losing it makes the
controller refuse writes (NOT_CONTROLLER), which is the fencing a multi-node deployment relies on.
The same timer asks the controller for a snapshot by time (``metadata.log.max.snapshot.interval.ms``).

Nothing on the broker side talks to this object except ``odradek.broker.server`` (life cycle and wiring):
requests go through ``odradek.broker.metadata.controller_client.LocalControllerClient``, metadata comes back through
the publisher. A remote controller replaces this object and that client, not the handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.broker.config.broker_config import BrokerConfig
from odradek.controller.controller import DEFAULT_LEASE_TTL_MS, Controller
from odradek.controller.lease import LocalLeaseStore
from odradek.controller.log_store import LocalMetadataLogStore
from odradek.controller.publisher import MetadataPublisher
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)

LEASE_FILE_NAME = "controller.lease"


class EmbeddedController:
    def __init__(self, config: BrokerConfig, metadata_dir: Path) -> None:
        self.metadata_dir = Path(metadata_dir)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-controller-io")
        self._executor = executor
        self.lease_store = LocalLeaseStore(self.metadata_dir / LEASE_FILE_NAME, executor)
        self.controller = Controller(
            config.node_id,
            self.metadata_dir,
            self.lease_store,
            log_store=LocalMetadataLogStore(self.metadata_dir, executor),
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            delete_topic_enable=config["delete.topic.enable"],
            max_broker_partitions=config["max.broker.partitions"],
            unclean_leader_election_enable=config["unclean.leader.election.enable"],
            snapshot_max_new_record_bytes=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_max_interval_ms=config["metadata.log.max.snapshot.interval.ms"],
        )
        self._renewer: asyncio.Task[None] | None = None

    def add_publisher(self, publisher: MetadataPublisher) -> Callable[[], None]:
        """Send ``publisher`` the current image now and every committed change after it."""
        return self.controller.add_publisher(publisher)

    async def start(self) -> None:
        self.metadata_dir.mkdir(parents=True, exist_ok=True)
        try:
            await self.controller.start()
        except KafkaApiError as exc:
            if exc.code != ErrorCode.NOT_CONTROLLER or self.controller.lease is not None:
                raise
            # On one machine the lease is refused only while another process holds its lock: another
            # broker on the same directory (Kafka: "Failed to acquire lock on file .lock in ...").
            pid = self.lease_store.holder_pid()
            holder = f"process {pid}" if pid is not None else "another process"
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER,
                                f"the data directory {self.metadata_dir.resolve()} is in use by {holder} (another "
                                f"broker holds {self.lease_store.path.name}.lock); stop it or choose another "
                                "log.dirs") from None
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        interval = DEFAULT_LEASE_TTL_MS / 3000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.controller.renew_lease()
            except Exception as exc:
                log.error("controller lease renewal failed; metadata changes are refused: %s", exc)
                return
            try:
                await self.controller.maybe_snapshot()
            except Exception:  # the log keeps its batches; the next tick tries again
                log.exception("metadata snapshot failed")

    async def shutdown(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
        try:
            await self.controller.stop()
            await self.lease_store.close()
        finally:
            self._executor.shutdown(wait=True)
