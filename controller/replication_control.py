"""Topics, partitions, ISRs, leaders and reassignments (Kafka's ReplicationControlManager).

Rules of this module:
1. It reads the controller's image and never writes it: every operation validates its request
   against the image and returns per-item results and the records that carry it out. The
   controller (odradek.controller.controller) appends those records, applies and publishes them; with
   ``validate_only`` it drops them. So an operation here runs under the controller's write lock,
   on the loop thread, with no I/O and no await.
2. Items fail one by one: a bad topic, partition or assignment raises
   :class:`~odradek.controller.requests.ItemError` inside, which becomes that item's result with Kafka's
   code and message; the other items go on.
3. The election rules (clean, unclean, preferred, rebalance, fencing, controlled shutdown) are
   odradek.controller.elections; the reassignment records odradek.controller.reassignments; the partition count
   limits odradek.controller.partition_limits; replica placement odradek.controller.placement. This module picks
   the partitions they apply to and says what unclean election is allowed by default.
4. :meth:`ReplicationControl.replay` sees every record before the image applies it (at start-up
   replay and after each commit), to keep what the image does not index: the existing topic names
   that collide once '.' and '_' are unified (Kafka's topicsWithCollisionChars).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from odradek.controller import elections, reassignments
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.controller.meta_properties import new_kafka_uuid
from odradek.controller.partition_limits import (
    EXCESSIVE_PARTITIONS_MESSAGE,
    adds_too_many_partitions,
    partitions_per_broker,
    requests_too_many_partitions,
    reserve_broker_capacity,
)
from odradek.controller.placement import PlacementError, StripedReplicaPlacer, UsableBroker
from odradek.controller.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from odradek.controller.requests import (
    ZERO_UUID,
    AlterPartitionResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    ElectionType,
    ItemError,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
)
from odradek.controller.topic_configs import TopicConfigError, validate_topic_configs
from odradek.controller.topic_names import (
    has_collision_chars,
    invalid_topic_reason,
    is_internal,
    unify_collision_chars,
)
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."

@dataclass(slots=True)
class _NewPartition:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class ReplicationControl:
    """The controller's topic and partition decisions over ``image`` (the controller's, read only)."""

    def __init__(self, image: MetadataImage, node_id: int, *, default_num_partitions: int,
                 default_replication_factor: int, max_broker_partitions: int | None,
                 unclean_leader_election_enable: bool, replica_placer: StripedReplicaPlacer) -> None:
        self._image = image
        self.node_id = node_id
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.max_broker_partitions = max_broker_partitions
        # Kafka's broker config; the topic config and the cluster-wide dynamic default of
        # unclean.leader.election.enable override it (odradek.controller.elections).
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self._replica_placer = replica_placer
        # unify_collision_chars(name) -> names of existing topics with '.' or '_' (Kafka's
        # topicsWithCollisionChars), maintained from replayed records.
        self._collisions: dict[str, set[str]] = {}

    def replay(self, record: MetadataRecord) -> None:
        """``record`` is about to be applied to the image (rule 4)."""
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

    # ----------------------------------------------------------------------------------------
    # Helpers shared by the operations

    def is_live(self, node_id: int) -> bool:
        return elections.is_live(self._image, node_id)

    def _epoch_matches(self, node_id: int, broker_epoch: int) -> bool:
        """KIP-903: -1 (not given) or the broker's registered epoch."""
        if broker_epoch == -1:
            return True
        reg = self._image.brokers.get(node_id)
        return reg is not None and reg.broker_epoch == broker_epoch

    def unclean_default(self) -> bool:
        return elections.unclean_default(self._image, self.node_id, self.unclean_leader_election_enable)

    def all_partitions(self) -> list[tuple[TopicImage, PartitionState]]:
        return [(t, p) for t in self._image.topics.values() for p in t.partitions.values()]

    # ----------------------------------------------------------------------------------------
    # Brokers coming and going (the controller writes these records with the broker's own)

    def offline_elections(self, image: MetadataImage) -> list[MetadataRecord]:
        """Leaders for every partition without a live one, judged on ``image`` (the image as it will
        be after a broker record; its topics are the current image's)."""
        return list(elections.offline_election_records(image, self.all_partitions(), self.unclean_default()))

    def fenced_broker_records(self, image: MetadataImage, node_id: int) -> list[MetadataRecord]:
        """``node_id`` leaves every ISR (never emptying one) and its leaderships move, judged on ``image``."""
        return list(elections.failover_records(image, node_id, self.unclean_default()))

    def offline_replica_records(self, node_id: int, offline: Set[tuple[uuid.UUID, int]]) -> list[MetadataRecord]:
        """KIP-858: the replicas of ``node_id`` in failed log dirs leave ISRs and leaderships."""
        return list(elections.offline_replica_records(self._image, node_id, offline, self.unclean_default()))

    def controlled_shutdown_records(self, node_id: int) -> tuple[list[MetadataRecord], list[tuple[str, int]]]:
        """The records moving every leadership off ``node_id``, and the partitions it still leads."""
        records, remaining = elections.controlled_shutdown_records(self._image, node_id)
        return list(records), remaining

    # ----------------------------------------------------------------------------------------
    # ElectLeaders and the auto rebalance

    def elect_leaders(self, kind: ElectionType, partitions: Iterable[tuple[str, int]] | None
                      ) -> tuple[list[ElectionResult], list[MetadataRecord]]:
        """Kafka's electLeaders: a result per partition; ``partitions`` None means every partition,
        and then ELECTION_NOT_NEEDED results are left out (as Kafka does)."""
        every = partitions is None
        wanted = [(t.name, p.partition) for t, p in self.all_partitions()] if partitions is None else list(partitions)
        results: list[ElectionResult] = []
        records: list[MetadataRecord] = []
        for name, index in wanted:
            result, change = elections.elect_leader(self._image, name, index, kind)
            if every and result.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            results.append(result)
            if change is not None:
                records.append(change)
        return results, records

    def imbalanced_partitions(self, leader_imbalance_per_broker_percentage: int) -> list[tuple[str, int]]:
        """The partitions a preferred election would move back, for brokers over the imbalance ratio."""
        return elections.imbalanced_partitions(self._image, leader_imbalance_per_broker_percentage)

    # ----------------------------------------------------------------------------------------
    # Reassignments (KIP-455; the records are odradek.controller.reassignments')

    def alter_partition_reassignments(self, targets: Sequence[ReassignmentTarget]
                                      ) -> tuple[list[ReassignmentResult], list[MetadataRecord]]:
        results: list[ReassignmentResult] = []
        records: list[MetadataRecord] = []
        for target in targets:
            try:
                change = self._reassignment_change(target)
            except (ItemError, reassignments.ReassignmentError) as e:
                results.append(ReassignmentResult(target.topic, target.partition, e.code, e.message))
                continue
            if change is not None:
                records.append(change)
            results.append(ReassignmentResult(target.topic, target.partition))
        return results, records

    def _reassignment_change(self, target: ReassignmentTarget) -> PartitionChangeRecord | None:
        topic = self._image.topics.get(target.topic)
        if topic is None:
            raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {target.topic}.")
        p = topic.partitions.get(target.partition)
        if p is None:
            raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Unable to find partition {target.topic}:{target.partition}.")
        if target.replicas is None:
            return reassignments.cancel(self._image, topic, p, self.unclean_default())
        self._validate_manual_assignment(target.replicas, None)
        if not target.allow_replication_factor_change:
            reassignments.check_replication_factor_unchanged(p, target.replicas)
        return reassignments.start_or_change(self._image, topic, p, tuple(target.replicas), self.unclean_default())

    def list_partition_reassignments(self, partitions: Sequence[tuple[str, int]] | None
                                     ) -> list[OngoingReassignment]:
        """The ongoing ones among ``partitions`` (None: all); unknown ones are left out, as Kafka does."""
        out: list[OngoingReassignment] = []
        if partitions is None:
            for topic, p in self.all_partitions():
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

    def maybe_complete_reassignment(
        self, topic_id: uuid.UUID, partition: int, isr: Sequence[int] | None = None
    ) -> PartitionChangeRecord | None:
        """HOOK for ISR changes (AlterPartition): the record completing the partition's reassignment
        once ``isr`` (default: the image's ISR) holds every target replica, else None.

        Call it under the write lock. Either after committing the ISR change (no ``isr``), then
        commit what it returns; or before, with the new ISR, and commit its record *instead of*
        the ISR change when it returns one (it carries the final ISR).
        """
        topic = self._image.topics_by_id.get(topic_id)
        p = None if topic is None else topic.partitions.get(partition)
        if topic is None or p is None:
            return None
        return reassignments.maybe_complete(self._image, topic, p, None if isr is None else tuple(isr),
                                            self.unclean_default())

    # ----------------------------------------------------------------------------------------
    # AlterPartition (KIP-497): a leader's ISR change

    def alter_partition(self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int,
                        partition_epoch: int, isr: tuple[int, ...], broker_epochs: Mapping[int, int]
                        ) -> tuple[ErrorCode, PartitionChangeRecord | None]:
        """Validate a leader's new ISR (Kafka's alterPartition, one partition): the error code, and on
        NONE the record changing the ISR (None when it is unchanged)."""
        topic = self._image.topics_by_id.get(topic_id)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, None
        p = topic.partitions.get(partition)
        code = self._validate_alter_partition(topic, p, leader_id, leader_epoch, partition_epoch, isr, broker_epochs)
        if code != ErrorCode.NONE or p is None:
            return code, None
        if isr == p.isr:
            return ErrorCode.NONE, None
        log.info("Node %d altered the ISR of %s-%d from %s to %s", leader_id, topic.name, partition,
                 list(p.isr), list(isr))
        return ErrorCode.NONE, PartitionChangeRecord(partition, topic_id, isr=isr)

    def alter_partition_result(self, topic_id: uuid.UUID, partition: int) -> AlterPartitionResult:
        """The partition's state as an AlterPartition answer names it, once the change is committed."""
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
        ineligible = [b for b in isr if not self.is_live(b) or not self._epoch_matches(b, broker_epochs.get(b, -1))
                      or b in p.offline_replicas]
        if ineligible:
            log.info("Rejecting AlterPartition from node %d for %s-%d: ineligible replicas %s (not registered, "
                     "fenced, offline, or a stale broker epoch in %s)", broker_id, topic.name, p.partition,
                     ineligible, dict(broker_epochs))
            return ErrorCode.INELIGIBLE_REPLICA
        return ErrorCode.NONE

    # ----------------------------------------------------------------------------------------
    # CreateTopics

    def create_topics(self, topics: Sequence[CreatableTopic], *, internal: bool
                      ) -> tuple[list[CreateTopicResult], list[MetadataRecord]]:
        """One result per distinct name, in request order (Kafka's codes and messages), and the records."""
        order: list[str] = []
        by_name: dict[str, CreatableTopic] = {}
        duplicates: set[str] = set()
        for t in topics:
            if t.name in by_name:
                duplicates.add(t.name)
            else:
                by_name[t.name] = t
                order.append(t.name)
        if not internal and requests_too_many_partitions(topics, self.default_num_partitions):
            # Before any name is checked or replica placed: nothing proportional to the asked
            # count is allocated (a 2**31-1 partition request used to wedge the broker).
            return [CreateTopicResult(name, ErrorCode.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE)
                    for name in order], []
        limit = self.max_broker_partitions
        hosted = None if internal or limit is None else partitions_per_broker(self._image)
        results: dict[str, CreateTopicResult] = {}
        records: list[MetadataRecord] = []
        for name in order:
            if name in duplicates:
                results[name] = CreateTopicResult(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                continue
            try:
                result, topic_records = self._create_topic(by_name[name], internal)
                if hosted is not None and limit is not None:
                    reserve_broker_capacity(hosted, topic_records, limit)
            except ItemError as e:
                results[name] = CreateTopicResult(name, e.code, e.message)
                continue
            results[name] = result
            records.extend(topic_records)
        return [results[name] for name in order], records

    def _create_topic(
        self, topic: CreatableTopic, internal: bool
    ) -> tuple[CreateTopicResult, list[MetadataRecord]]:
        name = topic.name
        reason = invalid_topic_reason(name)
        if reason is not None:
            raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if name == CLUSTER_METADATA_TOPIC:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        # Internal-ness follows the name, as Kafka's Topic.isInternal: a __consumer_offsets created
        # through CreateTopics is as internal as the one the group coordinator creates.
        internal = internal or is_internal(name)
        if has_collision_chars(name):
            colliding = self._collisions.get(unify_collision_chars(name))
            if colliding and name not in colliding:
                raise ItemError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {sorted(colliding)[0]}",
                )
        if name in self._image.topics:
            raise ItemError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        null_keys = [k for k, v in topic.configs.items() if v is None]
        if null_keys:
            raise ItemError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(null_keys))
        configs: dict[str, str] = {k: v for k, v in topic.configs.items() if v is not None}
        try:
            validate_topic_configs(configs)
        except TopicConfigError as e:
            raise ItemError(ErrorCode.INVALID_CONFIG, str(e)) from None

        new_parts: dict[int, _NewPartition] = {}
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ItemError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                "replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise ItemError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                "numPartitions was not set to -1.")
            replication_factor: int | None = None
            for assignment in topic.assignments:
                if assignment.partition_index in new_parts:
                    raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition "
                                    f"assignments for partition {assignment.partition_index}")
                replicas = tuple(assignment.broker_ids)
                self._validate_manual_assignment(replicas, replication_factor)
                replication_factor = len(replicas)
                isr = tuple(b for b in replicas if self.is_live(b))
                if not isr:
                    raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                                    f"partition assignment for partition {assignment.partition_index} are fenced "
                                    "or in controlled shutdown.")
                new_parts[assignment.partition_index] = _NewPartition(replicas, isr)
            for i in range(len(new_parts)):
                if i not in new_parts:
                    raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    "partitions should be a consecutive 0-based integer sequence")
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            "Replication factor must be larger than 0, or -1 to use the default value.")
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise ItemError(ErrorCode.INVALID_PARTITIONS,
                            "Number of partitions was set to an invalid non-positive value.")
        else:
            num_partitions = self.default_num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = self.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            for index, replicas in enumerate(self._place(num_partitions, rf)):
                new_parts[index] = _NewPartition(replicas, tuple(b for b in replicas if self.is_live(b)))

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
            raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the partition {replication_factor} time(s): {e}") from None
        for replicas in placed:
            if not any(self.is_live(b) for b in replicas):
                raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"Unable to replicate the partition {replication_factor} time(s): All brokers "
                                "are currently fenced or in controlled shutdown.")
        return placed

    def _validate_manual_assignment(self, replicas: Sequence[int], replication_factor: int | None) -> None:
        if not replicas:
            raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "The manual partition assignment includes an empty replica list.")
        previous: int | None = None
        for broker_id in sorted(replicas):
            if broker_id not in self._image.brokers:
                raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                                f"broker {broker_id}, but no such broker is registered.")
            if broker_id == previous:
                raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                                f"the broker {previous} more than once.")
            previous = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a "
                            f"partition with {len(replicas)} replica(s), but this is not consistent with previous "
                            f"partitions, which have {replication_factor} replica(s).")

    # ----------------------------------------------------------------------------------------
    # DeleteTopics

    def delete_topics(self, names: Sequence[str], topic_ids: Sequence[uuid.UUID]
                      ) -> tuple[list[DeleteTopicResult], list[MetadataRecord]]:
        """By name and/or id (ControllerApis.deleteTopics rules): the refusals first, then one
        result per deleted topic, and a RemoveTopicRecord for each."""
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
        records: list[MetadataRecord] = [RemoveTopicRecord(i) for i in to_delete]
        results.extend(DeleteTopicResult(n, i) for i, n in to_delete.items())
        return results, records

    # ----------------------------------------------------------------------------------------
    # CreatePartitions

    def create_partitions(self, topics: Sequence[CreatePartitionsTopic]
                          ) -> tuple[list[CreatePartitionsResult], list[MetadataRecord]]:
        """One result per distinct name, in request order, and the new partitions' records."""
        counts: dict[str, int] = {}
        for t in topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        if adds_too_many_partitions(self._image, topics, counts):
            return [CreatePartitionsResult(name, ErrorCode.INVALID_PARTITIONS, EXCESSIVE_PARTITIONS_MESSAGE)
                    for name in counts], []
        limit = self.max_broker_partitions
        hosted = None if limit is None else partitions_per_broker(self._image)
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
                if hosted is not None and limit is not None:
                    reserve_broker_capacity(hosted, new_records, limit)
                records.extend(new_records)
            except ItemError as e:
                results.append(CreatePartitionsResult(t.name, e.code, e.message))
                continue
            results.append(CreatePartitionsResult(t.name))
        return results, records

    def _create_partitions(self, request: CreatePartitionsTopic) -> list[MetadataRecord]:
        topic = self._image.topics.get(request.name)
        if topic is None:
            raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)
        current = len(topic.partitions)
        if request.count == current:
            raise ItemError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if request.count < current:
            raise ItemError(ErrorCode.INVALID_PARTITIONS, f"The topic {request.name} currently has {current} "
                            f"partition(s); {request.count} would not be an increase.")
        additional = request.count - current
        if request.assignments is not None and len(request.assignments) != additional:
            raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional "
                            f"partition(s), but only {len(request.assignments)} assignment(s) were specified.")
        replication_factor = len(next(iter(topic.partitions.values())).replicas)
        placed: list[tuple[int, ...]]
        if request.assignments is not None:
            placed = []
            for i, broker_ids in enumerate(request.assignments):
                replicas = tuple(broker_ids)
                self._validate_manual_assignment(replicas, replication_factor)
                if not any(self.is_live(b) for b in replicas):
                    raise ItemError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                                    f"partition assignment for partition {current + i} are fenced or in "
                                    "controlled shutdown.")
                placed.append(replicas)
        else:
            placed = self._place(additional, replication_factor)
        records: list[MetadataRecord] = []
        for i, replicas in enumerate(placed):
            isr = tuple(b for b in replicas if self.is_live(b))
            records.append(PartitionRecord(partition_id=current + i, topic_id=topic.topic_id, replicas=replicas,
                                           isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0))
        return records
