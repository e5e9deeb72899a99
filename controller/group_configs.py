"""Group configs (KIP-848, KIP-932, KIP-1071): the GROUP config resource, as Kafka 4.4's GroupConfig.

A group's overrides are a named config resource of type GROUP (32) stored in the metadata log as
ConfigRecords of that type (Kafka stores them the same way), so every broker sees them. The keys are
Kafka 4.4's, each with the broker config it overrides (its synonym; none for the share-only keys)::

    key                                   type     at least  broker synonym / default
    consumer.session.timeout.ms           INT      1         group.consumer.session.timeout.ms
    consumer.heartbeat.interval.ms        INT      1         group.consumer.heartbeat.interval.ms
    consumer.assignment.interval.ms       INT      0         group.consumer.assignment.interval.ms (*)
    consumer.assignor.offload.enable      BOOLEAN            group.consumer.assignor.offload.enable (*, internal)
    share.session.timeout.ms              INT      1         group.share.session.timeout.ms
    share.heartbeat.interval.ms           INT      1         group.share.heartbeat.interval.ms
    share.record.lock.duration.ms         INT      1000      group.share.record.lock.duration.ms
    share.delivery.count.limit            INT      2         group.share.delivery.count.limit
    share.partition.max.record.locks      INT      100       group.share.partition.max.record.locks
    share.auto.offset.reset               STRING             latest (earliest, latest, by_duration:<ISO-8601>)
    share.isolation.level                 STRING             read_uncommitted (or read_committed)
    share.renew.acknowledge.enable        BOOLEAN            true
    share.assignment.interval.ms          INT      0         group.share.assignment.interval.ms (*)
    share.assignor.offload.enable         BOOLEAN            group.share.assignor.offload.enable (*, internal)
    streams.session.timeout.ms            INT      1         group.streams.session.timeout.ms
    streams.heartbeat.interval.ms         INT      1         group.streams.heartbeat.interval.ms
    streams.num.standby.replicas          INT      0         group.streams.num.standby.replicas
    streams.initial.rebalance.delay.ms    INT      0         group.streams.initial.rebalance.delay.ms
    streams.assignment.interval.ms        INT      0         group.streams.assignment.interval.ms (*)
    streams.rack.aware.assignment.tags    LIST               group.streams.rack.aware.assignment.tags (*)
    streams.assignor.offload.enable       BOOLEAN            group.streams.assignor.offload.enable (*, internal)
    streams.task.offset.interval.ms       INT      1         group.streams.task.offset.interval.ms (internal)
    streams.num.warmup.replicas           INT      0         group.streams.num.warmup.replicas (*, internal)
    streams.acceptable.recovery.lag       LONG     0         group.streams.acceptable.recovery.lag (internal)
    streams.assignor.name                 STRING             the first of group.streams.assignors
    errors.deadletterqueue.topic.name     STRING             "" (KIP-1191)
    errors.deadletterqueue.copy.record.enable BOOLEAN        false (KIP-1191)

(*) broker configs Odradek may not define: their Kafka 4.4 defaults stand in where it does not
(``KAFKA_BROKER_DEFAULTS``).
Internal keys are accepted and shown once set, never as defaults (Kafka's DescribeConfigs hides them).

``validate(props, broker)`` is Kafka 4.4's GroupConfig.validate over a group's complete set of values
after an alteration, raising ``GroupConfigError`` (INVALID_CONFIG) with Kafka's messages, in Kafka's
order: an unknown key ("Unknown group config name: k"); each value as ConfigDef parses it, in the
definition order ("Invalid value v for configuration k: Not a number of type INT", "...: Value must be
at least n", "...: String must be one of: ..."); then the broker-level bounds of the keys present
("k must be in the range a to b inclusive.", "k must be less than or equal to n", "k must be greater
than or equal to n"); then each session timeout above its heartbeat interval, the value or the
broker's ("k must be greater than h"); then the dead-letter topic name. ``broker(name)`` gives a
broker config's parsed value.

``describe(props, broker_entry)`` is what DescribeConfigs shows for a group (Kafka 4.4's
ConfigHelper): the internal keys it sets, then every public key, each part in the order of Kafka's HashMap of them;
a set key has source GROUP_CONFIG (8) and its synonyms are itself then its broker synonym; an unset key
shows its broker synonym's value and source, or its default (DEFAULT_CONFIG, 5) with itself as the
synonym. Values are shown as parsed (``" 20000 "`` is ``20000``).

Pure functions; any thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.controller.client_metrics_configs import java_trim, parse_list
from odradek.controller.java_hashing import hash_map_order, string_hash
from odradek.protocol.errors import ErrorCode

# DescribeConfigs' config_type ids (Kafka's DescribeConfigsResponse.ConfigType).
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
TYPE_NAMES = {BOOLEAN: "BOOLEAN", STRING: "STRING", INT: "INT", LONG: "LONG", LIST: "LIST"}
SOURCE_GROUP = 8
SOURCE_DEFAULT = 5

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
STREAMS_SESSION_TIMEOUT_MS = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL_MS = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_INITIAL_REBALANCE_DELAY_MS = "streams.initial.rebalance.delay.ms"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"

# Kafka 4.4's defaults of the broker configs group keys fall back to, for those Odradek does not define.
KAFKA_BROKER_DEFAULTS: dict[str, Any] = {
    "group.consumer.assignment.interval.ms": 1000,
    "group.consumer.min.assignment.interval.ms": 0,
    "group.consumer.max.assignment.interval.ms": 15000,
    "group.consumer.assignor.offload.enable": True,
    "group.share.assignment.interval.ms": 1000,
    "group.share.min.assignment.interval.ms": 0,
    "group.share.max.assignment.interval.ms": 15000,
    "group.share.assignor.offload.enable": True,
    "group.streams.assignment.interval.ms": 1000,
    "group.streams.min.assignment.interval.ms": 0,
    "group.streams.max.assignment.interval.ms": 15000,
    "group.streams.rack.aware.assignment.tags": [],
    "group.streams.assignor.offload.enable": True,
    "group.streams.num.warmup.replicas": 2,
    "group.streams.max.warmup.replicas": 20,
}

_AUTO_RESET_DOC = (
    "The strategy to initialize the share-partition start offset. <ul><li>earliest: automatically reset the offset "
    "to the earliest offset</li><li>latest: automatically reset the offset to the latest offset</li><li>by_duration:"
    "&lt;duration&gt;: automatically reset the offset to a configured duration from the current timestamp. "
    "&lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). Negative duration is not allowed.</li><li>"
    "anything else: throw exception to the share consumer.</li></ul>")
_ISOLATION_DOC = (
    "Controls how to read records written transactionally. If set to \"read_committed\", the share group will only "
    "deliver transactional records which have been committed. If set to \"read_uncommitted\", the share group will "
    "return all messages, even transactional messages which have been aborted. Non-transactional records will be "
    "returned unconditionally in either mode.")
_ASSIGNOR_NAME_DOC = (
    "The task assignor to use for this streams group, selected by short name from the assignors registered via the "
    "broker configuration group.streams.assignors. When unset, the group defaults to the first assignor configured "
    "in the broker's group.streams.assignors setting. Changing the assignor does not trigger a rebalance for the "
    "group; the new assignor takes effect on the next rebalance.")


@dataclass(frozen=True)
class KeyDef:
    name: str
    config_type: int
    synonym: str | None  # the broker config this key overrides
    default: Any  # used when there is no synonym
    at_least: int | None
    doc: str
    internal: bool = False


def _k(name: str, config_type: int, synonym: str | None, at_least: int | None, doc: str, default: Any = None,
       internal: bool = False) -> KeyDef:
    return KeyDef(name, config_type, synonym, default, at_least, doc, internal)


# In Kafka 4.4's ConfigDef order (ConfigDef.parse reports the first bad value in this order).
KEYS: dict[str, KeyDef] = {d.name: d for d in (
    _k(CONSUMER_SESSION_TIMEOUT_MS, INT, "group.consumer.session.timeout.ms", 1,
       "The timeout to detect client failures when using the consumer group protocol."),
    _k(CONSUMER_HEARTBEAT_INTERVAL_MS, INT, "group.consumer.heartbeat.interval.ms", 1,
       "The heartbeat interval given to the members of a consumer group."),
    _k("consumer.assignment.interval.ms", INT, "group.consumer.assignment.interval.ms", 0,
       "The interval between assignment updates for a consumer group."),
    _k("consumer.assignor.offload.enable", BOOLEAN, "group.consumer.assignor.offload.enable", None,
       "Whether to offload consumer group assignment to a group coordinator background thread.", internal=True),
    _k(SHARE_SESSION_TIMEOUT_MS, INT, "group.share.session.timeout.ms", 1,
       "The timeout to detect client failures when using the share group protocol."),
    _k(SHARE_HEARTBEAT_INTERVAL_MS, INT, "group.share.heartbeat.interval.ms", 1,
       "The heartbeat interval given to the members of a share group."),
    _k(SHARE_RECORD_LOCK_DURATION_MS, INT, "group.share.record.lock.duration.ms", 1000,
       "The record acquisition lock duration in milliseconds for share groups."),
    _k(SHARE_DELIVERY_COUNT_LIMIT, INT, "group.share.delivery.count.limit", 2,
       "The maximum number of delivery attempts for a record delivered to a share group."),
    _k("share.partition.max.record.locks", INT, "group.share.partition.max.record.locks", 100,
       "Share-group record lock limit per share-partition."),
    _k(SHARE_AUTO_OFFSET_RESET, STRING, None, None, _AUTO_RESET_DOC, default="latest"),
    _k(SHARE_ISOLATION_LEVEL, STRING, None, None, _ISOLATION_DOC, default="read_uncommitted"),
    _k("share.renew.acknowledge.enable", BOOLEAN, None, None,
       "Whether the renew acknowledge type is enabled for the share group.", default=True),
    _k("share.assignment.interval.ms", INT, "group.share.assignment.interval.ms", 0,
       "The interval between assignment updates for a share group."),
    _k("share.assignor.offload.enable", BOOLEAN, "group.share.assignor.offload.enable", None,
       "Whether to offload share group assignment to a group coordinator background thread.", internal=True),
    _k(STREAMS_SESSION_TIMEOUT_MS, INT, "group.streams.session.timeout.ms", 1,
       "The timeout to detect client failures when using the streams group protocol."),
    _k(STREAMS_HEARTBEAT_INTERVAL_MS, INT, "group.streams.heartbeat.interval.ms", 1,
       "The heartbeat interval given to the members."),
    _k(STREAMS_NUM_STANDBY_REPLICAS, INT, "group.streams.num.standby.replicas", 0,
       "The number of standby replicas for each task."),
    _k(STREAMS_INITIAL_REBALANCE_DELAY_MS, INT, "group.streams.initial.rebalance.delay.ms", 0,
       "The amount of time the group coordinator will wait for more streams clients to join a new group before "
       "performing the first rebalance. A longer delay means potentially fewer rebalances."),
    _k("streams.assignment.interval.ms", INT, "group.streams.assignment.interval.ms", 0,
       "The interval between assignment updates for a streams group."),
    _k("streams.rack.aware.assignment.tags", LIST, "group.streams.rack.aware.assignment.tags", None,
       "List of client tag keys used to distribute standby replicas across Kafka Streams instances. When "
       "configured, and the used broker-side assignor supports it, it will make a best-effort to distribute "
       "standby tasks over each client tag dimension."),
    _k("streams.assignor.offload.enable", BOOLEAN, "group.streams.assignor.offload.enable", None,
       "Whether to offload streams group assignment to a group coordinator background thread.", internal=True),
    _k("streams.task.offset.interval.ms", INT, "group.streams.task.offset.interval.ms", 1,
       "The interval in which the warmup task changelog offsets on a client are updated on the broker. The offsets are "
       "sent with the next heartbeat after this time has passed.", internal=True),
    _k("streams.num.warmup.replicas", INT, "group.streams.num.warmup.replicas", 0,
       "The maximum number of warmup task replicas.", internal=True),
    _k("streams.acceptable.recovery.lag", LONG, "group.streams.acceptable.recovery.lag", 0,
       "The maximum acceptable lag (number of offsets to catch up) for a client to be considered caught-up enough to "
       "receive an active task assignment.", internal=True),
    _k("streams.assignor.name", STRING, "group.streams.assignors", None, _ASSIGNOR_NAME_DOC),
    _k(DLQ_TOPIC_NAME, STRING, None, None,
       "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the "
       "default), the group does not have a DLQ topic.", default=""),
    _k("errors.deadletterqueue.copy.record.enable", BOOLEAN, None, None,
       "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or "
       "just write a record containing the context information headers.", default=False),
)}

# (key, broker min, broker max) checked in Kafka's order when the key is set; None: no bound that side.
_BOUNDS: tuple[tuple[str, str | None, str | None], ...] = (
    (CONSUMER_HEARTBEAT_INTERVAL_MS, "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    (CONSUMER_SESSION_TIMEOUT_MS, "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
     "group.consumer.max.assignment.interval.ms"),
    (SHARE_HEARTBEAT_INTERVAL_MS, "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    (SHARE_SESSION_TIMEOUT_MS, "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    (SHARE_RECORD_LOCK_DURATION_MS, "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    (SHARE_DELIVERY_COUNT_LIMIT, "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
    ("share.assignment.interval.ms", "group.share.min.assignment.interval.ms", "group.share.max.assignment.interval.ms"),
    (STREAMS_HEARTBEAT_INTERVAL_MS, "group.streams.min.heartbeat.interval.ms",
     "group.streams.max.heartbeat.interval.ms"),
    (STREAMS_SESSION_TIMEOUT_MS, "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    (STREAMS_NUM_STANDBY_REPLICAS, None, "group.streams.max.standby.replicas"),
    ("streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
     "group.streams.max.assignment.interval.ms"),
    ("streams.task.offset.interval.ms", "group.streams.min.task.offset.interval.ms", None),
    ("streams.num.warmup.replicas", None, "group.streams.max.warmup.replicas"),
)
_SESSION_OVER_HEARTBEAT = (
    (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
    (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
    (STREAMS_SESSION_TIMEOUT_MS, STREAMS_HEARTBEAT_INTERVAL_MS),
)


class GroupConfigError(ValueError):
    """A group's configs are refused: ``code`` and ``str(e)`` are Kafka's."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_CONFIG) -> None:
        super().__init__(message)
        self.code = code


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
# ShareGroupAutoOffsetResetStrategy: by_duration takes java.time.Duration.parse's ISO-8601 form, not negative.
_ISO_DURATION = re.compile(r"[+]?P(?:([0-9]+)D)?(?:T(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+)(?:[.,][0-9]{0,9})?S)?)?",
                           re.IGNORECASE)


def _bad(key: str, value: object, reason: str) -> GroupConfigError:
    return GroupConfigError(f"Invalid value {value} for configuration {key}: {reason}")


def _valid_auto_reset(value: str) -> bool:
    if value in ("earliest", "latest"):
        return True
    if not value.startswith("by_duration:"):
        return False
    duration = value[len("by_duration:"):]
    match = _ISO_DURATION.fullmatch(duration)
    # Java's Duration.parse needs at least one part, and "T" needs one after it.
    return match is not None and any(match.groups()) and not duration.upper().endswith("T")


def parse_value(key: str, raw: str) -> Any:
    """ConfigDef.parseType and the key's validator; raises GroupConfigError."""
    d = KEYS[key]
    text = java_trim(raw)
    if d.config_type in (INT, LONG):
        limit = 2**31 if d.config_type == INT else 2**63
        if not (_JAVA_INT.fullmatch(text) and -limit <= int(text) < limit):
            raise _bad(key, raw, f"Not a number of type {TYPE_NAMES[d.config_type]}")
        value: Any = int(text)
        if d.at_least is not None and value < d.at_least:
            raise _bad(key, value, f"Value must be at least {d.at_least}")
        return value
    if d.config_type == BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _bad(key, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if d.config_type == LIST:
        return parse_list(raw)
    if key == SHARE_ISOLATION_LEVEL and text not in ("read_committed", "read_uncommitted"):
        raise _bad(key, text, "String must be one of: read_committed, read_uncommitted")
    if key == SHARE_AUTO_OFFSET_RESET and not _valid_auto_reset(text):
        raise _bad(key, text, f"Invalid value `{text}` for configuration {key}. The value must be either 'earliest', "
                   "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    return text


def broker_value(broker: Callable[[str], Any], name: str) -> Any:
    """A broker config's parsed value; Kafka's default for one Odradek does not define."""
    try:
        return broker(name)
    except KeyError:
        return KAFKA_BROKER_DEFAULTS[name]


def validate(props: Mapping[str, str], broker: Callable[[str], Any]) -> dict[str, Any]:
    """Kafka's GroupConfig.validate (module docstring: the checks and their order); the parsed values."""
    for key in props:
        if key not in KEYS:
            raise GroupConfigError(f"Unknown group config name: {key}")
    parsed = {key: parse_value(key, props[key]) for key in KEYS if key in props}
    for key, low_name, high_name in _BOUNDS:
        if key not in parsed:
            continue
        value = parsed[key]
        low = broker_value(broker, low_name) if low_name else None
        high = broker_value(broker, high_name) if high_name else None
        if low is not None and high is not None:
            if not low <= value <= high:
                raise GroupConfigError(f"{key} must be in the range {low} to {high} inclusive.")
        elif high is not None and value > high:
            raise GroupConfigError(f"{key} must be less than or equal to {high}")
        elif low is not None and value < low:
            raise GroupConfigError(f"{key} must be greater than or equal to {low}")
    tags = parsed.get("streams.rack.aware.assignment.tags")
    if tags is not None and len(set(tags)) != len(tags):
        raise GroupConfigError("streams.rack.aware.assignment.tags must not contain duplicate tag keys.")
    assignor = parsed.get("streams.assignor.name")
    if assignor is not None:
        registered = list(broker_value(broker, "group.streams.assignors"))
        if assignor not in registered:
            raise GroupConfigError(f"streams.assignor.name '{assignor}' is not a registered task assignor. "
                                   f"Registered assignors are: [{', '.join(registered)}].")
    for session_key, heartbeat_key in _SESSION_OVER_HEARTBEAT:
        if session_key not in parsed and heartbeat_key not in parsed:
            continue
        session = parsed.get(session_key, broker_value(broker, KEYS[session_key].synonym or ""))
        heartbeat = parsed.get(heartbeat_key, broker_value(broker, KEYS[heartbeat_key].synonym or ""))
        if session <= heartbeat:
            raise GroupConfigError(f"{session_key} must be greater than {heartbeat_key}")
    dlq = parsed.get(DLQ_TOPIC_NAME)
    if dlq and dlq.startswith("__"):
        raise GroupConfigError(f"{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'")
    return parsed


def format_value(key: str, value: Any) -> str:
    """How ConfigDef writes a parsed value back (DescribeConfigs' value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str
    source: int
    config_type: int
    documentation: str
    synonyms: list[tuple[str, str, int]]


# A broker synonym's (value, source) chain, most specific first (odradek.broker.metadata.topic_config_view).
BrokerEntry = Callable[[str], list[tuple[str, str, int]]]


def _java_hash_map_capacity(count: int) -> int:
    """The table size of ``new HashMap<>(map)`` for a map of ``count`` entries (HashMap.putMapEntries:
    tableSizeFor(count / 0.75 + 1)), which is how Kafka's describe map is built."""
    wanted = int(count / 0.75 + 1.0)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return capacity


def describe(props: Mapping[str, str], broker_entry: BrokerEntry) -> list[DescribedConfig]:
    """DescribeConfigs' entries for a group with overrides ``props`` (none: the defaults)."""
    public = [k for k, d in KEYS.items() if not d.internal]
    internal_set = [k for k, d in KEYS.items() if d.internal and k in props]
    capacity = _java_hash_map_capacity(len(public))
    # Kafka 4.4 lists the internal keys a group sets ahead of the public ones (seen on the wire).
    order = hash_map_order(sorted(internal_set), string_hash, capacity) + hash_map_order(sorted(public), string_hash,
                                                                                          capacity)
    out: list[DescribedConfig] = []
    for key in order:
        d = KEYS[key]
        if d.synonym is None:
            broker_chain = [(key, format_value(key, d.default), SOURCE_DEFAULT)]
        else:
            broker_chain = broker_entry(d.synonym)
            if not broker_chain:  # a broker config Odradek does not define
                broker_chain = [(d.synonym, format_value(key, KAFKA_BROKER_DEFAULTS[d.synonym]), SOURCE_DEFAULT)]
            if key == "streams.assignor.name":  # the group's default is the first registered assignor
                broker_chain = [(n, v.split(",")[0], s) for n, v, s in broker_chain]
        if key in props:
            try:
                value = format_value(key, parse_value(key, props[key]))
            except GroupConfigError:  # validated when written; shown as stored rather than not at all
                value = props[key]
            synonyms = [(key, value, SOURCE_GROUP), *broker_chain]
            out.append(DescribedConfig(key, value, SOURCE_GROUP, d.config_type, d.doc, synonyms))
        else:
            _, value, source = broker_chain[0]
            out.append(DescribedConfig(key, value, source, d.config_type, d.doc, broker_chain))
    return out


def duration_ms(text: str) -> int:
    """The milliseconds of an ISO-8601 duration as share.auto.offset.reset's by_duration takes it
    (java.time.Duration.parse: days, hours, minutes, seconds with a fraction); 0 when it does not parse."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None:
        return 0
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    fraction = re.search(r"[.,]([0-9]{1,9})S$", text, re.IGNORECASE)
    millis = int(fraction.group(1).ljust(9, "0")[:3]) if fraction else 0
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + millis
