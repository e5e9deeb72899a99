"""The controller candidate every node runs in cluster mode: campaign, lead, reconcile brokers, step down.

Kafka's ZooKeeper-era controller is the model, etcd the store (issue 12's design):

1. **Campaign.** While another node holds the controller lease (``/odradek/<id>/controller``), check
   again every ``campaign_interval_s``. When it is free, ``Controller.start`` takes it with an etcd
   lease of ``controller.lease.ttl.ms`` and a compare-and-swap bump of the controller epoch, replays
   the metadata log from etcd, and appends a LeaderChangeRecord with its epoch.
2. **Lead.** Every metadata write is one etcd transaction guarded by "the leader key still names me
   at my epoch" (``EtcdMetadataLogStore``'s fence), so a deposed controller - cut off from etcd,
   paused past its TTL - cannot write, even before a successor wrote anything. The lease is renewed
   every TTL/3; a failed renewal, or a write refused by the fence, stops the controller at once and
   the node campaigns again.
3. **Reconcile brokers.** Every ``reconcile_interval_s`` the active controller lists the registration
   keys (``/odradek/<id>/brokers/``, each under its broker's session lease) and makes the image
   agree: a new broker or a new incarnation → RegisterBrokerRecord (and leaders for partitions that
   had none); a registration that is gone → the broker is fenced: it leaves every ISR (never emptying
   one) and its leaderships move to the next live ISR member with a bumped leader epoch
   (``Controller.fence_broker``) - once this node has been in unbroken contact with etcd for the
   fencing grace (``odradek.broker.cluster.etcd_contact``: a key may vanish because etcd swept every lease
   when it came back from an outage, and a live broker registers again, as the same incarnation,
   within it; a broker that died is fenced at once when etcd was there all along, else within a
   lease TTL plus the grace after etcd returns); the replicas a registration lists as offline (in a
   failed log dir) leave ISRs and leaderships and are shown offline until it no longer lists them
   (``Controller.set_offline_replicas``). The same loop asks the controller for a snapshot by time
   (``Controller.maybe_snapshot``; by size it snapshots after a commit on its own).

Each term uses a fresh ``Controller`` (it replays the log), so no state of an old term leaks into a
new one. While etcd is away nobody leads: the lease cannot be renewed, so the controller steps down
and the node campaigns again when etcd answers; metadata changes wait for that (the brokers' data
plane does not, see odradek.broker.cluster.registration). Ownership: the broker's handler loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aetcd.utils import prefix_range_end

from odradek.broker.cluster.etcd_contact import EtcdContact
from odradek.broker.cluster.keys import ClusterKeys
from odradek.broker.cluster.registration import decode_registration
from odradek.controller.controller import Controller
from odradek.controller.etcd_client import EtcdError
from odradek.controller.etcd_lease import LEADER_KEY, EtcdLeaseStore
from odradek.controller.etcd_log_store import EtcdMetadataLogStore
from odradek.controller.lease import LeaseLostError
from odradek.controller.metadata_log import StaleControllerEpochError
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)

ControllerFactory = Callable[[EtcdLeaseStore, EtcdMetadataLogStore], Controller]

# The least fencing grace (see ControllerCandidate.fencing_grace_s), whatever the lease TTL.
FENCING_GRACE_MIN_S = 3.0


class ControllerCandidate:
    def __init__(self, node_id: int, endpoint: str, keys: ClusterKeys, lease_ttl_ms: int,
                 make_controller: ControllerFactory, registrations_client: Any,
                 campaign_interval_s: float = 0.5, reconcile_interval_s: float = 0.25) -> None:
        self.node_id = node_id
        self._endpoint = endpoint
        self._keys = keys
        self._lease_ttl_ms = lease_ttl_ms
        self._make_controller = make_controller
        self._client = registrations_client
        self._campaign_interval_s = campaign_interval_s
        self._reconcile_interval_s = reconcile_interval_s
        self.controller: Controller | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.terms = 0  # how many times this node became the controller
        # Per term: the offline replicas each broker reported that the image already reflects.
        self._synced_offline: dict[int, frozenset[tuple[Any, int]]] = {}
        self._unreachable = False
        # Evidence that a missing registration means a missing broker (see etcd_contact): an answer
        # that took half a TTL counts as an interruption (a pause that short lapses no live lease).
        ttl_s = lease_ttl_ms / 1000
        self.contact = EtcdContact(slow_call_s=ttl_s / 2)
        # A broker whose key is gone is fenced once contact has been unbroken this long: a lease TTL
        # (by which a live broker's renewal, every TTL/3, has met etcd again and registered anew),
        # and at least FENCING_GRACE_MIN_S for the brokers' connections to etcd to come back.
        self.fencing_grace_s = max(ttl_s, FENCING_GRACE_MIN_S)
        self._awaiting_reregistration: set[int] = set()

    @property
    def active_controller(self) -> Controller | None:
        """The controller this node runs, if it is the active one right now."""
        c = self.controller
        return c if c is not None and c.is_active else None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop campaigning; an active controller releases its lease (a successor need not wait a TTL)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._step_down("shutting down")

    async def _run(self) -> None:
        while not self._stopping:
            try:
                won = await self._campaign()
                self._unreachable = False
                if won:
                    await self._lead()
            except asyncio.CancelledError:
                raise
            except (EtcdError, OSError) as exc:
                self.contact.failed()
                if not self._unreachable:  # once per outage, not every campaign_interval_s
                    log.warning("controller candidate %d cannot reach the metadata store: %s", self.node_id, exc)
                    self._unreachable = True
            except Exception:
                log.exception("controller candidate %d: unexpected error; campaigning again", self.node_id)
                await self._step_down("unexpected error")
            await asyncio.sleep(self._campaign_interval_s)

    def _stores(self) -> tuple[EtcdLeaseStore, EtcdMetadataLogStore]:
        lease_store = EtcdLeaseStore(self._endpoint, self._keys.prefix)
        log_store = EtcdMetadataLogStore(self._endpoint, self._keys.metadata_prefix,
                                         fence=lease_store.fence(self.node_id))
        return lease_store, log_store

    async def _campaign(self) -> bool:
        """One attempt at the lease; True when this node is now the active controller."""
        # While a controller holds the lease, one Get on the shared client is the whole check; the
        # stores (each with its own connection) are built only when the lease looks free.
        sent_at = self.contact.clock()
        held = await self._client.get(f"{self._keys.prefix}/{LEADER_KEY}".encode()) is not None
        self.contact.answered(sent_at)
        if held:
            return False
        lease_store, log_store = self._stores()
        try:
            controller = self._make_controller(lease_store, log_store)
            await controller.start()
        except KafkaApiError as exc:
            await _close_quietly(lease_store, log_store)
            if exc.code != ErrorCode.NOT_CONTROLLER:
                raise
            return False  # someone else won the race
        except (EtcdError, OSError, StaleControllerEpochError) as exc:
            await _close_quietly(lease_store, log_store)
            log.warning("controller candidate %d cannot campaign: %s", self.node_id, exc)
            return False
        self.controller = controller
        self._lease_store = lease_store
        self.terms += 1
        log.info("node %d is the active controller (epoch %d)", self.node_id, controller.controller_epoch)
        return True

    async def _lead(self) -> None:
        controller = self.controller
        assert controller is not None
        self._synced_offline = {}  # a new term checks every broker's once (a stale mark is cleared)
        self._awaiting_reregistration = set()
        loop = asyncio.get_running_loop()
        renew_every = max(0.2, self._lease_ttl_ms / 3000)
        next_renewal = loop.time() + renew_every
        rebalance_every = controller.leader_imbalance_check_interval_s()
        next_rebalance = loop.time() + rebalance_every
        while not self._stopping and controller.is_active:
            try:
                await self._reconcile_brokers(controller)
                if loop.time() >= next_renewal:
                    await controller.renew_lease()
                    next_renewal = loop.time() + renew_every
                if rebalance_every > 0 and loop.time() >= next_rebalance:
                    # Kafka's auto.leader.rebalance.enable: leadership back to preferred replicas.
                    next_rebalance = loop.time() + rebalance_every
                    await controller.rebalance_leaders()
                await controller.maybe_raise_metadata_format()  # once every broker runs a newer release
                await controller.maybe_snapshot()  # metadata.log.max.snapshot.interval.ms
            except (LeaseLostError, StaleControllerEpochError) as exc:
                await self._step_down(f"lost the controller lease: {exc}")
                return
            except KafkaApiError as exc:
                if exc.code == ErrorCode.NOT_CONTROLLER:
                    await self._step_down(f"no longer the controller: {exc}")
                    return
                log.warning("controller %d: reconciling brokers failed: %s", self.node_id, exc)
            except (EtcdError, OSError) as exc:
                self.contact.failed()
                log.warning("controller %d cannot reach the metadata store: %s", self.node_id, exc)
            await asyncio.sleep(self._reconcile_interval_s)
        await self._step_down("no longer active (lease lost or a write was fenced)")

    async def _reconcile_brokers(self, controller: Controller) -> None:
        sent_at = self.contact.clock()
        rng = await self._client.get_range(self._keys.brokers_prefix, prefix_range_end(self._keys.brokers_prefix))
        self.contact.answered(sent_at)
        live: dict[int, dict[str, Any]] = {}
        for kv in rng:
            try:
                reg = decode_registration(bytes(kv.value))
                live[int(reg["node_id"])] = reg
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed broker registration %r", bytes(kv.key))
        image = controller.image
        for node_id, reg in sorted(live.items()):
            known = image.brokers.get(node_id)
            # Features too: a record a 0.1.0 controller wrote lacks them though the broker sent them,
            # and the metadata format can only move up once the image knows every broker reads it.
            same = (known is not None and known.incarnation_id == reg["incarnation_id"]
                    and known.host == reg["host"] and known.port == reg["port"]
                    and known.endpoints == reg["endpoints"] and known.features == reg["features"])
            if not same or known is None:
                await controller.register_broker(node_id, reg["host"], int(reg["port"]), reg.get("rack"),
                                                 listener_name=reg.get("listener_name") or "PLAINTEXT",
                                                 incarnation_id=reg["incarnation_id"], endpoints=reg["endpoints"],
                                                 features=reg["features"])
                log.info("controller %d: broker %d registered at %s:%s", self.node_id, node_id, reg["host"],
                         reg["port"])
            elif reg["shutting_down"]:
                if not known.fenced:
                    # A controlled shutdown (Kafka's wantShutDown): its leaderships move now.
                    log.info("controller %d: broker %d is shutting down; fencing it and moving its "
                             "leaderships", self.node_id, node_id)
                    await controller.fence_broker(node_id)
            elif known.fenced:
                await controller.unfence_broker(node_id)
                if not controller.image.brokers[node_id].fenced:
                    log.info("controller %d: broker %d unfenced", self.node_id, node_id)
            elif node_id in self._awaiting_reregistration:
                log.info("controller %d: broker %d registered again as the same process within the fencing "
                         "grace; it keeps its leaderships and ISR memberships", self.node_id, node_id)
            self._awaiting_reregistration.discard(node_id)
        for node_id, reg in sorted(live.items()):
            offline = reg["offline_replicas"]
            if self._synced_offline.get(node_id) != offline:
                if offline:
                    log.warning("controller %d: broker %d reports %d replicas in failed log dirs; they leave "
                                "ISRs and leaderships", self.node_id, node_id, len(offline))
                await controller.set_offline_replicas(node_id, offline)
                self._synced_offline[node_id] = offline
        contact_s = self.contact.unbroken_for()
        for node_id, broker in sorted(image.brokers.items()):
            if node_id in live or broker.fenced:
                continue
            if contact_s < self.fencing_grace_s:
                # etcd was away from here lately: its lease may have lapsed in the sweep etcd makes
                # when it comes back, with the broker alive (see odradek.broker.cluster.etcd_contact).
                if node_id not in self._awaiting_reregistration:
                    self._awaiting_reregistration.add(node_id)
                    log.warning("controller %d: broker %d's registration is gone, but the metadata store was "
                                "unreachable from here lately (its lease may have lapsed in etcd's sweep after "
                                "an outage); fencing it only if it has not registered again once the store has "
                                "answered for %.1f s", self.node_id, node_id, self.fencing_grace_s)
                continue
            self._awaiting_reregistration.discard(node_id)
            log.warning("controller %d: broker %d's registration is gone; fencing it and moving its "
                        "leaderships", self.node_id, node_id)
            await controller.fence_broker(node_id)

    async def _step_down(self, why: str) -> None:
        controller, self.controller = self.controller, None
        if controller is None:
            return
        if not self._stopping:
            log.error("node %d stops acting as controller: %s", self.node_id, why)
        with contextlib.suppress(Exception):
            await controller.stop()
        with contextlib.suppress(Exception):
            await self._lease_store.close()


async def _close_quietly(lease_store: EtcdLeaseStore, log_store: EtcdMetadataLogStore) -> None:
    with contextlib.suppress(Exception):
        await lease_store.close()
    with contextlib.suppress(Exception):
        await log_store.close()


def controller_factory(node_id: int, metadata_dir: Path, config: Any) -> ControllerFactory:
    """Builds each term's ``Controller`` with the broker's settings."""

    def make(lease_store: EtcdLeaseStore, log_store: EtcdMetadataLogStore) -> Controller:
        return Controller(
            node_id, metadata_dir, lease_store, log_store=log_store,
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            lease_ttl_ms=config["controller.lease.ttl.ms"],
            delete_topic_enable=config["delete.topic.enable"],
            max_broker_partitions=config["max.broker.partitions"],
            unclean_leader_election_enable=config["unclean.leader.election.enable"],
            auto_leader_rebalance_enable=config["auto.leader.rebalance.enable"],
            leader_imbalance_check_interval_seconds=config["leader.imbalance.check.interval.seconds"],
            leader_imbalance_per_broker_percentage=config["leader.imbalance.per.broker.percentage"],
            snapshot_max_new_record_bytes=config["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_max_interval_ms=config["metadata.log.max.snapshot.interval.ms"],
        )

    return make
