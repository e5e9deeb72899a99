"""Leadership and log lifecycle: the metadata's partitions turned into this broker's Partitions
(Kafka's ReplicaManager.applyDelta with makeLeaders / makeFollowers, and the LogManager's side of
topic creation and deletion).

Every partition hosted here gets a :class:`~odradek.broker.replica.partition.Partition` over its storage
``Log`` once the log exists, with the leader epoch, replicas and ISR the controller assigned. From
each committed metadata change: new followers and new leader epochs are handed to the replica
fetchers, new leaders and deleted partitions taken from them; listeners hear of leaderships won and
lost (the coordinators load and unload their partitions); topic config and dynamic broker config
changes reach the logs.

Log creation and deletion block (a 10,000-partition topic takes seconds of file creation), so they
run on one log-admin thread in delta order - a topic deleted and re-created under the same name
has its old logs removed before the new ones are made - and a partition is registered once its
log exists. A topic whose logs could not be made answers KAFKA_STORAGE_ERROR to CreateTopics /
CreatePartitions / auto-creation (``wait_for_logs``) and to requests for its partitions
(``storage_failure``), and the creation is retried on those requests at most once a second (a
transient EMFILE passes). Logs the metadata does not know are renamed ``-stray`` at start-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from odradek.broker.replica.append_lane import AppendLane
from odradek.broker.replica.high_watermark_checkpoint import read_high_watermarks
from odradek.broker.replica.partition import Partition
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms
from odradek.storage.errors import KafkaStorageError
from odradek.storage.log_config import LogConfig
from odradek.storage.partition_metadata import topic_id_to_str

if TYPE_CHECKING:
    from odradek.broker.replica.log_defaults import LogDefaults
    from odradek.broker.replica.replica_fetcher import ReplicaFetcherManager
    from odradek.controller.image import MetadataDelta, MetadataImage, TopicImage
    from odradek.storage.log_manager import LogManager
    from odradek.storage.results import AppendInfo

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# What creating a topic's local logs needs: name, topic id, log config, hosted partition indexes.
HostedSnapshot = tuple[str, str, LogConfig, list[int]]

# A topic whose local logs could not be made is retried (on the next request for one of its
# partitions) at most this often: a transient EMFILE passes, an offline dir fails fast again.
LOG_CREATION_RETRY_S = 1.0


class PartitionLeadership:
    """Keeps ``partitions`` (the replica manager's table) in step with the metadata image."""

    def __init__(self, node_id: int, image: Callable[[], MetadataImage], log_manager: LogManager,
                 defaults: LogDefaults, partitions: dict[TopicPartition, Partition],
                 fetchers: ReplicaFetcherManager, io_pool: Executor,
                 after_leader_append: Callable[[Partition, AppendInfo], None],
                 wake: Callable[[TopicPartition], None]) -> None:
        """``after_leader_append`` is what an append lane calls when it appended (the replica
        manager's metrics and HW step); ``wake(key)`` answers what waits on a partition."""
        self.node_id = node_id
        self._image = image
        self.log_manager = log_manager
        self.defaults = defaults
        self.partitions = partitions
        self.fetchers = fetchers
        self.io_pool = io_pool
        self._after_leader_append = after_leader_append
        self._wake = wake
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leader_listeners: list[Callable[[str, int, int], None]] = []
        self._resign_listeners: list[Callable[[str, int], None]] = []
        self._log_admin = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-log-admin")
        self._pending_logs: dict[str, asyncio.Future[Any]] = {}
        # Topics whose logs could not all be opened or created here: (reason, monotonic time).
        self._log_failures: dict[str, tuple[str, float]] = {}
        # replication-offset-checkpoint's HWs, taken by the partitions made at start-up.
        self._checkpointed_hws: dict[TopicPartition, int] = {}

    def on_become_leader(self, callback: Callable[[str, int, int], None]) -> None:
        self._leader_listeners.append(callback)

    def on_resign(self, callback: Callable[[str, int], None]) -> None:
        self._resign_listeners.append(callback)

    # -- start-up and shutdown ----------------------------------------------------------------

    async def open_logs(self, image: MetadataImage) -> None:
        """Load the log dirs and open the logs of every hosted partition (a topic whose logs fail
        stays unserved, KAFKA_STORAGE_ERROR; the others start)."""
        self._loop = asyncio.get_running_loop()
        self.log_manager.cluster_id = image.cluster_id
        # Dynamic broker defaults stored by the controller apply from the first log opened.
        self._apply_broker_defaults(image)
        topic_configs = {name: self.defaults.topic_log_config(t) for name, t in image.topics.items()}
        await self._io(self.log_manager.startup, topic_configs)
        self._checkpointed_hws = await self._io(read_high_watermarks, self.log_manager.online_dirs())
        for topic in list(image.topics.values()):
            try:
                await self._io(self._open_logs, self._hosted_snapshot(topic))
            except KafkaStorageError as exc:
                log.error("Cannot open the logs of %s: %s", topic.name, exc)
                self._log_failures[topic.name] = (str(exc), time.monotonic())

    async def serve(self, image: MetadataImage) -> None:
        """Make the partitions of ``image``, put aside stray logs; then follow each delta (the caller
        subscribes :meth:`on_delta`)."""
        self.apply(image, set(image.topics))
        await self._io(self._delete_strays, image)

    def close_log_admin(self) -> None:
        self._log_admin.shutdown(wait=True)

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.io_pool, fn, *args)

    # -- logs ---------------------------------------------------------------------------------

    def _hosted_snapshot(self, topic: TopicImage) -> HostedSnapshot:
        """What creating a topic's local logs needs, copied on the loop (the image is loop-owned)."""
        indexes = [p.partition for p in topic.partitions.values() if self.node_id in p.replicas]
        return topic.name, topic_id_to_str(topic.topic_id), self.defaults.topic_log_config(topic), indexes

    def _open_logs(self, snapshot: HostedSnapshot) -> None:
        """Blocking: open or create the local logs of a topic's partitions hosted here.

        Tries every partition; KafkaStorageError (the first reason, and how many failed) if any
        log could not be opened or created.
        """
        name, tid, config, indexes = snapshot
        failed: list[KafkaStorageError] = []
        for index in indexes:
            try:
                self.log_manager.get_or_create_log(name, index, tid, config)
            except KafkaStorageError as exc:
                failed.append(exc)
        if len(failed) == 1:
            raise failed[0]
        if failed:
            raise KafkaStorageError(f"{failed[0]} (and {len(failed) - 1} more partitions of {name})")

    def _delete_strays(self, image: MetadataImage) -> None:
        """Logs the metadata does not know (a crash between a topic deletion's commit and its log
        removal, or lost metadata) are renamed ``-stray``, not deleted, and never served."""
        for (topic, partition), lg in list(self.log_manager.all_logs().items()):
            t = image.topics.get(topic)
            if t is None or partition not in t.partitions or (
                lg.topic_id is not None and lg.topic_id != topic_id_to_str(t.topic_id)
            ):
                target = self.log_manager.mark_stray(topic, partition)
                log.warning("log %s-%d is not in the cluster metadata; kept as %s", topic, partition, target)

    def _delete_topic_logs(self, topic: str, partitions: list[int]) -> None:
        for index in partitions:
            try:
                self.log_manager.delete_log(topic, index)
            except KafkaStorageError as exc:
                log.warning("could not delete %s-%d: %s", topic, index, exc)

    def _log_admin_job(self, topic: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run blocking log creation/deletion on the single log-admin thread, in delta order.

        One thread, so a topic deleted and re-created under the same name has its old logs
        removed before the new ones are made. When a job ends, the topic's partitions are
        (re)registered from the then-current image.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._log_admin, fn, *args)
        self._pending_logs[topic] = future

        def done(f: asyncio.Future[Any]) -> None:
            if self._pending_logs.get(topic) is f:
                del self._pending_logs[topic]
            if f.cancelled():
                return
            exc = f.exception()
            if isinstance(exc, KafkaStorageError):
                log.error("Creating or deleting logs of %s failed: %s", topic, exc)
                self._log_failures[topic] = (str(exc), time.monotonic())
            else:
                self._log_failures.pop(topic, None)
                if exc is not None:
                    log.error("creating or deleting logs of %s failed", topic, exc_info=exc)
            self.apply(self._image(), {topic})

        future.add_done_callback(done)

    async def wait_for_logs(self, topics: Iterable[str]) -> dict[str, KafkaApiError]:
        """Wait until pending log creation/deletion for these topics is done (CreateTopics,
        CreatePartitions and auto-creation answer after it, so a Produce that follows succeeds).

        Returns the topics whose logs could not be made, with the error to answer: a topic the
        controller created but whose log does not exist here must not be reported as a success
        (KAFKA_STORAGE_ERROR with the reason; UNKNOWN_SERVER_ERROR for an unexpected failure).
        """
        pending = {t: f for t in topics if (f := self._pending_logs.get(t)) is not None}
        if not pending:
            return {}
        outcomes = await asyncio.gather(*pending.values(), return_exceptions=True)
        errors: dict[str, KafkaApiError] = {}
        for topic, outcome in zip(pending, outcomes, strict=True):
            if isinstance(outcome, KafkaApiError):
                errors[topic] = outcome
            elif isinstance(outcome, BaseException):
                errors[topic] = KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Creating the logs of {topic} failed")
        return errors

    def storage_failure(self, topic: TopicImage) -> str | None:
        """Why the logs of ``topic`` could not be made here (None: they were, or are being made); a
        failed topic is tried again, at most once a second."""
        failure = self._log_failures.get(topic.name)
        if failure is None:
            return None
        if topic.name not in self._pending_logs and time.monotonic() - failure[1] >= LOG_CREATION_RETRY_S:
            self._log_failures[topic.name] = (failure[0], time.monotonic())
            self._log_admin_job(topic.name, self._open_logs, self._hosted_snapshot(topic))
        return failure[0]

    # -- append lanes (a topic that recompresses, broker/replica/append_lane.py) ----------------

    def leads_at(self, part: Partition, leader_epoch: int) -> bool:
        """``part`` is still hosted and led here, at ``leader_epoch`` (an append lane's entry)."""
        return (self.partitions.get((part.topic, part.index)) is part and part.leader == self.node_id
                and part.leader_epoch == leader_epoch)

    def _sync_append_lane(self, part: Partition) -> None:
        """Give ``part`` an append lane when its topic recompresses (a lane whose topic stopped
        retires itself once empty)."""
        if part.append_lane is None and part.log.config.recompression is not None and self._loop is not None:
            part.append_lane = AppendLane(part, self.io_pool, self._loop, self.leads_at, self._after_leader_append)

    def _sync_append_lanes(self, topic: TopicImage) -> None:
        for index in topic.partitions:
            part = self.partitions.get((topic.name, index))
            if part is not None:
                self._sync_append_lane(part)

    # -- leadership ---------------------------------------------------------------------------

    def apply(self, image: MetadataImage, topics: set[str]) -> None:
        """Bring hosted partitions to the image's leadership; start and stop following them
        (Kafka's makeLeaders / makeFollowers)."""
        follow: dict[TopicPartition, tuple[int, int, Any, int]] = {}
        unfollow: list[TopicPartition] = []
        for name in topics:
            topic = image.topics.get(name)
            if topic is None:
                continue
            for p in topic.partitions.values():
                key = (name, p.partition)
                if self.node_id not in p.replicas:
                    continue
                part = self.partitions.get(key)
                created = part is None
                if part is None:
                    lg = self.log_manager.get_log(name, p.partition)
                    if lg is None or (lg.topic_id is not None and lg.topic_id != topic_id_to_str(topic.topic_id)):
                        continue  # its log is still being created (or belongs to a deleted namesake)
                    part = self.partitions[key] = Partition(name, p.partition, topic.topic_id, lg)
                    self._sync_append_lane(part)
                    checkpointed = self._checkpointed_hws.pop(key, None)
                    if checkpointed is not None:
                        part.restore_high_watermark(checkpointed)
                part.is_internal = topic.is_internal
                was_leader = part.leader == self.node_id
                moved = not created and (part.leader != p.leader or part.leader_epoch != p.leader_epoch)
                isr_changed = part.isr != p.isr
                if isr_changed or moved or created or part.partition_epoch != p.partition_epoch:
                    # Newer metadata ends an AlterPartition in flight (Kafka's makeLeader: the committed
                    # state replaces a pending one; its answer, if it comes, is ignored).
                    part.set_committed_isr(p.isr, p.partition_epoch)
                part.leader, part.leader_epoch = p.leader, p.leader_epoch
                part.replicas = p.replicas
                if p.leader == self.node_id:
                    if moved or created:
                        part.reset_follower_states(now_ms())  # followers' positions unknown until they fetch
                        # Kafka's makeLeader: the ISR may be this broker alone (HW = log end).
                        part.maybe_increment_high_watermark()
                        unfollow.append(key)
                    elif isr_changed:
                        # A smaller ISR may let the HW move (and acks=-1 produces answer, or fail
                        # with NOT_ENOUGH_REPLICAS_AFTER_APPEND below min.insync.replicas).
                        part.maybe_increment_high_watermark()
                        self._wake(key)
                if moved:
                    # Requests waiting on the old leadership answer now (fenced or not leader).
                    self._wake(key)
                if p.leader != self.node_id and (moved or created):
                    # A follower (again, or under a new leader epoch): truncate, then fetch.
                    follow[key] = (p.leader, p.leader_epoch, topic.topic_id, part.log_end_offset)
                if p.leader == self.node_id and not was_leader:
                    for on_leader in self._leader_listeners:
                        on_leader(name, p.partition, p.leader_epoch)
                elif was_leader and p.leader != self.node_id:
                    for on_resign in self._resign_listeners:
                        on_resign(name, p.partition)
        if unfollow:
            self.fetchers.remove_partitions(unfollow)
        if follow:
            self.fetchers.add_partitions(follow)

    def on_delta(self, delta: MetadataDelta) -> None:
        """Called on the handler loop after each committed metadata change."""
        image = self._image()
        for name, old in delta.deleted_topics.items():
            for index in old.partitions:
                part = self.partitions.pop((name, index), None)
                self.fetchers.remove_partitions([(name, index)])
                if part is not None:
                    # Waiting requests on a deleted partition answer now (with its error).
                    self._wake((name, index))
                    for cb in self._resign_listeners:
                        cb(name, index)
            self._log_admin_job(name, self._delete_topic_logs, name, list(old.partitions))
        touched = set(delta.created_topics) | {t for t, _ in delta.changed_partitions}
        for name in touched:
            topic = image.topics.get(name)
            if topic is not None:
                # Partitions already hosted keep serving; new ones are registered once their logs
                # exist (a 10,000-partition topic takes seconds of file creation, which must not
                # stall the loop). Until then they answer NOT_LEADER_OR_FOLLOWER, which clients retry.
                self.apply(image, {name})
                self._log_admin_job(name, self._open_logs, self._hosted_snapshot(topic))
        for name in delta.changed_topic_configs:
            topic = image.topics.get(name)
            if topic is not None:
                self.log_manager.update_config(name, self.defaults.topic_log_config(topic))
                self._sync_append_lanes(topic)
        if delta.changed_broker_configs:
            self._reload_broker_defaults(image)
        if delta.changed_brokers:
            self._refollow(image, delta.changed_brokers)

    def _refollow(self, image: MetadataImage, brokers: set[int]) -> None:
        """Leaders that (re)registered: follow their partitions not yet followed at that endpoint
        (a leader unknown when its partition became a follower, or moved to another port)."""
        follow: dict[TopicPartition, tuple[int, int, Any, int]] = {}
        for key, part in self.partitions.items():
            leader = part.leader
            if leader in brokers and leader != self.node_id and leader >= 0:
                reg = image.brokers.get(leader)
                endpoint = (reg.host, reg.port) if reg is not None else None
                if endpoint is not None and not self.fetchers.follows(key, endpoint):
                    follow[key] = (leader, part.leader_epoch, part.topic_id, part.log_end_offset)
        if follow:
            self.fetchers.add_partitions(follow)

    def _apply_broker_defaults(self, image: MetadataImage) -> None:
        """The controller-stored dynamic broker configs: log.* keys become the topic defaults, and
        producer.id.expiration.ms reaches the logs already open (at start-up there are none)."""
        if self.defaults.apply(image):
            self.log_manager.set_producer_id_expiration_ms(self.defaults.producer_id_expiration_ms)

    def _reload_broker_defaults(self, image: MetadataImage) -> None:
        """A dynamic broker config change: new defaults, then every topic's log config again."""
        self._apply_broker_defaults(image)
        for name, topic in image.topics.items():
            self.log_manager.update_config(name, self.defaults.topic_log_config(topic))
            self._sync_append_lanes(topic)
