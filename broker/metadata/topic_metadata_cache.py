"""Encoded Metadata topic entries, reused while the metadata image does not change.

A Metadata response lists every partition of every requested topic; building and encoding that
field by field costs ~6 us a partition on the handler loop (~60 ms for a 10,000-partition topic,
docs/benchmarks/archive/2026-11-21-profiles-tried-microbenchmarks.md). The entry of a topic depends
only on the image (partitions, leaders, live brokers), the response version and whether topic
operations were asked for, so it is encoded once (odradek.protocol.codec.Encoded) and copied into later
responses until the image changes.

Validity: the image is mutated in place, and every applied record bumps ``image.offset``; the
cache is dropped whenever the image object or its offset differs from the ones it was filled
from. Owned by the handler loop, like the image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from odradek.protocol.codec import Encoded, codec

RESPONSE_SCHEMA = "MetadataResponse"


class VersionedImage(Protocol):
    """What the cache reads of a metadata image (odradek.controller.image.MetadataImage)."""

    @property
    def offset(self) -> int:
        """Bumped by every record applied to the image."""
        ...


class NamedTopic(Protocol):
    """What the cache reads of a topic of that image (odradek.controller.image.TopicImage)."""

    @property
    def name(self) -> str: ...


class TopicMetadataCache:
    def __init__(self) -> None:
        self._image: VersionedImage | None = None
        self._offset = -2
        self._entries: dict[tuple[str, int, bool], Encoded] = {}

    def entry(self, image: VersionedImage, version: int, include_ops: bool, topic: NamedTopic,
              build: Callable[[], Mapping[str, Any]]) -> Encoded:
        """The encoded entry of ``topic`` for this image; ``build()`` makes it when missing."""
        if image is not self._image or image.offset != self._offset:
            self._image, self._offset = image, image.offset
            self._entries = {}
        key = (topic.name, version, include_ops)
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = codec(RESPONSE_SCHEMA, version).element_encoder("topics")(build())
        return found
