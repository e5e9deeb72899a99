"""Config truth: every key Odradek accepts either works or says why it does not.

The broker's table (broker/config/broker_config.py DEFINITIONS) and the topic table (storage/log_config.py
TOPIC_CONFIGS) mark keys that change nothing with ``no_effect`` and a reason; the broker warns
about such keys at start-up and the controller when they are set on a topic. These tests read the
source itself: a key marked ``no_effect`` that the code reads is a false warning (a user is told a
setting does nothing when it does), and a key not marked that nothing reads is a silent no-op.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import (
    CONFIG_DEFS,
    DEFINITIONS,
    BrokerConfig,
    ConfigError,
    load_config,
)
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_config import TOPIC_CONFIGS, LogConfig

REPO = Path(__file__).resolve().parents[3]
SOURCE_DIRS = ("broker", "storage", "controller", "protocol")
CONFIG_PY = REPO / "broker" / "config" / "broker_config.py"
LOG_CONFIG_PY = REPO / "storage" / "log_config.py"

# Topic keys whose implementation is under way: neither they nor their broker synonyms are checked
# here until it lands. (None now; broker-side recompression, the last, is in.)
IN_PROGRESS_TOPIC_KEYS: set[str] = set()
# Topic keys the code reads by name from the controller's image rather than through LogConfig.
READ_BY_NAME = {"unclean.leader.election.enable": REPO / "controller" / "elections.py"}
# LogConfig fields read through a derived property of LogConfig (storage/log_config.py).
DERIVED = {"cleanup_policy": ("compact", "delete"), "message_timestamp_type": ("log_append_time",),
           **{f"compression_{name}": ("recompression",) for name in ("type", "gzip_level", "lz4_level", "zstd_level")}}


@cache
def _sources() -> dict[Path, str]:
    out = {}
    for d in SOURCE_DIRS:
        for path in (REPO / d).rglob("*.py"):
            out[path] = path.read_text(encoding="utf-8")
    return out


@cache
def _attributes_read() -> dict[Path, set[str]]:
    """Per source file, every attribute name it accesses (``config.preallocate`` -> preallocate)."""
    return {path: {node.attr for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Attribute)}
            for path, text in _sources().items()}


def _config_py_outside_table() -> str:
    text = _sources()[CONFIG_PY]
    start = text.index("DEFINITIONS: tuple[ConfigDef, ...] = (")
    end = text.index("CONFIG_DEFS: Mapping")
    return text[:start] + text[end:]


def _topic_key_of_broker_synonym() -> dict[str, str]:
    return {broker_key: topic_key for topic_key, cdef in TOPIC_CONFIGS.items() for broker_key, _ in cdef.synonyms}


def broker_key_readers(key: str) -> list[str]:
    """Where the code reads broker ``key``: files quoting it (config.py outside the definitions
    table counts: its cross-key rules act on values), and the topic key it is the default of when
    that topic key works."""
    quoted = (f'"{key}"', f"'{key}'")
    readers = []
    for path, text in _sources().items():
        if path in (CONFIG_PY, LOG_CONFIG_PY):
            continue
        if any(q in text for q in quoted):
            readers.append(str(path.relative_to(REPO)))
    if any(q in _config_py_outside_table() for q in quoted):
        readers.append("broker/config/broker_config.py (validation)")
    topic_key = _topic_key_of_broker_synonym().get(key)
    if topic_key is not None and topic_key not in IN_PROGRESS_TOPIC_KEYS and topic_key_is_read(topic_key):
        readers.append(f"topic key {topic_key}")
    return readers


def topic_key_is_read(key: str) -> bool:
    """Whether the code outside storage/log_config.py reads topic ``key``'s value."""
    cdef = TOPIC_CONFIGS[key]
    names = {cdef.field, *DERIVED.get(cdef.field, ())}
    if any(names & attrs for path, attrs in _attributes_read().items() if path != LOG_CONFIG_PY):
        return True
    reader = READ_BY_NAME.get(key)
    return reader is not None and f'"{key}"' in _sources()[reader]


def _in_progress(broker_key: str) -> bool:
    return _topic_key_of_broker_synonym().get(broker_key) in IN_PROGRESS_TOPIC_KEYS


@pytest.mark.parametrize("key", [d.name for d in DEFINITIONS if d.no_effect and not _in_progress(d.name)])
def test_a_broker_key_marked_without_effect_is_read_nowhere(key: str) -> None:
    assert broker_key_readers(key) == [], f"{key} is marked no_effect ({CONFIG_DEFS[key].no_effect}) but is read"


@pytest.mark.parametrize("key", [d.name for d in DEFINITIONS if not d.no_effect and not _in_progress(d.name)])
def test_a_broker_key_not_marked_is_read_somewhere(key: str) -> None:
    assert broker_key_readers(key), f"{key} is accepted, not marked no_effect, and nothing reads it"


@pytest.mark.parametrize("key", sorted(set(TOPIC_CONFIGS) - IN_PROGRESS_TOPIC_KEYS - {"remote.storage.enable"}))
def test_a_topic_key_is_read_or_marked_without_effect(key: str) -> None:
    read, marked = topic_key_is_read(key), bool(TOPIC_CONFIGS[key].no_effect)
    assert read != marked, f"{key}: read by the code: {read}, marked no_effect: {marked}"


def test_remote_storage_enable_is_honoured_by_refusing_true() -> None:
    # Its only accepted value, false, is what Odradek does; true is refused as by a Kafka broker
    # without tiered storage, so the key needs no warning.
    assert not TOPIC_CONFIGS["remote.storage.enable"].no_effect
    assert LogConfig().with_overrides({"remote.storage.enable": "false"}).remote_storage_enable is False
    with pytest.raises(InvalidConfigError):
        LogConfig().with_overrides({"remote.storage.enable": "true"})


def test_reasons_are_the_corrected_ones() -> None:
    # Keys whose old reasons were false: the transaction coordinator sends WriteTxnMarkers with
    # request.timeout.ms, and replication exists (its fetchers' sockets take the receive buffer).
    assert CONFIG_DEFS["request.timeout.ms"].no_effect == ""
    assert CONFIG_DEFS["replica.socket.receive.buffer.bytes"].no_effect == ""
    # DescribeTopicPartitions is served: its partition bound takes effect (issue 28).
    assert CONFIG_DEFS["max.request.partition.size.limit"].no_effect == ""
    for d in DEFINITIONS:
        assert "replication" not in d.no_effect or "throttl" in d.no_effect, d.name


# --- the KIP-848 bounds (Kafka's GroupCoordinatorConfig requires) ---------------------------------


@pytest.mark.parametrize("overrides,message", [
    ({"group.consumer.session.timeout.ms": "30000"},
     "group.consumer.session.timeout.ms (30000) must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"group.consumer.session.timeout.ms": "70000"},
     "group.consumer.session.timeout.ms (70000) must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"group.consumer.heartbeat.interval.ms": "4000"},
     "group.consumer.heartbeat.interval.ms (4000) must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms"),
    ({"group.consumer.heartbeat.interval.ms": "16000"},
     "group.consumer.heartbeat.interval.ms (16000) must be less than or equal to "
     "group.consumer.max.heartbeat.interval.ms"),
    ({"group.consumer.session.timeout.ms": "1000", "group.consumer.min.session.timeout.ms": "1000",
      "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000"},
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
])
def test_kip848_defaults_outside_their_bounds_stop_start_up(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["node.id=1", *(f"{k}={v}" for k, v in overrides.items())], {})
    assert message in str(info.value)


def test_kip848_bounds_moved_with_the_defaults_start() -> None:
    cfg = load_config(None, ["node.id=1", "group.consumer.session.timeout.ms=1500",
                             "group.consumer.min.session.timeout.ms=1000",
                             "group.consumer.heartbeat.interval.ms=500",
                             "group.consumer.min.heartbeat.interval.ms=500"], {})
    assert isinstance(cfg, BrokerConfig) and cfg["group.consumer.session.timeout.ms"] == 1500


# --- topic values Kafka refuses -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["*", "0:1", "0:1,1:2", " 0:1 , 1:2 ", ""])
@pytest.mark.parametrize("key", ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"])
def test_throttled_replica_lists_kafka_accepts(key: str, value: str) -> None:
    LogConfig().with_overrides({key: value})


@pytest.mark.parametrize("value", ["garbage", "0", "0:x", "0:1,*", "1:2:3", "-1:2"])
@pytest.mark.parametrize("key", ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"])
def test_throttled_replica_lists_kafka_refuses(key: str, value: str) -> None:
    # Kafka's ThrottledReplicaListValidator: '*' or [partitionId]:[brokerId] pairs.
    with pytest.raises(InvalidConfigError) as info:
        LogConfig().with_overrides({key: value})
    assert info.value.key == key
    assert "[partitionId]:[brokerId]" in str(info.value)


def test_min_compaction_lag_above_max_is_refused() -> None:
    # Kafka's LogConfig.validateValues, on the topic's combined values.
    with pytest.raises(InvalidConfigError) as info:
        LogConfig().with_overrides({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "50"})
    assert "conflict topic config setting min.compaction.lag.ms (100) > max.compaction.lag.ms (50)" in str(info.value)
    with pytest.raises(InvalidConfigError):
        LogConfig(max_compaction_lag_ms=50).with_overrides({"min.compaction.lag.ms": "100"})
    assert LogConfig().with_overrides({"min.compaction.lag.ms": "50", "max.compaction.lag.ms": "50"}) \
        .min_compaction_lag_ms == 50
