"""A group's own value of a group config (Kafka's GroupConfigManager): the GROUP resource's override in
the metadata image when the group has one, else the broker's value the caller passes.

Kafka's coordinator and share-partition leaders read the group's config at each use (a heartbeat, a
session timer, an acquisition), so an override takes effect on the group's next heartbeat or fetch
without a restart; so do these. The stored values were validated when written
(odradek.controller.group_configs.validate); one that no longer parses falls back to the broker's value.

Pure reads of the image; the handler loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from odradek.controller.group_configs import GroupConfigError, parse_value

if TYPE_CHECKING:
    from odradek.controller.image import MetadataImage


class MetadataView(Protocol):
    @property
    def image(self) -> MetadataImage: ...


def _group_value(metadata: MetadataView, group_id: str, key: str) -> Any:
    """The group's parsed value of ``key``; None when it has none or it no longer parses."""
    raw = metadata.image.group_configs.get(group_id, {}).get(key)
    if raw is None:
        return None
    try:
        return parse_value(key, raw)
    except GroupConfigError:
        return None


def group_int(metadata: MetadataView, group_id: str, key: str, default: int) -> int:
    """The group's INT (or LONG) config ``key``, else ``default``."""
    value = _group_value(metadata, group_id, key)
    return default if value is None else int(value)


def group_bool(metadata: MetadataView, group_id: str, key: str, default: bool) -> bool:
    """The group's BOOLEAN config ``key``, else ``default``."""
    value = _group_value(metadata, group_id, key)
    return default if value is None else bool(value)


def group_str(metadata: MetadataView, group_id: str, key: str, default: str) -> str:
    """The group's STRING config ``key`` (trimmed, as Kafka parses it), else ``default``."""
    value = _group_value(metadata, group_id, key)
    return default if value is None else str(value)


def group_list(metadata: MetadataView, group_id: str, key: str, default: list[str]) -> list[str]:
    """The group's LIST config ``key`` (ConfigDef's split at commas), else ``default``."""
    value = _group_value(metadata, group_id, key)
    return default if value is None else [str(item) for item in value]
