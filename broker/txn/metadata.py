"""``TxnMetadata``: what the coordinator knows of one transactional id (Kafka's TransactionMetadata).

The in-memory state is always the replay of ``__transaction_state``: a transition computes the
next ``TxnLogValue`` (``next_value``) without changing anything; once that record is durable the
coordinator's apply copies it in (``install``). As Kafka's TxnTransitMetadata, every transition's
record names the producer id before it as ``previous_producer_id``. Owned by the handler loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.broker.txn.records import TxnLogValue, TxnState

# Kafka bumps to a new producer id when the epoch would reach Short.MaxValue
# (TransactionMetadata.isEpochExhausted: epoch >= Short.MaxValue - 1).
MAX_EPOCH = 32767 - 1
# transaction.version 2 (KIP-890 part 2): every commit or abort bumps the producer epoch.
TV2 = 2

COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: dict[str, set[int]] = field(default_factory=dict)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = -1
    # Transactions v2: the producer id a commit or abort that exhausted the epoch hands over once
    # complete (Kafka's nextProducerId), and the transaction version of the transaction.
    next_producer_id: int = -1
    client_transaction_version: int = 0
    # The epoch before the last bump (Kafka's lastProducerEpoch; not in the record, derived from
    # the records' sequence): a KIP-360 producer naming it is the current one retrying or recovering.
    last_producer_epoch: int = -1

    @classmethod
    def from_value(cls, transactional_id: str, v: TxnLogValue) -> TxnMetadata:
        m = cls(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms)
        m.install(v)
        return m

    def install(self, v: TxnLogValue) -> None:
        """Take the state of a durable record."""
        if v.producer_id == self.producer_id and v.producer_epoch != self.producer_epoch:
            self.last_producer_epoch = self.producer_epoch
        elif v.producer_id != self.producer_id:
            self.last_producer_epoch = -1
        self.producer_id, self.producer_epoch, self.timeout_ms = v.producer_id, v.producer_epoch, v.timeout_ms
        self.state, self.start_ms, self.last_update_ms = v.state, v.start_ms, v.last_update_ms
        self.previous_producer_id = v.previous_producer_id
        self.next_producer_id, self.client_transaction_version = v.next_producer_id, v.client_transaction_version
        self.partitions = {t: set(ps) for t, ps in v.partitions.items()}

    def value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           {t: set(ps) for t, ps in self.partitions.items()}, self.last_update_ms,
                           self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.client_transaction_version)

    def next_value(self, state: TxnState, now_ms: int, **changes: object) -> TxnLogValue:
        """The record of a transition to ``state`` (fields in ``changes`` replaced)."""
        v = self.value()
        v.state, v.last_update_ms = state, now_ms
        v.previous_producer_id = self.producer_id
        for name, new in changes.items():
            setattr(v, name, new)
        if state in COMPLETE:
            v.partitions = {}
        return v

    def has_partitions(self, partitions: dict[str, list[int]]) -> bool:
        return all(set(ps) <= self.partitions.get(t, set()) for t, ps in partitions.items())

    def contains(self, topic: str, partition: int) -> bool:
        return partition in self.partitions.get(topic, ())
