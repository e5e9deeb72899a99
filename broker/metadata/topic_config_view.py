"""Effective broker and topic configuration as Kafka reports it: value, source and synonyms per key.

Kafka's model (DynamicBrokerConfig, ConfigHelper), which DescribeConfigs and CreateTopics (v5+)
show and which this module computes:

- A broker key's value comes from, highest precedence first: the per-broker dynamic config stored
  by the controller (resource name = node id, DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic
  default (resource name "", DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties/env/--override
  (STATIC_BROKER_CONFIG), Kafka's default (DEFAULT_CONFIG). A dynamic value also removes its
  *synonyms* from the layers below it (``log.retention.hours`` set dynamically beats a static
  ``log.retention.ms``: Kafka's ``overrideProps``).
- A topic key's value is the topic's override (TOPIC_CONFIG), else the broker default derived from
  the key's broker synonyms (``retention.ms`` <- ``log.retention.ms``/``minutes``/``hours``).
- Synonyms are listed per layer in that order, each layer in the synonym order, and then Kafka
  drops everything before the first entry named like the key being described
  (``ConfigHelper.configSynonyms``'s ``dropWhile``). So ``retention.ms`` with nothing set lists no
  synonyms (``log.retention.ms`` has no default; ``log.retention.hours`` is dropped), exactly as
  Kafka does. The entry's source is the first synonym's source, else DEFAULT_CONFIG.
- Unknown keys given to the broker (server.properties or dynamic) are reported like Kafka's
  ``allConfigs``: with their raw value, read-only, type UNKNOWN.

Pure functions over immutable inputs (BrokerConfig, a snapshot of the controller's broker config
maps): safe on any thread, but callers on the handler loop pass the live image's maps, which only
that loop mutates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.broker.config.broker_config import (
    BrokerConfig,
    ConfigError,
    ConfigSource,
    format_value,
    is_secret_key,
)
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_config import TOPIC_CONFIGS, LogConfig

if TYPE_CHECKING:
    from odradek.protocol.messages import DescribeConfigsResourceResult

Synonym = tuple[str, "str | None", ConfigSource]


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    is_sensitive: bool = False
    # (name, value, source) from highest to lowest precedence, for DescribeConfigs include_synonyms.
    synonyms: list[Synonym] = field(default_factory=list)
    type_name: str = "string"
    doc: str | None = ""


_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
             "password": 9}


def config_type_id(type_name: str) -> int:
    """DescribeConfigs v3+ config_type numbers (ConfigEntry.ConfigType); 0 = UNKNOWN."""
    return _TYPE_IDS.get(type_name, 0)


_LISTENER_PREFIXED = re.compile(r"listener\.name\.[^.]*\.(.*)")
_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str, match_listener_override: bool = True) -> list[str]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``: keys that set the same value, by precedence."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":  # the scheduler interval is its default
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    m = _LISTENER_PREFIXED.fullmatch(name)
    if m is not None and match_listener_override:
        return [name, m.group(1)]
    return [name]


@dataclass(frozen=True)
class BrokerConfigLayers:
    """Raw string values of broker keys in each of Kafka's four layers, highest precedence first."""

    dynamic_broker: Mapping[str, str]
    dynamic_default: Mapping[str, str]
    static: Mapping[str, str]
    defaults: Mapping[str, str]

    def by_source(self) -> list[tuple[Mapping[str, str], ConfigSource]]:
        return [
            (self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
            (self.defaults, ConfigSource.DEFAULT_CONFIG),
        ]


def config_layers(config: BrokerConfig, broker_configs: Mapping[str, Mapping[str, str]] | None = None,
                  node_id: int | None = None) -> BrokerConfigLayers:
    """The layers for this broker: ``broker_configs`` is the controller image's ``broker_configs``."""
    static = {k: v for k, v in config.originals.items()
              if k not in config.definitions or config.origin(k) != "dynamic"}
    defaults: dict[str, str] = {}
    for name, d in config.definitions.items():
        text = format_value(d, d.default)
        if text is not None:
            defaults[name] = text
    dynamic = broker_configs or {}
    node = config.node_id if node_id is None else node_id
    return BrokerConfigLayers(dict(dynamic.get(str(node), {})), dict(dynamic.get("", {})), static, defaults)


def config_synonyms(name: str, synonyms: list[str], layers: BrokerConfigLayers) -> list[Synonym]:
    """Kafka's ``ConfigHelper.configSynonyms`` (values of secrets are masked by the caller)."""
    out: list[Synonym] = []
    for values, source in layers.by_source():
        for syn in synonyms:
            if syn in values:
                out.append((syn, values[syn], source))
    for i, (syn, _, _) in enumerate(out):
        if syn == name:
            return out[i:]
    return []


def _usable_dynamic(config: BrokerConfig, values: Mapping[str, str]) -> dict[str, str]:
    """Dynamic values the broker would apply: defined, dynamic, parsable (Kafka drops the others)."""
    out = {}
    for key, raw in values.items():
        d = config.definitions.get(key)
        if d is None or not d.dynamic:
            continue
        try:
            d.parse(raw)
        except ConfigError:
            continue
        out[key] = raw
    return out


def merged_props(config: BrokerConfig, layers: BrokerConfigLayers) -> dict[str, str]:
    """Static props overridden by the dynamic default then the per-broker layer (``overrideProps``)."""
    props = dict(layers.static)
    for layer in (layers.dynamic_default, layers.dynamic_broker):
        for key, raw in _usable_dynamic(config, layer).items():
            for syn in broker_synonyms(key, match_listener_override=False):
                props.pop(syn, None)
            props[key] = raw
    return props


def effective_broker_config(config: BrokerConfig, layers: BrokerConfigLayers) -> BrokerConfig:
    """The broker config with the dynamic layers applied; ``config`` itself when there are none or
    the combination is invalid (the running broker keeps its config then, as Kafka does)."""
    if not layers.dynamic_broker and not layers.dynamic_default:
        return config
    try:
        return BrokerConfig.from_props(merged_props(config, layers))
    except ConfigError:
        return config


def effective_log_defaults(config: BrokerConfig, layers: BrokerConfigLayers) -> LogConfig:
    """Topic-level defaults (``LogConfig``) from the broker config with its dynamic layers."""
    # BrokerConfig.log_config returns Any (it imports storage's LogConfig only when called).
    defaults: LogConfig
    try:
        defaults = effective_broker_config(config, layers).log_config()
    except ConfigError:
        defaults = config.log_config()
    return defaults


def effective_log_config(config: BrokerConfig, broker_configs: Mapping[str, Mapping[str, str]],
                         overrides: Mapping[str, str], node_id: int | None = None) -> LogConfig:
    """A topic's effective ``LogConfig``: its overrides over the (dynamic-aware) broker defaults.

    Invalid stored overrides are skipped one by one rather than losing the valid ones.
    """
    defaults = effective_log_defaults(config, config_layers(config, broker_configs, node_id))
    try:
        return defaults.with_overrides(overrides)
    except InvalidConfigError:
        result = defaults
        for key, value in overrides.items():
            try:
                result = result.with_overrides({key: value})
            except InvalidConfigError:
                continue
        return result


def topic_config_entries(config: BrokerConfig, overrides: Mapping[str, str],
                         layers: BrokerConfigLayers | None = None, *, describe: bool = False) -> list[ConfigEntry]:
    """Every topic config key with value, source and synonyms.

    ``describe``: sources as DescribeConfigs reports them (ConfigHelper.createTopicConfigEntry, with
    the ``dropWhile`` above). Otherwise as the controller resolves them for CreateTopics v5+
    (KafkaConfigSchema.resolveEffectiveTopicConfig): the first layer in which *any* broker synonym
    is set. ``layers`` = None: the static broker config only (no dynamic broker configs).
    """
    if layers is None:
        layers = config_layers(config)
    defaults = effective_log_defaults(config, layers)
    try:
        effective = defaults.with_overrides(overrides)
    except InvalidConfigError:
        effective = defaults
    values = effective.to_topic_configs()
    entries = []
    for key, cdef in TOPIC_CONFIGS.items():
        synonyms: list[Synonym] = []
        if cdef.synonym is not None:
            synonyms = config_synonyms(cdef.synonym, broker_synonyms(cdef.synonym), layers)
        value = values[key]
        if key in overrides:
            synonyms.insert(0, (key, value, ConfigSource.TOPIC_CONFIG))
        if describe:
            source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        else:
            source = _resolved_topic_source(key in overrides, [n for n, _ in cdef.synonyms], layers)
        entries.append(ConfigEntry(key, value, source, synonyms=synonyms, type_name=cdef.type, doc=cdef.doc))
    return entries


def _resolved_topic_source(overridden: bool, synonyms: list[str], layers: BrokerConfigLayers) -> ConfigSource:
    if overridden:
        return ConfigSource.TOPIC_CONFIG
    for values, source in layers.by_source()[:3]:
        if any(s in values for s in synonyms):
            return source
    return ConfigSource.DEFAULT_CONFIG


def broker_config_entries(config: BrokerConfig, layers: BrokerConfigLayers, *, per_broker: bool) -> list[ConfigEntry]:
    """DescribeConfigs entries of a broker resource (ConfigHelper.createBrokerConfigEntry).

    ``per_broker``: this node's resource - every defined key plus unknown given ones, with effective
    values. Otherwise the cluster default resource ("") - only the keys set at that level, with
    only DYNAMIC_DEFAULT_BROKER_CONFIG synonyms.
    """
    if per_broker:
        effective = effective_broker_config(config, layers)
        items: list[tuple[str, str | None]] = [(k, effective.value_string(k)) for k in config.definitions]
        extra: dict[str, str] = {}
        for values in (layers.static, layers.dynamic_default, layers.dynamic_broker):
            extra.update((k, v) for k, v in values.items() if k not in config.definitions)
        items.extend(sorted(extra.items()))
    else:
        items = list(layers.dynamic_default.items())
    entries = []
    for name, value in items:
        synonyms = config_synonyms(name, broker_synonyms(name), layers)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        d = config.definitions.get(name)
        sensitive = is_sensitive(config, name)
        if sensitive:  # Kafka's ConfigHelper: a PASSWORD's value is null, in its synonyms too
            value = None
            synonyms = [(n, None, s) for n, _, s in synonyms]
        entries.append(ConfigEntry(
            name, value, source,
            read_only=d is None or not d.dynamic,
            is_sensitive=sensitive,
            synonyms=synonyms,
            type_name=d.type.value if d is not None else "unknown",
            doc=d.doc if d is not None else None,
        ))
    return entries


def is_sensitive(config: BrokerConfig, name: str) -> bool:
    """A secret (Kafka's Type.PASSWORD: ssl.keystore.password, ...), also under a listener prefix."""
    return is_secret_key(name, config.definitions)


def entry_to_wire(entry: ConfigEntry, include_synonyms: bool, include_documentation: bool) -> DescribeConfigsResourceResult:
    """A DescribeConfigsResourceResult dict (newest shape)."""
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_sensitive": entry.is_sensitive,
        "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in entry.synonyms]
        if include_synonyms else [],
        "config_type": config_type_id(entry.type_name),
        "documentation": entry.doc if include_documentation else None,
    }
