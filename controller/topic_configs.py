"""Validation of topic config overrides for the controller (CreateTopics, AlterConfigs).

The authority on topic configs is ``odradek.storage.log_config`` (owned by the storage package): a set of
overrides is valid when ``LogConfig().with_overrides(overrides)`` accepts it; its
``InvalidConfigError`` message becomes the INVALID_CONFIG message. This module is the controller's
only link to that table, so it is the one place to re-point if the validation moves.

``is_list_config`` and ``list_default`` tell incremental AlterConfigs which keys APPEND/SUBTRACT
may touch and which list to start from when the key is unset (ConfigurationControlManager.getParts).

``warn_keys_without_effect`` logs, once the records are committed, one warning per topic naming
the keys just set that Odradek accepts but does not act on (``TopicConfigDef.no_effect``), the way
the broker's start-up warning names its own such keys: Kafka's tools set them, so they are not
refused, but nobody should tune a setting that changes nothing without being told.

Pure functions; safe from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from odradek.controller.records import ConfigRecord, ConfigResourceType
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_config import TOPIC_CONFIGS, LogConfig

log = logging.getLogger(__name__)

_DEFAULTS = LogConfig()


class TopicConfigError(ValueError):
    """A config override was rejected; ``str(e)`` is the INVALID_CONFIG message."""


def validate_topic_configs(configs: Mapping[str, str]) -> None:
    """Raise ``TopicConfigError`` if ``configs`` (a topic's complete set of overrides) is invalid."""
    try:
        _DEFAULTS.with_overrides(configs)
    except InvalidConfigError as e:
        raise TopicConfigError(str(e)) from None


def is_list_config(key: str) -> bool:
    cdef = TOPIC_CONFIGS.get(key)
    return cdef is not None and cdef.type == "list"


def list_default(key: str) -> str | None:
    cdef = TOPIC_CONFIGS.get(key)
    if cdef is None:
        return None
    value = getattr(_DEFAULTS, cdef.field)
    return value if isinstance(value, str) else None


def keys_without_effect(configs: Iterable[str]) -> list[tuple[str, str]]:
    """(key, why) for each of ``configs``' topic keys that Odradek accepts but does not act on."""
    out = []
    for key in configs:
        cdef = TOPIC_CONFIGS.get(key)
        if cdef is not None and cdef.no_effect:
            out.append((key, cdef.no_effect))
    return out


def warn_keys_without_effect(records: Iterable[object]) -> None:
    """One warning per topic whose committed ``records`` set keys without effect (deletions and
    other resources are ignored)."""
    set_keys: dict[str, list[str]] = {}
    for record in records:
        if (isinstance(record, ConfigRecord) and record.resource_type == ConfigResourceType.TOPIC
                and record.value is not None):
            set_keys.setdefault(record.resource_name, []).append(record.name)
    for topic, keys in set_keys.items():
        without_effect = keys_without_effect(keys)
        if without_effect:
            log.warning("Topic %s: these settings are accepted but have no effect in Odradek: %s", topic,
                        "; ".join(f"{key} ({why})" for key, why in without_effect))
