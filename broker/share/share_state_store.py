"""``ShareStateStore``: share-partitions' durable state in ``__share_group_state`` (KIP-932's share
coordinator, Kafka 4.4's ShareCoordinatorShard), on the coordinator runtime.

The state of share-partition (group, topic id, partition) lives in partition
``partition_for("groupId:topicId:partition")`` of ``__share_group_state`` (Kafka's
ShareCoordinator.partitionFor: Utils.abs(String.hashCode) % partitions, the topic id in Kafka's
base64 form). Each partition's shard replays the ShareSnapshot and ShareUpdate records into the
latest state per share-partition (broker/share/share_state_records.py) and a write appends a
snapshot of the whole state.

The share-partition leader reads and writes the shard directly when this broker leads the
state's partition; where another broker leads it (``where`` answers ELSEWHERE) the persister
(broker/share/share_persister.py) sends that broker the share coordinator's APIs (83-87), which
broker/share/share_coordinator.py serves there.

The topic is created (``share.coordinator.state.topic.*``; cleanup.policy=delete and
retention.ms=-1 as Kafka's, which prunes it with DeleteRecords - not done here yet) by the first
share-partition that needs it, as Kafka's share coordinator creates it on first use.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import logging
import uuid
from typing import TYPE_CHECKING

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.coordinator.runtime import (
    NO_PRODUCER_ID,
    CoordinatorResult,
    CoordinatorRuntime,
    PartitionState,
    PartitionWriter,
)
from odradek.broker.share.share_state_records import (
    SNAPSHOT,
    CorruptShareStateRecord,
    ShareState,
    StateKey,
    batches_of,
    decode,
    encode_key,
    encode_snapshot,
    merge_update,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient

STATE_TOPIC = "__share_group_state"

log = logging.getLogger(__name__)


class Where(enum.Enum):
    READY = "ready"  # this broker leads the state's partition and has loaded it
    ABSENT = "absent"  # no __share_group_state yet (being created): no state is stored anywhere
    WAIT = "wait"  # the topic is being created or the partition loaded: try again shortly
    ELSEWHERE = "elsewhere"  # another broker leads it (or none does): memory only


def kafka_uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


class ShareStateShard:
    """One __share_group_state partition: the latest state of each share-partition in it."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.states: dict[StateKey, ShareState] = {}

    def replay(self, offset: int, key: bytes | None, value: bytes | None,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> None:
        try:
            kind, k, body = decode(key, value)
        except CorruptShareStateRecord as exc:
            log.error("skipping unreadable %s record at offset %s: %s", STATE_TOPIC, offset, exc)
            return
        if body is None:
            self.states.pop(k, None)
        elif kind == SNAPSHOT:
            self.states[k] = ShareState(body["start_offset"], body["state_epoch"], body["leader_epoch"],
                                        body["snapshot_epoch"], body["create_timestamp"], body["write_timestamp"],
                                        batches_of(body))
        elif (state := self.states.get(k)) is not None:
            merge_update(state, body)  # an update without a snapshot before it has nothing to amend

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass  # the share coordinator writes no transactions

    def on_loaded(self) -> None:
        pass

    def on_unloaded(self) -> None:
        pass


class ShareStateStore:
    def __init__(self, writer: PartitionWriter, metadata: BrokerMetadata, controller_client: ControllerClient,
                 node_id: int, num_partitions: int, replication_factor: int, min_isr: int, segment_bytes: int,
                 local_store: bool) -> None:
        self.metadata = metadata
        self.controller_client = controller_client
        self.node_id = node_id
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.min_isr = min_isr
        self.segment_bytes = segment_bytes
        self.local_store = local_store
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(STATE_TOPIC, writer, ShareStateShard)
        self._creating: asyncio.Task[None] | None = None

    async def start(self) -> None:
        topic = self.metadata.image.topics.get(STATE_TOPIC)
        led = [] if topic is None else [(p.partition, p.leader_epoch) for p in topic.partitions.values()
                                        if p.leader == self.node_id]
        self.runtime.start(led)

    def shutdown(self) -> None:
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

    def write(self, key: StateKey, state: ShareState) -> bool:
        """Append a snapshot of ``state`` (durable before the shard shows it; failures are logged:
        the share-partition goes on in memory, as a write timeout leaves Kafka's). False when the
        state's partition is not served here (yet): nothing was written."""
        p = self.state_partition(key)
        if p is None or self.runtime.state(p) is not PartitionState.ACTIVE:
            return False

        def op(shard: ShareStateShard) -> CoordinatorResult[None]:
            old = shard.states.get(key)
            state.snapshot_epoch = 0 if old is None else old.snapshot_epoch + 1
            if old is not None:
                state.create_timestamp = old.create_timestamp

            def apply() -> None:
                shard.states[key] = state
            return CoordinatorResult(records=[encode_snapshot(key, state)], apply=apply)

        self.runtime.schedule_write(p, op, f"write the share state of {key[0]} {key[1]}-{key[2]}")
        return True

    def delete(self, key: StateKey) -> None:
        """Drop the stored state (a tombstone, as Kafka's DeleteShareGroupState writes): the next
        share-partition starts again at share.auto.offset.reset."""
        p = self.state_partition(key)
        if p is None or self.runtime.state(p) is not PartitionState.ACTIVE or key not in self.runtime.shard(p).states:
            return

        def op(shard: ShareStateShard) -> CoordinatorResult[None]:
            def apply() -> None:
                shard.states.pop(key, None)
            return CoordinatorResult(records=[(encode_key(key), None)], apply=apply)

        self.runtime.schedule_write(p, op, f"delete the share state of {key[0]} {key[1]}-{key[2]}")

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
