"""Kafka's topic-name rules (org.apache.kafka.common.internals.Topic), with Kafka's messages.

A legal name is 1..249 characters from ``[a-zA-Z0-9._-]`` and is neither "." nor "..". Names that
differ only by '.' versus '_' collide (metric names replace '.' with '_'), so the controller refuses a
new topic whose ``unify_collision_chars`` form matches an existing topic's.

Pure functions; safe from any thread.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME})

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def invalid_topic_reason(name: str) -> str | None:
    """Kafka's ``Topic.validate`` message ("Topic name is invalid: ...") or None when legal."""
    if name == "":
        reason = "the empty string is not allowed"
    elif name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    elif _LEGAL.fullmatch(name) is None:
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return f"Topic name is invalid: {reason}"


def has_collision_chars(name: str) -> bool:
    return "_" in name or "." in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
