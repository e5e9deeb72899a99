"""Coordinator state written under the old partition rule, found after the upgrade that fixed it.

Releases before the fix put a group id or transactional id ``k`` on partition
``legacy_partition_for(k)`` = ``(hashCode(k) & 0x7fffffff) % n`` of ``__consumer_offsets`` /
``__transaction_state``; Kafka, and this release, use ``partition_for(k)`` =
``abs(hashCode(k)) % n`` (broker/coordinator/hashing.py). They agree for a non-negative hash and for
MIN_VALUE. For any other negative hash ``h`` the old partition is ``(2**31 - |h|) % n`` and the new
one ``|h| % n``, so the old partition of every id that moved into partition ``p`` is the same one,
``twin(p) = (2**31 - p) % n``, and twin is its own inverse: partitions pair up (0<->48, 1<->47,
..., 24 and 49 alone, for n = 50), and state only ever moves between the two partitions of a pair.
A partition that is its own twin (``2p = 2**31 mod n``: 24 and 49 of 50, both partitions of 2, the
only one of 1) loses and gains nothing.

What we do: *migrate once, pulled by the new partition's leader*, as ordinary coordinator writes.

1. Loading partition ``p`` (GroupShard / TxnShard with a ``LoadFilter``) sets aside the records
   of ids that do not belong to ``p`` any more (*foreign*, the old rule put them here), so ``p``
   never serves them, and reads two marker records of its own (format below).
2. The first leader of ``p`` loading it under Kafka's rule (the gate below) writes ``p``'s
   SWITCHED marker (``p`` was already loaded: everything after the marker is written under
   Kafka's rule, which never writes a foreign id's record).
3. Until ``p`` has its MIGRATED marker, ids that moved into ``p`` get COORDINATOR_LOAD_IN_PROGRESS
   (retriable; the other ids of ``p`` are served at once), while the leader of ``p`` reads
   ``twin(p)``'s log (locally when it leads it too, else with Fetch from its leader:
   broker/coordinator/twin_reader.py) and waits for ``twin(p)``'s SWITCHED marker, i.e. for the
   twin's leader to switch to Kafka's rule too. It then copies the compacted state of the moved ids (the
   newest record per key, tombstoned keys left out, in log order; transactional offsets only once
   their transaction committed: while one is still open on the twin it waits for its marker) into
   ``p`` as ordinary records, the last batch with ``p``'s MIGRATED marker; the state goes live
   when that batch is durable, and the ids are served from then on. A crash before the marker
   leaves copies that the next leader writes again, identically (the twin holds nothing newer
   for those ids: its SWITCHED marker came before the copy); after it, nothing is read again.
4. Once ``twin(p)`` has its MIGRATED marker (it copied ``p``'s foreign records), the leader of
   ``p`` writes tombstones for them, so compaction removes them and a Kafka broker that opens
   the log dir finds no stale copies. Each leader only ever writes to its own partition.

Transactions: a transactional id's TransactionLogValue moves like any record; an ongoing one
continues on the new partition (EndTxn, the timeout's abort), a prepared one gets its markers
resent when its state goes live. Its producer's data partitions remember the coordinator epoch
of the last marker, the old partition's leader epoch, which may be above the new partition's:
the MIGRATED marker keeps the twin's leader epoch at its SWITCHED marker, and the transaction
coordinator sends ``leader epoch + that`` as the coordinator epoch of the partition's markers
(never below either, and still rising with every new leader, so zombie coordinators stay fenced).
TxnOffsetCommit offsets still open on the twin are waited for (their marker goes to the twin, the
partition in the transaction): EndTxn or the coordinator's timeout abort ends them. (A transaction
that commits offsets of the same group again after the upgrade meets LOAD_IN_PROGRESS until then,
so its timeout aborts it: aborted, as a transaction may always be, never half applied.)

Why not "load both places": the twin's records would stay the truth for the moved ids for good,
so every delete or expiry on ``p`` would need a tombstone on the twin too (or compaction of
``p``'s tombstones would resurrect them), a write to another partition's log, often led by
another broker.

Clusters and rolling upgrades: the level gate. None of the above happens before the cluster's
metadata format level (controller/metadata_format.py) reaches ``COORDINATOR_REHASH``, i.e. before
every registered broker runs this release. Below it a broker of this release routes every id by
the old rule and loads its partitions as 0.1.0 does - no ``LoadFilter``, no marker, no copy
(broker/coordinator/partition_rule.py) - so old and new brokers name the same coordinator for every
id, and a partition's leadership may go back and forth between them (an upgraded broker failing
mid-upgrade, auto.leader.rebalance, an election) without a write escaping the migration. The
controller raises the level once the last broker runs this release; it never goes back, and a
0.1.0 broker cannot register unfenced after that. Each broker then loads again the partitions it
leads, under Kafka's rule, and steps 1-4 start. Brokers see the level a moment apart: while the
leader of ``p`` switched and its twin's leader has not, step 3 waits for the twin's SWITCHED marker,
so the moved ids are still served on the twin by the old rule and ``p`` answers them
LOAD_IN_PROGRESS - one coordinator per id at any time (a client sent from one to the other meets
NOT_COORDINATOR / LOAD_IN_PROGRESS, retriable). A broker that becomes a partition's leader after its
SWITCHED marker learns of it from a metadata record after the level's, so it loads under Kafka's
rule too: nothing is written for a moved id on its old partition after that partition's SWITCHED
marker, and the copy is complete. Downgrading after the switch is not supported: an old release
would load the moved ids' copies on the new partition as its own and serve them by the old rule.

Format of the two markers (one pair per partition; Kafka's loaders skip an unknown key version
with a warning: CoordinatorLoaderImpl's UnknownRecordTypeException, TransactionStateManager's
UnknownKey; so do ours and the releases before this one)::

    key    int16 version = 32767 (outside Kafka's coordinator record types)
           string name   int16 length + UTF-8: "odradek.switched" or "odradek.migrated"
    value  int16 version = 0, then
           SWITCHED  int32 leader epoch of the partition when its leader wrote the marker
           MIGRATED  int32 source partition (the twin), int32 partition count,
                     int32 the twin's SWITCHED leader epoch

Pure functions and plain state; the I/O lives in twin_reader.py and the coordinators.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.broker.coordinator.hashing import legacy_partition_for
from odradek.broker.coordinator.runtime import KeyValue
from odradek.protocol.records import ControlRecordType, InvalidRecordError, RecordBatch, parse_control_type

MARKER_KEY_VERSION = 32767
SWITCHED = "odradek.switched"
MIGRATED = "odradek.migrated"
_INT16 = struct.Struct(">h")
_SWITCHED_VALUE = struct.Struct(">hi")
_MIGRATED_VALUE = struct.Struct(">hiii")


def twin_partition(partition: int, num_partitions: int) -> int:
    """The only partition whose ids can have moved into ``partition`` (and out of it into)."""
    return ((1 << 31) - partition) % num_partitions


def moved(key: str, num_partitions: int, partition: int) -> bool:
    """Whether ``key``, which belongs to ``partition`` now, lived on its twin under the old rule."""
    return legacy_partition_for(key, num_partitions) != partition


# ==============================================================================================
# the markers


def _marker_key(name: str) -> bytes:
    data = name.encode()
    return _INT16.pack(MARKER_KEY_VERSION) + _INT16.pack(len(data)) + data


SWITCHED_KEY = _marker_key(SWITCHED)
MIGRATED_KEY = _marker_key(MIGRATED)


def switched_record(leader_epoch: int) -> KeyValue:
    return SWITCHED_KEY, _SWITCHED_VALUE.pack(0, leader_epoch)


def migrated_record(source: int, num_partitions: int, source_epoch: int) -> KeyValue:
    return MIGRATED_KEY, _MIGRATED_VALUE.pack(0, source, num_partitions, source_epoch)


def is_marker_key(key: bytes | None) -> bool:
    return key is not None and len(key) >= 2 and _INT16.unpack_from(key, 0)[0] == MARKER_KEY_VERSION


@dataclass
class Markers:
    """What a partition's markers say."""

    switched: bool = False
    switched_epoch: int = 0
    migrated: bool = False
    migrated_from: int = -1
    # The twin's leader epoch at its SWITCHED marker (the coordinator epoch floor of moved ids).
    source_epoch: int = 0

    def read(self, key: bytes, value: bytes | None) -> None:
        """One marker record (``is_marker_key(key)``); a newer version's extra bytes are ignored."""
        try:
            if key == SWITCHED_KEY and value is not None:
                _, self.switched_epoch = _SWITCHED_VALUE.unpack_from(value, 0)
                self.switched = True
            elif key == MIGRATED_KEY and value is not None:
                _, self.migrated_from, _, self.source_epoch = _MIGRATED_VALUE.unpack_from(value, 0)
                self.migrated = True
        except struct.error:
            pass  # unreadable: as if absent (the worst case is a second, identical copy)


# ==============================================================================================
# a partition's own load


class LoadFilter:
    """What a shard's load sets aside: the markers, and the records of ids that belong to another
    partition now (their keys, and whether each one's newest record is live, for the tombstones
    of step 4). ``key_id`` reads the group or transactional id out of a record key (None: a key
    this filter does not know, left to the shard)."""

    def __init__(self, partition: int, partition_of: Callable[[str], int],
                 key_id: Callable[[bytes], str | None]) -> None:
        self.partition = partition
        self.partition_of = partition_of
        self.key_id = key_id
        self.markers = Markers()
        self.foreign: dict[bytes, bool] = {}

    def consume(self, key: bytes | None, value: bytes | None) -> bool:
        """True if the record is a marker or a foreign id's (set aside here); False: the shard's."""
        if key is None:
            return False
        if is_marker_key(key):
            self.markers.read(key, value)
            return True
        owner = self.key_id(key)
        if owner is None or self.partition_of(owner) == self.partition:
            return False
        self.foreign[bytes(key)] = value is not None
        return True

    def live_foreign_keys(self) -> list[bytes]:
        return [k for k, live in self.foreign.items() if live]


# ==============================================================================================
# the twin's log


@dataclass
class TwinScan:
    """The twin partition's records replayed in order, keeping those of ids that belong to
    ``partition``: per key the newest (offset, value); a transactional batch's records wait for
    their producer's marker (COMMIT: taken over an older record of the key, as the loaders do;
    ABORT: dropped). Fed batch by batch, so a scan resumes where the last read stopped."""

    belongs: Callable[[bytes], bool]
    next_offset: int = 0
    markers: Markers = field(default_factory=Markers)
    latest: dict[bytes, tuple[int, bytes | None]] = field(default_factory=dict)
    pending: dict[int, dict[bytes, tuple[int, bytes | None]]] = field(default_factory=dict)

    def feed(self, batch: RecordBatch) -> None:
        self.next_offset = batch.next_offset
        if batch.is_control:
            for rec in batch.records:
                try:
                    control = parse_control_type(rec.key)
                except InvalidRecordError:
                    continue
                if control in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    self._end_transaction(batch.producer_id, control is ControlRecordType.COMMIT)
            return
        for rec in batch.records:
            key = rec.key
            if key is None:
                continue
            if is_marker_key(key):
                self.markers.read(key, rec.value)
                continue
            if not self.belongs(key):
                continue
            offset = batch.base_offset if rec.offset is None else rec.offset
            if batch.is_transactional:
                self.pending.setdefault(batch.producer_id, {})[bytes(key)] = (offset, rec.value)
            else:
                self.latest[bytes(key)] = (offset, rec.value)

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        records = self.pending.pop(producer_id, None)
        if not commit or not records:
            return
        for key, (offset, value) in records.items():
            current = self.latest.get(key)
            if current is None or current[0] < offset:
                self.latest[key] = (offset, value)

    def open_transactions(self) -> set[int]:
        """Producers whose transactional records of our ids have no marker yet."""
        return {pid for pid, records in self.pending.items() if records}

    def records(self) -> list[KeyValue]:
        """The compacted state of our ids: live records, in the order of their offsets."""
        live = sorted((offset, key, value) for key, (offset, value) in self.latest.items() if value is not None)
        return [(key, value) for _, key, value in live]
