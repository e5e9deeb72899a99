import pytest

from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_config import LONG_MAX, TOPIC_CONFIGS, LogConfig


def test_defaults_are_kafkas():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_index_bytes, c.index_interval_bytes) == (
        1073741824, 604800000, 10485760, 4096)
    assert (c.retention_ms, c.retention_bytes, c.cleanup_policy) == (604800000, -1, "delete")
    assert (c.flush_messages, c.flush_ms, c.max_message_bytes) == (LONG_MAX, LONG_MAX, 1048588)
    assert (c.file_delete_delay_ms, c.delete_retention_ms, c.min_cleanable_dirty_ratio) == (60000, 86400000, 0.5)
    assert c.message_timestamp_type == "CreateTime" and not c.preallocate


def test_table_covers_every_field_and_names_synonyms():
    fields = {d.field for d in TOPIC_CONFIGS.values()}
    assert fields == set(LogConfig.__dataclass_fields__)
    assert TOPIC_CONFIGS["retention.ms"].synonym == "log.retention.ms"
    assert TOPIC_CONFIGS["segment.ms"].synonym == "log.roll.ms"
    assert TOPIC_CONFIGS["max.message.bytes"].synonym == "message.max.bytes"
    assert TOPIC_CONFIGS["file.delete.delay.ms"].synonym == "log.segment.delete.delay.ms"


def test_broker_retention_precedence_ms_over_minutes_over_hours():
    assert LogConfig.from_broker_props({"log.retention.hours": "1"}).retention_ms == 3_600_000
    assert LogConfig.from_broker_props({"log.retention.hours": 1, "log.retention.minutes": "2"}).retention_ms == 120_000
    props = {"log.retention.hours": 1, "log.retention.minutes": 2, "log.retention.ms": "5"}
    assert LogConfig.from_broker_props(props).retention_ms == 5
    assert LogConfig.from_broker_props({"log.retention.hours": "-1"}).retention_ms == -1


def test_broker_roll_hours_and_other_synonyms():
    c = LogConfig.from_broker_props({"log.roll.hours": "2", "log.segment.bytes": "1000", "message.max.bytes": 77,
                                     "log.cleanup.policy": "compact", "unrelated.key": "x"})
    assert (c.segment_ms, c.segment_bytes, c.max_message_bytes, c.cleanup_policy) == (7_200_000, 1000, 77, "compact")
    assert LogConfig.from_broker_props({"log.roll.hours": "2", "log.roll.ms": "9"}).segment_ms == 9


def test_with_overrides_parses_and_validates():
    c = LogConfig().with_overrides({"retention.ms": "1000", "cleanup.policy": "compact, delete", "preallocate": "true",
                                    "min.cleanable.dirty.ratio": "0.1", "message.timestamp.type": "LogAppendTime"})
    assert c.retention_ms == 1000 and c.compact and c.delete and c.preallocate and c.log_append_time
    assert c.min_cleanable_dirty_ratio == 0.1
    assert LogConfig().retention_ms == 604800000  # frozen original untouched


@pytest.mark.parametrize("key,value", [
    ("retention.ms", "abc"), ("retention.ms", "-2"), ("segment.bytes", "1"), ("segment.bytes", str(2**31)),
    ("cleanup.policy", "shred"), ("cleanup.policy", ""), ("message.timestamp.type", "Now"),
    ("min.cleanable.dirty.ratio", "1.5"), ("preallocate", "maybe"), ("no.such.key", "1"),
    ("compression.type", "brotli"), ("remote.storage.enable", "true"),
])
def test_with_overrides_rejects_bad_values(key, value):
    with pytest.raises(InvalidConfigError) as info:
        LogConfig().with_overrides({key: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert info.value.key == key


def test_to_topic_configs_round_trips():
    c = LogConfig(retention_ms=5, preallocate=True, cleanup_policy="compact,delete")
    assert LogConfig().with_overrides(c.to_topic_configs()) == c
