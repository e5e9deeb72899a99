"""ISR changes of the partitions this broker leads (KIP-497; Kafka's Partition.maybeShrinkIsr /
maybeExpandIsr with the AlterPartitionManager).

As leader, a follower lagging more than ``replica.lag.time.max.ms`` is dropped from the ISR
(:meth:`IsrManager.shrink_lagging`, Kafka's isr-expiration task, run every half of it) and a replica
that caught up is added back (:meth:`IsrManager.maybe_expand`, on its fetch), each through
``alter_partition`` - the controller client's AlterPartition (None: the ISR stays as the controller
made it). Only the controller's answer or newer metadata changes a partition's ISR; until then the
HW counts the maximal ISR (``Partition.maximal_isr``), and a change that got no answer (no controller
while etcd is away) is sent again with backoff (``_send``). That is what lets a leader go on serving
on the metadata it has through an etcd outage of any length without ever acknowledging an acks=all
write that a replica the controller may elect lacks (broker/cluster/registration.py has the argument).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from odradek.broker.replica.partition import Partition
from odradek.protocol.errors import ErrorCode
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    from odradek.controller.image import MetadataImage
    from odradek.controller.requests import AlterPartitionResult

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# ControllerClient.alter_partition(topic_id, partition, leader_id, leader_epoch, partition_epoch, new_isr,
# broker_epochs)
AlterPartitionCall = Callable[[Any, int, int, int, int, Sequence[int], Mapping[int, int]],
                              Awaitable["AlterPartitionResult"]]

# An AlterPartition that got no answer is sent again after this, doubling up to the maximum.
ISR_CHANGE_BACKOFF_S = 0.1
ISR_CHANGE_MAX_BACKOFF_S = 5.0
# Answers that say "no controller could decide": sent again (the others are final, see IsrManager._send).
ISR_CHANGE_RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT,
                                  ErrorCode.STALE_CONTROLLER_EPOCH})


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def broker_epoch_of(image: MetadataImage, broker_id: int) -> int:
    """A broker's registration epoch in the image, -1 if it is not registered."""
    reg = image.brokers.get(broker_id)
    return reg.broker_epoch if reg is not None else -1


class IsrManager:
    """Asks the controller to shrink and expand the ISRs of led partitions, and applies its answers.

    ``partitions`` is the replica manager's own table (read, never changed here); ``wake(key)``
    answers what waits on a partition whose HW moved (the replica manager's purgatories)."""

    def __init__(self, node_id: int, partitions: Mapping[TopicPartition, Partition], image: Callable[[], MetadataImage],
                 alter_partition: AlterPartitionCall | None, lag_time_max_ms: int,
                 wake: Callable[[TopicPartition], None]) -> None:
        self.node_id = node_id
        self.partitions = partitions
        self._image = image
        # None on a replica manager without a controller client: the ISR stays as the controller made it.
        self.alter_partition = alter_partition
        self.lag_time_max_ms = lag_time_max_ms
        self._wake = wake
        self._tasks: set[asyncio.Task[None]] = set()

    def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def shrink_lagging(self) -> None:
        """Drop from each led partition's ISR the followers lagging over replica.lag.time.max.ms."""
        if self.alter_partition is None:
            return
        now = now_ms()
        lag = self.lag_time_max_ms
        for part in self.partitions.values():
            if len(part.isr) > 1 and part.leader == self.node_id and part.pending_isr is None:
                out = part.out_of_sync_replicas(now, lag)
                if out:
                    log.info("Shrinking the ISR of %s-%d from %s: %s not caught up for %d ms", part.topic,
                             part.index, list(part.isr), out, lag)
                    self._request(part, tuple(r for r in part.isr if r not in out))

    def maybe_expand(self, part: Partition, replica_id: int) -> None:
        """A follower outside the ISR fetched: ask to add it back if it caught up."""
        if (self.alter_partition is not None and part.pending_isr is None and part.is_expansion_candidate(replica_id)
                and self._eligible(replica_id, part.follower_broker_epoch(replica_id))):
            log.info("Expanding the ISR of %s-%d from %s to add %d", part.topic, part.index, list(part.isr), replica_id)
            self._request(part, (*part.isr, replica_id))

    def _eligible(self, replica_id: int, fetched_epoch: int) -> bool:
        """Kafka's Partition.isReplicaIsrEligible: registered, not fenced, and (KIP-903) fetching as
        the incarnation the metadata knows: a follower that restarted with a lost log fetches with a
        new broker epoch, and must not be added back on the strength of an older one."""
        reg = self._image().brokers.get(replica_id)
        if reg is None or reg.fenced:
            return False
        return fetched_epoch == -1 or fetched_epoch == reg.broker_epoch

    def _request(self, part: Partition, new_isr: tuple[int, ...]) -> None:
        part.pending_isr = new_isr  # the HW counts the maximal ISR from now on (Partition's docstring)
        task = asyncio.get_running_loop().create_task(self._send(part, new_isr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _current(self, part: Partition, new_isr: tuple[int, ...], leader_epoch: int) -> bool:
        """The AlterPartition for ``new_isr`` is still the one in flight: same partition object, still
        led here in the same leader epoch, no newer metadata since (which clears ``pending_isr``)."""
        return (self.partitions.get((part.topic, part.index)) is part and part.leader == self.node_id
                and part.leader_epoch == leader_epoch and part.pending_isr is new_isr)

    async def _send(self, part: Partition, new_isr: tuple[int, ...]) -> None:
        """Send the AlterPartition until the controller answers (Kafka's AlterPartitionManager): no
        answer - no controller while etcd is away, a timeout, a lost connection - is sent again with
        backoff for as long as this change is the one in flight, the HW counting the maximal ISR
        meanwhile. The answer, as Kafka's handleAlterPartitionError takes it: NONE commits the ISR
        here at once; INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED (the controller did not apply it)
        go back to the committed ISR, so a later check may try again; any other error (a stale
        leader or partition epoch) leaves it pending until newer metadata replaces it."""
        call = self.alter_partition
        assert call is not None
        epoch = part.leader_epoch
        backoff = ISR_CHANGE_BACKOFF_S
        while True:
            if not self._current(part, new_isr, epoch):
                return
            try:
                # KIP-903: each member with the broker epoch it fetched with, ours for ourselves.
                epochs = {r: part.follower_broker_epoch(r) for r in new_isr if r != self.node_id}
                epochs[self.node_id] = broker_epoch_of(self._image(), self.node_id)
                result = await call(part.topic_id, part.index, self.node_id, epoch, part.partition_epoch, new_isr,
                                    epochs)
                code = result.error_code
                if code not in ISR_CHANGE_RETRIABLE:
                    break
                why = error_name(code)
            except Exception as exc:  # REQUEST_TIMED_OUT, NOT_CONTROLLER, a lost connection, etcd away
                why = str(exc) or type(exc).__name__
            # One WARNING per change, the retries at DEBUG: an etcd outage of hours must not fill the log.
            log.log(logging.WARNING if backoff == ISR_CHANGE_BACKOFF_S else logging.DEBUG,
                    "AlterPartition of %s-%d to %s got no answer (%s); sending it again in %.1f s and after that "
                    "until a controller answers", part.topic, part.index, list(new_isr), why, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, ISR_CHANGE_MAX_BACKOFF_S)
        if not self._current(part, new_isr, epoch):
            return  # newer metadata came first and says what is committed
        if code == ErrorCode.NONE:
            # Applied at once, as Kafka does; the metadata that follows says the same.
            part.set_committed_isr(tuple(result.isr), result.partition_epoch)
            part.maybe_increment_high_watermark()
            self._wake((part.topic, part.index))
            return
        log.info("AlterPartition of %s-%d to %s answered %s", part.topic, part.index, list(new_isr), error_name(code))
        if code in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            part.pending_isr = None  # applied by no controller: back to the committed ISR
            if part.maybe_increment_high_watermark():  # a refused member no longer holds the HW
                self._wake((part.topic, part.index))
