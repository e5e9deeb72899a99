"""One broker's cluster-mode parts wired together, in start-up order, for ``odradek.broker.server``.

Start (``start``, before the replica manager; ``register`` once the sockets are bound):
1. agree on the cluster id with etcd (``cluster_identity``); while etcd cannot be reached, log one
   clear line per attempt and retry with exponential backoff (0.5 s doubling to 10 s), until it
   answers or the broker is asked to stop - never a crash;
2. read the committed metadata log into the broker's image and follow it (``metadata_follower``);
3. start the controller candidate (``controller_candidate``);
4. ``register``: this broker's registration key under its session lease (``registration``); a
   duplicate node.id refuses the start. Then wait until the controller has put this broker in the
   image, so a client that connects the moment the port opens finds it in Metadata.

Controlled shutdown (``controlled_shutdown``, when ``controlled.shutdown.enable``): the broker
marks its registration "shutting down", so the controller - on this node or another - fences it
and moves its leaderships to other ISR members at once instead of after a lease TTL; the broker
waits until its image shows it leads nothing (bounded), then deletes its registration (revoking its
lease) and stops serving. The candidate stops last and
releases the controller lease, so the next controller need not wait for a TTL either.

Writes through ``controller_client`` wait until this broker's image has caught up with them, so a
handler that created a topic finds it in ``metadata.image`` right after, as in single-node mode.

Once running, an etcd outage of any length stops nothing on the data plane: the image stays as it
is (``metadata_follower``), so leaders keep leading and followers keep following; the registration
keeps renewing and, once etcd answers that its lease lapsed, registers again as the same process
(``registration``, which says why serving on is safe); the controller role is given up until etcd
answers (``controller_candidate``, which also keeps the brokers whose keys etcd dropped in one
sweep from being fenced); controller calls (ISR changes, elections, topic and config changes)
wait, end in Kafka's retriable errors (REQUEST_TIMED_OUT, NOT_CONTROLLER) and are retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from odradek.broker.cluster.cluster_identity import agree_cluster_id
from odradek.broker.cluster.controller_candidate import ControllerCandidate, controller_factory
from odradek.broker.cluster.errors import DuplicateNodeIdError, StartAborted
from odradek.broker.cluster.keys import ClusterKeys
from odradek.broker.cluster.metadata_follower import MetadataFollower
from odradek.broker.cluster.registration import BrokerRegistrationLease
from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.metadata.broker_registration import BrokerEndpoint
from odradek.broker.metadata.controller_client import ControllerClient
from odradek.broker.metadata.forwarding_controller_client import RoutingControllerClient
from odradek.controller.etcd_client import EtcdError, etcd_client
from odradek.controller.image import MetadataImage

log = logging.getLogger(__name__)

class ClusterNode:
    def __init__(self, config: BrokerConfig, metadata: BrokerMetadata, stop_requested: Callable[[], bool]) -> None:
        self.config = config
        self.node_id = config.node_id
        self._metadata = metadata
        self._stop_requested = stop_requested
        # The etcd members as configured (etcd://h:p[,h:p]); the etcd client parses the list itself.
        self.endpoint: str = config["metadata.store"]
        self._client = etcd_client(self.endpoint)
        self.lease_ttl_ms: int = config["controller.lease.ttl.ms"]
        self.keys: ClusterKeys | None = None
        self.follower: MetadataFollower | None = None
        self.candidate: ControllerCandidate | None = None
        self.registration: BrokerRegistrationLease | None = None
        self._reports: set[asyncio.Task[None]] = set()
        self._offline_replicas: frozenset[tuple[uuid.UUID, int]] = frozenset()
        self._router: RoutingControllerClient | None = None

    async def _retrying(self, what: str, attempt: Callable[[], Any]) -> Any:
        """Run ``attempt`` until etcd answers; one ERROR line per failure, backoff 0.5 s -> 10 s."""
        delay = 0.5
        while True:
            if self._stop_requested():
                raise StartAborted(f"stopped while waiting for the metadata store to {what}")
            try:
                return await attempt()
            except (EtcdError, OSError) as exc:
                log.error("cannot %s: metadata store %s unreachable (%s); retrying in %.1f s", what,
                          self.config["metadata.store"], exc or type(exc).__name__, delay)
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and not self._stop_requested():
                await asyncio.sleep(0.1)
            delay = min(delay * 2, 10.0)

    async def start(self) -> None:
        metadata_dir = self._metadata.metadata_dir
        metadata_dir.mkdir(parents=True, exist_ok=True)
        cluster_id: str = await self._retrying(
            "agree on the cluster id",
            lambda: agree_cluster_id(self._client, metadata_dir, self.node_id, self.config.get("cluster.id")))
        self.keys = ClusterKeys(cluster_id)
        follower = MetadataFollower(self._client, self.keys.metadata_prefix, cluster_id, self._metadata.publish)
        await self._retrying("read the cluster metadata", follower.start)
        self.follower = follower
        self.candidate = ControllerCandidate(self.node_id, self.endpoint, self.keys, self.lease_ttl_ms,
                                             controller_factory(self.node_id, metadata_dir, self.config),
                                             self._client)
        self.candidate.start()
        log.info("node %d joined cluster %s (metadata store %s, metadata at offset %d)", self.node_id,
                 cluster_id, self.config["metadata.store"], follower.next_offset)

    async def register(self, endpoint: BrokerEndpoint, wait_s: float = 30.0) -> None:
        assert self.keys is not None
        registration = BrokerRegistrationLease(self._client, self.keys, self.node_id, endpoint, self.lease_ttl_ms)
        registration.offline_replicas = self._offline_replicas
        await self._retrying("register this broker", lambda: self._register_waiting_for_a_dead_twin(registration))
        self.registration = registration
        registration.start_renewing()
        deadline = time.monotonic() + wait_s
        while not self._registered_in_image() and not self._stop_requested():
            if time.monotonic() >= deadline:
                log.warning("broker %d is registered but no controller has admitted it after %.0f s; "
                            "serving anyway", self.node_id, wait_s)
                return
            await asyncio.sleep(0.05)

    async def _register_waiting_for_a_dead_twin(self, registration: BrokerRegistrationLease) -> None:
        """Register; while this node.id's key is held, retry for one lease TTL (plus a second).

        After a crash (SIGKILL, power loss) the old process's key lives until its lease lapses, at most
        one TTL: the restart waits it out, as Kafka's broker retries a registration refused while its
        old session is alive. A key still held after that is renewed by a live process: a duplicate
        node.id, refused (``DuplicateNodeIdError``)."""
        deadline = time.monotonic() + self.lease_ttl_ms / 1000 + 1.0
        logged = False
        while True:
            try:
                await registration.register()
                return
            except DuplicateNodeIdError:
                if time.monotonic() >= deadline or self._stop_requested():
                    raise
                if not logged:
                    log.warning("node.id %d is still registered (a previous run of this broker that has not "
                                "expired yet, or another live broker); waiting up to %.0f s", self.node_id,
                                self.lease_ttl_ms / 1000 + 1.0)
                    logged = True
                await asyncio.sleep(0.25)

    def report_offline_replicas(self, replicas: Sequence[tuple[uuid.UUID, int]]) -> None:
        """A log dir failed: put the replicas this broker holds in failed dirs into its registration
        (retried until etcd takes it; a later registration carries them anyway)."""
        self._offline_replicas = frozenset(replicas)
        registration = self.registration
        if registration is None:
            return  # ``register`` puts them in the first registration

        async def report() -> None:
            for attempt in range(20):
                try:
                    await registration.report_offline_replicas(replicas)
                    return
                except (EtcdError, OSError) as exc:
                    log.warning("broker %d cannot report its offline replicas yet (%s)", self.node_id, exc)
                    await asyncio.sleep(min(0.2 * (attempt + 1), 2.0))

        task = asyncio.get_running_loop().create_task(report())
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    def _registered_in_image(self) -> bool:
        assert self.registration is not None
        b = self._metadata.image.brokers.get(self.node_id)
        return b is not None and not b.fenced and b.incarnation_id == self.registration.incarnation_id

    def leaderships(self) -> list[tuple[str, int]]:
        image = self._metadata.image
        return [(t.name, p.partition) for t in image.topics.values() for p in t.partitions.values()
                if p.leader == self.node_id]

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Announce the shutdown in the registration (the controller moves this broker's leaderships at
        once, as Kafka's does on a heartbeat that wants to shut down), wait until this broker leads
        nothing, then deregister; False if leaderships remain at the timeout. If the announcement
        cannot be written (etcd away), deregistering still moves them, after the controller's
        fencing grace."""
        registration = self.registration
        if registration is None:
            return True
        try:
            await registration.announce_shutdown()
        except (EtcdError, OSError) as exc:
            log.warning("controlled shutdown of broker %d: cannot announce it in the metadata store (%s); "
                        "deregistering", self.node_id, exc)
            await registration.stop()
            await registration.deregister()
        deadline = time.monotonic() + timeout_s
        moved = True
        while self.leaderships():
            if time.monotonic() >= deadline:
                remaining = self.leaderships()
                log.warning("controlled shutdown of broker %d: %d partition(s) still led after %.0f s "
                            "(no other live replica in their ISR?)", self.node_id, len(remaining), timeout_s)
                moved = False
                break
            await asyncio.sleep(0.05)
        await registration.stop()
        await registration.deregister()
        if moved:
            log.info("controlled shutdown of broker %d: no leaderships left", self.node_id)
        return moved

    async def stop(self) -> None:
        if self._router is not None:
            await self._router.close()
        if self.registration is not None:
            await self.registration.stop()
        if self.candidate is not None:
            await self.candidate.stop()
        if self.follower is not None:
            await self.follower.stop()
        try:
            await self._client.close()
        except Exception:
            pass

    @property
    def etcd(self) -> Any:
        """The etcd client this node's broker parts share (registration, follower, producer ids)."""
        return self._client

    # -- the controller, as the broker's ControllerClient reaches it -----------------------------

    def local_controller(self) -> Any:
        return None if self.candidate is None else self.candidate.active_controller

    def image(self) -> MetadataImage:
        return self._metadata.image

    async def sync_metadata(self, timeout_s: float = 5.0) -> None:
        """Read your writes: after a controller call returned, make this broker's image hold what it
        committed - wait for the follower to pass the local controller's offset, or (the controller
        being elsewhere, which committed before it answered) read the log once more now."""
        follower = self.follower
        if follower is None:
            return
        controller = self.local_controller()
        try:
            if controller is not None:
                await follower.wait_for_offset(controller.committed_offset, timeout_s)
            else:
                await asyncio.wait_for(follower.catch_up(), timeout_s)
        except (EtcdError, OSError, TimeoutError) as exc:
            log.warning("metadata not re-read after a controller call: %s", exc)

    def controller_client(self) -> ControllerClient:
        """The broker's door to the controller: local when this node leads, else forwarded (KIP-590)."""
        router = RoutingControllerClient(self.node_id, self.local_controller, self.image)
        self._router = router
        return ReadYourWritesControllerClient(router, self)


class ReadYourWritesControllerClient:
    """A ``ControllerClient`` whose calls return once this broker's image holds their effect (a handler
    that created a topic finds it in ``metadata.image`` right after, as on a single node)."""

    def __init__(self, inner: ControllerClient, node: ClusterNode) -> None:
        self._inner = inner
        self._node = node

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return await method(*args, **kwargs)
            finally:
                await self._node.sync_metadata()

        return call


__all__: Sequence[str] = ["ClusterNode", "ReadYourWritesControllerClient"]
