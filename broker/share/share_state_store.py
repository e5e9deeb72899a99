"""``ShareStateStore``: share-partitions' durable state in ``__share_group_state`` (KIP-932's share
coordinator, Kafka 4.4's ShareCoordinatorShard), on the coordinator runtime.

The state of share-partition (group, topic id, partition) lives in partition
``partition_for("groupId:topicId:partition")`` of ``__share_group_state`` (Kafka's
ShareCoordinator.partitionFor: Utils.abs(String.hashCode) % partitions, the topic id in Kafka's
base64 form). Each partition's shard replays the ShareSnapshot and ShareUpdate records into the
latest state per share-partition (broker/share/share_state_records.py). A write appends a
ShareUpdate with the batches it changed, and a ShareSnapshot of the whole state once
``share.coordinator.snapshot.update.records.per.snapshot`` updates followed the last one (and on
the first write), as Kafka's ShareCoordinatorShard.generateShareStateRecord.

The share-partition leader reads and writes the shard directly when this broker leads the
state's partition; where another broker leads it (``where`` answers ELSEWHERE) the persister
(broker/share/share_persister.py) sends that broker the share coordinator's APIs (83-87), which
broker/share/share_coordinator.py serves there.

The topic is created (``share.coordinator.state.topic.*``; cleanup.policy=delete and
retention.ms=-1 as Kafka's) by the first share-partition that needs it, as Kafka's share
coordinator creates it on first use. Nothing deletes its records but the share coordinator itself
(Kafka's ShareCoordinatorService.setupRecordPruning): every
``share.coordinator.state.topic.prune.interval.ms`` each partition led here is cut, by
DeleteRecords on the leader (the followers follow its log start offset), below the oldest of its
share-partitions' latest snapshots - nothing a replay needs is lost: a key's latest snapshot and
the updates after it stay, and a deleted key holds nothing back. Every
``share.coordinator.cold.partition.snapshot.interval.ms`` a share-partition whose last snapshot
is that old is snapshotted again (Kafka's snapshotColdPartitions), so an idle one does not pin
the log.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import enum
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.coordinator.runtime import (
    NO_PRODUCER_ID,
    CoordinatorResult,
    CoordinatorRuntime,
    KeyValue,
    PartitionState,
    PartitionWriter,
)
from odradek.broker.share.share_state_records import (
    SNAPSHOT,
    CorruptShareStateRecord,
    ShareState,
    StateBatch,
    StateKey,
    batches_of,
    decode,
    encode_key,
    encode_snapshot,
    encode_update,
    merge_update,
    overlay,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient

STATE_TOPIC = "__share_group_state"
# Kafka's ShareCoordinatorConfig defaults.
DEFAULT_UPDATES_PER_SNAPSHOT = 500
DEFAULT_PRUNE_INTERVAL_MS = 300_000
DEFAULT_COLD_SNAPSHOT_INTERVAL_MS = 300_000

log = logging.getLogger(__name__)

# The share coordinator's message for a write or read from an older leader (Kafka's
# FencedLeaderEpochException, as its share coordinator answers it).
FENCED_LEADER_EPOCH_MESSAGE = "The leader epoch in the request is older than the epoch on the broker."


def _log_failure(what: str, written: asyncio.Future[None]) -> None:
    if not written.cancelled() and (exc := written.exception()) is not None \
            and not (isinstance(exc, KafkaApiError) and exc.code == ErrorCode.FENCED_LEADER_EPOCH):
        log.warning("could not %s: %s", what, exc)  # (a fenced write was logged when it was refused)


class Where(enum.Enum):
    READY = "ready"  # this broker leads the state's partition and has loaded it
    ABSENT = "absent"  # no __share_group_state yet (being created): no state is stored anywhere
    WAIT = "wait"  # the topic is being created or the partition loaded: try again shortly
    ELSEWHERE = "elsewhere"  # another broker leads it (or none does): memory only


def kafka_uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


class ShareStateShard:
    """One __share_group_state partition: the latest state of each share-partition in it, how many
    ShareUpdates followed each one's last ShareSnapshot, and where that snapshot sits in the log
    (Kafka's ShareCoordinatorShard and ShareCoordinatorOffsetsManager).

    Replay and the writes made here change it through the same three ``applied_*`` methods, so
    the state after a write is the state a later load replays."""

    def __init__(self, partition: int, updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT) -> None:
        self.partition = partition
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[StateKey, ShareState] = {}
        self.update_counts: dict[StateKey, int] = {}
        self.snapshot_offsets: dict[StateKey, int] = {}  # the latest snapshot's offset per live key
        self._redundant = -1  # records below it are needed by no share-partition (-1: none yet)

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        try:
            kind, k, body = decode(key, value)
        except CorruptShareStateRecord as exc:
            log.error("skipping unreadable %s record at offset %s: %s", STATE_TOPIC, offset, exc)
            return
        if body is None:
            self.applied_delete(k, offset)
        elif kind == SNAPSHOT:
            self.applied_snapshot(k, ShareState(body["start_offset"], body["state_epoch"], body["leader_epoch"],
                                                body["snapshot_epoch"], body["create_timestamp"],
                                                body["write_timestamp"], batches_of(body),
                                                body["delivery_complete_count"]), offset)
        elif (state := self.states.get(k)) is not None:
            merge_update(state, body)  # an update without a snapshot before it has nothing to amend
            self.update_counts[k] = self.update_counts.get(k, 0) + 1

    # -- what a record does ----------------------------------------------------------------------

    def applied_snapshot(self, key: StateKey, state: ShareState, offset: int) -> None:
        self.states[key] = state
        # Kafka resets the count only once it reached the limit (an initialize's snapshot keeps it).
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            self.update_counts[key] = 0
        self._snapshot_at(key, offset, deleted=False)

    def applied_update(self, key: StateKey, state: ShareState) -> None:
        self.states[key] = state
        self.update_counts[key] = self.update_counts.get(key, 0) + 1

    def applied_delete(self, key: StateKey, offset: int) -> None:
        self.states.pop(key, None)
        self.update_counts.pop(key, None)
        self._snapshot_at(key, offset, deleted=True)

    def _snapshot_at(self, key: StateKey, offset: int, deleted: bool) -> None:
        """Everything of ``key`` before its latest snapshot is redundant; a deleted key needs
        nothing (its tombstone counts once, as Kafka's offsets manager)."""
        self.snapshot_offsets[key] = offset
        self._redundant = min(self.snapshot_offsets.values())
        if deleted:
            del self.snapshot_offsets[key]

    def redundant_offset(self) -> int | None:
        """Kafka's lastRedundantOffset: the log may be deleted below this offset (None: nothing)."""
        return self._redundant if self._redundant > 0 else None

    # -- records for a write (Kafka's generateShareStateRecord) --------------------------------

    def state_record(self, key: StateKey, leader_epoch: int, start_offset: int, batches: list[StateBatch],
                     now: int, force_snapshot: bool = False, merged: list[StateBatch] | None = None,
                     delivery_complete_count: int | None = None) -> tuple[KeyValue, ShareState, bool]:
        """The record of a write of ``batches`` to the stored state of ``key`` (which exists),
        the state it leaves and whether it is a snapshot: a ShareUpdate with the write's batches,
        or, once ``updates_per_snapshot`` updates followed the last snapshot, a ShareSnapshot
        of the merged state. The start offset never moves back; leader epoch -1 keeps it.
        ``merged``: the state's batches after the write when the caller knows them already.
        ``delivery_complete_count``: the writer's (None keeps the state's), taken as Kafka's
        generateShareStateRecord takes it: as written for a start offset past the state's, the larger
        of the two for the same start offset, the state's for an older one (or -1, unchanged)."""
        cur = self.states[key]
        start = max(start_offset, cur.start_offset)
        epoch = leader_epoch if leader_epoch != -1 else cur.leader_epoch
        complete = cur.delivery_complete_count
        if delivery_complete_count is not None and start_offset >= cur.start_offset:
            complete = (delivery_complete_count if start_offset > cur.start_offset
                        else max(delivery_complete_count, complete))
        if force_snapshot or self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            whole = list(merged) if merged is not None else overlay([] if force_snapshot else cur.batches,
                                                                    batches, start)
            new = ShareState(start, cur.state_epoch, epoch, cur.snapshot_epoch + 1, now, now, whole, complete)
            return encode_snapshot(key, new), new, True
        changed = overlay([], batches, start)
        new = ShareState(start, cur.state_epoch, epoch, cur.snapshot_epoch, cur.create_timestamp, cur.write_timestamp,
                         list(merged) if merged is not None else overlay(cur.batches, changed, start), complete)
        return encode_update(key, cur.snapshot_epoch, epoch, start, changed, complete), new, False

    def cold_snapshots(self, now: int, interval_ms: int) -> list[tuple[StateKey, ShareState]]:
        """Kafka's snapshotColdPartitions: a new snapshot of every share-partition whose last one
        is ``interval_ms`` old, so that a share-partition nobody writes does not hold back pruning;
        nothing when every one was snapshotted so already."""
        if all(s.create_timestamp != s.write_timestamp for s in self.states.values()):
            return []
        return [(k, ShareState(s.start_offset, s.state_epoch, s.leader_epoch, s.snapshot_epoch + 1,
                               s.create_timestamp, now, list(s.batches), s.delivery_complete_count))
                for k, s in self.states.items() if now - s.write_timestamp >= interval_ms]

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass  # the share coordinator writes no transactions

    def on_loaded(self) -> None:
        pass

    def on_unloaded(self) -> None:
        pass


class StateTopicWriter(PartitionWriter, Protocol):
    """The partition writer, and DeleteRecords on the partitions led here (the pruning)."""

    def delete_records(self, topic: str, partition: int, offset: int) -> Awaitable[int]: ...


class ShareStateStore:
    def __init__(self, writer: StateTopicWriter, metadata: BrokerMetadata, controller_client: ControllerClient,
                 node_id: int, num_partitions: int, replication_factor: int, min_isr: int, segment_bytes: int,
                 local_store: bool, updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT,
                 prune_interval_ms: int = DEFAULT_PRUNE_INTERVAL_MS,
                 cold_snapshot_interval_ms: int = DEFAULT_COLD_SNAPSHOT_INTERVAL_MS,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self.writer = writer
        self.metadata = metadata
        self.controller_client = controller_client
        self.node_id = node_id
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.min_isr = min_isr
        self.segment_bytes = segment_bytes
        self.local_store = local_store
        self.prune_interval_ms = prune_interval_ms
        self.cold_snapshot_interval_ms = cold_snapshot_interval_ms
        self.clock_ms = clock_ms
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            STATE_TOPIC, writer, lambda p: ShareStateShard(p, updates_per_snapshot))
        self._creating: asyncio.Task[None] | None = None
        self._jobs: list[asyncio.Task[None]] = []
        self._last_pruned: dict[int, int] = {}

    async def start(self) -> None:
        topic = self.metadata.image.topics.get(STATE_TOPIC)
        led = [] if topic is None else [(p.partition, p.leader_epoch) for p in topic.partitions.values()
                                        if p.leader == self.node_id]
        self.runtime.start(led)
        loop = asyncio.get_running_loop()
        self._jobs = [loop.create_task(self._every(self.prune_interval_ms, self.prune)),
                      loop.create_task(self._every(self.cold_snapshot_interval_ms, self.snapshot_cold))]

    def shutdown(self) -> None:
        for job in self._jobs:
            job.cancel()
        self.runtime.shutdown()
        if self._creating is not None:
            self._creating.cancel()

    def state_partition(self, key: StateKey) -> int | None:
        """The __share_group_state partition of ``key`` (None before the topic exists)."""
        topic = self.metadata.image.topics.get(STATE_TOPIC)
        if topic is None or not topic.partitions:
            return None
        group_id, topic_id, partition = key
        return partition_for(f"{group_id}:{kafka_uuid_string(topic_id)}:{partition}", len(topic.partitions))

    def where(self, key: StateKey) -> Where:
        p = self.state_partition(key)
        if p is None:
            self._create_topic()
            return Where.ABSENT
        state = self.runtime.state(p)
        if state is PartitionState.ACTIVE:
            return Where.READY
        if state is PartitionState.LOADING:
            return Where.WAIT
        leader = self.metadata.image.partition(STATE_TOPIC, p)
        # Led here but not yet told to the runtime: the leadership callback is on its way.
        return Where.WAIT if leader is not None and leader.leader == self.node_id else Where.ELSEWHERE

    def read(self, key: StateKey) -> ShareState | None:
        p = self.state_partition(key)
        assert p is not None
        return self.runtime.shard(p).states.get(key)

    def write(self, key: StateKey, state: ShareState) -> asyncio.Future[None] | None:
        """Write ``state`` (the share-partition's whole state, leader epoch included): a ShareUpdate
        of the batches that changed, or a snapshot when one is due. The future answers once the
        record is durable and the shard shows it, or the error (logged too). A write from a leader
        older than the one whose epoch the state holds is refused with FENCED_LEADER_EPOCH (Kafka's
        share coordinator), so a leader that has not yet heard it lost the partition cannot undo
        its successor's writes. None when the state's partition is not served here (yet): nothing
        was written."""
        p = self.state_partition(key)
        if p is None or self.runtime.state(p) is not PartitionState.ACTIVE:
            return None

        def op(shard: ShareStateShard) -> CoordinatorResult[None]:
            now = self.clock_ms()
            old = shard.states.get(key)
            if old is not None and old.leader_epoch > state.leader_epoch:
                log.warning("refused a write of the share state of %s %s-%s at leader epoch %s: the state "
                            "holds leader epoch %s (FENCED_LEADER_EPOCH)", key[0], key[1], key[2],
                            state.leader_epoch, old.leader_epoch)
                raise KafkaApiError(ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER_EPOCH_MESSAGE)
            if old is None:
                new = ShareState(state.start_offset, state.state_epoch, state.leader_epoch, 0, now, now,
                                 list(state.batches), state.delivery_complete_count)
                return snapshot_result(shard, key, new)
            start = max(state.start_offset, old.start_offset)
            changed = changed_batches(old.batches, state.batches, start) if start == state.start_offset else None
            if changed is None:
                # No update of the changed batches rebuilds this state (a range left the window
                # above the start offset): the whole state, as a snapshot.
                record, new, is_snapshot = shard.state_record(
                    key, state.leader_epoch, state.start_offset, state.batches, now, force_snapshot=True,
                    delivery_complete_count=state.delivery_complete_count)
            else:
                record, new, is_snapshot = shard.state_record(key, state.leader_epoch, start, changed, now,
                                                              merged=state.batches,
                                                              delivery_complete_count=state.delivery_complete_count)
            return state_result(shard, key, record, new, is_snapshot)

        what = f"write the share state of {key[0]} {key[1]}-{key[2]}"
        written = self.runtime.write(p, op)
        written.add_done_callback(functools.partial(_log_failure, what))
        return written

    def record_leader_epoch(self, key: StateKey, leader_epoch: int) -> None:
        """A share-partition leader at ``leader_epoch`` read the state: a newer epoch than the one
        it holds is recorded, so older leaders' writes are fenced from now on (Kafka's
        readStateAndMaybeUpdateLeaderEpoch, for a read that needs no request: the state's partition
        is led here)."""
        p = self.state_partition(key)
        if p is None or self.runtime.state(p) is not PartitionState.ACTIVE:
            return

        def op(shard: ShareStateShard) -> CoordinatorResult[None]:
            cur = shard.states.get(key)
            if cur is None or cur.leader_epoch >= leader_epoch:
                return CoordinatorResult(records=[], response=None)
            record, new, is_snapshot = shard.state_record(key, leader_epoch, cur.start_offset, [], self.clock_ms())
            return state_result(shard, key, record, new, is_snapshot)

        self.runtime.schedule_write(p, op, f"record leader epoch {leader_epoch} of {key[0]} {key[1]}-{key[2]}")

    def delete(self, key: StateKey) -> None:
        """Drop the stored state (a tombstone, as Kafka's DeleteShareGroupState writes): the next
        share-partition starts again at share.auto.offset.reset."""
        p = self.state_partition(key)
        if p is None or self.runtime.state(p) is not PartitionState.ACTIVE or key not in self.runtime.shard(p).states:
            return

        self.runtime.schedule_write(p, lambda shard: delete_result(shard, key),
                                    f"delete the share state of {key[0]} {key[1]}-{key[2]}")

    # ------------------------------------------------------------------------------------------
    # the periodic jobs (Kafka's ShareCoordinatorService timers)

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                log.exception("a %s job failed", STATE_TOPIC)

    async def prune(self) -> None:
        """Delete each led partition's records below its last redundant offset (Kafka's
        performRecordPruning: skipped when nothing moved since the last prune)."""
        for p in sorted(self.runtime.active_partitions()):
            try:
                offset = self.runtime.shard(p).redundant_offset()
            except KafkaApiError:
                continue  # resigned meanwhile
            if offset is None or self._last_pruned.get(p) == offset:
                continue
            try:
                await self.writer.delete_records(STATE_TOPIC, p, offset)
            except KafkaApiError as exc:
                log.warning("could not prune %s-%d below offset %d: %s", STATE_TOPIC, p, offset, exc.code.name)
                continue
            log.debug("pruned %s-%d below offset %d", STATE_TOPIC, p, offset)
            self._last_pruned[p] = offset

    async def snapshot_cold(self) -> None:
        """Snapshot again the share-partitions whose last snapshot is older than the interval."""
        for p in sorted(self.runtime.active_partitions()):
            def op(shard: ShareStateShard) -> CoordinatorResult[None]:
                cold = shard.cold_snapshots(self.clock_ms(), self.cold_snapshot_interval_ms)

                def apply_at(last: int) -> None:
                    for i, (k, new) in enumerate(cold):
                        shard.applied_snapshot(k, new, last - len(cold) + 1 + i)
                return CoordinatorResult(records=[encode_snapshot(k, new) for k, new in cold], apply_at=apply_at)
            self.runtime.schedule_write(p, op, f"snapshot cold share-partitions of {STATE_TOPIC}-{p}")

    def _create_topic(self) -> None:
        if self._creating is not None and not self._creating.done():
            return
        self._creating = asyncio.get_running_loop().create_task(self._create())

    async def _create(self) -> None:
        live = len(self.metadata.image.live_broker_ids())
        rf = self.replication_factor
        if self.local_store:  # one node
            rf = min(rf, max(live, 1))
        elif live < rf:
            log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for the "
                        "share-group state topic (configured via 'share.coordinator.state.topic.replication.factor')",
                        live, rf)
            return
        configs = {"cleanup.policy": "delete", "retention.ms": "-1",
                   "min.insync.replicas": str(min(self.min_isr, rf)), "segment.bytes": str(self.segment_bytes)}
        try:
            result = await self.controller_client.create_internal_topic(STATE_TOPIC, self.num_partitions, rf, configs)
        except KafkaApiError as exc:
            log.warning("could not create %s: %s", STATE_TOPIC, exc.code.name)
            return
        if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("could not create %s: %s %s", STATE_TOPIC, result.error_code, result.error_message)


def changed_batches(old: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch] | None:
    """The batches of ``new`` that ``old`` does not hold as they are - what a write changed, an
    update that turns ``old`` into ``new`` at ``start_offset`` - or None when no update does (a
    batch of ``old`` above the start offset that ``new`` neither keeps nor covers). Two set
    lookups per batch: an acknowledgement meets a window of thousands of batches on every write."""
    if new and new[0][0] < start_offset:
        return None
    held, kept = set(old), set(new)
    changed = [b for b in new if b not in held]
    lasts = [b[1] for b in changed]
    for b in old:
        if b[1] < start_offset or b in kept:
            continue
        # Gone from ``new``: its offsets from the start offset on must all be in changed batches.
        at, la = max(b[0], start_offset), b[1]
        i = bisect.bisect_left(lasts, at)
        while at <= la:
            if i >= len(changed) or changed[i][0] > at:
                return None
            at = changed[i][1] + 1
            i += 1
    return changed


def unchanged_dropped(old: list[StateBatch], batches: list[StateBatch]) -> list[StateBatch]:
    """A write's ``batches`` without those ``old`` holds as they are: laying them over ``old``
    gives the same state (an update of disjoint batches replaces only what each covers). Overlapping
    batches are kept whole: which one wins is the merge's to decide."""
    ordered = sorted(batches)
    if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:], strict=False)):
        return batches
    held = set(old)
    return [b for b in ordered if b not in held]


def state_result(shard: ShareStateShard, key: StateKey, record: KeyValue, new: ShareState,
                 is_snapshot: bool, response: Any = None) -> CoordinatorResult[Any]:
    """A write of ``record`` that leaves ``new``; a snapshot's offset is what pruning looks at."""
    if is_snapshot:
        return CoordinatorResult(records=[record], response=response,
                                 apply_at=lambda offset: shard.applied_snapshot(key, new, offset))
    return CoordinatorResult(records=[record], response=response, apply=lambda: shard.applied_update(key, new))


def snapshot_result(shard: ShareStateShard, key: StateKey, new: ShareState, response: Any = None) -> CoordinatorResult[Any]:
    return state_result(shard, key, encode_snapshot(key, new), new, True, response)


def delete_result(shard: ShareStateShard, key: StateKey, response: Any = None) -> CoordinatorResult[Any]:
    """A tombstone (Kafka's DeleteShareGroupState record)."""
    return CoordinatorResult(records=[(encode_key(key), None)], response=response,
                             apply_at=lambda offset: shard.applied_delete(key, offset))
