"""Transactional offset commits (Kafka's TxnOffsetCommit in OffsetMetadataManager): offsets a
transactional producer commits for a group, visible only when its transaction commits.

1. ``commit``: after the coordinator and group checks, the offsets are written to the group's
   ``__consumer_offsets`` partition as the producer's own transactional batch (its producer id and
   epoch, the next sequence of that producer on the partition, Kafka's OffsetCommitKey/Value), so
   the transaction's markers close it; once durable they are held as *pending* per producer id,
   not visible to OffsetFetch.
2. ``on_transaction_completed`` (the replica manager calls it when a marker lands on a
   ``__consumer_offsets`` partition led here): once the marker is durable (the high watermark
   passed it), COMMIT makes the producer's pending offsets of that partition's groups the
   committed ones, except where an ordinary commit was written after the transaction's offset
   record (the newer record wins, as in Kafka: ``offsets_to_commit``), ABORT drops them;
   applied through the coordinator runtime's queue (an operation with no records), in order
   with the partition's other writes. Nothing more is written: the
   marker itself is what a reload replays (the runtime's loader hands transactional records and
   markers to ``GroupShard``, as Kafka's CoordinatorLoaderImpl does), so there is no window
   between the marker and a second record.
3. ``install_pending`` (the shard's load ended): the offsets of transactions still open on the
   partition, rebuilt by the loader from the log, become pending again; ``unload`` drops the
   pending offsets of a partition led elsewhere now.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.coordinator.runtime import CoordinatorResult, CoordinatorShard
from odradek.broker.group import records as R
from odradek.broker.group.classic_group import ClassicGroup
from odradek.broker.group.context import OFFSETS_TOPIC, GroupContext
from odradek.broker.group.errors import commit_append_error
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch

if TYPE_CHECKING:
    from odradek.broker.group.classic_manager import ClassicGroupManager
    from odradek.broker.group.consumer_group import ConsumerGroupManager

log = logging.getLogger(__name__)

# topic, partition, offset, leader epoch, metadata
TxnCommitPartition = tuple[str, int, int, int, "str | None"]
Pending = dict[str, dict[tuple[str, int], R.OffsetAndMetadata]]  # group -> partition -> offset


class ProducerStates(Protocol):
    """What the replica manager tells of a __consumer_offsets partition's producers."""

    def next_producer_sequence(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> int: ...


class TxnOffsetManager:
    def __init__(self, ctx: GroupContext, classic: ClassicGroupManager, consumer: ConsumerGroupManager,
                 producers: ProducerStates | None = None) -> None:
        self.ctx = ctx
        self.classic = classic
        self.consumer = consumer
        self.producers = producers
        self.pending: dict[int, Pending] = {}  # producer id -> its uncommitted offsets

    def install_pending(self, loaded: dict[int, Pending]) -> None:
        """A partition loaded: its open transactions' offsets (producer id -> group -> offsets)."""
        for producer_id, groups in loaded.items():
            held = self.pending.setdefault(producer_id, {})
            for group, offsets in groups.items():
                held.setdefault(group, {}).update(offsets)

    def unload(self, partition: int) -> None:
        """The partition is led elsewhere now: its groups' pending offsets go with it."""
        for producer_id in list(self.pending):
            held = self.pending[producer_id]
            for group in [g for g in held if self.ctx.partition_for(g) == partition]:
                del held[group]
            if not held:
                del self.pending[producer_id]

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any((topic, partition) in p.get(group_id, {}) for p in self.pending.values())

    async def commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                     instance_id: str | None, generation_id: int,
                     partitions: list[TxnCommitPartition], api_version: int = 3) -> list[ErrorCode]:
        try:
            partition = self.ctx.check_coordinator(group_id)
            self._validate_group(group_id, member_id, instance_id, generation_id, api_version)
        except KafkaApiError as exc:
            return [ErrorCode(exc.code)] * len(partitions)
        image = self.ctx.metadata.image
        now = self.ctx.time_ms()
        max_metadata = self.ctx.config.offset_metadata_max_bytes
        errors: list[ErrorCode] = []
        to_write: list[tuple[tuple[str, int], R.OffsetAndMetadata]] = []
        for topic, index, offset, leader_epoch, metadata in partitions:
            if image.partition(topic, index) is None:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode("utf-8")) > max_metadata:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                to_write.append(((topic, index), R.OffsetAndMetadata(offset, leader_epoch, metadata or "", now)))
                errors.append(ErrorCode.NONE)
        if not to_write:
            return errors
        try:
            sequence = (self.producers.next_producer_sequence(OFFSETS_TOPIC, partition, producer_id, producer_epoch)
                        if self.producers is not None else 0)
            batch = encode_batch([Record(timestamp=now, key=R.offset_commit_key(group_id, t, p),
                                         value=R.offset_commit_value(om)) for (t, p), om in to_write],
                                 producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence,
                                 is_transactional=True)
            record_offset = await self.ctx.runtime.writer.append(OFFSETS_TOPIC, partition, batch)
        except KafkaApiError as exc:
            code = exc.code
            err = (ErrorCode.PRODUCER_FENCED if code == ErrorCode.INVALID_PRODUCER_EPOCH
                   else commit_append_error(code))
            return [err if e == ErrorCode.NONE else e for e in errors]
        held = self.pending.setdefault(producer_id, {}).setdefault(group_id, {})
        for tp, om in to_write:
            om.record_offset = record_offset
            held[tp] = om
        return errors

    def _validate_group(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                        api_version: int) -> None:
        """Kafka's checks of TxnOffsetCommit v3+'s group fields (a classic group's generation and
        member); a commit without them (generation -1) is always taken. A generation for a group
        the coordinator does not have is ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND from v6 (KIP-1319),
        as Kafka 4.4's OffsetMetadataManager answers."""
        streams = self.ctx.streams_groups.get(group_id)
        if streams is not None:
            # Kafka's StreamsGroup.validateOffsetCommit(isTransactional=true): the member and its epoch.
            streams.validate_offset_commit(member_id, generation_id, api_version, transactional=True)
            return
        group = self.classic.groups.get(group_id)
        if group is None and generation_id >= 0 and group_id not in self.consumer.groups:
            raise KafkaApiError(ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 6 else ErrorCode.ILLEGAL_GENERATION)
        if group is None or generation_id < 0:
            return
        from odradek.broker.group.offset_manager import validate_classic_offset_commit

        validate_classic_offset_commit(group, member_id, instance_id, generation_id)

    def on_transaction_completed(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        if topic != OFFSETS_TOPIC or not self._held_on(partition, producer_id):
            return
        writer = self.ctx.runtime.writer
        try:
            durable = writer.wait_for_high_watermark(OFFSETS_TOPIC, partition, writer.log_end_offset(OFFSETS_TOPIC, partition))
        except KafkaApiError:
            return  # no longer led here: the next leader replays the marker
        future = asyncio.ensure_future(durable)
        future.add_done_callback(functools.partial(self._marker_durable, partition, producer_id, commit))

    def _held_on(self, partition: int, producer_id: int) -> bool:
        held = self.pending.get(producer_id) or {}
        return any(self.ctx.partition_for(g) == partition for g in held)

    def _marker_durable(self, partition: int, producer_id: int, commit: bool, durable: asyncio.Future[int]) -> None:
        if durable.cancelled() or durable.exception() is not None:
            return  # the partition moved: its next leader replays the marker from the log
        self.ctx.runtime.schedule_write(partition, functools.partial(self._complete_op, partition, producer_id, commit),
                                        f"complete the transactional offsets of producer {producer_id}")

    def _complete_op(self, partition: int, producer_id: int, commit: bool, shard: CoordinatorShard) -> CoordinatorResult[None]:
        """No record: the marker is in the log already; only memory follows it."""
        def apply() -> None:
            held = self.pending.get(producer_id)
            if not held:
                return
            mine = {g: offsets for g, offsets in held.items() if self.ctx.partition_for(g) == partition}
            for g in mine:
                del held[g]
            if not held:
                del self.pending[producer_id]
            if commit:
                self._commit(mine)

        return CoordinatorResult([], None, apply)

    def _commit(self, offsets: Pending) -> None:
        for g, tps in offsets.items():
            target: Any = self.consumer.groups.get(g) or self.ctx.streams_groups.get(g) or self.classic.groups.get(g)
            if target is None:
                target = self.classic.groups[g] = ClassicGroup(g, self.ctx.partition_for(g),
                                                              current_time_ms=self.ctx.time_ms())
                target.current_state_timestamp = None
            target.offsets.update(offsets_to_commit(g, target.offsets, tps))


def offsets_to_commit(group_id: str, committed: Mapping[tuple[str, int], R.OffsetAndMetadata | None],
                      offsets: Mapping[tuple[str, int], R.OffsetAndMetadata]) -> dict[tuple[str, int], R.OffsetAndMetadata]:
    """Which of a committed transaction's offsets become the group's: each unless the group holds a
    newer record for that partition. An ordinary commit written between the transaction's offset
    record and its marker wins (Kafka's OffsetMetadataManager.replayEndTransactionMarker)."""
    taken: dict[tuple[str, int], R.OffsetAndMetadata] = {}
    for tp, om in offsets.items():
        current = committed.get(tp)
        if current is None or om.record_offset > current.record_offset:
            taken[tp] = om
        else:
            log.info("skipped the transactional offset %d of group %s for %s-%d: its record (offset %d) is "
                     "older than the committed offset's (%d)", om.committed_offset, group_id, tp[0], tp[1],
                     om.record_offset, current.record_offset)
    return taken
