"""The controller: the single owner of cluster metadata (topics, partitions, leaders, configs, brokers).

Theory of operation (the KRaft QuorumController pattern, with one node):
1. ``start`` acquires the controller lease; the lease epoch becomes the controller epoch. It reads
   (or creates) the cluster id in ``meta.properties``, replays the metadata log into the image,
   appends a LeaderChangeRecord with the new epoch (fencing any older controller), and registers
   this broker.
2. Every operation validates its input against the current image exactly as Kafka's
   ReplicationControlManager / ConfigurationControlManager / ControllerApis do, producing per-item
   results (Kafka error codes and messages) and a list of records.
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
``_maybe_complete_reassignment``.

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
from dataclasses import dataclass, replace
from pathlib import Path

from odradek.controller import (
    acls,
    client_metrics_configs,
    client_quotas,
    elections,
    feature_updates,
    features,
    metadata_format,
    reassignments,
    scram_credentials,
)
from odradek.controller.image import MetadataDelta, MetadataImage, PartitionState, TopicImage, apply
from odradek.controller.image_records import image_records
from odradek.controller.lease import Lease, LeaseLostError, LeaseStore
from odradek.controller.log_store import (
    LocalMetadataLogStore,
    MetadataLogStore,
    MetadataStoreUnavailableError,
)
from odradek.controller.meta_properties import load_or_create_cluster_id, new_kafka_uuid
from odradek.controller.metadata_log import MetadataBatch, StaleControllerEpochError
from odradek.controller.metadata_snapshot import MetadataSnapshot
from odradek.controller.placement import PlacementError, StripedReplicaPlacer, UsableBroker
from odradek.controller.publisher import DeltaListenerPublisher, MetadataListener, MetadataPublisher
from odradek.controller.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    LeaderChangeRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from odradek.controller.requests import (
    ZERO_UUID,
    AlterableConfig,
    AlterConfigOp,
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
from odradek.controller.topic_configs import (
    TopicConfigError,
    is_list_config,
    list_default,
    validate_topic_configs,
    warn_keys_without_effect,
)
from odradek.controller.topic_names import (
    has_collision_chars,
    invalid_topic_reason,
    is_internal,
    unify_collision_chars,
)
from odradek.protocol.acl_types import AclBinding, AclBindingFilter
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL_MS = 30_000
# Kafka's defaults of metadata.log.max.record.bytes.between.snapshots and
# metadata.log.max.snapshot.interval.ms (KRaftConfigs); broker/config/broker_config.py defines the keys.
DEFAULT_SNAPSHOT_MAX_NEW_RECORD_BYTES = 20 * 1024 * 1024
DEFAULT_SNAPSHOT_MAX_INTERVAL_MS = 60 * 60 * 1000
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."

# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH (KAFKA-17870): one CreateTopics request
# may add at most this many partitions, counted from the request before anything is placed or
# allocated; over it the whole request fails with POLICY_VIOLATION and this message. The same bound
# applies to CreatePartitions (KAFKA-19673), with INVALID_PARTITIONS.
MAX_PARTITIONS_PER_BATCH = 10_000
EXCESSIVE_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
# max.broker.partitions (the name KIP-578 gave it; Kafka never shipped a per-broker limit) is passed
# in by the broker (broker/config/broker_config.py has its default); a Controller built without it has no cap.


def _bootstrap_feature_records(levels: Mapping[str, int]) -> list[MetadataRecord]:
    # metadata.version first, as Kafka's bootstrap metadata writes it.
    ordered = sorted(levels.items(), key=lambda item: (item[0] != features.METADATA_VERSION, item[0]))
    return [FeatureLevelRecord(name, level) for name, level in ordered]


class _ApiError(Exception):
    """Internal: one item's failure, turned into a per-item result."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class _NewPartition:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class Controller:
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
        clock: Callable[[], int] = now_ms,
        replica_placer: StripedReplicaPlacer | None = None,
    ) -> None:
        if default_num_partitions <= 0 or default_replication_factor <= 0:
            raise ValueError("default_num_partitions and default_replication_factor must be positive")
        self.node_id = node_id
        self.metadata_dir = Path(metadata_dir)
        self._lease_store = lease_store
        self._log_store: MetadataLogStore = log_store if log_store is not None else LocalMetadataLogStore(metadata_dir)
        self._log_open = False
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self._lease_ttl_ms = lease_ttl_ms
        self.delete_topic_enable = delete_topic_enable
        self.max_broker_partitions = max_broker_partitions
        # Kafka's broker configs of the same names; the topic config and the cluster-wide dynamic
        # default of unclean.leader.election.enable override the first (odradek.controller.elections).
        self.unclean_leader_election_enable = unclean_leader_election_enable
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
        # Kafka's StripedReplicaPlacer over an unseeded java.util.Random; tests may pass a seeded one.
        self._replica_placer = replica_placer if replica_placer is not None else StripedReplicaPlacer()
        self._image = MetadataImage()
        self._lease: Lease | None = None
        self._active = False
        self._publishers: list[MetadataPublisher] = []
        self._write_lock = asyncio.Lock()
        # unify_collision_chars(name) -> names of existing topics with '.' or '_' (Kafka's
        # topicsWithCollisionChars), maintained from applied records.
        self._collisions: dict[str, set[str]] = {}
        # Brokers whose release cannot read the metadata format, already named in the log.
        self._unreadable_logged: set[int] = set()

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
            if isinstance(record, TopicRecord) and has_collision_chars(record.name):
                self._collisions.setdefault(unify_collision_chars(record.name), set()).add(record.name)
            elif isinstance(record, RemoveTopicRecord):
                topic = self._image.topics_by_id.get(record.topic_id)
                if topic is not None and has_collision_chars(topic.name):
                    names = self._collisions.get(unify_collision_chars(topic.name))
                    if names is not None:
                        names.discard(topic.name)
                        if not names:
                            del self._collisions[unify_collision_chars(topic.name)]
            apply(self._image, record, delta)
        return delta

    def _publish(self, delta: MetadataDelta) -> None:
        for publisher in list(self._publishers):
            try:
                publisher.publish(self._image, delta)
            except Exception:  # the change is committed; one bad publisher must not hide it from others
                log.exception("metadata publisher %r failed", publisher)

    # ----------------------------------------------------------------------------------------
    # Brokers

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
        if not 0 < port <= 65535:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Invalid port {port}.")
        async with self._write_lock:
            await self._check_active()
            if not fenced and not self._reads_metadata_format(node_id, features):
                fenced = True
            broker_epoch = self._log_store.next_offset
            record = RegisterBrokerRecord(
                broker_id=node_id,
                broker_epoch=broker_epoch,
                incarnation_id=incarnation_id or uuid.uuid4(),
                host=host,
                port=port,
                listener_name=listener_name,
                rack=rack,
                fenced=fenced,
                endpoints=tuple((str(n), str(h), int(p)) for n, h, p in endpoints),
                features=tuple((str(f), int(low), int(high)) for f, low, high in features),
            )
            changes: list[MetadataRecord] = [record]
            if not fenced:
                # A broker coming back may lead partitions that had no leader: elected in the same
                # batch, so no broker sees it live while those partitions still have no leader.
                changes += self._offline_elections(self._image_after(record))
            await self._commit(changes)
        # The last broker of an older release replaced (or the one node of a store an older release
        # wrote): the metadata format may move up now.
        await self.maybe_raise_metadata_format()
        return broker_epoch

    def _reads_metadata_format(self, node_id: int, features: Sequence[tuple[str, int, int]]) -> bool:
        level = self._image.metadata_format
        if metadata_format.min_readable(features) <= level <= metadata_format.max_readable(features):
            return True
        if node_id not in self._unreadable_logged:
            self._unreadable_logged.add(node_id)
            log.error("controller %d: broker %d reads %s levels %d-%d but the metadata is at level %d; it "
                      "stays fenced until it runs a release that reads it", self.node_id, node_id,
                      metadata_format.FEATURE, metadata_format.min_readable(features),
                      metadata_format.max_readable(features), level)
        return False

    def _newest_readable_format(self) -> int:
        return min([metadata_format.LATEST] + [metadata_format.max_readable(b.features)
                                               for b in self._image.brokers.values()])

    async def maybe_raise_metadata_format(self) -> int:
        """Raise ``odradek.metadata.format`` to the newest level every registered broker reads
        (odradek.controller.metadata_format, rule 3); returns the level now finalized. Never lowers it."""
        if self._newest_readable_format() <= self._image.metadata_format:
            return self._image.metadata_format  # the common case, on every turn of the candidate's loop
        async with self._write_lock:
            await self._check_active()
            level = self._image.metadata_format
            target = self._newest_readable_format()
            if target > level:
                records: list[MetadataRecord] = [FeatureLevelRecord(metadata_format.FEATURE, target)]
                if level < metadata_format.FEATURE_LEVELS <= target:
                    # The store may hold Kafka's feature levels now: write the ones it behaved at.
                    records += self._pre_feature_level_records()
                await self._commit(records)
                log.info("controller %d: every registered broker reads %s level %d; raised from %d",
                         self.node_id, metadata_format.FEATURE, target, level)
                self._unreadable_logged.clear()
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
            broker = self._image.brokers.get(node_id)
            if broker is None:
                raise KafkaApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
            if broker.fenced == fenced:
                return
            if not fenced and not self._reads_metadata_format(node_id, broker.features):
                return
            # One batch, as Kafka's controller writes a fencing with its leader moves: no broker
            # may see the broker fenced while its partitions still name it leader and in-sync.
            change = BrokerRegistrationChangeRecord(node_id, broker.broker_epoch, fenced)
            after = self._image_after(change)
            records: list[MetadataRecord] = [change]
            if fenced:
                records += elections.failover_records(after, node_id, self._unclean_default())
            else:
                records += self._offline_elections(after)
            await self._commit(records)

    async def set_offline_replicas(self, node_id: int, offline: Set[tuple[uuid.UUID, int]]) -> None:
        """Broker ``node_id`` holds ``offline`` ((topic id, partition)) in failed log dirs, and no other
        replica (KIP-858's directory failure, reported with its registration): those replicas are
        marked offline and leave ISRs and leaderships; the ones it no longer reports come back."""
        async with self._write_lock:
            await self._check_active()
            records = elections.offline_replica_records(self._image, node_id, offline, self._unclean_default())
            if records:
                await self._commit(list(records))

    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        """KRaft's controlled shutdown: move every leadership off ``node_id`` to another live ISR
        member and take it out of every ISR (never emptying one). Returns the partitions it still
        leads (no other ISR member could take them). STALE_BROKER_EPOCH if ``broker_epoch`` is not
        its registration's."""
        async with self._write_lock:
            await self._check_active()
            broker = self._image.brokers.get(node_id)
            if broker is None:
                raise KafkaApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
            if broker_epoch != -1 and broker_epoch != broker.broker_epoch:
                raise KafkaApiError(ErrorCode.STALE_BROKER_EPOCH,
                                    f"Broker epoch {broker_epoch} of broker {node_id} is stale; "
                                    f"the registered epoch is {broker.broker_epoch}.")
            records, remaining = elections.controlled_shutdown_records(self._image, node_id)
            if records:
                await self._commit(list(records))
            return remaining

    # ----------------------------------------------------------------------------------------
    # Leader election (the rules live in odradek.controller.elections)

    def _is_live(self, node_id: int) -> bool:
        return elections.is_live(self._image, node_id)

    def _epoch_matches(self, node_id: int, broker_epoch: int) -> bool:
        """KIP-903: -1 (not given) or the broker's registered epoch."""
        if broker_epoch == -1:
            return True
        reg = self._image.brokers.get(node_id)
        return reg is not None and reg.broker_epoch == broker_epoch

    def _unclean_default(self) -> bool:
        return elections.unclean_default(self._image, self.node_id, self.unclean_leader_election_enable)

    def _all_partitions(self) -> list[tuple[TopicImage, PartitionState]]:
        return [(t, p) for t in self._image.topics.values() for p in t.partitions.values()]

    def _image_after(self, record: RegisterBrokerRecord | BrokerRegistrationChangeRecord) -> MetadataImage:
        """The image as it will be once the broker ``record`` is applied, for elections written in the
        same batch. A broker record changes only ``brokers``, so the copy gets its own brokers map
        and shares everything else."""
        after = replace(self._image, brokers=dict(self._image.brokers))
        apply(after, record)
        return after

    def _offline_elections(self, image: MetadataImage) -> list[MetadataRecord]:
        """Leaders for every partition without a live one, judged on ``image`` (whose topics are the
        current image's: ``_image_after`` copies only the brokers)."""
        return list(elections.offline_election_records(image, self._all_partitions(), self._unclean_default()))

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
        async with self._write_lock:
            await self._check_active()
            every = partitions is None
            wanted = [(t.name, p.partition) for t, p in self._all_partitions()] if partitions is None \
                else list(partitions)
            results: list[ElectionResult] = []
            records: list[MetadataRecord] = []
            for name, index in wanted:
                result, change = elections.elect_leader(self._image, name, index, kind)
                if every and result.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                    continue
                results.append(result)
                if change is not None:
                    records.append(change)
            if records:
                await self._commit(records)
            return results

    def leader_imbalance_check_interval_s(self) -> float:
        """How often the cluster controller should call ``rebalance_leaders`` (0: never)."""
        return self.leader_imbalance_check_interval_seconds if self.auto_leader_rebalance_enable else 0.0

    async def rebalance_leaders(self) -> list[ElectionResult]:
        """Kafka's auto leader rebalance: preferred elections for the partitions of every broker whose
        leader imbalance is over ``leader.imbalance.per.broker.percentage``. A no-op when
        ``auto.leader.rebalance.enable`` is off."""
        if not self.auto_leader_rebalance_enable:
            return []
        wanted = elections.imbalanced_partitions(self._image, self.leader_imbalance_per_broker_percentage)
        if not wanted:
            return []
        results = await self.elect_leaders(ElectionType.PREFERRED, wanted)
        moved = sum(1 for r in results if r.error_code == ErrorCode.NONE)
        if moved:
            log.info("auto leader rebalance: %d partition(s) moved back to their preferred leader", moved)
        return results

    # ----------------------------------------------------------------------------------------
    # Reassignments (the rules live in odradek.controller.reassignments)

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]:
        """AlterPartitionReassignments: start, change or (replicas None) cancel reassignments.

        One result per requested partition (Kafka's ReplicationControlManager.alterPartitionReassignments):
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered
        replicas), NO_REASSIGNMENT_IN_PROGRESS (cancel without one). The records of every valid
        partition are one batch.
        """
        async with self._write_lock:
            await self._check_active()
            results: list[ReassignmentResult] = []
            records: list[MetadataRecord] = []
            for target in targets:
                try:
                    change = self._reassignment_change(target)
                except _ApiError as e:
                    results.append(ReassignmentResult(target.topic, target.partition, e.code, e.message))
                    continue
                except reassignments.ReassignmentError as e:
                    results.append(ReassignmentResult(target.topic, target.partition, e.code, e.message))
                    continue
                if change is not None:
                    records.append(change)
                results.append(ReassignmentResult(target.topic, target.partition))
            if records:
                await self._commit(records)
            return results

    def _reassignment_change(self, target: ReassignmentTarget) -> PartitionChangeRecord | None:
        topic = self._image.topics.get(target.topic)
        if topic is None:
            raise _ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {target.topic}.")
        p = topic.partitions.get(target.partition)
        if p is None:
            raise _ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Unable to find partition {target.topic}:{target.partition}.")
        if target.replicas is None:
            return reassignments.cancel(self._image, topic, p, self._unclean_default())
        self._validate_manual_assignment(target.replicas, None)
        if not target.allow_replication_factor_change:
            reassignments.check_replication_factor_unchanged(p, target.replicas)
        return reassignments.start_or_change(self._image, topic, p, tuple(target.replicas),
                                             self._unclean_default())

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        """ListPartitionReassignments: the ongoing ones among ``partitions`` (None: all). Unknown
        topics and partitions are left out, as Kafka does."""
        await self._check_active()
        out: list[OngoingReassignment] = []
        if partitions is None:
            for topic, p in self._all_partitions():
                entry = reassignments.ongoing(topic, p)
                if entry is not None:
                    out.append(entry)
            return out
        for name, index in partitions:
            named = self._image.topics.get(name)
            state = None if named is None else named.partitions.get(index)
            if named is not None and state is not None:
                found = reassignments.ongoing(named, state)
                if found is not None:
                    out.append(found)
        return out

    def _maybe_complete_reassignment(
        self, topic_id: uuid.UUID, partition: int, isr: Sequence[int] | None = None
    ) -> PartitionChangeRecord | None:
        """HOOK for ISR changes (``alter_partition``): the record completing the partition's
        reassignment once ``isr`` (default: the image's ISR) holds every target replica, else None.

        Call it under the write lock. Either after committing the ISR change (no ``isr``), then
        commit what it returns; or before, with the new ISR, and commit its record *instead of*
        the ISR change when it returns one (it carries the final ISR).
        """
        topic = self._image.topics_by_id.get(topic_id)
        p = None if topic is None else topic.partitions.get(partition)
        if topic is None or p is None:
            return None
        return reassignments.maybe_complete(self._image, topic, p, None if isr is None else tuple(isr),
                                            self._unclean_default())

    # ----------------------------------------------------------------------------------------
    # ACLs (CreateAcls / DeleteAcls; the logic is odradek.controller.acls)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[acls.AclCreateResult]:
        async with self._write_lock:
            await self._check_active()
            results, records = acls.create_acl_records(self._image.acls, bindings)
            if records:
                await self._commit(records)
            return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[acls.AclDeleteResult]:
        async with self._write_lock:
            await self._check_active()
            results, records = acls.delete_acl_records(self._image.acls, filters)
            if records:
                await self._commit(records)
            return results

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
            topic = self._image.topics_by_id.get(topic_id)
            if topic is None:
                return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)
            p = topic.partitions.get(partition)
            isr = tuple(new_isr)
            code = self._validate_alter_partition(topic, p, leader_id, leader_epoch, partition_epoch, isr,
                                                  broker_epochs or {})
            if code != ErrorCode.NONE or p is None:
                return AlterPartitionResult(code)
            if isr != p.isr:
                log.info("Node %d altered the ISR of %s-%d from %s to %s", leader_id, topic.name, partition,
                         list(p.isr), list(isr))
                await self._commit([PartitionChangeRecord(partition, topic_id, isr=isr)])
            # KIP-455: an ISR now holding every target replica completes the partition's reassignment.
            completion = self._maybe_complete_reassignment(topic_id, partition)
            if completion is not None:
                log.info("Reassignment of %s-%d completed by the ISR %s", topic.name, partition, list(isr))
                await self._commit([completion])
            p = self._image.topics_by_id[topic_id].partitions[partition]
            return AlterPartitionResult(ErrorCode.NONE, p.leader, p.leader_epoch, p.partition_epoch, p.isr)

    def _validate_alter_partition(self, topic: TopicImage, p: PartitionState | None, broker_id: int,
                                  leader_epoch: int, partition_epoch: int, isr: tuple[int, ...],
                                  broker_epochs: Mapping[int, int]) -> ErrorCode:
        """Kafka's validateAlterPartitionData, its checks in its order."""
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if leader_epoch > p.leader_epoch or partition_epoch > p.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if leader_epoch < p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != p.leader:
            log.info("Rejecting AlterPartition from node %d for %s-%d: the leader is %d", broker_id, topic.name,
                     p.partition, p.leader)
            return ErrorCode.INVALID_REQUEST
        if partition_epoch < p.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        if len(set(isr)) != len(isr) or any(b not in p.replicas for b in isr) or p.leader not in isr:
            log.error("Rejecting AlterPartition from node %d for %s-%d: invalid ISR %s", broker_id, topic.name,
                      p.partition, list(isr))
            return ErrorCode.INVALID_REQUEST
        # Kafka's ineligibleReplicasForIsr: not registered, fenced, a stale broker epoch (KIP-903), or
        # a replica its broker reported in a failed log dir (KIP-858: it holds no usable log).
        ineligible = [b for b in isr if not self._is_live(b) or not self._epoch_matches(b, broker_epochs.get(b, -1))
                      or b in p.offline_replicas]
        if ineligible:
            log.info("Rejecting AlterPartition from node %d for %s-%d: ineligible replicas %s (not registered, "
                     "fenced, offline, or a stale broker epoch in %s)", broker_id, topic.name, p.partition,
                     ineligible, dict(broker_epochs))
            return ErrorCode.INELIGIBLE_REPLICA
        return ErrorCode.NONE

    # ----------------------------------------------------------------------------------------
    # CreateTopics

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
            order: list[str] = []
            by_name: dict[str, CreatableTopic] = {}
            duplicates: set[str] = set()
            for t in topics:
                if t.name in by_name:
                    duplicates.add(t.name)
                else:
                    by_name[t.name] = t
                    order.append(t.name)
            if not internal and self._requests_too_many_partitions(topics):
                # Before any name is checked or replica placed: nothing proportional to the asked
                # count is allocated (a 2**31-1 partition request used to wedge the broker).
                return [CreateTopicResult(name, ErrorCode.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE)
                        for name in order]
            hosted = None if internal or self.max_broker_partitions is None else self._partitions_per_broker()
            results: dict[str, CreateTopicResult] = {}
            records: list[MetadataRecord] = []
            for name in order:
                if name in duplicates:
                    results[name] = CreateTopicResult(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                    continue
                try:
                    result, topic_records = self._create_topic(by_name[name], internal)
                    if hosted is not None:
                        self._reserve_broker_capacity(hosted, topic_records)
                except _ApiError as e:
                    results[name] = CreateTopicResult(name, e.code, e.message)
                    continue
                results[name] = result
                records.extend(topic_records)
            if records and not validate_only:
                await self._commit(records)
                warn_keys_without_effect(records)
            return [results[name] for name in order]

    def _requests_too_many_partitions(self, topics: Sequence[CreatableTopic]) -> bool:
        """Kafka's validateTotalNumberOfPartitions: assignments count when given, else num_partitions
        (-1: the default; other non-positive values add nothing, they fail on their own later)."""
        total = 0
        for t in topics:
            if t.assignments:
                total += len(t.assignments)
            elif t.num_partitions == -1:
                total += self.default_num_partitions
            elif t.num_partitions > 0:
                total += t.num_partitions
            if total > MAX_PARTITIONS_PER_BATCH:
                return True
        return False

    def _partitions_per_broker(self) -> dict[int, int]:
        """How many partition replicas each broker hosts now (for max.broker.partitions)."""
        hosted: dict[int, int] = {}
        for topic in self._image.topics.values():
            for p in topic.partitions.values():
                for b in p.replicas:
                    hosted[b] = hosted.get(b, 0) + 1
        return hosted

    def _reserve_broker_capacity(self, hosted: dict[int, int], records: Sequence[MetadataRecord]) -> None:
        """Count ``records``' new partitions into ``hosted``; refuse them all (and count none) if a
        broker would then host more than max.broker.partitions replicas."""
        adding: dict[int, int] = {}
        for record in records:
            if isinstance(record, PartitionRecord):
                for b in record.replicas:
                    adding[b] = adding.get(b, 0) + 1
        limit = self.max_broker_partitions
        assert limit is not None
        for b, n in sorted(adding.items()):
            if hosted.get(b, 0) + n > limit:
                raise _ApiError(ErrorCode.POLICY_VIOLATION,
                                f"Adding {n} partition replica(s) to broker {b}, which hosts {hosted.get(b, 0)}, "
                                f"would exceed max.broker.partitions ({limit}).")
        for b, n in adding.items():
            hosted[b] = hosted.get(b, 0) + n

    def _create_topic(
        self, topic: CreatableTopic, internal: bool
    ) -> tuple[CreateTopicResult, list[MetadataRecord]]:
        name = topic.name
        reason = invalid_topic_reason(name)
        if reason is not None:
            raise _ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if name == CLUSTER_METADATA_TOPIC:
            raise _ApiError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        # Internal-ness follows the name, as Kafka's Topic.isInternal: a __consumer_offsets created
        # through CreateTopics is as internal as the one the group coordinator creates.
        internal = internal or is_internal(name)
        if has_collision_chars(name):
            colliding = self._collisions.get(unify_collision_chars(name))
            if colliding and name not in colliding:
                raise _ApiError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {sorted(colliding)[0]}",
                )
        if name in self._image.topics:
            raise _ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        null_keys = [k for k, v in topic.configs.items() if v is None]
        if null_keys:
            raise _ApiError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(null_keys))
        configs: dict[str, str] = {k: v for k, v in topic.configs.items() if v is not None}
        try:
            validate_topic_configs(configs)
        except TopicConfigError as e:
            raise _ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None

        new_parts: dict[int, _NewPartition] = {}
        if topic.assignments:
            if topic.replication_factor != -1:
                raise _ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                "replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise _ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                "numPartitions was not set to -1.")
            replication_factor: int | None = None
            for assignment in topic.assignments:
                if assignment.partition_index in new_parts:
                    raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition "
                                    f"assignments for partition {assignment.partition_index}")
                replicas = tuple(assignment.broker_ids)
                self._validate_manual_assignment(replicas, replication_factor)
                replication_factor = len(replicas)
                isr = tuple(b for b in replicas if self._is_live(b))
                if not isr:
                    raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                                    f"partition assignment for partition {assignment.partition_index} are fenced "
                                    "or in controlled shutdown.")
                new_parts[assignment.partition_index] = _NewPartition(replicas, isr)
            for i in range(len(new_parts)):
                if i not in new_parts:
                    raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    "partitions should be a consecutive 0-based integer sequence")
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise _ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            "Replication factor must be larger than 0, or -1 to use the default value.")
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise _ApiError(ErrorCode.INVALID_PARTITIONS,
                            "Number of partitions was set to an invalid non-positive value.")
        else:
            num_partitions = self.default_num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = self.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            for index, replicas in enumerate(self._place(num_partitions, rf)):
                new_parts[index] = _NewPartition(replicas, tuple(b for b in replicas if self._is_live(b)))

        topic_id = new_kafka_uuid()
        records: list[MetadataRecord] = [TopicRecord(name, topic_id, is_internal=internal)]
        # Kafka writes ConfigRecords after the TopicRecord and before the PartitionRecords.
        for key in sorted(configs):
            records.append(ConfigRecord(ConfigResourceType.TOPIC, name, key, configs[key]))
        for index in sorted(new_parts):
            part = new_parts[index]
            records.append(PartitionRecord(
                partition_id=index, topic_id=topic_id, replicas=part.replicas, isr=part.isr,
                leader=part.isr[0], leader_epoch=0, partition_epoch=0,
            ))
        result = CreateTopicResult(
            name=name,
            topic_id=topic_id,
            num_partitions=len(new_parts),
            replication_factor=len(next(iter(new_parts.values())).replicas),
            configs=configs,
        )
        return result, records

    def _place(self, count: int, replication_factor: int) -> list[tuple[int, ...]]:
        # Kafka's placer is not told the first new partition's id (it ignores PlacementSpec's).
        usable = [UsableBroker(b.node_id, b.rack, b.fenced) for b in self._image.brokers.values()]
        try:
            placed = self._replica_placer.place(count, replication_factor, usable)
        except PlacementError as e:
            raise _ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the partition {replication_factor} time(s): {e}") from None
        for replicas in placed:
            if not any(self._is_live(b) for b in replicas):
                raise _ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"Unable to replicate the partition {replication_factor} time(s): All brokers "
                                "are currently fenced or in controlled shutdown.")
        return placed

    def _validate_manual_assignment(self, replicas: Sequence[int], replication_factor: int | None) -> None:
        if not replicas:
            raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "The manual partition assignment includes an empty replica list.")
        previous: int | None = None
        for broker_id in sorted(replicas):
            if broker_id not in self._image.brokers:
                raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                                f"broker {broker_id}, but no such broker is registered.")
            if broker_id == previous:
                raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                                f"the broker {previous} more than once.")
            previous = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a "
                            f"partition with {len(replicas)} replica(s), but this is not consistent with previous "
                            f"partitions, which have {replication_factor} replica(s).")

    # ----------------------------------------------------------------------------------------
    # DeleteTopics

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
        async with self._write_lock:
            await self._check_active()
            results: list[DeleteTopicResult] = []
            name_counts: dict[str, int] = {}
            for n in names:
                name_counts[n] = name_counts.get(n, 0) + 1
            id_counts: dict[uuid.UUID, int] = {}
            for i in topic_ids:
                if i == ZERO_UUID:
                    results.append(DeleteTopicResult(None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                                     "Neither topic name nor id were specified."))
                else:
                    id_counts[i] = id_counts.get(i, 0) + 1
            for n, c in name_counts.items():
                if c > 1:
                    results.append(DeleteTopicResult(n, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            for i, c in id_counts.items():
                if c > 1:
                    results.append(DeleteTopicResult(None, i, ErrorCode.INVALID_REQUEST, "Duplicate topic id."))
            to_delete: dict[uuid.UUID, str] = {}
            for i, c in id_counts.items():
                if c > 1:
                    continue
                topic = self._image.topics_by_id.get(i)
                if topic is None:
                    results.append(DeleteTopicResult(None, i, ErrorCode.UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID_MESSAGE))
                else:
                    to_delete[i] = topic.name
            for n, c in name_counts.items():
                if c > 1:
                    continue
                topic = self._image.topics.get(n)
                if topic is None:
                    results.append(DeleteTopicResult(n, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                     UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
                elif topic.topic_id in to_delete:
                    del to_delete[topic.topic_id]
                    results.append(DeleteTopicResult(n, topic.topic_id, ErrorCode.INVALID_REQUEST,
                                                     "The provided topic name maps to an ID that was already supplied."))
                else:
                    to_delete[topic.topic_id] = n
            if to_delete:
                await self._commit([RemoveTopicRecord(i) for i in to_delete])
            results.extend(DeleteTopicResult(n, i) for i, n in to_delete.items())
            return results

    # ----------------------------------------------------------------------------------------
    # CreatePartitions

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        """Add partitions to existing topics; one result per distinct name, in request order."""
        async with self._write_lock:
            await self._check_active()
            counts: dict[str, int] = {}
            for t in topics:
                counts[t.name] = counts.get(t.name, 0) + 1
            if self._adds_too_many_partitions(topics, counts):
                return [CreatePartitionsResult(name, ErrorCode.INVALID_PARTITIONS, EXCESSIVE_PARTITIONS_MESSAGE)
                        for name in counts]
            hosted = None if self.max_broker_partitions is None else self._partitions_per_broker()
            results: list[CreatePartitionsResult] = []
            records: list[MetadataRecord] = []
            seen: set[str] = set()
            for t in topics:
                if t.name in seen:
                    continue
                seen.add(t.name)
                if counts[t.name] > 1:
                    results.append(CreatePartitionsResult(t.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                    continue
                try:
                    new_records = self._create_partitions(t)
                    if hosted is not None:
                        self._reserve_broker_capacity(hosted, new_records)
                    records.extend(new_records)
                except _ApiError as e:
                    results.append(CreatePartitionsResult(t.name, e.code, e.message))
                    continue
                results.append(CreatePartitionsResult(t.name))
            if records and not validate_only:
                await self._commit(records)
            return results

    def _adds_too_many_partitions(self, topics: Sequence[CreatePartitionsTopic], counts: dict[str, int]) -> bool:
        """True if the request's existing, non-duplicate topics would gain more than
        MAX_PARTITIONS_PER_BATCH partitions in all (checked before any placement)."""
        total = 0
        for t in topics:
            topic = self._image.topics.get(t.name)
            if topic is None or counts[t.name] > 1:
                continue
            total += max(0, t.count - len(topic.partitions))
            if total > MAX_PARTITIONS_PER_BATCH:
                return True
        return False

    def _create_partitions(self, request: CreatePartitionsTopic) -> list[MetadataRecord]:
        topic = self._image.topics.get(request.name)
        if topic is None:
            raise _ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)
        current = len(topic.partitions)
        if request.count == current:
            raise _ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if request.count < current:
            raise _ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {request.name} currently has {current} "
                            f"partition(s); {request.count} would not be an increase.")
        additional = request.count - current
        if request.assignments is not None and len(request.assignments) != additional:
            raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional "
                            f"partition(s), but only {len(request.assignments)} assignment(s) were specified.")
        replication_factor = len(next(iter(topic.partitions.values())).replicas)
        placed: list[tuple[int, ...]]
        if request.assignments is not None:
            placed = []
            for i, broker_ids in enumerate(request.assignments):
                replicas = tuple(broker_ids)
                self._validate_manual_assignment(replicas, replication_factor)
                if not any(self._is_live(b) for b in replicas):
                    raise _ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                                    f"partition assignment for partition {current + i} are fenced or in "
                                    "controlled shutdown.")
                placed.append(replicas)
        else:
            placed = self._place(additional, replication_factor)
        records: list[MetadataRecord] = []
        for i, replicas in enumerate(placed):
            isr = tuple(b for b in replicas if self._is_live(b))
            records.append(PartitionRecord(partition_id=current + i, topic_id=topic.topic_id, replicas=replicas,
                                           isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0))
        return records

    # ----------------------------------------------------------------------------------------
    # Configs

    def describe_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides (a copy)."""
        topic = self._image.topics.get(name)
        if topic is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        return dict(topic.configs)

    def describe_broker_configs(self, name: str) -> dict[str, str]:
        """Dynamic broker config overrides for broker ``name`` ("" = cluster-wide default)."""
        return dict(self._image.broker_configs.get(name, {}))

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        """AlterUserScramCredentials (controller/scram_credentials.py): one atomic batch of records."""
        async with self._write_lock:
            await self._check_active()
            records, results = scram_credentials.alter(self._image.scram_credentials, deletions, upsertions)
            if records:
                await self._commit(records)
            return results

    async def alter_client_quotas(
        self, alterations: Sequence[client_quotas.ClientQuotaAlteration], validate_only: bool = False
    ) -> list[client_quotas.ClientQuotaAlterationResult]:
        """AlterClientQuotas (controller/client_quotas.py): one batch of ClientQuotaRecords."""
        async with self._write_lock:
            await self._check_active()
            records, results = client_quotas.alter_client_quotas(self._image, alterations)
            if records and not validate_only:
                await self._commit(records)
            return results

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
            counts: dict[tuple[int, str], int] = {}
            for r in resources:
                key = (r.resource_type, r.resource_name)
                counts[key] = counts.get(key, 0) + 1
            results: list[AlterConfigsResult] = []
            records: list[MetadataRecord] = []
            seen: set[tuple[int, str]] = set()
            for r in resources:
                key = (r.resource_type, r.resource_name)
                if key in seen:
                    continue
                seen.add(key)
                if counts[key] > 1:
                    results.append(AlterConfigsResult(*key, ErrorCode.INVALID_REQUEST,
                                                      "Each resource must appear at most once."))
                    continue
                try:
                    if incremental:
                        records.extend(self._incremental_config_records(r))
                    else:
                        records.extend(self._legacy_config_records(r))
                except _ApiError as e:
                    results.append(AlterConfigsResult(*key, e.code, e.message))
                    continue
                results.append(AlterConfigsResult(*key))
            if records and not validate_only:
                await self._commit(records)
                warn_keys_without_effect(records)
            return results

    def _current_configs(self, resource_type: int, name: str) -> dict[str, str]:
        if resource_type == ConfigResourceType.TOPIC:
            topic = self._image.topics.get(name)
            if topic is None:
                raise _ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            return topic.configs
        if resource_type == ConfigResourceType.BROKER:
            if name != "":
                try:
                    node_id = int(name)
                except ValueError:
                    raise _ApiError(ErrorCode.INVALID_REQUEST, f"Invalid broker name {name}") from None
                if node_id not in self._image.brokers:
                    raise _ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
            return self._image.broker_configs.get(name, {})
        if resource_type == ConfigResourceType.CLIENT_METRICS:
            if self._image.metadata_format < metadata_format.CLIENT_METRICS_CONFIGS:
                # A 0.1.0 broker could not read the records (it refuses a resource type it does not know).
                raise _ApiError(ErrorCode.UNSUPPORTED_VERSION,
                                "Client metrics subscriptions need every broker to run Odradek 0.2.0 or newer "
                                f"({metadata_format.FEATURE} level {metadata_format.CLIENT_METRICS_CONFIGS}); "
                                f"the metadata is at level {self._image.metadata_format}.")
            return self._image.client_metrics.get(name, {})
        raise _ApiError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource_type}")

    def _incremental_config_records(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        ops = resource.configs
        if isinstance(ops, dict):
            raise _ApiError(ErrorCode.INVALID_REQUEST, "IncrementalAlterConfigs needs per-key operations")
        names = [op.name for op in ops]
        if len(set(names)) != len(names):
            raise _ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        current = self._current_configs(resource.resource_type, resource.resource_name)
        new_values: dict[str, str | None] = {}
        for op in ops:
            new_values[op.name] = self._apply_op(resource.resource_type, op, current.get(op.name))
        return self._config_records(resource, current, new_values)

    def _apply_op(self, resource_type: int, op: AlterableConfig, current: str | None) -> str | None:
        try:
            kind = AlterConfigOp(op.op)
        except ValueError:
            raise _ApiError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.op}") from None
        if kind != AlterConfigOp.DELETE and op.value is None:
            raise _ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {op.name}")
        if kind == AlterConfigOp.SET:
            return op.value
        if kind == AlterConfigOp.DELETE:
            return None
        if resource_type != ConfigResourceType.TOPIC or not is_list_config(op.name):
            raise _ApiError(ErrorCode.INVALID_CONFIG,
                            f"Can't {kind.name} to key {op.name} because its type is not LIST.")
        base = current if current is not None else list_default(op.name)
        parts = [p for p in (base or "").split(",") if p]
        assert op.value is not None
        for item in op.value.split(","):
            if kind == AlterConfigOp.APPEND:
                if item not in parts:
                    parts.append(item)
            elif item in parts:
                parts.remove(item)
        return ",".join(parts)

    def _legacy_config_records(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        new_configs = resource.configs
        if not isinstance(new_configs, dict):
            raise _ApiError(ErrorCode.INVALID_REQUEST, "AlterConfigs needs a map of config values")
        current = self._current_configs(resource.resource_type, resource.resource_name)
        null_keys = [k for k, v in new_configs.items() if v is None]
        if null_keys:
            raise _ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(null_keys)}")
        new_values: dict[str, str | None] = dict(new_configs)
        for key in current:
            if key not in new_configs:
                new_values[key] = None  # legacy AlterConfigs replaces the whole set
        return self._config_records(resource, current, new_values)

    def _config_records(
        self, resource: AlterConfigsResource, current: dict[str, str], new_values: dict[str, str | None]
    ) -> list[MetadataRecord]:
        merged = dict(current)
        records: list[MetadataRecord] = []
        for key, value in new_values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
            # Kafka writes broker records even when unchanged, to trigger reloads (KAFKA-14136).
            if current.get(key) != value or resource.resource_type == ConfigResourceType.BROKER:
                records.append(ConfigRecord(resource.resource_type, resource.resource_name, key, value))
        if resource.resource_type == ConfigResourceType.TOPIC:
            try:
                validate_topic_configs(merged)
            except TopicConfigError as e:
                raise _ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if resource.resource_type == ConfigResourceType.CLIENT_METRICS:
            try:
                client_metrics_configs.validate(resource.resource_name, merged)
            except client_metrics_configs.ClientMetricsConfigError as e:
                raise _ApiError(e.code, str(e)) from None
        # TODO(broker configs): validate dynamic broker configs once broker/config/broker_config.py defines them.
        return records


def replay_batches(image: MetadataImage, batches: Iterable[MetadataBatch]) -> MetadataImage:
    """Apply ``batches`` to ``image`` (used by tools and tests to inspect a log without a controller)."""
    for batch in batches:
        for record in batch.records:
            apply(image, record)
    return image
