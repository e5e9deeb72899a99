"""The controller: the single owner of cluster metadata (topics, partitions, leaders, configs, brokers).

Theory of operation (the KRaft QuorumController pattern, with one node):
1. ``start`` acquires the controller lease; the lease epoch becomes the controller epoch. It reads
   (or creates) the cluster id in ``meta.properties``, replays the metadata log into the image,
   appends a LeaderChangeRecord with the new epoch (fencing any older controller), and registers
   this broker.
2. Every operation validates its input against the current image exactly as Kafka's
   ReplicationControlManager / ConfigurationControlManager / ControllerApis do, producing per-item
   results (Kafka error codes and messages) and a list of records. As in Kafka's QuorumController,
   the deciding is done by managers that read the image and never write it, and this class is the
   dispatcher that commits what they decide: ``odradek.controller.replication_control`` (topics,
   partitions, ISRs, leaders, reassignments), ``odradek.controller.cluster_control`` (broker
   registrations and fencing), ``odradek.controller.configuration_control`` (config overrides), and the
   function modules ``odradek.controller.acls``, ``odradek.controller.client_quotas``,
   ``odradek.controller.scram_credentials`` and ``odradek.controller.feature_updates``.
3. Unless ``validate_only``, the records of one operation are appended to the metadata log as one
   atomic, durable batch stamped with the controller epoch (``odradek.controller.log_store``), and only then
   applied to the image and published (``odradek.controller.publisher``). A crash before the append
   returns loses the change and the client saw no success; after it, replay restores it.
4. Operations are serialised by an asyncio lock, so validation always sees the image the records
   will be applied to. The lease and log stores are asynchronous (the local ones run their file
   I/O on an executor); the image is never touched off the loop thread.

Snapshots (Kafka's ``metadata.log.max.record.bytes.between.snapshots`` and
``metadata.log.max.snapshot.interval.ms``): once the batches committed since the last snapshot
reach the first, or there are any and the second has passed since the last snapshot (or since this
controller started), the controller writes the image as a snapshot at the log's end offset
(``odradek.controller.image_records``) and the store deletes the batches it covers (``MetadataLogStore
.write_snapshot``). The size check runs after each commit, as a task of its own (the request that
crossed the threshold does not wait for it); the time check runs when the owner calls
``maybe_snapshot`` (on its lease-renewal timer). ``start`` loads the snapshot, then the batches after
it, so a restart replays at most one snapshot plus the bytes between two snapshots.

Fencing: if the lease is lost (``LeaseLostError``) or the log holds a newer controller epoch
(``StaleControllerEpochError``), this controller stops: later operations raise ``KafkaApiError``
with NOT_CONTROLLER.

Leader election: the rules (clean, unclean, preferred, auto rebalance, controlled shutdown) are
``odradek.controller.elections``; the controller runs them on fencing, (re)registration, ElectLeaders,
``rebalance_leaders`` and ``controlled_shutdown``. A leader change bumps the leader epoch (see
``odradek.controller.image``), which is how stale leaders are fenced.

Reassignments (KIP-455): ``alter_partition_reassignments`` / ``list_partition_reassignments``, the
records in ``odradek.controller.reassignments``; an ISR change completes one through
``ReplicationControl.maybe_complete_reassignment``.

Ownership: a ``Controller`` and its ``image`` belong to the asyncio event loop thread that called
``start``. Nothing on the broker reads the controller: brokers get the image from a publisher
(``add_publisher``) and send changes through a ``odradek.broker.metadata.controller_client.ControllerClient``.
Publishers are called on that loop, synchronously, after each committed change.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from pathlib import Path
from typing import TypeVar

from odradek.controller import (
    acls,
    client_quotas,
    feature_updates,
    features,
    metadata_format,
    scram_credentials,
)
from odradek.controller.cluster_control import ClusterControl, check_port
from odradek.controller.configuration_control import ConfigurationControl
from odradek.controller.image import MetadataDelta, MetadataImage, apply
from odradek.controller.image_records import image_records
from odradek.controller.lease import Lease, LeaseLostError, LeaseStore
from odradek.controller.log_store import (
    LocalMetadataLogStore,
    MetadataLogStore,
    MetadataStoreUnavailableError,
)
from odradek.controller.meta_properties import load_or_create_cluster_id
from odradek.controller.metadata_log import MetadataBatch, StaleControllerEpochError
from odradek.controller.metadata_snapshot import MetadataSnapshot
from odradek.controller.placement import StripedReplicaPlacer
from odradek.controller.publisher import DeltaListenerPublisher, MetadataListener, MetadataPublisher
from odradek.controller.records import FeatureLevelRecord, LeaderChangeRecord, MetadataRecord
from odradek.controller.replication_control import ReplicationControl
from odradek.controller.requests import (
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    ElectionType,
    FeatureUpdate,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
    UpdateFeaturesResult,
)
from odradek.controller.scram_credentials import ScramAlterResult, ScramUpsertion
from odradek.controller.topic_configs import warn_keys_without_effect
from odradek.protocol.acl_types import AclBinding, AclBindingFilter
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import monotonic_ms

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL_MS = 30_000
# Kafka's defaults of metadata.log.max.record.bytes.between.snapshots and
# metadata.log.max.snapshot.interval.ms (KRaftConfigs); broker/config/broker_config.py defines the keys.
DEFAULT_SNAPSHOT_MAX_NEW_RECORD_BYTES = 20 * 1024 * 1024
DEFAULT_SNAPSHOT_MAX_INTERVAL_MS = 60 * 60 * 1000

_R = TypeVar("_R")  # what an operation answers: its per-item results


def _bootstrap_feature_records(levels: Mapping[str, int]) -> list[MetadataRecord]:
    # metadata.version first, as Kafka's bootstrap metadata writes it.
    ordered = sorted(levels.items(), key=lambda item: (item[0] != features.METADATA_VERSION, item[0]))
    return [FeatureLevelRecord(name, level) for name, level in ordered]


class Controller:
    """One node's metadata controller (see the module docstring): lease, commit path and snapshots
    here; each operation's records decided by the managers it holds (``replication``, ``cluster``,
    ``configuration``) or the function modules it calls, then committed here as one batch."""

    def __init__(
        self,
        node_id: int,
        metadata_dir: Path,
        lease_store: LeaseStore,
        *,
        log_store: MetadataLogStore | None = None,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        delete_topic_enable: bool = True,
        max_broker_partitions: int | None = None,
        unclean_leader_election_enable: bool = False,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_seconds: int = 300,
        leader_imbalance_per_broker_percentage: int = 10,
        snapshot_max_new_record_bytes: int = DEFAULT_SNAPSHOT_MAX_NEW_RECORD_BYTES,
        snapshot_max_interval_ms: int = DEFAULT_SNAPSHOT_MAX_INTERVAL_MS,
        # Times the lease and the snapshot interval, both durations: monotonic, so that a step of the
        # system clock neither expires the lease (a single node then refused metadata changes until
        # restarted) nor stretches it.
        clock: Callable[[], int] = monotonic_ms,
        replica_placer: StripedReplicaPlacer | None = None,
    ) -> None:
        if default_num_partitions <= 0 or default_replication_factor <= 0:
            raise ValueError("default_num_partitions and default_replication_factor must be positive")
        self.node_id = node_id
        self.metadata_dir = Path(metadata_dir)
        self._lease_store = lease_store
        self._log_store: MetadataLogStore = log_store if log_store is not None else LocalMetadataLogStore(metadata_dir)
        self._log_open = False
        self._lease_ttl_ms = lease_ttl_ms
        self.delete_topic_enable = delete_topic_enable
        # Kafka's broker configs of the same names: when the owner runs rebalance_leaders.
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_seconds = leader_imbalance_check_interval_seconds
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        if snapshot_max_new_record_bytes < 1 or snapshot_max_interval_ms < 0:
            raise ValueError("snapshot_max_new_record_bytes must be at least 1, snapshot_max_interval_ms at least 0")
        self.snapshot_max_new_record_bytes = snapshot_max_new_record_bytes
        self.snapshot_max_interval_ms = snapshot_max_interval_ms  # 0: no snapshots by time (Kafka's rule)
        self._last_snapshot_ms = 0
        self._snapshot_task: asyncio.Task[None] | None = None
        self._clock = clock
        self._image = MetadataImage()
        # The managers read the image and decide; this class commits what they decide (module docstring).
        self.replication = ReplicationControl(
            self._image, node_id, default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor, max_broker_partitions=max_broker_partitions,
            unclean_leader_election_enable=unclean_leader_election_enable,
            # Kafka's StripedReplicaPlacer over an unseeded java.util.Random; tests may pass a seeded one.
            replica_placer=replica_placer if replica_placer is not None else StripedReplicaPlacer())
        self.cluster = ClusterControl(self._image, node_id)
        self.configuration = ConfigurationControl(self._image)
        self._lease: Lease | None = None
        self._active = False
        self._publishers: list[MetadataPublisher] = []
        self._write_lock = asyncio.Lock()

    # ----------------------------------------------------------------------------------------
    # Life cycle

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def controller_epoch(self) -> int:
        return -1 if self._lease is None else self._lease.epoch

    @property
    def lease(self) -> Lease | None:
        return self._lease

    @property
    def committed_offset(self) -> int:
        """Offset after the last committed record (what a follower of the log must reach to see it)."""
        return self._log_store.next_offset if self._log_open else 0

    async def start(
        self,
        now_ms: int | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        rack: str | None = None,
        listener_name: str = "PLAINTEXT",
    ) -> None:
        """Become the controller: lease, cluster id, replay, LeaderChangeRecord, register this broker.

        Raises ``KafkaApiError(NOT_CONTROLLER)`` if another holder has the lease.
        """
        now = self._clock() if now_ms is None else now_ms
        lease = await self._lease_store.try_acquire(self.node_id, self._lease_ttl_ms, now)
        if lease is None:
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "Another controller holds the controller lease.")
        self._lease = lease
        try:
            self._image.cluster_id = load_or_create_cluster_id(self.metadata_dir, self.node_id)
            contents = await self._log_store.open()
            self._log_open = True
            replayed = MetadataDelta()
            if contents.snapshot is not None:
                replayed.merge(self._apply_batch(contents.snapshot.records))
                self._image.offset = contents.snapshot.end_offset - 1
            for batch in contents.batches:
                replayed.merge(self._apply_batch(batch.records))
            self._last_snapshot_ms = now
            if not replayed.is_empty():
                self._publish(replayed)  # publishers installed before start see the replayed image
            newest_epoch = self._log_store.newest_epoch
            if lease.epoch <= newest_epoch:
                # The lease state was lost or rolled back; writing would be refused anyway.
                raise StaleControllerEpochError(lease.epoch, newest_epoch)
            self._active = True
            first: list[MetadataRecord] = [LeaderChangeRecord(self.node_id, lease.epoch)]
            if contents.snapshot is None and not contents.batches:
                # A new cluster is formatted at the newest metadata format (odradek.controller.metadata_format, rule 1)
                # and at Kafka's feature levels for a new cluster (odradek.controller.features).
                first.append(FeatureLevelRecord(metadata_format.FEATURE, metadata_format.LATEST))
                first += _bootstrap_feature_records(features.BOOTSTRAP)
            elif self._image.metadata_format >= metadata_format.FEATURE_LEVELS:
                # A store at the format, from a build without Kafka's feature levels: the levels it behaved at.
                first += self._pre_feature_level_records()
            async with self._write_lock:
                await self._commit(first)
        except BaseException:
            self._active = False
            await self._lease_store.release(lease)
            self._lease = None
            await self._close_log()
            raise
        log.info("controller %d active with epoch %d, cluster id %s", self.node_id, lease.epoch,
                 self._image.cluster_id)
        if host is not None and port is not None:
            await self.register_broker(self.node_id, host, port, rack, listener_name=listener_name)

    async def stop(self) -> None:
        """Give up the lease and close the log. The image stays readable."""
        async with self._write_lock:
            self._active = False
            if self._lease is not None:
                await self._lease_store.release(self._lease)
                self._lease = None
            await self._close_log()
        task, self._snapshot_task = self._snapshot_task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)  # it found the controller stopped

    async def _close_log(self) -> None:
        if self._log_open:
            self._log_open = False
            await self._log_store.close()

    async def renew_lease(self, now_ms: int | None = None) -> None:
        """Extend the lease; call periodically (well within the TTL). Loses control on failure."""
        if self._lease is None or not self._active:
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.")
        now = self._clock() if now_ms is None else now_ms
        try:
            self._lease = await self._lease_store.renew(self._lease, now)
        except LeaseLostError:
            self._active = False
            raise

    def add_publisher(self, publisher: MetadataPublisher) -> Callable[[], None]:
        """Install ``publisher``: it gets the current image now (empty delta), then every commit.

        Returns the function that removes it again.
        """
        self._publishers.append(publisher)
        publisher.publish(self._image, MetadataDelta())
        return lambda: self._publishers.remove(publisher)

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener(delta)`` after every committed change; returns an unsubscribe function."""
        return self.add_publisher(DeltaListenerPublisher(listener))

    # ----------------------------------------------------------------------------------------
    # Commit path

    async def _check_active(self) -> None:
        if not self._active or self._lease is None or not self._log_open:
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.")
        now = self._clock()
        if now + self._lease_ttl_ms // 2 >= self._lease.expires_at_ms:
            await self.renew_lease(now)

    async def _commit(self, records: Sequence[MetadataRecord]) -> MetadataDelta:
        """Append ``records`` as one batch, then apply and publish them. Caller holds the write lock."""
        await self._check_active()
        assert self._lease is not None
        try:
            appended = await self._log_store.append(records, self._lease.epoch)
        except StaleControllerEpochError as exc:
            self._active = False
            log.error("controller %d: metadata write refused, stepping down: %s", self.node_id, exc.message)
            raise
        except MetadataStoreUnavailableError as exc:
            # The batch may be committed without being in this image: going on could validate the
            # next request against stale state (a retried CreateTopics writing its topic twice).
            self._active = False
            log.error("controller %d: stepping down: %s", self.node_id, exc.message)
            raise
        delta = MetadataDelta()
        for batch in appended.caught_up:
            # Written by another writer before our append (only possible at take-over).
            delta.merge(self._apply_batch(batch.records))
        delta.merge(self._apply_batch(records))
        self._publish(delta)
        if self._log_store.bytes_since_snapshot >= self.snapshot_max_new_record_bytes:
            self._snapshot_soon()
        return delta

    # ----------------------------------------------------------------------------------------
    # Snapshots

    def _snapshot_soon(self) -> None:
        """Take a snapshot in a task of its own, once the current operation released the write lock."""
        if self._snapshot_task is None or self._snapshot_task.done():
            self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot_in_background())

    async def _snapshot_in_background(self) -> None:
        try:
            await self.take_snapshot()
        except KafkaApiError as exc:  # stale or unavailable: take_snapshot stepped down already
            log.error("controller %d: metadata snapshot refused: %s", self.node_id, exc.message)
        except Exception:
            log.exception("controller %d: metadata snapshot failed; the log keeps its batches", self.node_id)

    async def maybe_snapshot(self, now_ms: int | None = None) -> bool:
        """Snapshot if ``metadata.log.max.snapshot.interval.ms`` has passed since the last one (or since
        this controller started) and batches were committed since; call on a timer. True if taken."""
        if not self._active or not self._log_open or self._log_store.bytes_since_snapshot == 0:
            return False
        now = self._clock() if now_ms is None else now_ms
        by_time = self.snapshot_max_interval_ms > 0 and now - self._last_snapshot_ms >= self.snapshot_max_interval_ms
        if not by_time and self._log_store.bytes_since_snapshot < self.snapshot_max_new_record_bytes:
            return False
        return await self.take_snapshot()

    async def take_snapshot(self) -> bool:
        """Write the image as a snapshot at the log's end offset and let the store delete the batches it
        covers. False when there is nothing new since the last one, or the store moved on (another
        writer: this controller is about to learn it is stale). Raises what a write raises when the
        store refuses this controller (it steps down, as on a refused append)."""
        async with self._write_lock:
            if not self._active or not self._log_open or self._log_store.bytes_since_snapshot == 0:
                return False
            if self._image.metadata_format < metadata_format.SNAPSHOTS:
                # A broker of a release that cannot read a snapshot is still registered (a rolling
                # upgrade in progress): deleting the batches a snapshot covers would strand it.
                return False
            end_offset = self._log_store.next_offset
            if self._image.offset != end_offset - 1:
                log.error("controller %d: image at offset %d, log at %d: no snapshot", self.node_id,
                          self._image.offset, end_offset)
                return False
            snapshot = MetadataSnapshot(end_offset, self._log_store.newest_epoch, tuple(image_records(self._image)))
            try:
                taken = await self._log_store.write_snapshot(snapshot)
            except (StaleControllerEpochError, MetadataStoreUnavailableError) as exc:
                self._active = False
                log.error("controller %d: snapshot refused, stepping down: %s", self.node_id, exc.message)
                raise
            if taken:
                self._last_snapshot_ms = self._clock()
                log.info("controller %d: metadata snapshot at offset %d (%d records); the log before it is "
                         "deleted", self.node_id, end_offset, len(snapshot.records))
            return taken

    def _apply_batch(self, records: Iterable[MetadataRecord]) -> MetadataDelta:
        delta = MetadataDelta()
        for record in records:
            self.replication.replay(record)
            apply(self._image, record, delta)
        return delta

    async def _decide_and_commit(self, decide: Callable[[], tuple[_R, Sequence[MetadataRecord]]],
                                 validate_only: bool = False) -> _R:
        """The shape of most operations: under the write lock, as the active controller, a manager
        decides the results and the records; the records (unless ``validate_only``) are committed
        as one batch before the results are returned."""
        async with self._write_lock:
            await self._check_active()
            results, records = decide()
            if records and not validate_only:
                await self._commit(list(records))
            return results

    def _publish(self, delta: MetadataDelta) -> None:
        for publisher in list(self._publishers):
            try:
                publisher.publish(self._image, delta)
            except Exception:  # the change is committed; one bad publisher must not hide it from others
                log.exception("metadata publisher %r failed", publisher)

    # Brokers (the registrations are odradek.controller.cluster_control's; the leader moves they bring,
    # odradek.controller.replication_control's, go in the same batch)

    async def register_broker(
        self,
        node_id: int,
        host: str,
        port: int,
        rack: str | None = None,
        *,
        listener_name: str = "PLAINTEXT",
        fenced: bool = False,
        incarnation_id: uuid.UUID | None = None,
        endpoints: Sequence[tuple[str, str, int]] = (),
        features: Sequence[tuple[str, int, int]] = features.REGISTERED,
    ) -> int:
        """Register (or re-register) a broker; returns its broker epoch (the record's log offset).

        ``incarnation_id`` names the broker process (cluster mode passes the one in its etcd
        registration); None draws a fresh one. ``features``: the (feature, min, max) levels its
        release reads (this release's by default; an etcd registration's, where a 0.1.0 broker has
        none); one that cannot read the store's metadata format is registered fenced
        (odradek.controller.metadata_format, rule 5)."""
        check_port(port)
        async with self._write_lock:
            await self._check_active()
            broker_epoch = self._log_store.next_offset
            record = self.cluster.registration(node_id, host, port, rack, broker_epoch=broker_epoch,
                                               listener_name=listener_name, fenced=fenced,
                                               incarnation_id=incarnation_id, endpoints=endpoints,
                                               features=features)
            changes: list[MetadataRecord] = [record]
            if not record.fenced:
                # A broker coming back may lead partitions that had no leader: elected in the same
                # batch, so no broker sees it live while those partitions still have no leader.
                changes += self.replication.offline_elections(self.cluster.image_after(record))
            await self._commit(changes)
        # The last broker of an older release replaced (or the one node of a store an older release
        # wrote): the metadata format may move up now.
        await self.maybe_raise_metadata_format()
        return broker_epoch

    async def maybe_raise_metadata_format(self) -> int:
        """Raise ``odradek.metadata.format`` to the newest level every registered broker reads
        (odradek.controller.metadata_format, rule 3); returns the level now finalized. Never lowers it."""
        if self.cluster.newest_readable_format() <= self._image.metadata_format:
            return self._image.metadata_format  # the common case, on every turn of the candidate's loop
        async with self._write_lock:
            await self._check_active()
            level = self._image.metadata_format
            target = self.cluster.newest_readable_format()
            if target > level:
                records: list[MetadataRecord] = [FeatureLevelRecord(metadata_format.FEATURE, target)]
                if level < metadata_format.FEATURE_LEVELS <= target:
                    # The store may hold Kafka's feature levels now: write the ones it behaved at.
                    records += self._pre_feature_level_records()
                await self._commit(records)
                log.info("controller %d: every registered broker reads %s level %d; raised from %d",
                         self.node_id, metadata_format.FEATURE, target, level)
                self.cluster.metadata_format_raised()
                level = target
            return level

    def _pre_feature_level_records(self) -> list[MetadataRecord]:
        """FeatureLevelRecords of the levels a store without Kafka's feature levels behaved at
        (odradek.controller.features.PRE_FEATURE_LEVELS); none once it has them."""
        if features.has_feature_levels(self._image.features):
            return []
        return _bootstrap_feature_records(features.PRE_FEATURE_LEVELS)

    async def update_features(self, updates: Sequence[FeatureUpdate], validate_only: bool = False
                              ) -> UpdateFeaturesResult:
        """UpdateFeatures (controller/feature_updates.py): every level changed in one batch, or none."""
        async with self._write_lock:
            await self._check_active()
            result, records = feature_updates.update_features(self._image, self.node_id, updates)
            if records and not validate_only:
                await self._commit(records)
                log.info("controller %d: feature levels finalized: %s", self.node_id,
                         ", ".join(f"{r.name}={r.feature_level}" for r in records
                                   if isinstance(r, FeatureLevelRecord)))
            return result

    async def fence_broker(self, node_id: int) -> None:
        """Fence a broker: drop it from ISRs (never emptying one) and move its leaderships
        (unclean elections where ``unclean.leader.election.enable`` allows them)."""
        await self._set_fenced(node_id, True)

    async def unfence_broker(self, node_id: int) -> None:
        await self._set_fenced(node_id, False)

    async def _set_fenced(self, node_id: int, fenced: bool) -> None:
        async with self._write_lock:
            await self._check_active()
            change = self.cluster.fencing_change(node_id, fenced)
            if change is None:
                return
            # One batch, as Kafka's controller writes a fencing with its leader moves: no broker
            # may see the broker fenced while its partitions still name it leader and in-sync.
            after = self.cluster.image_after(change)
            records: list[MetadataRecord] = [change]
            if fenced:
                records += self.replication.fenced_broker_records(after, node_id)
            else:
                records += self.replication.offline_elections(after)
            await self._commit(records)

    async def set_offline_replicas(self, node_id: int, offline: Set[tuple[uuid.UUID, int]]) -> None:
        """Broker ``node_id`` holds ``offline`` ((topic id, partition)) in failed log dirs, and no other
        replica (KIP-858's directory failure, reported with its registration): those replicas are
        marked offline and leave ISRs and leaderships; the ones it no longer reports come back."""
        await self._decide_and_commit(lambda: (None, self.replication.offline_replica_records(node_id, offline)))

    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        """KRaft's controlled shutdown: move every leadership off ``node_id`` to another live ISR
        member and take it out of every ISR (never emptying one). Returns the partitions it still
        leads (no other ISR member could take them). STALE_BROKER_EPOCH if ``broker_epoch`` is not
        its registration's."""
        def decide() -> tuple[list[tuple[str, int]], list[MetadataRecord]]:
            self.cluster.check_broker_epoch(node_id, broker_epoch)
            records, remaining = self.replication.controlled_shutdown_records(node_id)
            return remaining, records

        return await self._decide_and_commit(decide)

    # ----------------------------------------------------------------------------------------
    # Leader election (the rules live in odradek.controller.elections)

    async def elect_leaders(
        self, election_type: int = ElectionType.PREFERRED, partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        """ElectLeaders (Kafka's ReplicationControlManager.electLeaders).

        PREFERRED: ``replicas[0]`` leads if it is live and in the ISR (ELECTION_NOT_NEEDED if it
        leads already, PREFERRED_LEADER_NOT_AVAILABLE otherwise). UNCLEAN: a partition without a
        live leader gets a live ISR member, else any live replica (ELECTION_NOT_NEEDED when it has a
        leader, ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live). Unknown partitions:
        UNKNOWN_TOPIC_OR_PARTITION. ``partitions`` of None means every partition, and then
        ELECTION_NOT_NEEDED results are left out (as Kafka does).
        """
        try:
            kind = ElectionType(election_type)
        except ValueError:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}") from None
        return await self._decide_and_commit(lambda: self.replication.elect_leaders(kind, partitions))

    def leader_imbalance_check_interval_s(self) -> float:
        """How often the cluster controller should call ``rebalance_leaders`` (0: never)."""
        return self.leader_imbalance_check_interval_seconds if self.auto_leader_rebalance_enable else 0.0

    async def rebalance_leaders(self) -> list[ElectionResult]:
        """Kafka's auto leader rebalance: preferred elections for the partitions of every broker whose
        leader imbalance is over ``leader.imbalance.per.broker.percentage``. A no-op when
        ``auto.leader.rebalance.enable`` is off."""
        if not self.auto_leader_rebalance_enable:
            return []
        wanted = self.replication.imbalanced_partitions(self.leader_imbalance_per_broker_percentage)
        if not wanted:
            return []
        results = await self.elect_leaders(ElectionType.PREFERRED, wanted)
        moved = sum(1 for r in results if r.error_code == ErrorCode.NONE)
        if moved:
            log.info("auto leader rebalance: %d partition(s) moved back to their preferred leader", moved)
        return results

    # ----------------------------------------------------------------------------------------
    # Reassignments (odradek.controller.replication_control; the records are odradek.controller.reassignments')

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]:
        """AlterPartitionReassignments: start, change or (replicas None) cancel reassignments.

        One result per requested partition (Kafka's ReplicationControlManager.alterPartitionReassignments):
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered
        replicas), NO_REASSIGNMENT_IN_PROGRESS (cancel without one). The records of every valid
        partition are one batch.
        """
        return await self._decide_and_commit(lambda: self.replication.alter_partition_reassignments(targets))

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        """ListPartitionReassignments: the ongoing ones among ``partitions`` (None: all). Unknown
        topics and partitions are left out, as Kafka does."""
        await self._check_active()
        return self.replication.list_partition_reassignments(partitions)

    # ----------------------------------------------------------------------------------------
    # ACLs (CreateAcls / DeleteAcls; the logic is odradek.controller.acls)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[acls.AclCreateResult]:
        return await self._decide_and_commit(lambda: acls.create_acl_records(self._image.acls, bindings))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[acls.AclDeleteResult]:
        return await self._decide_and_commit(lambda: acls.delete_acl_records(self._image.acls, filters))

    # ----------------------------------------------------------------------------------------
    # AlterPartition (KIP-497): a leader's ISR change

    async def alter_partition(self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int,
                              partition_epoch: int, new_isr: Sequence[int],
                              broker_epochs: Mapping[int, int] | None = None) -> AlterPartitionResult:
        """Change a partition's ISR at its leader's request (Kafka's
        ReplicationControlManager.alterPartition, one partition).

        ``leader_id`` is the requesting broker. Refused, in Kafka's order: UNKNOWN_TOPIC_ID /
        UNKNOWN_TOPIC_OR_PARTITION; NOT_CONTROLLER for epochs newer than ours (this controller is
        behind); FENCED_LEADER_EPOCH for an older leader epoch; INVALID_REQUEST from a broker that
        is not the leader; INVALID_UPDATE_VERSION for an older partition epoch (a stale request);
        INVALID_REQUEST for an ISR with non-replicas, duplicates or without the leader;
        INELIGIBLE_REPLICA for members not registered, fenced, or whose broker epoch in
        ``broker_epochs`` is not their registration's (KIP-903: the leader saw them fetch as an
        earlier incarnation, whose log may have been lost since; -1 or absent is not checked).
        Success commits a
        PartitionChangeRecord (the partition epoch goes up) unless the ISR is unchanged.
        """
        async with self._write_lock:
            await self._check_active()
            code, change = self.replication.alter_partition(topic_id, partition, leader_id, leader_epoch,
                                                            partition_epoch, tuple(new_isr), broker_epochs or {})
            if code != ErrorCode.NONE:
                return AlterPartitionResult(code)
            if change is not None:
                await self._commit([change])
            # KIP-455: an ISR now holding every target replica completes the partition's reassignment.
            completion = self.replication.maybe_complete_reassignment(topic_id, partition)
            if completion is not None:
                log.info("Reassignment of %s-%d completed by the ISR %s", self._image.topics_by_id[topic_id].name,
                         partition, list(new_isr))
                await self._commit([completion])
            return self.replication.alter_partition_result(topic_id, partition)

    # ----------------------------------------------------------------------------------------
    # Topics and partitions (odradek.controller.replication_control)

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """Create topics; one result per distinct name, in request order (Kafka's codes/messages)."""
        return await self._create_topics(topics, validate_only, internal=False)

    async def create_internal_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicResult:
        """Create an internal topic (e.g. __consumer_offsets); TOPIC_ALREADY_EXISTS if it exists."""
        request = CreatableTopic(name, num_partitions, replication_factor, (), dict(configs or {}))
        (result,) = await self._create_topics([request], False, internal=True)
        return result

    async def _create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool, *, internal: bool
    ) -> list[CreateTopicResult]:
        async with self._write_lock:
            await self._check_active()
            results, records = self.replication.create_topics(topics, internal=internal)
            if records and not validate_only:
                await self._commit(records)
                warn_keys_without_effect(records)
            return results

    async def delete_topics(
        self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]:
        """Delete topics by name and/or id (ControllerApis.deleteTopics rules).

        Raises ``KafkaApiError(TOPIC_DELETION_DISABLED)`` when delete.topic.enable is false (the
        DeleteTopics handler answers INVALID_REQUEST instead for versions below 3, as Kafka does).
        Internal topics may be deleted, as in KRaft.
        """
        if not self.delete_topic_enable:
            raise KafkaApiError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        return await self._decide_and_commit(lambda: self.replication.delete_topics(names, topic_ids))

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        """Add partitions to existing topics; one result per distinct name, in request order."""
        return await self._decide_and_commit(lambda: self.replication.create_partitions(topics), validate_only)

    # ----------------------------------------------------------------------------------------
    # Configs (odradek.controller.configuration_control), SCRAM credentials and client quotas

    def describe_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides (a copy)."""
        return self.configuration.describe_topic_configs(name)

    def describe_broker_configs(self, name: str) -> dict[str, str]:
        """Dynamic broker config overrides for broker ``name`` ("" = cluster-wide default)."""
        return self.configuration.describe_broker_configs(name)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        """AlterUserScramCredentials (controller/scram_credentials.py): one atomic batch of records."""
        def decide() -> tuple[list[ScramAlterResult], list[MetadataRecord]]:
            records, results = scram_credentials.alter(self._image.scram_credentials, deletions, upsertions)
            return results, records

        return await self._decide_and_commit(decide)

    async def alter_client_quotas(
        self, alterations: Sequence[client_quotas.ClientQuotaAlteration], validate_only: bool = False
    ) -> list[client_quotas.ClientQuotaAlterationResult]:
        """AlterClientQuotas (controller/client_quotas.py): one batch of ClientQuotaRecords."""
        def decide() -> tuple[list[client_quotas.ClientQuotaAlterationResult], Sequence[MetadataRecord]]:
            records, results = client_quotas.alter_client_quotas(self._image, alterations)
            return results, records

        return await self._decide_and_commit(decide, validate_only)

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        """IncrementalAlterConfigs: SET/DELETE/APPEND/SUBTRACT per key, for topic, broker and client metrics resources."""
        return await self._alter_configs(resources, validate_only, incremental=True)

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        """Legacy AlterConfigs: each resource's overrides are replaced by exactly the given map."""
        return await self._alter_configs(resources, validate_only, incremental=False)

    async def _alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool, *, incremental: bool
    ) -> list[AlterConfigsResult]:
        async with self._write_lock:
            await self._check_active()
            results, records = self.configuration.alter_configs(resources, incremental=incremental)
            if records and not validate_only:
                await self._commit(records)
                warn_keys_without_effect(records)
            return results


def replay_batches(image: MetadataImage, batches: Iterable[MetadataBatch]) -> MetadataImage:
    """Apply ``batches`` to ``image`` (used by tools and tests to inspect a log without a controller)."""
    for batch in batches:
        for record in batch.records:
            apply(image, record)
    return image
