"""The broker's view of cluster metadata: the current image, fed by a publisher, and who watches it.

``BrokerMetadata`` is a ``odradek.controller.publisher.MetadataPublisher``: the controller (in-process
today, remote later) calls ``publish(image, delta)`` after every commit; ``image`` becomes the
current one and each listener added with ``subscribe`` then gets the delta (Kafka's
BrokerMetadataPublisher). Broker components read ``image`` (topics, partitions, leaders, epochs,
topic ids, dynamic broker configs) and watch changes through ``subscribe``; they never reach the
controller, and they send changes through ``odradek.broker.metadata.controller_client``. ``metadata_dir`` is the
directory of the metadata log (``metadata.log.dir``, else the first of ``log.dirs``, as in KRaft),
where other node-level state (producer ids) lives too.

Ownership: the handler loop. ``publish`` runs there, synchronously; the image is read-only to the
broker (in-process it is the controller's own object, changed in place by the next commit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.metadata.topic_metadata_cache import TopicMetadataCache
from odradek.controller.image import MetadataDelta, MetadataImage
from odradek.controller.publisher import MetadataListener

log = logging.getLogger(__name__)

def metadata_dir_of(config: BrokerConfig) -> Path:
    """``metadata.log.dir``, else the first of ``log.dirs`` (KRaft's rule)."""
    return Path(config.get("metadata.log.dir") or config.log_dirs[0])


class BrokerMetadata:
    def __init__(self, metadata_dir: Path) -> None:
        self.metadata_dir = Path(metadata_dir)
        self._image = MetadataImage()
        self._listeners: list[MetadataListener] = []
        self.topic_metadata_cache = TopicMetadataCache()

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def cluster_id(self) -> str:
        return self._image.cluster_id

    def publish(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Take ``image`` as current, then tell every listener what changed (nothing for an empty delta)."""
        self._image = image
        if delta.is_empty():
            return
        for listener in list(self._listeners):
            try:
                listener(delta)
            except Exception:  # the change is committed; one bad listener must not hide it from others
                log.exception("metadata listener %r failed", listener)

    def subscribe(self, callback: MetadataListener) -> Callable[[], None]:
        """Call ``callback(delta)`` after each published change; returns the unsubscribe function."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe
