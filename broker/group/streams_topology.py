"""A streams group's topology and its configuration against the cluster's topics (KIP-1071; Kafka
4.4's StreamsTopology and streams/topics/InternalTopicManager).

The first member to join sends the application's topology: subtopologies, each with its source
topics, the repartition topics it reads (``repartition_source_topics``, with a partition count or 0
for "decide") and writes (``repartition_sink_topics``), its state stores' changelog topics and the
groups of source topics that must be co-partitioned. The coordinator keeps it as a
StreamsGroupTopology record and *configures* it against the metadata image whenever the group's
topics may have changed:

1. Every source topic must exist, else the topology is not ready: MISSING_SOURCE_TOPICS.
2. A repartition topic without a fixed count takes the largest partition count of the source topics
   (external or repartition) of the subtopologies that write to it, repeated until every count is
   known (Kafka's RepartitionTopics).
3. Co-partition groups: their external source topics must have equal partition counts, else
   INCORRECTLY_PARTITIONED_TOPICS; a repartition topic in a group takes that count (a fixed one
   must equal it); a group of repartition topics only takes the largest of theirs
   (CopartitionedTopicsEnforcer).
4. A subtopology has as many tasks as its largest source topic has partitions; each changelog
   topic gets that many partitions.
5. Internal topics (repartition and changelog) that do not exist are *to be created* - by the
   broker that answered the heartbeat (KafkaApis, handlers/streams_group_heartbeat.py), with the
   configs the topology names - and the topology is not ready until they exist:
   MISSING_INTERNAL_TOPICS. An existing one with another partition count is
   INCORRECTLY_PARTITIONED_TOPICS.

Only a ready topology has tasks to assign. Pure functions over the image; any thread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.java_hashing import hash_map_order, string_hash

# StreamsGroupHeartbeatResponse.Status codes (Kafka 4.4's clients).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
MISSING_CLIENT_TAGS = 6  # StreamsGroupHeartbeat v1 and later only (KAFKA-20744): v0 clients throw on it


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic as the topology describes it (partitions 0: decided here)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()  # (source, repartition) indices

    def copartitioned_topic_sets(self) -> list[set[str]]:
        return [{self.source_topics[i] for i in src} | {self.repartition_source_topics[i].name for i in rep}
                for src, rep in self.copartition_groups]


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    @staticmethod
    def from_wire(body: Mapping[str, Any]) -> StreamsTopology:
        """From a heartbeat's ``topology`` or a StreamsGroupTopologyValue (the same field names)."""
        def info(row: Mapping[str, Any]) -> TopicInfo:
            return TopicInfo(row["name"], row["partitions"], row["replication_factor"],
                             tuple((c["key"], c["value"]) for c in row["topic_configs"] or ()))
        subs = []
        for s in body["subtopologies"] or ():
            subs.append(Subtopology(
                s["subtopology_id"], tuple(s["source_topics"] or ()), tuple(s["repartition_sink_topics"] or ()),
                tuple(info(r) for r in s["repartition_source_topics"] or ()),
                tuple(info(r) for r in s["state_changelog_topics"] or ()),
                tuple((tuple(g["source_topics"] or ()), tuple(g["repartition_source_topics"] or ()))
                      for g in s["copartition_groups"] or ())))
        return StreamsTopology(body["epoch"], tuple(sorted(subs, key=lambda s: s.subtopology_id)))

    def record_value(self) -> dict[str, Any]:
        """The StreamsGroupTopologyValue body."""
        def info(t: TopicInfo) -> dict[str, Any]:
            return {"name": t.name, "partitions": t.partitions, "replication_factor": t.replication_factor,
                    "topic_configs": [{"key": k, "value": v} for k, v in t.configs]}
        return {"epoch": self.epoch, "subtopologies": [{
            "subtopology_id": s.subtopology_id, "source_topics": list(s.source_topics), "source_topic_regex": [],
            "state_changelog_topics": [info(t) for t in s.state_changelog_topics],
            "repartition_sink_topics": list(s.repartition_sink_topics),
            "repartition_source_topics": [info(t) for t in s.repartition_source_topics],
            "copartition_groups": [{"source_topics": list(src), "source_topic_regex": [],
                                    "repartition_source_topics": list(rep)} for src, rep in s.copartition_groups],
        } for s in self.subtopologies]}

    def required_topics(self) -> set[str]:
        """Every topic the topology reads, writes as repartition, or keeps state in."""
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.source_topics)
            out.update(s.repartition_sink_topics)
            out.update(t.name for t in s.repartition_source_topics)
            out.update(t.name for t in s.state_changelog_topics)
        return out

    def source_topics(self) -> set[str]:
        """The topics whose partitions are tasks' inputs (external and repartition)."""
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.source_topics)
            out.update(t.name for t in s.repartition_source_topics)
        return out


@dataclass(frozen=True, slots=True)
class InternalTopicToCreate:
    name: str
    partitions: int
    replication_factor: int  # -1: the broker's default.replication.factor
    configs: tuple[tuple[str, str], ...]


@dataclass(slots=True)
class ConfiguredTopology:
    """The topology against the metadata it was configured with: the task count per subtopology
    when ready, else the status (code, detail) that says why not."""

    epoch: int
    tasks: dict[str, int] | None = None  # subtopology id -> number of tasks (None: not ready)
    source_partitions: dict[str, list[str]] = field(default_factory=dict)  # subtopology -> its input topics
    to_create: list[InternalTopicToCreate] = field(default_factory=list)
    status: tuple[int, str] | None = None

    @property
    def ready(self) -> bool:
        return self.tasks is not None and self.status is None


class TopicConfigurationError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _summary(topics: list[str]) -> str:
    """Kafka's InternalTopicManager.summarizeTopics: at most three names."""
    if not topics:
        return "<none>"
    shown = ", ".join(topics[:3])
    return shown + (f" and {len(topics) - 3} additional topics" if len(topics) > 3 else "")


def _hash_map_order(names: list[str]) -> list[str]:
    """The order Kafka lists the missing internal topics in: its HashMap's (default capacity 16,
    doubled while more than three quarters full)."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2
    return hash_map_order(names, string_hash, capacity)


def configure(topology: StreamsTopology, partition_count: Callable[[str], int | None]) -> ConfiguredTopology:
    """Rules 1-5 against ``partition_count(topic)`` (None: the topic does not exist)."""
    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if partition_count(t) is None})
        if missing:
            raise TopicConfigurationError(MISSING_SOURCE_TOPICS, f"Source topics {_summary(missing)} are missing.")
        decided: dict[str, int] = {}

        def count(topic: str) -> int | None:
            existing = partition_count(topic)
            return existing if existing is not None else decided.get(topic)

        _decide_repartition_counts(topology, count, decided)
        for s in topology.subtopologies:
            for group in s.copartitioned_topic_sets():
                _enforce_copartitioning(topology, group, count, decided)
        tasks: dict[str, int] = {}
        inputs: dict[str, list[str]] = {}
        for s in topology.subtopologies:
            names = list(s.source_topics) + [t.name for t in s.repartition_source_topics]
            counts = [c for n in names if (c := count(n)) is not None]
            tasks[s.subtopology_id] = max(counts) if counts else 0
            inputs[s.subtopology_id] = names
            for t in s.state_changelog_topics:
                decided[t.name] = tasks[s.subtopology_id]
        to_create: dict[str, InternalTopicToCreate] = {}
        for s in topology.subtopologies:
            for t in s.repartition_source_topics + s.state_changelog_topics:
                want = decided[t.name]
                existing = partition_count(t.name)
                if existing is None:
                    to_create[t.name] = InternalTopicToCreate(t.name, want, t.replication_factor or -1, t.configs)
                elif existing != want:
                    raise TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS, f"Existing topic {t.name} has different number of "
                        f"partitions: expected {want}, found {existing}")
        configured = ConfiguredTopology(topology.epoch, tasks, inputs, list(to_create.values()))
        if to_create:
            configured.status = (MISSING_INTERNAL_TOPICS,
                                 f"Internal topics are missing: {_summary(_hash_map_order(list(to_create)))}")
        return configured
    except TopicConfigurationError as exc:
        return ConfiguredTopology(topology.epoch, None, status=(exc.status, exc.detail))


def _decide_repartition_counts(topology: StreamsTopology, count: Callable[[str], int | None],
                               decided: dict[str, int]) -> None:
    for s in topology.subtopologies:
        for t in s.repartition_source_topics:
            if t.partitions:
                decided[t.name] = t.partitions
    pending = {t.name for s in topology.subtopologies for t in s.repartition_source_topics if t.name not in decided}
    while pending:
        progressed = False
        for name in sorted(pending):
            upstream = [u for u in topology.subtopologies if name in u.repartition_sink_topics]
            counts = []
            for u in upstream:
                for src in list(u.source_topics) + [r.name for r in u.repartition_source_topics]:
                    c = count(src)
                    if c is not None:
                        counts.append(c)
            if counts:
                decided[name] = max(counts)
                pending.discard(name)
                progressed = True
        if not progressed:
            raise TopicConfigurationError(
                MISSING_SOURCE_TOPICS, "Failed to compute number of partitions for all repartition topics: "
                + _summary(sorted(pending)))


def _enforce_copartitioning(topology: StreamsTopology, group: set[str], count: Callable[[str], int | None],
                            decided: dict[str, int]) -> None:
    fixed = {t.name for s in topology.subtopologies for t in s.repartition_source_topics if t.partitions}
    repartition = {t.name for s in topology.subtopologies for t in s.repartition_source_topics}
    external = {t: count(t) for t in group if t not in repartition}
    if external:
        counts = set(external.values())
        if len(counts) > 1:
            raise TopicConfigurationError(
                INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number of partitions: "
                f"[{', '.join(f'{t}={c}' for t, c in sorted(external.items()))}]")
        target = counts.pop()
    else:
        fixed_counts = {decided[t] for t in group if t in fixed}
        if len(fixed_counts) > 1:
            raise TopicConfigurationError(
                INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number of partitions: "
                f"[{', '.join(sorted(t for t in group if t in fixed))}]")
        target = fixed_counts.pop() if fixed_counts else max(decided.get(t, 0) for t in group)
    for t in group:
        if t in fixed and decided[t] != target:
            raise TopicConfigurationError(
                INCORRECTLY_PARTITIONED_TOPICS, f"Number of partitions [{decided[t]}] of repartition topic [{t}] "
                f"doesn't match number of partitions [{target}] of the source topic.")
        if t in repartition and t not in fixed and target is not None:
            decided[t] = target


def metadata_hash(topology: StreamsTopology, topic_state: Callable[[str], tuple[object, int] | None]) -> int:
    """A digest of the group's topics as the metadata image has them (id and partition count of
    every topic the topology names): the group re-configures its topology and re-assigns when it
    changes (Kafka's StreamsGroup.computeMetadataHash; the value differs from Kafka's, which hashes
    racks too, and is only ever compared with itself)."""
    h = hashlib.sha256()
    for name in sorted(topology.required_topics()):
        state = topic_state(name)
        h.update(f"{name}\0{state!r}\0".encode())
    return int.from_bytes(h.digest()[:8], "big", signed=True)
