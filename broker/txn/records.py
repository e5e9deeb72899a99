"""The records of ``__transaction_state``: Kafka's TransactionLogKey / TransactionLogValue.

Key: int16 version 0 + TransactionLogKey (transactional_id string). Value: int16 version + the
TransactionLogValue of that version (v0 plain; v1 flexible with Kafka 4.4's tagged fields:
previous_producer_id (tag 0, the producer id before the transition), next_producer_id (tag 1, the
id a transactions-v2 commit or abort that exhausted the epoch hands over), client_transaction_version
(tag 2, the transaction version the transaction was started or ended with) and next_producer_epoch
(tag 3, KIP-939's two-phase commit: never set here, -1). A null value is a tombstone (an expired
transactional id).
The coordinator writes the version the cluster's transaction.version asks for, as Kafka's
TransactionLog.valueToBytes: 0 at level 0, 1 from level 1 (odradek.controller.features
.transaction_log_value_version); both are read, by Odradek and by Kafka's tools (kafka-dump-log
--transaction-log-decoder).

The status byte is Kafka's TransactionState id (``TxnState``). The field tables come from
protocol/transaction_schema_data.py (tools/gen_schema_data.py --data). Pure functions; any thread.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.codec import MessageCodec
from odradek.protocol.primitives import DecodeError
from odradek.protocol.transaction_schema_data import MESSAGES

KEY_VERSION = 0
VALUE_VERSION = 0  # the default of value_bytes: what a cluster at transaction.version 0 writes

_VERSION = struct.Struct(">h")
_codecs: dict[tuple[str, int], MessageCodec] = {}


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, by the id stored in TransactionLogValue.transaction_status."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


class CorruptTxnRecordError(ValueError):
    """A __transaction_state key or value that does not parse."""


@dataclass(slots=True)
class TxnLogValue:
    """One TransactionLogValue as stored."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: dict[str, set[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def _codec(name: str, version: int) -> MessageCodec:
    c = _codecs.get((name, version))
    if c is None:
        c = _codecs[(name, version)] = MessageCodec(name, version, MESSAGES)
    return c


def _decode(name: str, data: bytes) -> dict[str, Any]:
    if len(data) < 2:
        raise CorruptTxnRecordError(f"{name} shorter than its version")
    (version,) = _VERSION.unpack_from(data, 0)
    lo, hi = MESSAGES[name]["valid"]
    if not lo <= version <= hi:
        raise CorruptTxnRecordError(f"{name} has no version {version}")
    try:
        body, _ = _codec(name, version).decode(data, 2)
    except DecodeError as exc:
        raise CorruptTxnRecordError(str(exc)) from None
    return body


def key_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + _codec("TransactionLogKey", KEY_VERSION).encode(
        {"transactional_id": transactional_id})


def decode_key(data: bytes | None) -> str:
    if data is None:
        raise CorruptTxnRecordError("a record without a key")
    return str(_decode("TransactionLogKey", data)["transactional_id"])


def key_transactional_id(data: bytes) -> str | None:
    """The transactional id of a TransactionLogKey; None for any other key (another version)."""
    try:
        return decode_key(data)
    except CorruptTxnRecordError:
        return None


def value_bytes(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    # As Kafka's TransactionLog.valueToBytes: null partitions for Empty only (Kafka's own reader
    # fails on a null list in any other state), a list - empty once Complete* - otherwise.
    parts = None if v.state is TxnState.EMPTY else [
        {"topic": t, "partition_ids": sorted(ps)} for t, ps in sorted(v.partitions.items())]
    return _VERSION.pack(version) + _codec("TransactionLogValue", version).encode({
        "producer_id": v.producer_id,
        "previous_producer_id": v.previous_producer_id,
        "next_producer_id": v.next_producer_id,
        "next_producer_epoch": -1,
        "producer_epoch": v.producer_epoch,
        "transaction_timeout_ms": v.timeout_ms,
        "transaction_status": int(v.state),
        "transaction_partitions": parts,
        "transaction_last_update_timestamp_ms": v.last_update_ms,
        "transaction_start_timestamp_ms": v.start_ms,
        "client_transaction_version": v.client_transaction_version,
    })


def decode_value(data: bytes) -> TxnLogValue:
    body = _decode("TransactionLogValue", data)
    try:
        state = TxnState(body["transaction_status"])
    except ValueError:
        raise CorruptTxnRecordError(f"unknown transaction status {body['transaction_status']}") from None
    partitions: dict[str, set[int]] = {}
    for entry in body["transaction_partitions"] or ():
        partitions.setdefault(entry["topic"], set()).update(entry["partition_ids"])
    return TxnLogValue(body["producer_id"], body["producer_epoch"], body["transaction_timeout_ms"], state,
                       partitions, body["transaction_last_update_timestamp_ms"],
                       body["transaction_start_timestamp_ms"], body.get("previous_producer_id", -1),
                       body.get("next_producer_id", -1), body.get("client_transaction_version", 0))
