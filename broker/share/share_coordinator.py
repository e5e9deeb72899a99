"""``ShareCoordinator``: the share coordinator's operations on the ``__share_group_state``
partitions this broker leads (Kafka 4.4's ShareCoordinatorService and ShareCoordinatorShard),
behind InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87).

Each operation is for one share-partition (group id, topic id, partition) and runs on the shard
of its state partition (``ShareStateStore.state_partition``) through the coordinator runtime:
the runtime's errors come first, as Kafka's scheduleWriteOperation/scheduleReadOperation give
them (COORDINATOR_NOT_AVAILABLE before start, NOT_COORDINATOR where another broker leads the
partition, COORDINATOR_LOAD_IN_PROGRESS while it loads), then the shard's checks in Kafka's order:

- initialize: a negative partition or state epoch is INVALID_REQUEST; a state epoch below the
  stored one FENCED_STATE_EPOCH; an unknown topic id or partition UNKNOWN_TOPIC_OR_PARTITION; then a
  ShareSnapshot with the new start offset and state epoch, no batches (leader epoch -1), always.
- read: a negative partition or leader epoch INVALID_REQUEST; no state ("Read operation on
  uninitialized share partition not allowed.") INVALID_REQUEST; a leader epoch below the stored
  one FENCED_LEADER_EPOCH; unknown topic. A read with a newer leader epoch writes it (an update, or a
  snapshot when one is due).
- write: negative partition, leader epoch or state epoch INVALID_REQUEST; no state ("Write
  operation on uninitialized ...") INVALID_REQUEST; an older leader epoch FENCED_LEADER_EPOCH, an
  older state epoch FENCED_STATE_EPOCH; unknown topic. The request's batches replace the offsets
  they cover in the stored state, batches below the start offset go (the start offset never moves
  back); the stored leader and state epochs stay (Kafka 4.4's writeState: only a read records a
  leader epoch, only an initialize a state epoch). Written as a ShareUpdate of the request's
  batches, or a ShareSnapshot of the merged state once
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates followed the last one.
- delete: negative partition INVALID_REQUEST, unknown topic; a tombstone where there is state,
  nothing (and no error) where there is none.
- summary: negative partition INVALID_REQUEST, unknown topic; an unknown share-partition reads as
  start offset -1, leader and state epoch 0 (Kafka's answer), else the stored values.

Records and their choice: broker/share/share_state_store.py's ShareStateShard.state_record.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.coordinator.runtime import CoordinatorResult
from odradek.broker.share.share_state_records import ShareState, StateBatch, StateKey
from odradek.broker.share.share_state_store import (
    FENCED_LEADER_EPOCH_MESSAGE,
    STATE_TOPIC,
    delete_result,
    snapshot_result,
    state_result,
    unchanged_dropped,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.share.share_state_store import ShareStateShard, ShareStateStore

# Kafka's messages (ShareCoordinatorShard's exceptions and Errors' default messages).
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.FENCED_LEADER_EPOCH: FENCED_LEADER_EPOCH_MESSAGE,
    ErrorCode.FENCED_STATE_EPOCH: "The coordinator rejected the request because the state epoch did not match.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}
# Storage errors of a failed append, as Kafka's CoordinatorOperationExceptionHelper maps them.
_APPEND_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                 ErrorCode.COORDINATOR_NOT_AVAILABLE})


@dataclass
class Outcome:
    """One share-partition's answer: an error, or (read, summary) its state."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state: ShareState | None = None
    batches: list[StateBatch] = field(default_factory=list)


def error(code: int, message: str | None = None) -> Outcome:
    return Outcome(code, message if message is not None else MESSAGES.get(ErrorCode(code)))


class ShareCoordinator:
    def __init__(self, store: ShareStateStore, metadata: BrokerMetadata,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.metadata = metadata
        self.clock_ms = clock_ms

    # ------------------------------------------------------------------------------------------
    # the five operations

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> Outcome:
        def op(shard: ShareStateShard) -> CoordinatorResult[Outcome]:
            if key[2] < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID))
            if state_epoch < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH))
            old = shard.states.get(key)
            if old is not None and old.state_epoch > state_epoch:
                return _answer(error(ErrorCode.FENCED_STATE_EPOCH))
            if not self._known(key):
                return _answer(error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            now = self.clock_ms()
            # Kafka's ShareGroupOffset.fromRequest: leader epoch 0, nothing delivered yet (a
            # delivery-complete count of 0; -1, unknown, for the start offset -1, not yet known).
            new = ShareState(start_offset, state_epoch, 0, 0 if old is None else old.snapshot_epoch + 1, now, now,
                             delivery_complete_count=-1 if start_offset == -1 else 0)
            return snapshot_result(shard, key, new, Outcome())
        return await self._write(key, op)

    async def read(self, key: StateKey, leader_epoch: int) -> Outcome:
        def op(shard: ShareStateShard) -> CoordinatorResult[Outcome]:
            if key[2] < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID))
            if leader_epoch < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_LEADER_EPOCH))
            old = shard.states.get(key)
            if old is None:
                return _answer(error(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED))
            if old.leader_epoch > leader_epoch:
                return _answer(error(ErrorCode.FENCED_LEADER_EPOCH))
            if not self._known(key):
                return _answer(error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            answer = Outcome(state=old, batches=list(old.batches))
            if old.leader_epoch == leader_epoch:
                return _answer(answer)
            # The share-partition has a new leader: its epoch is recorded, so the old leader's
            # writes are fenced from now on (Kafka's readStateAndMaybeUpdateLeaderEpoch).
            record, new, is_snapshot = shard.state_record(key, leader_epoch, old.start_offset, [], self.clock_ms())
            return state_result(shard, key, record, new, is_snapshot, answer)
        return await self._write(key, op)

    async def write(self, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch], delivery_complete_count: int = -1) -> Outcome:
        def op(shard: ShareStateShard) -> CoordinatorResult[Outcome]:
            if key[2] < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID))
            if leader_epoch < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_LEADER_EPOCH))
            if state_epoch < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH))
            old = shard.states.get(key)
            if old is None:
                return _answer(error(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED))
            if old.leader_epoch > leader_epoch:
                return _answer(error(ErrorCode.FENCED_LEADER_EPOCH))
            if old.state_epoch > state_epoch:
                return _answer(error(ErrorCode.FENCED_STATE_EPOCH))
            if not self._known(key):
                return _answer(error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            # The stored leader epoch stays (-1): Kafka 4.4 records it on reads only. Batches the
            # state holds as they are change nothing: the update leaves them out (Odradek's
            # persister sends the whole in-flight window).
            record, new, is_snapshot = shard.state_record(key, -1, start_offset, unchanged_dropped(old.batches, batches),
                                                          self.clock_ms(),
                                                          delivery_complete_count=delivery_complete_count)
            return state_result(shard, key, record, new, is_snapshot, Outcome())
        return await self._write(key, op)

    async def delete(self, key: StateKey) -> Outcome:
        def op(shard: ShareStateShard) -> CoordinatorResult[Outcome]:
            if key[2] < 0:
                return _answer(error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID))
            if not self._known(key):
                return _answer(error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            if key not in shard.states:
                return _answer(Outcome())  # nothing to delete (Kafka: no record, no error)
            return delete_result(shard, key, Outcome())
        return await self._write(key, op)

    def summary(self, key: StateKey) -> Outcome:
        try:
            shard = self.store.runtime.shard(self._partition(key))
        except KafkaApiError as exc:
            return error(exc.code)
        if key[2] < 0:
            return error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        if not self._known(key):
            return error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        state = shard.states.get(key)
        return Outcome(state=state if state is not None else ShareState(-1, 0, 0))

    def coordinator_partition(self, key: str) -> int | None:
        """The ``__share_group_state`` partition of a FindCoordinator share key (None while the
        topic does not exist: its creation is started)."""
        topic = self.metadata.image.topics.get(STATE_TOPIC)
        if topic is None or not topic.partitions:
            self.store.where(("", uuid.UUID(int=0), 0))  # starts the creation, as a share-partition's first use
            return None
        return partition_for(key, len(topic.partitions))

    # ------------------------------------------------------------------------------------------

    def _partition(self, key: StateKey) -> int:
        p = self.store.state_partition(key)
        if p is None:  # no __share_group_state yet (its creation starts): no broker coordinates anything
            self.store.where(key)
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return p

    def _known(self, key: StateKey) -> bool:
        topic = self.metadata.image.topic_by_id(key[1])
        return topic is not None and key[2] in topic.partitions

    async def _write(self, key: StateKey, op: Callable[[ShareStateShard], CoordinatorResult[Outcome]]) -> Outcome:
        try:
            return await self.store.runtime.write(self._partition(key), op)
        except KafkaApiError as exc:
            code = _APPEND_ERRORS.get(exc.code, exc.code)
            # REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS...: Kafka's helper answers COORDINATOR_NOT_AVAILABLE,
            # which the persister retries.
            return error(code if code in _COORDINATOR_ERRORS else ErrorCode.COORDINATOR_NOT_AVAILABLE)


def parse_share_key(key: str) -> StateKey | None:
    """Kafka's SharePartitionKey.getInstance(String): "groupId:topicId:partition", the topic id in
    Kafka's base64 form; None when the key is not of that form."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "==")
        partition = int(parts[2])
    except (ValueError, binascii.Error):
        return None
    if len(raw) != 16 or not parts[2].lstrip("-").isdigit():
        return None
    return parts[0], uuid.UUID(bytes=raw), partition


def _answer(outcome: Outcome) -> CoordinatorResult[Outcome]:
    return CoordinatorResult(records=[], response=outcome)

