"""Validation of topic config overrides for the controller (CreateTopics, AlterConfigs).

The authority on topic configs is ``storage.log_config`` (owned by the storage package): a set of
overrides is valid when ``LogConfig().with_overrides(overrides)`` accepts it; its
``InvalidConfigError`` message becomes the INVALID_CONFIG message. This module is the controller's
only link to that table, so it is the one place to re-point if the validation moves.

``is_list_config`` and ``list_default`` tell incremental AlterConfigs which keys APPEND/SUBTRACT
may touch and which list to start from when the key is unset (ConfigurationControlManager.getParts).

Pure functions; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping

from storage.errors import InvalidConfigError
from storage.log_config import TOPIC_CONFIGS, LogConfig

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
