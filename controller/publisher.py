"""How committed metadata leaves the controller: ``MetadataPublisher`` (Kafka's MetadataPublisher).

After every commit the controller calls ``publish(image, delta)`` on each installed publisher, on
the controller's event loop, with the image after the change and the delta that led to it. A
publisher installed with ``Controller.add_publisher`` first receives the current image with an
empty delta, so it never has to ask the controller for anything.

In-process the image is the controller's own object, mutated in place by later commits: read it,
never change it. A remote controller's publisher (the next issue) will ship ``delta.records`` to
the broker, which applies them to its own copy of the image (``odradek.controller.image.apply``) and then
publishes locally through the same interface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from odradek.controller.image import MetadataDelta, MetadataImage

MetadataListener = Callable[[MetadataDelta], None]


class MetadataPublisher(Protocol):
    def publish(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Take ``image`` as current and announce ``delta``; must not raise for a listener's fault."""
        ...


class DeltaListenerPublisher:
    """Adapts a plain delta callback (``listener(delta)``) to a publisher; empty deltas are skipped."""

    def __init__(self, listener: MetadataListener) -> None:
        self.listener = listener

    def publish(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if not delta.is_empty():
            self.listener(delta)
