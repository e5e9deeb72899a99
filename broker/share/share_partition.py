"""One share-partition: the records of one topic-partition a share group has in flight (KIP-932,
Kafka 4.4's ``SharePartition``), kept on the partition's leader.

The window::

    start_offset (SPSO)                                        next_offset (SPEO + 1)
        |  in flight: each offset Available, Acquired, Acknowledged or Archived |  not read yet
        v                                                                        v
    ... [ r0 ][ r1 ][    r2    ][ r3 ] ... ---------------------------------------> log end

Offsets below the SPSO are done (acknowledged or archived); the in-flight offsets are kept as
*ranges* of consecutive offsets in one state, with one delivery count, one holder and one lock
deadline - not one object per record (Kafka keeps a batch whole the same way until an
acknowledgement splits it). A fetch acquires whole log batches: the new offsets past
``next_offset`` and any Available range inside the batches it read. Transitions (Kafka's
``RecordState``):

- Available -> Acquired by a ShareFetch: the delivery count goes up by one and the range is locked
  to the member until ``now + record lock duration``.
- Acquired -> Acknowledged (ACCEPT), Archived (REJECT, or GAP for offsets with no record), or
  Available again (RELEASE, the lock expiring, the member's connection or share session closing),
  except that a record released after its ``delivery count limit``-th delivery is Archived:
  it is never delivered again.
- RENEW (ShareAcknowledge/ShareFetch v2, KIP-1222) keeps the records Acquired and restarts the lock;
  where the group config ``share.renew.acknowledge.enable`` is false, it is refused as Kafka's
  SharePartition refuses it (INVALID_RECORD_STATE, "Renewing acquisition locks is not enabled for
  the group.").

Only the member holding a record may acknowledge it (INVALID_RECORD_STATE otherwise, and nothing of
that partition's acknowledgement is applied). The SPSO moves past every leading range that is done.
At most ``max_in_flight`` offsets are kept: past that a fetch only re-delivers Available ranges.

The start offset of a share-partition the group never read comes from ``share.auto.offset.reset``:
``latest`` (Kafka's default: the high watermark when the first ShareFetch reaches it) or
``earliest`` (the log start).

The durable part of the state is ``durable_state()``: what Kafka 4.4's share coordinator holds
after the writes its SharePartition makes, which the manager writes to ``__share_group_state``
(broker/share/share_state_store.py) and a new leader starts from (``restore``). Kafka writes on
an acknowledgement, a release (RELEASE, a closed session or connection) and an expired lock - never
on an acquisition or a renewed lock - and each write carries the SPSO as it stood *before* the
change it writes (its cached SPSO moves only once the write succeeded). So:

- the written SPSO is ``write_start``, the SPSO before the latest written change; the ranges that
  change finished (now below the SPSO, ``settled``) are written with it, so that a new leader
  moves past them as Kafka's does when it initializes;
- an Acquired range is written as its last release left it: Available with one delivery fewer,
  and not at all on its first delivery (Kafka never wrote it: after a crash it comes again with
  delivery count 1). ``restore`` reads offsets missing between stored ranges as such never
  written ones (Kafka's gap window): Available, delivered 0 times.

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable
from dataclasses import dataclass


class RecordState(enum.IntEnum):
    """Kafka's RecordState (the values ``kafka-share-groups`` and the state records use)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """The acknowledge_types a client sends (Kafka's AcknowledgeType; 0 is a gap, no record)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class InvalidRecordState(Exception):
    """An acknowledgement for offsets the member does not hold (INVALID_RECORD_STATE)."""


class InvalidAcknowledgement(Exception):
    """An acknowledgement that is malformed (INVALID_REQUEST)."""


@dataclass(slots=True)
class InFlightRange:
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0

    def split_at(self, offset: int) -> InFlightRange:
        """Cut this range before ``offset``; returns the part from ``offset`` on."""
        tail = InFlightRange(offset, self.last, self.state, self.delivery_count, self.member_id, self.deadline_ms)
        self.last = offset - 1
        return tail


class SharePartition:
    def __init__(self, group_id: str, topic: str, partition: int, start_offset: int, delivery_count_limit: int,
                 max_in_flight: int) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.ranges: list[InFlightRange] = []  # sorted, disjoint
        # The SPSO the next write carries (Kafka's cached SPSO, which a write moves only after it
        # succeeded) and the finished ranges from there to ``start_offset``, written with it.
        self.write_start = start_offset
        self.settled: list[InFlightRange] = []

    @classmethod
    def restore(cls, group_id: str, topic: str, partition: int, start_offset: int,
                batches: Iterable[tuple[int, int, int, int]], delivery_count_limit: int,
                max_in_flight: int) -> SharePartition:
        """A share-partition from its durable state: (first, last, delivery state, delivery count)
        batches, Available ones ready to be acquired again."""
        sp = cls(group_id, topic, partition, start_offset, delivery_count_limit, max_in_flight)
        for first, last, state, count in sorted(batches):
            first = max(first, start_offset, sp.next_offset)
            if last < first:
                continue
            if first > sp.next_offset:  # offsets acquired once and never written: not delivered yet
                sp.ranges.append(InFlightRange(sp.next_offset, first - 1, RecordState.AVAILABLE, 0))
            kind = RecordState(state) if state in (0, 2, 4) else RecordState.AVAILABLE
            sp.ranges.append(InFlightRange(first, last, kind, count))
            sp.next_offset = last + 1
        sp._merge()
        sp._advance_start()
        # Kafka's new leader moves its SPSO past the finished ranges without writing; its next
        # write carries the moved one.
        sp.write_start, sp.settled = sp.start_offset, []
        return sp

    def durable_state(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(written SPSO, (first, last, delivery state, delivery count) of each range as Kafka's
        writes left it): Acquired ranges as their last release wrote them, never-written ones left out."""
        out: list[tuple[int, int, int, int]] = []
        for r in self.settled + self.ranges:
            state, count = r.state, r.delivery_count
            if state is RecordState.ACQUIRED:
                state, count = RecordState.AVAILABLE, count - 1
            if state is RecordState.AVAILABLE and count <= 0:
                continue  # never written: Kafka's share coordinator has a gap here
            if out and out[-1][1] + 1 == r.first and out[-1][2] == state and out[-1][3] == count:
                out[-1] = (out[-1][0], r.last, int(state), count)
            else:
                out.append((r.first, r.last, int(state), count))
        return self.write_start, out

    def _written_change(self, start_before: int) -> None:
        """A change Kafka writes happened while the SPSO stood at ``start_before``: the write
        carries that SPSO, and the ranges the change finishes from there on."""
        self.write_start = start_before
        self.settled = [r for r in self.settled if r.last >= start_before]

    # ------------------------------------------------------------------------------------------
    # reading

    def fetch_offset(self) -> int | None:
        """Where a fetch should read from: the first Available range, else ``next_offset`` while
        the in-flight window has room; None when nothing can be acquired."""
        for r in self.ranges:
            if r.state is RecordState.AVAILABLE:
                return r.first
        if self.next_offset - self.start_offset >= self.max_in_flight:
            return None
        return self.next_offset

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int]], max_records: int, now_ms: int,
                lock_ms: int, strict: bool = False) -> list[tuple[int, int, int]]:
        """Acquire, for ``member_id``, the acquirable offsets of ``batches`` ((base offset, last
        offset) of each log batch read, in order), whole batches until ``max_records`` offsets are
        acquired (Kafka's batch_optimized mode), or exactly ``max_records`` at most when ``strict``
        (ShareFetch v2's record_limit mode, KIP-1206). Returns the acquired (first offset, last
        offset, delivery count) ranges."""
        acquired: list[tuple[int, int, int]] = []
        count = 0
        deadline = now_ms + lock_ms
        for base, last in batches:
            if count >= max_records:
                break
            if last < self.start_offset:
                continue
            base = max(base, self.start_offset)
            if strict:
                last = min(last, self._strict_end(base, max_records - count))
            # Available ranges inside the batch.
            for r in self._cut(base, min(last, self.next_offset - 1)):
                if strict and count >= max_records:
                    break
                if r.state is RecordState.AVAILABLE:
                    r.state, r.member_id, r.deadline_ms = RecordState.ACQUIRED, member_id, deadline
                    r.delivery_count += 1
                    acquired.append((r.first, r.last, r.delivery_count))
                    count += r.last - r.first + 1
            # New offsets past the window, while it has room.
            if last >= self.next_offset:
                if self.next_offset - self.start_offset >= self.max_in_flight:
                    break
                first = max(base, self.next_offset)
                self.ranges.append(InFlightRange(first, last, RecordState.ACQUIRED, 1, member_id, deadline))
                self.next_offset = last + 1
                acquired.append((first, last, 1))
                count += last - first + 1
        self._merge()
        return _coalesce(acquired)

    def _strict_end(self, base: int, room: int) -> int:
        """The last offset from ``base`` on that keeps the acquirable offsets within ``room``."""
        end = base - 1
        for r in self._overlapping(base, self.next_offset - 1):
            if r.state is RecordState.AVAILABLE:
                take = min(room, r.last - max(r.first, base) + 1)
                room -= take
                end = max(r.first, base) + take - 1
                if room == 0:
                    return end
            else:
                end = r.last
        return max(end, self.next_offset - 1) + room

    # ------------------------------------------------------------------------------------------
    # acknowledging

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]], now_ms: int,
                    lock_ms: int, renew_enabled: bool = True) -> None:
        """Apply a member's acknowledgement batches ((first, last, types): one type for the whole
        range or one per offset), all or none; RENEW only where ``renew_enabled``."""
        runs: list[tuple[int, int, AcknowledgeType]] = []
        for first, last, types in batches:
            if last < first or first < 0:
                raise InvalidAcknowledgement(f"acknowledgement batch {first}-{last} is empty")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError as exc:
                raise InvalidAcknowledgement(f"unknown acknowledge type in {types}") from exc
            if len(kinds) == 1:
                runs.append((first, last, kinds[0]))
            elif len(kinds) == last - first + 1:
                runs.extend(_runs(first, kinds))
            else:
                raise InvalidAcknowledgement(f"{len(kinds)} acknowledge types for offsets {first}-{last}")
        for first, last, kind in runs:
            if not self._held_by(member_id, first, last, allow_gap=kind is AcknowledgeType.GAP):
                raise InvalidRecordState(f"offsets {first}-{last} are not acquired by member {member_id}")
            if kind is AcknowledgeType.RENEW and not renew_enabled:  # (Kafka checks it after the holder)
                raise InvalidRecordState("Renewing acquisition locks is not enabled for the group.")
        start_before, written = self.start_offset, False
        for first, last, kind in runs:
            written = written or kind is not AcknowledgeType.RENEW  # (a renewed lock is not written)
            for r in self._cut(first, last):
                if r.state is not RecordState.ACQUIRED:
                    continue
                if kind is AcknowledgeType.ACCEPT:
                    self._finish(r, RecordState.ACKNOWLEDGED)
                elif kind in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                    self._finish(r, RecordState.ARCHIVED)
                elif kind is AcknowledgeType.RELEASE:
                    self._release(r)
                else:  # RENEW
                    r.deadline_ms = now_ms + lock_ms
        if written:
            self._written_change(start_before)
        self._merge()
        self._advance_start()

    def _held_by(self, member_id: str, first: int, last: int, allow_gap: bool) -> bool:
        """Every offset of first..last lies in a range Acquired by ``member_id`` (a gap
        acknowledgement may also name offsets that no batch held)."""
        covered = first
        for r in self._overlapping(first, last):
            if r.first > covered and not allow_gap:
                return False
            if r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                return False
            covered = r.last + 1
        return covered > last or allow_gap

    # ------------------------------------------------------------------------------------------
    # releases

    def release_member(self, member_id: str) -> int:
        """The member's records go back (its connection or share session closed); their count."""
        released = 0
        for r in self.ranges:
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                released += r.last - r.first + 1
                self._release(r)
        if released:
            self._written_change(self.start_offset)
            self._merge()
            self._advance_start()
        return released

    def expire_locks(self, now_ms: int) -> int:
        """Release every range whose acquisition lock expired; their offset count."""
        released = 0
        for r in self.ranges:
            if r.state is RecordState.ACQUIRED and r.deadline_ms <= now_ms:
                released += r.last - r.first + 1
                self._release(r)
        if released:
            self._written_change(self.start_offset)
            self._merge()
            self._advance_start()
        return released

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.ranges if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def _release(self, r: InFlightRange) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            self._finish(r, RecordState.ARCHIVED)
        else:
            r.state, r.member_id, r.deadline_ms = RecordState.AVAILABLE, None, 0

    @staticmethod
    def _finish(r: InFlightRange, state: RecordState) -> None:
        r.state, r.member_id, r.deadline_ms = state, None, 0

    # ------------------------------------------------------------------------------------------
    # the window

    def reset_start(self, offset: int) -> None:
        """Move the SPSO (the log start passed it, or an operator reset the group's offsets):
        everything in flight below it is dropped."""
        self.ranges = [r for r in self.ranges if r.last >= offset]
        if self.ranges and self.ranges[0].first < offset:
            self.ranges[0] = self.ranges[0].split_at(offset)
        self.start_offset = offset
        self.next_offset = max(self.next_offset, offset)
        self._advance_start()
        # Kafka moves its cached SPSO so without a write; the next write carries it.
        self.write_start, self.settled = self.start_offset, []

    def in_flight_count(self) -> int:
        return self.next_offset - self.start_offset

    def done_in_flight(self) -> int:
        """Offsets in the window already acknowledged or archived (not part of the group's lag)."""
        return sum(r.last - r.first + 1 for r in self.ranges
                   if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))

    def _advance_start(self) -> None:
        done = 0
        for r in self.ranges:
            if r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            done += 1
        if done:
            self.settled += self.ranges[:done]
            del self.ranges[:done]
        self.start_offset = self.ranges[0].first if self.ranges else self.next_offset

    def _overlapping(self, first: int, last: int) -> list[InFlightRange]:
        i = bisect.bisect_right([r.last for r in self.ranges], first - 1)
        out = []
        while i < len(self.ranges) and self.ranges[i].first <= last:
            out.append(self.ranges[i])
            i += 1
        return out

    def _cut(self, first: int, last: int) -> list[InFlightRange]:
        """The ranges covering first..last, split so that each lies wholly inside it."""
        if last < first:
            return []
        out = []
        i = bisect.bisect_right([r.last for r in self.ranges], first - 1)
        while i < len(self.ranges) and self.ranges[i].first <= last:
            r = self.ranges[i]
            if r.first < first:
                self.ranges.insert(i + 1, r.split_at(first))
                i += 1
                continue
            if r.last > last:
                self.ranges.insert(i + 1, r.split_at(last + 1))
            out.append(self.ranges[i])
            i += 1
        return out

    def _merge(self) -> None:
        """Join neighbouring ranges that are alike, so the list stays as short as the states allow."""
        merged: list[InFlightRange] = []
        for r in self.ranges:
            p = merged[-1] if merged else None
            if (p is not None and p.last + 1 == r.first and p.state == r.state
                    and p.delivery_count == r.delivery_count and p.member_id == r.member_id
                    and p.deadline_ms == r.deadline_ms):
                p.last = r.last
            else:
                merged.append(r)
        self.ranges = merged


def _runs(first: int, kinds: list[AcknowledgeType]) -> list[tuple[int, int, AcknowledgeType]]:
    out: list[tuple[int, int, AcknowledgeType]] = []
    for i, kind in enumerate(kinds):
        offset = first + i
        if out and out[-1][2] is kind and out[-1][1] == offset - 1:
            out[-1] = (out[-1][0], offset, kind)
        else:
            out.append((offset, offset, kind))
    return out


def _coalesce(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for first, last, count in ranges:
        if out and out[-1][1] + 1 == first and out[-1][2] == count:
            out[-1] = (out[-1][0], last, count)
        else:
            out.append((first, last, count))
    return out
