"""Which rule maps a group id or transactional id to its coordinator partition *now*.

0.1.0 put id ``k`` on ``legacy_partition_for(k)``; Kafka, and this release, on ``partition_for(k)``
(broker/coordinator/hashing.py). In a cluster every broker must agree on an id's partition, or two
coordinators serve one group. So the rule follows the cluster's metadata format level
(controller/metadata_format.py), finalized in the metadata log and the same on every broker at the
same log offset:

- below ``COORDINATOR_REHASH`` (some registered broker may run 0.1.0): the old rule, everywhere this
  broker routes an id - FindCoordinator, the group and transaction coordinators' ownership checks,
  AddOffsetsToTxn's and TxnOffsetCommit's offsets partition - and the coordinators load their
  partitions as 0.1.0 does (no ``LoadFilter``, no markers, no migration: broker/coordinator/rehash.py);
- from ``COORDINATOR_REHASH`` on (every registered broker runs this release, and the level never
  goes back): Kafka's rule, and the migration of rehash.py moves what the old rule wrote.

``kafka_rule(image)`` is the one answer; ``coordinator_partition`` routes by it. The coordinators
remember the rule their partitions were loaded under and, when a published metadata change moves
the level (``follow``: ``delta.features_changed``), unload and load again every partition they
lead, on the same turn of the handler loop that published the image, so no request is answered
between the new rule and the reload (the partitions answer COORDINATOR_LOAD_IN_PROGRESS until
loaded). Owned by the handler loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.coordinator.hashing import legacy_partition_for, partition_for
from odradek.controller.metadata_format import COORDINATOR_REHASH

if TYPE_CHECKING:
    from odradek.broker.coordinator.runtime import CoordinatorRuntime
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.controller.image import MetadataDelta, MetadataImage

log = logging.getLogger(__name__)


def kafka_rule(image: MetadataImage) -> bool:
    """Whether ids are routed by Kafka's rule (else 0.1.0's) at this image's metadata format level."""
    return image.metadata_format >= COORDINATOR_REHASH


def coordinator_partition(image: MetadataImage, key: str, num_partitions: int) -> int:
    """The partition of ``__consumer_offsets`` / ``__transaction_state`` that coordinates ``key`` now."""
    if kafka_rule(image):
        return partition_for(key, num_partitions)
    return legacy_partition_for(key, num_partitions)


class MetadataView(Protocol):
    """The broker's current metadata image."""

    @property
    def image(self) -> MetadataImage: ...


class LoadedRule:
    """The rule one coordinator's partitions were loaded under (``ids``: what it coordinates, for the
    log line); ``follow`` reloads them through its runtime when the level moved the rule."""

    def __init__(self, metadata: MetadataView, runtime: CoordinatorRuntime[Any], ids: str) -> None:
        self._metadata = metadata
        self._runtime = runtime
        self._ids = ids
        self.kafka = kafka_rule(metadata.image)

    def reset(self) -> None:
        """The partitions are about to be loaded (at start): under the rule of the image now."""
        self.kafka = kafka_rule(self._metadata.image)

    def follow(self) -> None:
        now = kafka_rule(self._metadata.image)
        if now == self.kafka:
            return
        self.kafka = now
        log.info("the metadata format level is %d: %s are coordinated by %s rule now; reloading the %s "
                 "partitions led here", self._metadata.image.metadata_format, self._ids,
                 "Kafka's" if now else "0.1.0's", self._runtime.topic)
        self._runtime.reload()


class RuleFollower(Protocol):
    def follow_partition_rule(self) -> None:
        """Reload the led partitions if the rule changed since they were loaded."""


def follow(metadata: BrokerMetadata, followers: Iterable[RuleFollower]) -> Callable[[], None]:
    """Have ``followers`` reload on every published change of the level; returns the unsubscribe."""
    targets = list(followers)

    def on_delta(delta: MetadataDelta) -> None:
        if delta.features_changed:
            for follower in targets:
                follower.follow_partition_rule()

    unsubscribe = metadata.subscribe(on_delta)
    for follower in targets:  # a change published before the subscription
        follower.follow_partition_rule()
    return unsubscribe
