"""This broker's registration in cluster mode: an ephemeral etcd key under its own session lease.

Value of ``/odradek/<cluster-id>/brokers/<node id>`` (JSON, attached to the broker's lease, so etcd
deletes it when the lease is revoked or lapses)::

    {"node_id": 2, "host": "broker2", "port": 9092, "listener_name": "PLAINTEXT", "rack": null,
     "endpoints": [["PLAINTEXT", "broker2", 9092], ["EXTERNAL", "localhost", 9093]],
     "incarnation_id": "<uuid of this process>", "offline_replicas": [["<topic id hex>", 0]],
     "features": [["odradek.metadata.format", 1, 2], ["metadata.version", 33, 33], ["group.version", 0, 1],
                  ["transaction.version", 0, 1]]}

(host/port/listener_name: the inter-broker listener; endpoints: every advertised listener;
offline_replicas: the replicas it holds in failed log dirs, rewritten by ``report_offline_replicas``;
features: the (feature, min, max) levels this release reads, absent from 0.1.0's registrations, as
odradek.controller.metadata_format says, and the ranges of Kafka's features it supports (odradek.controller.features:
UpdateFeatures finalizes no level a registered broker does not support); "shutting_down": true once a
controlled shutdown began (``announce_shutdown``). Readers ignore keys they do not know, so keys are
only added.)

The controller turns a new or changed key into a RegisterBrokerRecord and a deleted one into the
broker's fencing (its leaderships move to other ISR members). Kafka's equivalents: the KRaft
BrokerRegistration request plus heartbeats (or ZooKeeper's ephemeral /brokers/ids/<id> znode).

- ``register``: grant a lease of ``controller.lease.ttl.ms``, then create the key only if it does
  not exist; an existing key raises ``DuplicateNodeIdError``. ``odradek.broker.cluster.cluster_node`` retries
  for one TTL (a crashed previous run's key lapses with its lease) before refusing the start.
- Renewal runs every TTL/3 on the lease it holds. Only etcd says the lease is gone (a keep-alive
  answering TTL 0): then the broker registers again at once, as the same process (same incarnation
  id), so the controller re-admits it without a new broker epoch. A renewal that cannot reach etcd
  is retried at the next tick, for as long as etcd stays away.
- ``deregister``: revoke the lease (the key goes at once); used by controlled shutdown.

A lapsed registration changes nothing in what the broker serves (Kafka's KRaft brokers likewise keep
leading and following on the last metadata they saw while the controller quorum is away). The
broker cannot tell an etcd outage, in which nobody can change the metadata and every partition is
best kept where it is, from a partition of its own, in which the controller fences it and elects
other leaders; and it does not need to, because safety rests on leader epochs and on ISR changes that
only the controller commits:

- an acks=all write is acknowledged only when the high watermark passes it, and the HW is the
  smallest log end over the ISR the leader holds, which includes every replica the controller may
  elect from: the leader never drops a member before the controller committed that (and counts a
  member it asked to add from the moment it asked, ``Partition.begin_isr_change``);
- a new leader is elected from the committed ISR with a bumped leader epoch; its followers learn
  that epoch and fetch from it instead (a fetch answered by the old leader after that is dropped,
  ``ReplicaFetcher._current``), so the old leader's HW stops where the new leader's log already
  holds everything below it: its acks=all writes time out (REQUEST_TIMED_OUT), never succeed;
- its acks=1 and acks=0 writes are acknowledged and are truncated when it rejoins as a follower
  (OffsetForLeaderEpoch), Kafka's documented semantics for those acks.

Ownership: the broker's handler loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterable
from typing import Any

from odradek.broker.cluster.errors import DuplicateNodeIdError
from odradek.broker.cluster.keys import ClusterKeys
from odradek.broker.metadata.broker_registration import BrokerEndpoint
from odradek.controller import features
from odradek.controller.etcd_client import EtcdError

log = logging.getLogger(__name__)


def encode_registration(node_id: int, endpoint: BrokerEndpoint, incarnation_id: uuid.UUID,
                        offline_replicas: Iterable[tuple[uuid.UUID, int]] = (),
                        shutting_down: bool = False) -> bytes:
    value: dict[str, Any] = {"node_id": node_id, "host": endpoint.host, "port": endpoint.port,
                             "listener_name": endpoint.listener_name, "rack": endpoint.rack,
                             "endpoints": [list(e) for e in endpoint.endpoints],
                             "incarnation_id": str(incarnation_id),
                             "offline_replicas": sorted([t.hex, p] for t, p in offline_replicas),
                             "features": [list(f) for f in features.REGISTERED]}
    if shutting_down:
        value["shutting_down"] = True
    return json.dumps(value).encode()


def decode_registration(value: bytes) -> dict[str, Any]:
    """The JSON value as a dict; ``offline_replicas`` a frozenset of (topic id, partition)."""
    data: dict[str, Any] = json.loads(value)
    data["incarnation_id"] = uuid.UUID(data["incarnation_id"])
    data["endpoints"] = tuple((str(n), str(h), int(p)) for n, h, p in data.get("endpoints") or ())
    data["offline_replicas"] = frozenset((uuid.UUID(hex=t), int(p)) for t, p in data.get("offline_replicas") or ())
    data["features"] = tuple((str(f), int(low), int(high)) for f, low, high in data.get("features") or ())
    data["shutting_down"] = bool(data.get("shutting_down", False))
    return data


class BrokerRegistrationLease:
    def __init__(self, client: Any, keys: ClusterKeys, node_id: int, endpoint: BrokerEndpoint, ttl_ms: int) -> None:
        self._client = client
        self._key = keys.broker_key(node_id)
        self.node_id = node_id
        self.endpoint = endpoint
        self._ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self.incarnation_id = uuid.uuid4()
        self._lease_id: int | None = None
        # Monotonic time of the last renewal etcd accepted; when an outage began (None: no outage).
        self._last_renewal = 0.0
        self._unreachable_since: float | None = None
        # True from the moment etcd said the lease was gone until this process registered again.
        self.lapsed = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # Replicas this broker holds in failed log dirs, (topic id, partition): in the key's value.
        self.offline_replicas: frozenset[tuple[uuid.UUID, int]] = frozenset()
        self.shutting_down = False  # a controlled shutdown began (announce_shutdown)

    async def register(self) -> None:
        """Create the registration key; ``DuplicateNodeIdError`` if another process holds this node.id."""
        granted = await self._client.lease(self._ttl_s)
        lease_id = int(granted.id)
        t = self._client.transactions
        value = encode_registration(self.node_id, self.endpoint, self.incarnation_id, self.offline_replicas,
                                    self.shutting_down)
        try:
            succeeded, responses = await self._client.transaction(
                compare=[t.create(self._key) == 0],
                success=[t.put(self._key, value, lease=lease_id)],
                failure=[t.get(self._key)],
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await self._client.revoke_lease(lease_id)
            raise
        if not succeeded:
            with contextlib.suppress(Exception):
                await self._client.revoke_lease(lease_id)
            existing = decode_registration(bytes(responses[0][0][0])) if responses[0] else {}
            raise DuplicateNodeIdError(
                f"node.id {self.node_id} is already registered in this cluster by a live broker at "
                f"{existing.get('host')}:{existing.get('port')} (incarnation {existing.get('incarnation_id')}); "
                "give each broker its own node.id")
        self._lease_id = lease_id
        self._last_renewal = time.monotonic()

    async def report_offline_replicas(self, replicas: Iterable[tuple[uuid.UUID, int]]) -> None:
        """Rewrite the key with ``replicas`` as this broker's offline ones (a log dir failed; Kafka's
        broker heartbeat carries its offline dirs): the controller takes them out of ISRs and
        leaderships. Without a live key the next registration carries them."""
        self.offline_replicas = frozenset(replicas)
        await self._rewrite()

    async def announce_shutdown(self) -> None:
        """Mark the key "shutting down" (Kafka's BrokerHeartbeat with wantShutDown): the controller
        fences this broker and moves its leaderships at once, without the grace it gives a key that
        vanished (odradek.broker.cluster.etcd_contact), while the broker still serves and renews its lease."""
        self.shutting_down = True
        await self._rewrite()

    async def _rewrite(self) -> None:
        lease_id = self._lease_id
        if lease_id is None:
            return
        t = self._client.transactions
        value = encode_registration(self.node_id, self.endpoint, self.incarnation_id, self.offline_replicas,
                                    self.shutting_down)
        await self._client.transaction(compare=[t.create(self._key) != 0],
                                       success=[t.put(self._key, value, lease=lease_id)], failure=[])

    def start_renewing(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        interval = self._ttl_s / 3
        while not self._stopping:
            await asyncio.sleep(interval)
            if self._stopping:
                return
            try:
                if self._lease_id is not None and not await self._renew():
                    if not self.lapsed:
                        log.warning("broker %d: its registration lapsed in the metadata store; it keeps "
                                    "serving on the metadata it has and registers again", self.node_id)
                    self._lease_id = None
                    self.lapsed = True
                if self._lease_id is None:
                    await self.register()
                    self.lapsed = False
                    log.info("broker %d registered again (incarnation %s)", self.node_id, self.incarnation_id)
                self._reachable()
            except DuplicateNodeIdError as exc:
                # Our old key (lapsed lease) may linger for a moment, or someone took our id.
                log.error("broker %d cannot register again yet: %s", self.node_id, exc)
            except (EtcdError, OSError) as exc:
                self._unreachable(exc)

    async def _renew(self) -> bool:
        """One keep-alive of the held lease: False when etcd says it is gone (revoked or lapsed)."""
        assert self._lease_id is not None
        reply = await self._client.refresh_lease(self._lease_id)
        if reply is None or int(reply.TTL) <= 0:
            return False
        self._last_renewal = time.monotonic()
        return True

    def _unreachable(self, exc: BaseException) -> None:
        """One line when an outage begins, one when the lease has certainly lapsed by this clock;
        the lease is kept: only etcd's answer, when it comes, says whether it is gone."""
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.error("broker %d cannot renew its registration in the metadata store (%s); it keeps "
                      "serving on the metadata it has", self.node_id, str(exc) or type(exc).__name__)
        elif not self.lapsed and self._lease_id is not None and now - self._last_renewal >= self._ttl_s:
            self.lapsed = True
            log.error("broker %d: no renewal for %.0f s, its registration has lapsed in the metadata store; "
                      "it keeps serving on the metadata it has and registers again when etcd answers",
                      self.node_id, now - self._last_renewal)

    def _reachable(self) -> None:
        if self._unreachable_since is not None:
            log.info("broker %d reaches the metadata store again after %.1f s", self.node_id,
                     time.monotonic() - self._unreachable_since)
            self._unreachable_since = None

    async def deregister(self) -> None:
        """Revoke the lease: the key disappears now and the controller moves this broker's leaderships."""
        self._stopping = True
        lease_id, self._lease_id = self._lease_id, None
        if lease_id is not None:
            with contextlib.suppress(Exception):
                await self._client.revoke_lease(lease_id)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
