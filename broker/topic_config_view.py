"""Effective topic configuration as Kafka reports it: value, source and synonyms per key.

A topic's value for a key comes from (highest first) its own override (TOPIC_CONFIG), the broker
key that is its synonym when set in server.properties/env/--override (STATIC_BROKER_CONFIG), or
Kafka's default (DEFAULT_CONFIG). CreateTopics (v5+) and DescribeConfigs show exactly this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.config import BrokerConfig, ConfigSource
from storage.log_config import TOPIC_CONFIGS, LogConfig


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    is_sensitive: bool = False
    # (name, value, source) from highest to lowest precedence, for DescribeConfigs include_synonyms.
    synonyms: list[tuple[str, str | None, ConfigSource]] = field(default_factory=list)
    type_name: str = "string"
    doc: str = ""


_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
             "password": 9}


def config_type_id(type_name: str) -> int:
    """DescribeConfigs v3+ config_type numbers (ConfigEntry.ConfigType)."""
    return _TYPE_IDS.get(type_name, 0)


def topic_config_entries(config: BrokerConfig, overrides: dict[str, str]) -> list[ConfigEntry]:
    defaults: LogConfig = config.log_config()
    default_values = defaults.to_topic_configs()
    kafka_defaults = LogConfig().to_topic_configs()
    entries = []
    for key, cdef in TOPIC_CONFIGS.items():
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if key in overrides:
            synonyms.append((key, overrides[key], ConfigSource.TOPIC_CONFIG))
        broker_source = ConfigSource.DEFAULT_CONFIG
        for broker_key, _factor in cdef.synonyms:
            if broker_key in config.definitions and not config.is_default(broker_key):
                synonyms.append((broker_key, config.value_string(broker_key), ConfigSource.STATIC_BROKER_CONFIG))
                broker_source = ConfigSource.STATIC_BROKER_CONFIG
        if cdef.synonym is not None and broker_source == ConfigSource.DEFAULT_CONFIG:
            synonyms.append((cdef.synonym, kafka_defaults[key], ConfigSource.DEFAULT_CONFIG))
        if key in overrides:
            value, source = overrides[key], ConfigSource.TOPIC_CONFIG
        else:
            value, source = default_values[key], broker_source
        entries.append(ConfigEntry(key, value, source, synonyms=synonyms, type_name=cdef.type, doc=cdef.doc))
    return entries
