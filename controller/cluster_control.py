"""Broker registrations and fencing (Kafka's ClusterControlManager).

Like odradek.controller.replication_control, it reads the controller's image and returns records; the
controller commits them, together with the leader moves odradek.controller.replication_control writes for
the same change (one batch: no broker may see a broker fenced while its partitions still name it
leader and in-sync, or see it live while partitions it could lead have none).

A registration (RegisterBrokerRecord) carries the broker epoch (the record's log offset), its
incarnation id, endpoints, rack and the (feature, min, max) levels its release reads. A broker whose
release cannot read the store's metadata format (odradek.controller.metadata_format, rule 5) is registered
fenced and is not unfenced until it can; the controller logs that once per broker until the format
moves. Fencing and unfencing are BrokerRegistrationChangeRecords.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace

from odradek.controller import metadata_format
from odradek.controller.image import MetadataImage, apply
from odradek.controller.records import BrokerRegistrationChangeRecord, RegisterBrokerRecord
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)


def check_port(port: int) -> None:
    """A registration's port: INVALID_REQUEST outside 1-65535."""
    if not 0 < port <= 65535:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Invalid port {port}.")


class ClusterControl:
    """Broker decisions over ``image`` (the controller's, read only)."""

    def __init__(self, image: MetadataImage, node_id: int) -> None:
        self._image = image
        self.node_id = node_id
        # Brokers whose release cannot read the metadata format, already named in the log.
        self._unreadable_logged: set[int] = set()

    def registration(self, node_id: int, host: str, port: int, rack: str | None, *, broker_epoch: int,
                     listener_name: str, fenced: bool, incarnation_id: uuid.UUID | None,
                     endpoints: Sequence[tuple[str, str, int]], features: Sequence[tuple[str, int, int]]
                     ) -> RegisterBrokerRecord:
        """The record (re)registering ``node_id`` at ``broker_epoch``; fenced when asked, or when its
        release cannot read the metadata format. ``incarnation_id`` None draws a fresh one."""
        if not fenced and not self.reads_metadata_format(node_id, features):
            fenced = True
        return RegisterBrokerRecord(
            broker_id=node_id,
            broker_epoch=broker_epoch,
            incarnation_id=incarnation_id or uuid.uuid4(),
            host=host,
            port=port,
            listener_name=listener_name,
            rack=rack,
            fenced=fenced,
            endpoints=tuple((str(n), str(h), int(p)) for n, h, p in endpoints),
            features=tuple((str(f), int(low), int(high)) for f, low, high in features),
        )

    def fencing_change(self, node_id: int, fenced: bool) -> BrokerRegistrationChangeRecord | None:
        """The record fencing (or unfencing) ``node_id``; None when it is so already, or when its
        release cannot read the metadata format (it stays fenced). BROKER_ID_NOT_REGISTERED."""
        broker = self._image.brokers.get(node_id)
        if broker is None:
            raise KafkaApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
        if broker.fenced == fenced:
            return None
        if not fenced and not self.reads_metadata_format(node_id, broker.features):
            return None
        return BrokerRegistrationChangeRecord(node_id, broker.broker_epoch, fenced)

    def check_broker_epoch(self, node_id: int, broker_epoch: int) -> None:
        """BROKER_ID_NOT_REGISTERED, or STALE_BROKER_EPOCH if ``broker_epoch`` (-1: not given) is not
        the registration's (a controlled shutdown from an earlier incarnation)."""
        broker = self._image.brokers.get(node_id)
        if broker is None:
            raise KafkaApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
        if broker_epoch != -1 and broker_epoch != broker.broker_epoch:
            raise KafkaApiError(ErrorCode.STALE_BROKER_EPOCH,
                                f"Broker epoch {broker_epoch} of broker {node_id} is stale; "
                                f"the registered epoch is {broker.broker_epoch}.")

    def image_after(self, record: RegisterBrokerRecord | BrokerRegistrationChangeRecord) -> MetadataImage:
        """The image as it will be once the broker ``record`` is applied, for elections written in the
        same batch. A broker record changes only ``brokers``, so the copy gets its own brokers map
        and shares everything else."""
        after = replace(self._image, brokers=dict(self._image.brokers))
        apply(after, record)
        return after

    # ----------------------------------------------------------------------------------------
    # The metadata format the registered brokers read (odradek.controller.metadata_format)

    def reads_metadata_format(self, node_id: int, features: Sequence[tuple[str, int, int]]) -> bool:
        level = self._image.metadata_format
        if metadata_format.min_readable(features) <= level <= metadata_format.max_readable(features):
            return True
        if node_id not in self._unreadable_logged:
            self._unreadable_logged.add(node_id)
            log.error("controller %d: broker %d reads %s levels %d-%d but the metadata is at level %d; it "
                      "stays fenced until it runs a release that reads it", self.node_id, node_id,
                      metadata_format.FEATURE, metadata_format.min_readable(features),
                      metadata_format.max_readable(features), level)
        return False

    def newest_readable_format(self) -> int:
        """The newest metadata format every registered broker reads (rule 3)."""
        return min([metadata_format.LATEST] + [metadata_format.max_readable(b.features)
                                               for b in self._image.brokers.values()])

    def metadata_format_raised(self) -> None:
        """The format moved: a broker that could not read the old one is named again if need be."""
        self._unreadable_logged.clear()
