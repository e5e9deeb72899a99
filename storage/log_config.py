"""Topic-level log settings (Kafka's ``LogConfig``) and their broker-level defaults.

``LogConfig`` is an immutable value: every field is named after a Kafka topic config key in
snake_case (``retention.ms`` -> ``retention_ms``) and defaults to Kafka's default. A broker builds
its defaults with :meth:`LogConfig.from_broker_props` from its ``log.*`` keys (Kafka's synonyms,
e.g. ``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``, first one set
wins), and a topic's effective config is ``defaults.with_overrides(topic_configs)``.

:data:`TOPIC_CONFIGS` is the table CreateTopics/AlterConfigs/DescribeConfigs use: topic key ->
:class:`TopicConfigDef` (field, primary broker synonym, type, validator, doc, all synonyms, and
``no_effect``: why a key Kafka has is accepted and echoed but changes nothing here).
Values Kafka refuses are refused with the same rule: ``remote.storage.enable=true`` (tiered
storage is off), throttled-replica lists that are not ``*`` or ``partition:broker`` pairs,
``min.compaction.lag.ms`` above ``max.compaction.lag.ms``.

Pure values; safe to use from any thread.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from odradek.storage.errors import InvalidConfigError
from odradek.storage.recompression import Recompression, recompression_for

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
INT_MIN = -(2**31)

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

Validator = Callable[[Any], "str | None"]


def _at_least(low: int | float) -> Validator:
    return lambda v: None if v >= low else f"Value must be at least {low}"


def _between(low: int | float, high: int | float) -> Validator:
    return lambda v: None if low <= v <= high else f"Value must be in [{low}, {high}]"


def _one_of(*allowed: str) -> Validator:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _list_of(*allowed: str) -> Validator:
    def check(v: str) -> str | None:
        items = [i for i in v.split(",") if i]
        if not items:
            return "Value must not be empty"
        bad = [i for i in items if i not in allowed]
        return f"Invalid value(s) {bad}; allowed: {', '.join(allowed)}" if bad else None

    return check


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be -1 or in [1, 9]"


def _any(_v: Any) -> None:
    return None


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _throttled_replicas(v: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs (empty = none)."""
    if v == "*" or all(_THROTTLED_REPLICA.fullmatch(item) for item in v.split(",") if item):
        return None
    return "must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],..."


class TopicConfigDef(NamedTuple):
    field: str  # LogConfig attribute
    synonym: str | None  # the broker key with the highest priority (Kafka's serverSynonym)
    type: str  # "int" | "long" | "double" | "boolean" | "string" | "list"
    validator: Validator
    doc: str
    # Every broker key that sets the default, highest priority first, with the factor converting
    # its unit to the topic key's (log.retention.hours -> ms).
    synonyms: tuple[tuple[str, int], ...] = ()
    # Why a key Kafka has is accepted (so Kafka's tools and scripts work unchanged) but changes
    # nothing in Odradek; empty = the key works. The controller warns when one is set on a topic
    # (odradek.controller.topic_configs.warn_keys_without_effect), as the broker does for its own keys.
    no_effect: str = ""


def _d(field: str, synonyms: list[tuple[str, int]] | list[str] | None, type_: str, validator: Validator,
       doc: str, no_effect: str = "") -> TopicConfigDef:
    syn = tuple((s, 1) if isinstance(s, str) else s for s in (synonyms or []))
    return TopicConfigDef(field, syn[0][0] if syn else None, type_, validator, doc, syn, no_effect)


# Reasons shared by several keys (TopicConfigDef.no_effect).
_NO_TIERED_STORAGE = "no tiered storage: every segment stays local, under retention.ms and retention.bytes"
_NO_REPLICATION_THROTTLE = "replication is not throttled (Odradek has no replication quotas)"


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    "segment.bytes": _d("segment_bytes", ["log.segment.bytes"], "int", _at_least(14),
                        "Size of a segment file; a new segment is rolled when it would exceed this."),
    "segment.ms": _d("segment_ms", [("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)], "long", _at_least(1),
                     "Roll a new segment when the first batch's timestamp is this old."),
    "segment.jitter.ms": _d("segment_jitter_ms", [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)],
                            "long", _at_least(0), "Random jitter subtracted from segment.ms per segment."),
    "segment.index.bytes": _d("segment_index_bytes", ["log.index.size.max.bytes"], "int", _at_least(4),
                              "Size the offset and time indexes are preallocated to."),
    "flush.messages": _d("flush_messages", ["log.flush.interval.messages"], "long", _at_least(1),
                         "fsync after this many messages (default: never, rely on replication)."),
    "flush.ms": _d("flush_ms", ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"], "long",
                   _at_least(0), "fsync when data is this old (default: never)."),
    "retention.bytes": _d("retention_bytes", ["log.retention.bytes"], "long", _any,
                          "Delete old segments while the partition is larger than this (-1: no limit)."),
    "retention.ms": _d("retention_ms", [("log.retention.ms", 1), ("log.retention.minutes", _MINUTE_MS),
                                        ("log.retention.hours", _HOUR_MS)], "long", _at_least(-1),
                       "Delete segments whose newest record is older than this (-1: no limit)."),
    "max.message.bytes": _d("max_message_bytes", ["message.max.bytes"], "int", _at_least(0),
                            "Largest record batch size allowed."),
    "index.interval.bytes": _d("index_interval_bytes", ["log.index.interval.bytes"], "int", _at_least(0),
                               "Bytes of appended data between offset index entries."),
    "delete.retention.ms": _d("delete_retention_ms", ["log.cleaner.delete.retention.ms"], "long", _at_least(0),
                              "How long compaction keeps tombstones."),
    "min.compaction.lag.ms": _d("min_compaction_lag_ms", ["log.cleaner.min.compaction.lag.ms"], "long",
                                _at_least(0), "Minimum age of a record before it may be compacted."),
    "max.compaction.lag.ms": _d("max_compaction_lag_ms", ["log.cleaner.max.compaction.lag.ms"], "long",
                                _at_least(1), "Maximum time a record stays ineligible for compaction."),
    "file.delete.delay.ms": _d("file_delete_delay_ms", ["log.segment.delete.delay.ms"], "long", _at_least(0),
                               "Wait this long before removing a deleted segment's files."),
    "min.cleanable.dirty.ratio": _d("min_cleanable_dirty_ratio", ["log.cleaner.min.cleanable.ratio"], "double",
                                    _between(0, 1), "Dirty fraction of the log that triggers compaction."),
    "cleanup.policy": _d("cleanup_policy", ["log.cleanup.policy"], "list", _list_of("compact", "delete"),
                         "delete, compact, or both."),
    "unclean.leader.election.enable": _d("unclean_leader_election_enable", ["unclean.leader.election.enable"],
                                         "boolean", _any, "Allow out-of-sync replicas to become leader."),
    "min.insync.replicas": _d("min_insync_replicas", ["min.insync.replicas"], "int", _at_least(1),
                              "Replicas that must acknowledge an acks=all produce."),
    "compression.type": _d("compression_type", ["compression.type"], "string",
                           _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                           "Final compression of the topic's data; 'producer' keeps what was sent."),
    "compression.gzip.level": _d("compression_gzip_level", ["compression.gzip.level"], "int", _gzip_level,
                                 "gzip level when compression.type=gzip."),
    "compression.lz4.level": _d("compression_lz4_level", ["compression.lz4.level"], "int", _between(1, 17),
                                "lz4 level when compression.type=lz4."),
    "compression.zstd.level": _d("compression_zstd_level", ["compression.zstd.level"], "int",
                                 _between(-131072, 22), "zstd level when compression.type=zstd."),
    "preallocate": _d("preallocate", ["log.preallocate"], "boolean", _any,
                      "Preallocate segment files on creation.", no_effect="segment files are not preallocated"),
    "message.timestamp.type": _d("message_timestamp_type", ["log.message.timestamp.type"], "string",
                                 _one_of("CreateTime", "LogAppendTime"),
                                 "Whether record timestamps are the producer's or the broker's append time."),
    "message.timestamp.before.max.ms": _d("message_timestamp_before_max_ms",
                                          ["log.message.timestamp.before.max.ms"], "long", _at_least(0),
                                          "How far in the past a CreateTime timestamp may be."),
    "message.timestamp.after.max.ms": _d("message_timestamp_after_max_ms",
                                         ["log.message.timestamp.after.max.ms"], "long", _at_least(0),
                                         "How far in the future a CreateTime timestamp may be."),
    "message.downconversion.enable": _d("message_downconversion_enable", ["log.message.downconversion.enable"],
                                        "boolean", _any, "Kept for compatibility; Odradek never down-converts.",
                                        no_effect="no down-conversion: Kafka 4 removed it too"),
    "local.retention.ms": _d("local_retention_ms", ["log.local.retention.ms"], "long", _at_least(-2),
                             "Tiered storage local retention (unused: no tiered storage).",
                             no_effect=_NO_TIERED_STORAGE),
    "local.retention.bytes": _d("local_retention_bytes", ["log.local.retention.bytes"], "long", _at_least(-2),
                                "Tiered storage local retention (unused: no tiered storage).",
                                no_effect=_NO_TIERED_STORAGE),
    "remote.storage.enable": _d("remote_storage_enable", None, "boolean", _any,
                                "Tiered storage (not supported; must stay false)."),
    "leader.replication.throttled.replicas": _d("leader_replication_throttled_replicas", None, "list",
                                                _throttled_replicas,
                                                "Replication throttling (accepted, not enforced).",
                                                no_effect=_NO_REPLICATION_THROTTLE),
    "follower.replication.throttled.replicas": _d("follower_replication_throttled_replicas", None, "list",
                                                  _throttled_replicas,
                                                  "Replication throttling (accepted, not enforced).",
                                                  no_effect=_NO_REPLICATION_THROTTLE),
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = 604800000
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: str = "delete"
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_downconversion_enable: bool = True
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    # cached_property writes the instance __dict__ directly, so it works on a frozen dataclass;
    # the append path reads these for every produce.
    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @cached_property
    def recompression(self) -> Recompression | None:
        """The codec and level appends store batches with; None for ``producer`` (as sent)."""
        return recompression_for(self.compression_type, self.compression_gzip_level, self.compression_lz4_level,
                                 self.compression_zstd_level)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, Any]) -> LogConfig:
        """Defaults from a broker's properties; for each topic key the first synonym set wins.

        Unknown broker keys are ignored (they belong to other parts of the broker); bad values of
        known keys raise InvalidConfigError naming the broker key.
        """
        values: dict[str, Any] = {}
        for key, cdef in TOPIC_CONFIGS.items():
            for broker_key, factor in cdef.synonyms:
                raw = props.get(broker_key)
                if raw is None or raw == "":
                    continue
                value = _parse(broker_key, raw, cdef)
                if factor != 1:
                    # -1 (unlimited) stays -1 when converting hours/minutes to ms.
                    value = value if value < 0 else value * factor
                _validate(key, value, cdef)
                values[cdef.field] = value
                break
        return cls(**values)

    def with_overrides(self, topic_configs: Mapping[str, Any]) -> LogConfig:
        """A copy with topic-level overrides applied; raises InvalidConfigError on any bad key/value."""
        changes: dict[str, Any] = {}
        for key, raw in topic_configs.items():
            cdef = TOPIC_CONFIGS.get(key)
            if cdef is None:
                raise InvalidConfigError(key, "unknown topic config")
            if raw is None:
                continue
            value = _parse(key, raw, cdef)
            _validate(key, value, cdef)
            changes[cdef.field] = value
        if changes.get("remote_storage_enable"):
            raise InvalidConfigError("remote.storage.enable", "tiered storage is not supported")
        result = dataclasses.replace(self, **changes)
        # Kafka's LogConfig.validateValues, on the combined values.
        if result.min_compaction_lag_ms > result.max_compaction_lag_ms:
            key = "min.compaction.lag.ms" if "min_compaction_lag_ms" in changes else "max.compaction.lag.ms"
            raise InvalidConfigError(key, f"conflict topic config setting min.compaction.lag.ms "
                                          f"({result.min_compaction_lag_ms}) > max.compaction.lag.ms "
                                          f"({result.max_compaction_lag_ms})")
        return result

    def to_topic_configs(self) -> dict[str, str]:
        """Every topic key with its value as Kafka prints it (for DescribeConfigs)."""
        out: dict[str, str] = {}
        for key, cdef in TOPIC_CONFIGS.items():
            value = getattr(self, cdef.field)
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out


def _parse(key: str, raw: Any, cdef: TopicConfigDef) -> Any:
    kind = cdef.type
    try:
        if kind in ("int", "long"):
            if isinstance(raw, bool) or isinstance(raw, float):
                raise ValueError
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            low, high = (INT_MIN, INT_MAX) if kind == "int" else (LONG_MIN, LONG_MAX)
            if not low <= value <= high:
                raise InvalidConfigError(key, f"{raw!r} is out of range for type {kind}")
            return value
        if kind == "double":
            return float(raw)
        if kind == "boolean":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError
            return text == "true"
        if kind == "list":
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return ",".join(str(i).strip() for i in items if str(i).strip())
        return str(raw).strip()
    except (TypeError, ValueError):
        raise InvalidConfigError(key, f"{raw!r} is not a valid {kind}") from None


def _validate(key: str, value: Any, cdef: TopicConfigDef) -> None:
    error = cdef.validator(value)
    if error:
        raise InvalidConfigError(key, f"{value!r}: {error}")
