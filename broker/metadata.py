"""The broker's side of cluster metadata: the embedded controller and what handlers read from it.

In single-node mode the controller runs inside the broker process on the handler loop: it takes
its epoch-fenced lease from a lease store in the metadata directory (``metadata.log.dir``, else the
first of ``log.dirs``, as in KRaft), replays the metadata log, and this broker registers with its
advertised endpoint once its sockets are bound. Handlers read ``image`` (topics, partitions,
leaders, epochs, topic ids) and send changes through ``controller``; nothing else mutates
metadata. The lease is renewed on a timer; losing it makes the controller refuse writes
(NOT_CONTROLLER), which is the fencing a multi-node deployment relies on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from broker.topic_metadata_cache import TopicMetadataCache
from controller.controller import DEFAULT_LEASE_TTL_MS, Controller
from controller.image import BrokerRegistration, MetadataDelta, MetadataImage
from controller.lease import LocalLeaseStore
from protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger(__name__)


class BrokerMetadata:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.config = config
        metadata_dir = config.get("metadata.log.dir") or config.log_dirs[0]
        self.metadata_dir = Path(metadata_dir)
        self.lease_store = LocalLeaseStore(self.metadata_dir / "controller.lease")
        self.controller = Controller(
            config.node_id,
            self.metadata_dir,
            self.lease_store,
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            delete_topic_enable=config["delete.topic.enable"],
            max_broker_partitions=config["max.broker.partitions"],
        )
        self._renewer: asyncio.Task | None = None
        self.advertised: list[BrokerRegistration] = []
        self.topic_metadata_cache = TopicMetadataCache()

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def subscribe(self, callback: Callable[[MetadataDelta], None]) -> Callable[[], None]:
        """Call ``callback(delta)`` after every committed metadata change; returns the unsubscribe."""
        return self.controller.subscribe(callback)

    @property
    def cluster_id(self) -> str:
        return self.controller.image.cluster_id

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

    async def on_listening(self, bound_ports: dict[str, int]) -> None:
        """Register this broker's advertised endpoint (a configured port 0 becomes the bound one)."""
        listeners = self.config.advertised_listeners
        if not listeners:
            return
        first = listeners[0]
        port = first.port or bound_ports.get(first.name, 0)
        await self.controller.register_broker(self.config.node_id, first.host, port, self.config.get("broker.rack"),
                                              listener_name=first.name)

    async def _renew_forever(self) -> None:
        interval = DEFAULT_LEASE_TTL_MS / 3000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.controller.renew_lease()
            except Exception as exc:
                log.error("controller lease renewal failed; metadata changes are refused: %s", exc)
                return

    async def shutdown(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
        await self.controller.stop()
        self.lease_store.close()
