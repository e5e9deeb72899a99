"""One partition hosted by this broker: its log, leadership, high watermark and last stable offset.

Kafka's kafka.cluster.Partition. Everything that reads or writes a partition's data goes through
here; no handler touches a :class:`~odradek.storage.log.Log`.

High watermark (HW): the offset below which every in-sync replica has the records, and so the
end of what consumers may read. It is a field this class moves itself, in
:meth:`maybe_increment_high_watermark`, after each leader append: the minimum log end offset of
the ISR. On one node the ISR is this broker alone, so the HW is the log end offset after every
append; replication adds the followers' fetched offsets (``_follower_end_offsets``) to that
minimum without changing any caller. The last stable offset (LSO) bounds read_committed reads:
min(HW, first offset of the oldest transaction that is open or whose marker the HW has not passed
yet), from the log's producer state (Kafka's UnifiedLog.lastStableOffset); recomputed
(``_update_last_stable_offset``) whenever the HW moves, which is also when a marker's landing can
move it. With no transaction about, the LSO is the HW (a check of two empty dicts on the append path).

``high_watermark_bytes`` is the count of bytes appended (since this Partition was made) that lie
below the HW, and ``last_stable_bytes`` the same below the LSO: a waiting fetch adds up what
became readable from these two numbers instead of re-reading the log (Kafka keeps a segment
position in the HW's LogOffsetMetadata for the same reason). When the LSO moves to an offset below
the HW (one of several interleaved transactions ended), ``last_stable_bytes`` takes the HW's count:
an over-count, so a waiting read_committed fetch wakes early rather than late. While the HW lags the log end
(followers still fetching), ``_above_hw`` remembers, per append, its end offset and the byte
count up to it, so a HW move lands on an exact byte count; on one node it stays empty.

Replication (Kafka's leader and follower halves of Partition): as leader, the followers' fetches
report their log end offsets (:meth:`update_follower_fetch_state`) and the HW is the minimum over
the ISR, a member that has not fetched yet holding it where it is; as follower, the fetcher
appends the leader's batches as they are (:meth:`append_records_to_follower`), takes the HW from
the leader (:meth:`update_follower_high_watermark`) and truncates a divergent tail
(:meth:`truncate_to`, after OffsetForLeaderEpoch).

ISR changes (KIP-497) are decided here and sent by the replica manager: a follower whose last
caught-up time (Kafka's Replica.lastCaughtUpTimeMs, from its fetches) is older than
``replica.lag.time.max.ms`` is out of sync (:meth:`out_of_sync_replicas`); a replica outside the
ISR whose log end reached the HW and this leadership's start offset may join
(:meth:`is_expansion_candidate`). One AlterPartition is in flight at a time (``pending_isr``), and
only the controller's answer or newer metadata changes ``isr``, the committed ISR. Until then the HW
counts the *maximal* ISR (Kafka's PendingShrinkIsr/PendingExpandIsr.maximalIsr): the committed ISR
plus a member being added. A shrink is not in effect before it is committed, and an expansion may be:
the controller may commit it, lose the answer on the way (etcd away, a controller change) and elect
the new member after this leader dies. A leader cut off from the controller can therefore never
acknowledge an acks=all write that a replica the controller may elect lacks.

Owned by the handler loop (the cleaner reads ``last_stable_offset`` from its IO thread: a racy
read of an int only makes one cleaning round more conservative).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.results import AppendInfo, FetchSlice
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.broker.replica.append_lane import AppendLane

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# ListOffsets special timestamps (KIP-734, KIP-405, KIP-1005, KIP-1023).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6

# A per-request check of a produced record set (Produce's version-dependent header checks).
RecordCheck = Callable[[Any], None]

# A record batch header's base offset (bytes 0-7) and last offset delta (bytes 23-26).
_BASE_OFFSET = struct.Struct(">q")
_LAST_DELTA = struct.Struct(">i")
_FIRST_BATCH_END = 27


class Partition:
    """A partition hosted here (leader or follower): its log and replication state."""

    __slots__ = ("topic", "index", "topic_id", "log", "leader", "leader_epoch", "isr", "replicas",
                 "is_internal", "high_watermark", "last_stable_offset", "high_watermark_bytes",
                 "last_stable_bytes", "_appended_bytes", "_follower_end_offsets", "_follower_broker_epochs", "_above_hw",
                 "partition_epoch", "append_lane",
                 "pending_isr", "_caught_up_ms", "_last_fetch", "_leader_epoch_start_offset")

    def __init__(self, topic: str, index: int, topic_id: Any, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader = -1
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.partition_epoch = -1
        # The ISR an AlterPartition in flight asks for (None: none in flight).
        self.pending_isr: tuple[int, ...] | None = None
        self.is_internal = False
        # Set while the topic recompresses (broker/replica/append_lane.py): produce appends queue there.
        self.append_lane: AppendLane | None = None
        # Kafka reads the HW from its checkpoint at start-up; a single node's HW is its log end.
        self.high_watermark = log.log_end_offset
        self.last_stable_offset = self.high_watermark
        self._appended_bytes = 0
        self.high_watermark_bytes = 0
        self.last_stable_bytes = 0
        # Followers' log end offsets as their fetches report them (this broker leading).
        self._follower_end_offsets: dict[int, int] = {}
        self._follower_broker_epochs: dict[int, int] = {}  # KIP-903: the epoch each follower fetched with
        # (end offset, _appended_bytes at that end) of appends above the HW, oldest first.
        self._above_hw: deque[tuple[int, int]] = deque()
        # Per follower: when it was last caught up, and (leader log end, time) at its last fetch.
        self._caught_up_ms: dict[int, int] = {}
        self._last_fetch: dict[int, tuple[int, int]] = {}
        self._leader_epoch_start_offset = log.log_end_offset
        self._update_last_stable_offset()  # transactions left open in the log hold it

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader={self.leader}, epoch={self.leader_epoch})"

    # -- offsets -----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def offline(self) -> bool:
        return self.log.offline

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest log end offset in the ISR; True if it moved.

        Kafka's Partition.maybeIncrementLeaderHW. The HW never goes back here (a new leader's
        truncation is the follower path's business).
        """
        log_end = self.log.log_end_offset
        new_hw = log_end
        isr = self.isr if self.pending_isr is None else self.maximal_isr()
        if len(isr) > 1:
            # Kafka: an ISR member whose log end is unknown (it has not fetched since this
            # broker became leader) holds the HW where it is.
            followers = self._follower_end_offsets
            leader = self.leader
            for replica in isr:
                if replica != leader:
                    end = followers.get(replica, -1)
                    if end < new_hw:
                        new_hw = end
            if new_hw < log_end:
                self._note_above_hw(log_end)
        if new_hw <= self.high_watermark:
            return False
        # _set_high_watermark, its one-node case inlined (the produce hot path; entries left in
        # _above_hw are below the HW now, and _note_above_hw drops them).
        self.high_watermark = new_hw
        if new_hw == log_end:
            self.high_watermark_bytes = self._appended_bytes
        else:
            self._advance_high_watermark_bytes(new_hw)
        producer_state = self.log.producer_state
        if producer_state.ongoing_txns or producer_state.unreplicated_txns:
            self._update_last_stable_offset()
        else:
            # _update_last_stable_offset without transactions (the produce hot path).
            self.last_stable_offset = new_hw
            self.last_stable_bytes = self.high_watermark_bytes
        return True

    def _note_above_hw(self, log_end: int) -> None:
        """Remember the byte count at ``log_end`` (the HW will land there later); entries the HW
        already passed (it jumped to the log end meanwhile) go first."""
        above = self._above_hw
        hw = self.high_watermark
        while above and above[0][0] <= hw:
            above.popleft()
        if not above or above[-1][0] < log_end:
            above.append((log_end, self._appended_bytes))

    def _set_high_watermark(self, new_hw: int, log_end: int) -> None:
        """Move the HW and the byte count below it (the caller moves the LSO)."""
        self.high_watermark = new_hw
        if new_hw >= log_end:
            self.high_watermark_bytes = self._appended_bytes
            self._above_hw.clear()
        else:
            self._advance_high_watermark_bytes(new_hw)

    def _advance_high_watermark_bytes(self, new_hw: int) -> None:
        """The byte count at the last remembered append ending at or below ``new_hw``."""
        above = self._above_hw
        while above and above[0][0] <= new_hw:
            self.high_watermark_bytes = above.popleft()[1]

    def update_follower_fetch_state(self, replica_id: int, log_end_offset: int, now_ms: int = 0,
                                    broker_epoch: int = -1) -> bool:
        """A follower's fetch reported its log end offset (Kafka's updateFollowerFetchState);
        True if that moved the HW (the caller then completes what waited on it).

        The follower is caught up at this fetch if it reached our log end, or as of its previous
        fetch if it reached the log end we had then (Kafka's Replica.updateFetchStateOrThrow).
        """
        self._follower_end_offsets[replica_id] = log_end_offset
        self._follower_broker_epochs[replica_id] = broker_epoch
        leader_end = self.log.log_end_offset
        previous = self._last_fetch.get(replica_id)
        if log_end_offset >= leader_end:
            self._caught_up_ms[replica_id] = max(self._caught_up_ms.get(replica_id, 0), now_ms)
        elif previous is not None and log_end_offset >= previous[0]:
            self._caught_up_ms[replica_id] = max(self._caught_up_ms.get(replica_id, 0), previous[1])
        self._last_fetch[replica_id] = (leader_end, now_ms)
        return self.maybe_increment_high_watermark()

    def follower_state(self, replica_id: int) -> tuple[int, int]:
        """As leader: a follower's (log end offset, last caught-up time in ms) from its fetches,
        (-1, 0) before its first (KIP-392's replica view)."""
        return self._follower_end_offsets.get(replica_id, -1), self._caught_up_ms.get(replica_id, 0)

    def reset_follower_states(self, now_ms: int = 0) -> None:
        """This broker (again) became leader: the followers' positions are unknown until they
        fetch; ISR members count as caught up now, so they get ``replica.lag.time.max.ms`` to
        fetch (Kafka's resetReplicaState on makeLeader)."""
        self._follower_end_offsets.clear()
        self._follower_broker_epochs.clear()
        self._last_fetch.clear()
        self._caught_up_ms = {r: now_ms for r in self.isr}
        self._leader_epoch_start_offset = self.log.log_end_offset
        self.pending_isr = None

    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus the members an AlterPartition in flight adds (see the module
        docstring): what the HW and acks=all count while the controller has not answered."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def set_committed_isr(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The ISR and partition epoch the controller committed (its AlterPartition answer, or
        newer metadata): any change in flight is over."""
        self.isr, self.partition_epoch = isr, partition_epoch
        self.pending_isr = None

    def follower_broker_epoch(self, replica_id: int) -> int:
        """The broker epoch the follower's last fetch gave (KIP-903), -1 if none."""
        return self._follower_broker_epochs.get(replica_id, -1)

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not been caught up for more than ``max_lag_ms`` (Kafka's
        getOutOfSyncReplicas: a follower at our log end is never out of sync)."""
        leader_end = self.log.log_end_offset
        out = []
        for replica in self.isr:
            if replica == self.leader or self._follower_end_offsets.get(replica, -1) >= leader_end:
                continue
            if now_ms - self._caught_up_ms.get(replica, 0) > max_lag_ms:
                out.append(replica)
        return out

    def is_expansion_candidate(self, replica_id: int) -> bool:
        """A replica outside the ISR that caught up: its log end reached the HW and the start of
        this leadership (Kafka's isFollowerInSync before expanding the ISR)."""
        if replica_id in self.isr or replica_id not in self.replicas:
            return False
        end = self._follower_end_offsets.get(replica_id, -1)
        return end >= self.high_watermark and end >= self._leader_epoch_start_offset

    def restore_high_watermark(self, checkpointed: int) -> None:
        """At start-up: the HW from ``replication-offset-checkpoint``, within [log start, log end]
        (the byte counts start from here: what lies between it and the log end counts as old)."""
        hw = min(max(checkpointed, self.log.log_start_offset), self.log.log_end_offset)
        self.high_watermark = self.last_stable_offset = hw
        self._update_last_stable_offset()

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """As follower: the HW is the leader's, capped at our own log end; it only moves up
        (Kafka's maybeUpdateHighWatermark). True if it moved."""
        log_end = self.log.log_end_offset
        new_hw = min(leader_high_watermark, log_end)
        if new_hw <= self.high_watermark:
            return False
        self._set_high_watermark(new_hw, log_end)
        self._update_last_stable_offset()
        return True

    def _update_last_stable_offset(self) -> None:
        """LSO = min(HW, first unstable offset), never below the log start (Kafka's
        UnifiedLog.lastStableOffset and maybeIncrementFirstUnstableOffset)."""
        hw = self.high_watermark
        producer_state = self.log.producer_state
        producer_state.on_high_watermark_updated(hw)
        first_unstable = producer_state.first_unstable_offset()
        if first_unstable is None or first_unstable >= hw:
            lso = hw
        else:
            lso = max(first_unstable, self.log.log_start_offset)
        if lso == hw:
            self.last_stable_bytes = self.high_watermark_bytes
        elif lso > self.last_stable_offset:
            # Bytes up to an offset inside the HW's range are not tracked: count up to the HW (a
            # waiting read_committed fetch then wakes and reads what is really below the LSO).
            self.last_stable_bytes = self.high_watermark_bytes
        self.last_stable_offset = lso

    def fetch_bound(self, isolation_level: int) -> int:
        """The end of what a consumer may read: the LSO under read_committed, else the HW."""
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark

    @property
    def appended_bytes(self) -> int:
        """Bytes appended since this Partition was made: a follower's fetch reads up to here."""
        return self._appended_bytes

    def bytes_below_bound(self, isolation_level: int) -> int:
        """Bytes appended below the fetch bound (see the module docstring)."""
        return self.last_stable_bytes if isolation_level == READ_COMMITTED else self.high_watermark_bytes

    # -- leader epoch ------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client's view of the leader epoch must match ours (-1 = unknown)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaApiError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaApiError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) of ``leader_epoch``, (-1, -1) if unknown.

        Not capped at the high watermark, for consumers either (Kafka's lastOffsetForLeaderEpoch):
        a new leader's HW lags the old leader's until its followers fetch, and a capped answer
        below a consumer's position reads as truncation (librdkafka rewinds, and drops records
        it fetched but had not yet handed over).
        """
        self.check_leader_epoch(current_leader_epoch)
        return self.log.end_offset_for_epoch(leader_epoch)

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch of the batch holding ``offset`` (the latest epoch started at or before it)."""
        entries = self.log.epoch_cache.entries
        if entries:
            epoch = -1
            for e, start in entries:
                if start <= offset:
                    epoch = e
                else:
                    break
            return epoch
        return self.leader_epoch

    # -- appends -----------------------------------------------------------------------------

    def append_records_to_leader(self, records: Any, required_acks: int,
                                 record_check: RecordCheck | None = None) -> AppendInfo:
        """Append a produced record set as the leader (Kafka's appendRecordsToLeader).

        :meth:`check_leader_append`, then the log's validation and append. The caller moves the HW
        (:meth:`maybe_increment_high_watermark`) and wakes waiters.
        """
        self.check_leader_append(records, required_acks, record_check)
        info = self.log.append(records, leader_epoch=self.leader_epoch)
        if not info.duplicate:
            self._appended_bytes += info.size
        return info

    def check_leader_append(self, records: Any, required_acks: int, record_check: RecordCheck | None = None) -> None:
        """The checks before a produced set reaches the log, in Kafka's order: internal topics refuse
        clients, an empty set is corrupt, a set larger than a segment can never be stored, acks=-1
        needs min.insync.replicas in the ISR; then ``record_check`` (the request's own checks)."""
        if self.is_internal:
            raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {self.topic}")
        if records is None or len(records) == 0:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
        config = self.log.config
        if len(records) > config.segment_bytes:
            raise KafkaApiError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                f"record set of {len(records)} bytes exceeds segment.bytes")
        if required_acks == -1:
            self._require_min_insync_replicas()
        if record_check is not None:
            record_check(records)

    def append_checked(self, records: Any, recompressed_for: LogConfig | None = None) -> AppendInfo:
        """The log append of a produced set that passed :meth:`check_leader_append` (the append
        lane's second half; ``recompressed_for``: see :meth:`odradek.storage.log.Log.append`)."""
        info = self.log.append(records, leader_epoch=self.leader_epoch, recompressed_for=recompressed_for)
        if not info.duplicate:
            self._appended_bytes += info.size
        return info

    def append_kept(self, records: Any) -> AppendInfo:
        """:meth:`append_checked` of a set the topic's codec keeps as sent (``Log.append_kept``)."""
        info = self.log.append_kept(records, leader_epoch=self.leader_epoch)
        if not info.duplicate:
            self._appended_bytes += info.size
        return info

    def _require_min_insync_replicas(self) -> None:
        """acks=-1 appends (produce, coordinator writes, markers): NOT_ENOUGH_REPLICAS while the
        ISR is below min.insync.replicas, before anything is appended (Kafka's appendRecordsToLeader)."""
        if len(self.isr) < self.log.config.min_insync_replicas:
            raise KafkaApiError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                f"ISR {list(self.isr)} smaller than min.insync.replicas")

    def append_internal(self, records: Any, required_acks: int = 1) -> AppendInfo:
        """Append as the leader without the client checks (coordinators' internal topics); with
        ``required_acks=-1`` the min.insync.replicas check of a produce."""
        if required_acks == -1:
            self._require_min_insync_replicas()
        info = self.log.append(records, leader_epoch=self.leader_epoch)
        if not info.duplicate:
            self._appended_bytes += info.size
        return info

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool, transaction_version: int = 0) -> AppendInfo:
        """Write a COMMIT/ABORT marker as the leader (the coordinator's WriteTxnMarkers path, Kafka's
        appendRecordsToLeader with AppendOrigin.COORDINATOR and acks=-1): internal topics too
        (``__consumer_offsets`` gets markers for TxnOffsetCommit); NOT_ENOUGH_REPLICAS below
        min.insync.replicas. The caller moves the HW, which moves the LSO."""
        self._require_min_insync_replicas()
        info = self.log.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                              leader_epoch=self.leader_epoch, transaction_version=transaction_version)
        self._appended_bytes += info.size
        return info

    def append_records_to_follower(self, records: Any) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        Kafka's appendRecordsToFollowerOrFutureReplica; the follower's HW then comes from the
        leader's fetch response (:meth:`update_follower_high_watermark`), not from this append.
        An empty log restarted at the leader's log start may get a first batch that begins below
        it (DeleteRecords cut that batch): as Kafka, the log then restarts at the batch's base.
        """
        log_end = self.log.log_end_offset
        if len(records) >= _FIRST_BATCH_END and log_end == self.log.log_start_offset:
            base, last_delta = _BASE_OFFSET.unpack_from(records, 0)[0], _LAST_DELTA.unpack_from(records, 23)[0]
            if base < log_end <= base + last_delta:
                self.log.truncate_fully_and_start_at(base)
                self._above_hw.clear()
        info = self.log.append(records, leader_epoch=self.leader_epoch, assign_offsets=False)
        self._appended_bytes += info.size
        self._note_above_hw(self.log.log_end_offset)
        return info

    def truncate_to(self, offset: int) -> bool:
        """Blocking (the IO pool runs it): as follower, drop the log from ``offset`` on (a tail the
        leader does not have, KIP-101/279). The HW is then capped by :meth:`after_truncation`."""
        return self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Blocking: as follower, empty the log and restart it at ``offset`` (the leader's log
        start passed our log end)."""
        self.log.truncate_fully_and_start_at(offset)

    def after_truncation(self) -> None:
        """On the loop, after a truncation: the HW and the remembered appends stop at the new end."""
        log_end = self.log.log_end_offset
        above = self._above_hw
        while above and above[-1][0] > log_end:
            above.pop()
        if self.high_watermark > log_end:
            self.high_watermark = self.last_stable_offset = log_end
        elif self.high_watermark < self.log.log_start_offset:
            # Restarted at the leader's log start: nothing below it is left to wait for.
            self.high_watermark = self.last_stable_offset = self.log.log_start_offset
        self._update_last_stable_offset()  # the truncation may have reopened a transaction

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        """acks=-1: (done, error code) once the HW passed ``required_offset`` (Kafka's name).

        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas while
        the produce waited; NOT_LEADER_OR_FOLLOWER if this broker stopped leading.
        """
        if self.high_watermark >= required_offset:
            # Kafka counts the maximal ISR here: a shrink in flight has not taken a replica out yet.
            if len(self.maximal_isr()) < self.log.config.min_insync_replicas:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE

    # -- reads -------------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, min_one_batch: bool) -> FetchSlice:
        """Whole batches from ``fetch_offset``, never past the isolation level's bound."""
        bound = self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark
        return self.log.read(fetch_offset, max_bytes, max_offset=bound, min_one_batch=min_one_batch)

    def aborted_transactions(self, fetch_offset: int, piece: FetchSlice) -> list[AbortedTxn]:
        """A read_committed fetch's aborted transactions overlapping what it read (Kafka's
        addAbortedTransactions): the consumer drops their batches."""
        if piece.size == 0:
            return []
        return self.log.collect_aborted_txns(fetch_offset, piece.next_offset)

    def read_for_follower(self, fetch_offset: int, max_bytes: int, min_one_batch: bool) -> FetchSlice:
        """Whole batches from ``fetch_offset`` up to the log end: a follower reads past the HW."""
        return self.log.read(fetch_offset, max_bytes, min_one_batch=min_one_batch)

    def read_committed_bytes(self, start_offset: int, max_bytes: int) -> bytes:
        """Bytes below the HW from ``start_offset`` (coordinators loading their internal topic)."""
        return self.log.read(start_offset, max_bytes, max_offset=self.high_watermark).read_bytes()

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int) -> tuple[int, int, int]:
        """ListOffsets: (offset, timestamp, leader epoch) for a timestamp or a special value.

        T >= 0: the first offset whose record timestamp is >= T, with that record's timestamp,
        or (-1, -1, -1); only offsets below the isolation level's bound are visible.

        A new leader learns the HW its old leader had only once its followers fetch again, so for
        a moment its HW may lie below offsets a client was already shown (KIP-207). Until the HW
        reaches the start of this leadership, "latest" and a lookup with no answer below the HW
        get OFFSET_NOT_AVAILABLE (retriable) instead of an offset that went backwards: a batch
        reader would otherwise stop short of acknowledged records (Kafka's fetchOffsetForTimestamp).
        """
        visible = self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            offset = self.log_start_offset
            return offset, -1, self.epoch_for_offset(offset)
        if timestamp == LATEST_TIMESTAMP:
            self._check_high_watermark_caught_up()
            return visible, -1, self.leader_epoch
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return -1, -1, -1  # nothing is tiered: Kafka's answer for a topic without remote storage
        if timestamp == MAX_TIMESTAMP:
            found = self.log.max_timestamp_and_offset()
            if found is None or found[1] >= visible:
                self._check_high_watermark_caught_up()
                return -1, -1, -1
            ts, offset = found
            return offset, ts, self.epoch_for_offset(offset)
        if timestamp < 0:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
        found_ts = self.log.offset_for_timestamp(timestamp, max_offset=visible)
        if found_ts is None:
            self._check_high_watermark_caught_up()
            return -1, -1, -1
        offset, ts = found_ts
        return offset, ts, self.epoch_for_offset(offset)

    def _check_high_watermark_caught_up(self) -> None:
        """OFFSET_NOT_AVAILABLE while this leader's HW lags the start of its leadership."""
        if self._leader_epoch_start_offset > self.high_watermark:
            raise KafkaApiError(ErrorCode.OFFSET_NOT_AVAILABLE,
                                f"{self.topic}-{self.index}: the high watermark ({self.high_watermark}) is lagging "
                                f"behind the start offset of leader epoch {self.leader_epoch} "
                                f"({self._leader_epoch_start_offset})")

    # -- delete records ----------------------------------------------------------------------

    def delete_records_target(self, offset: int) -> int:
        """DeleteRecords' new log start offset for ``offset`` (-1 = the HW); on the loop.

        OFFSET_OUT_OF_RANGE beyond the HW or below 0.
        """
        hw = self.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE)
        return offset

    def after_log_start_moved(self) -> None:
        """On the loop, after DeleteRecords: an open transaction that began below the new log start
        no longer holds the LSO there (Kafka's maybeIncrementFirstUnstableOffset)."""
        self._update_last_stable_offset()

    def delete_records_before(self, offset: int) -> int:
        """Blocking (renames segment files; the IO pool runs it): make ``offset`` the log start
        offset if it is above it; returns the low watermark (the log start offset)."""
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(offset)
        return self.log.log_start_offset
