"""The fault suite's history and checker, and the load clients that feed it (issue 13).

``History`` records every client operation of a run, each with its monotonic time: produce acks
(client, partition, offset, value), produce errors (their Kafka error names, retriable or not,
final or transient; a final one names its record), the records a consumer group consumed (with the high watermark the consumer
saw at that poll), the group's committed offsets, the leaders/leader epochs/ISRs Metadata showed,
and named marks (the faults).

``Checker`` asserts what Kafka promises over that history and a final read of the topic:

- no acknowledged write lost: the acked value sits at its acked offset;
- no duplicate under idempotence: a value appears once in the log;
- offsets dense and monotonic: the final read has no holes; each consumer, between two
  rebalances, reads offset n+1 after offset n;
- the high watermark a consumer sees never goes backwards;
- one leader per (partition, leader epoch), whichever broker was asked;
- the group's committed offsets never go backwards;
- the errors reaching producers are only those the scenario allows: transient ones retriable, and a
  delivery failure only as an ambiguous outcome, its record nevertheless written exactly once and
  in its producer's order (``Checker.failed_but_written``; one absent from the log fails);
- no client ever got UNKNOWN_SERVER_ERROR (Kafka's catch-all, -1): not the producers, not the group's
  members (their commits, fetches, error callbacks), not the Metadata poller (issue 27). The
  brokers' logs are searched for it too (``unknown_server_errors_logged``, from ``FaultLoad.check``):
  every fault must be answered with Kafka's specific, usually retriable, error.

The load clients are real ones: ``RdkafkaProducer`` (confluent-kafka, acks=all, idempotent),
``JavaVerifiableProducer`` (Kafka's own org.apache.kafka.tools.VerifiableProducer, one JSON line per
ack), ``GroupConsumer`` (confluent-kafka subscribe(), N members of one group, committing), and
``MetadataPoller`` (raw Metadata v12 to every broker).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from odradek.protocol.errors import ErrorCode
from odradek.testing.cluster import ClusterProcesses
from tools.kafka_cli import tool_command
from tools.kafka_dist import LOG4J_TOOLS, log_config_option, log_levels

VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"

# Kafka's RetriableException subclasses a producer may see during a failover (the Java client's
# class names; librdkafka's errors carry their own retriable flag).
JAVA_RETRIABLE = {
    "TimeoutException", "NotEnoughReplicasException", "NotEnoughReplicasAfterAppendException",
    "NotLeaderOrFollowerException", "LeaderNotAvailableException", "NetworkException",
    "UnknownTopicOrPartitionException", "KafkaStorageException", "RequestTimedOutException",
    "DisconnectException", "FencedLeaderEpochException", "UnknownLeaderEpochException",
    "CorruptRecordException", "OffsetNotAvailableException", "CoordinatorLoadInProgressException",
}


# --- the history -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ack:
    client: str
    partition: int
    offset: int
    value: bytes
    at: float


@dataclass(frozen=True)
class ProduceError:
    client: str
    name: str          # Kafka's error name (librdkafka) or exception class (Java)
    retriable: bool
    final: bool        # the client gave up on a record (a delivery failure), not a transient client event
    at: float
    detail: str = ""
    # A final error's record, as the client names it: its value (unique per client) and, when the
    # client knows it, its partition (-1: not known). Not acknowledged is not "not written": the
    # checker looks the value up in the final read (``Checker.failed_but_written``).
    value: bytes | None = None
    partition: int = -1


@dataclass(frozen=True)
class Consumed:
    member: str
    session: int       # the member's assignment count: a rebalance may rewind to the committed offset
    partition: int
    offset: int
    value: bytes
    hw: int            # the high watermark the consumer held at that poll (-1: unknown)
    at: float
    epoch: int = -1    # the leader epoch of the record's batch


@dataclass(frozen=True)
class Commit:
    member: str
    partition: int
    offset: int
    at: float


@dataclass(frozen=True)
class ClientError:
    """An error a client other than a producer saw: a group member's commit, fetch or error callback,
    a Metadata answer's error code. Only UNKNOWN_SERVER_ERROR fails a run (``is_unknown_server_error``):
    the others (a commit refused during a rebalance, COORDINATOR_NOT_AVAILABLE) are Kafka's answers."""

    client: str
    name: str          # librdkafka's error name, or Kafka's error name for a raw answer
    at: float
    detail: str = ""


@dataclass(frozen=True)
class LeaderSeen:
    partition: int
    leader: int
    epoch: int
    isr: tuple[int, ...]
    via: int
    error: int
    at: float


@dataclass
class History:
    """Thread-safe, append-only record of one run (each client thread appends its own events)."""

    acks: list[Ack] = field(default_factory=list)
    errors: list[ProduceError] = field(default_factory=list)
    consumed: list[Consumed] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    leaders: list[LeaderSeen] = field(default_factory=list)
    client_errors: list[ClientError] = field(default_factory=list)
    marks: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, event: Ack | ProduceError | Consumed | Commit | LeaderSeen | ClientError) -> None:
        lists: dict[type, list[Any]] = {Ack: self.acks, ProduceError: self.errors, Consumed: self.consumed,
                                        Commit: self.commits, LeaderSeen: self.leaders,
                                        ClientError: self.client_errors}
        target = lists[type(event)]
        with self.lock:
            target.append(event)

    def mark(self, name: str) -> float:
        """Note a fault (or any step) now; returns its time."""
        at = time.monotonic()
        with self.lock:
            self.marks.append((name, at))
        return at

    def acked(self, client: str | None = None, partitions: Iterable[int] | None = None) -> int:
        wanted = None if partitions is None else set(partitions)
        with self.lock:
            return sum(1 for a in self.acks if (client is None or a.client == client)
                       and (wanted is None or a.partition in wanted))

    def final_errors(self) -> list[ProduceError]:
        with self.lock:
            return [e for e in self.errors if e.final]


# --- failover figures ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Failover:
    fault: str
    partitions: tuple[int, ...]
    leader_moved_s: float | None   # fault -> first Metadata showing another live leader (None: never seen)
    ack_stall_s: float | None      # the longest gap between acks on those partitions after the fault

    def line(self) -> str:
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f} s"
        return (f"{self.fault}: partitions {list(self.partitions)}: new leader in Metadata after "
                f"{fmt(self.leader_moved_s)}, longest ack stall {fmt(self.ack_stall_s)}")


def failover(history: History, fault: str, at: float, old_leader: int, partitions: Iterable[int],
             window: float = 60.0) -> Failover:
    """How long ``partitions`` (led by ``old_leader`` at time ``at``) were without a leader / acks."""
    parts = tuple(sorted(partitions))
    with history.lock:
        leaders = [s for s in history.leaders if s.partition in parts and s.at >= at]
        acks = sorted(a.at for a in history.acks if a.partition in parts and at - 1 <= a.at <= at + window)
    moved: dict[int, float] = {}
    for s in leaders:
        if s.leader not in (old_leader, -1) and s.partition not in moved:
            moved[s.partition] = s.at - at
    leader_moved = max(moved.values()) if len(moved) == len(parts) and parts else None
    after = [t for t in acks if t >= at]
    stall = None
    if after:
        before = [t for t in acks if t < at]
        points = ([before[-1]] if before else [at]) + after
        stall = max(b - a for a, b in zip(points, points[1:], strict=False)) if len(points) > 1 else 0.0
    return Failover(fault, parts, leader_moved, stall)


# --- UNKNOWN_SERVER_ERROR ------------------------------------------------------------------------

# Kafka's catch-all error (code -1) as each client names it: librdkafka's UNKNOWN ("Unknown broker
# error"), the Java client's UnknownServerException, Kafka's own name in raw answers and in the
# brokers' logs (the dispatcher's catch-all line names it: broker/dispatcher.CATCH_ALL_LOG).
UNKNOWN_SERVER_ERROR_NAMES = frozenset({"UNKNOWN", "UNKNOWN_SERVER_ERROR", "UnknownServerException"})
UNKNOWN_SERVER_ERROR_TEXTS = ("UNKNOWN_SERVER_ERROR", "Unknown broker error", "UnknownServerException")
UNKNOWN_SERVER_ERROR_CODE = -1


def is_unknown_server_error(name: str, detail: str = "") -> bool:
    return name in UNKNOWN_SERVER_ERROR_NAMES or any(t in detail for t in UNKNOWN_SERVER_ERROR_TEXTS)


def unknown_server_errors_logged(paths: Iterable[Path], context: int = 12) -> list[str]:
    """Each line of the given logs naming UNKNOWN_SERVER_ERROR, headed by its file and line number and
    followed by ``context`` lines (the catch-all's traceback). Whole files: a restarted broker
    appends to the log its previous run wrote."""
    found: list[str] = []
    for path in paths:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            continue
        for i, line in enumerate(lines):
            if any(t in line for t in UNKNOWN_SERVER_ERROR_TEXTS):
                found.append(f"{path}:{i + 1}: " + "\n".join(lines[i:i + 1 + context]))
    return found


def assert_no_unknown_server_error_logged(c: ClusterProcesses) -> None:
    """No broker of ``c`` logged an UNKNOWN_SERVER_ERROR (a request that hit the dispatcher's catch-all)."""
    logged = unknown_server_errors_logged(c.broker(n).log_path for n in c.node_ids)
    assert not logged, (f"{len(logged)} UNKNOWN_SERVER_ERROR lines in the brokers' logs; the first:\n"
                        + "\n\n".join(logged[:3]))


# --- the checker --------------------------------------------------------------------------------

Read = dict[int, list[tuple[int, bytes]]]   # partition -> [(offset, value)] as read back from offset 0


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> Read:
    """Every record of ``topic`` from the start up to each partition's high watermark now."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{topic}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        seen: Read = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any((seen[p][-1][0] + 1 if seen[p] else 0) < ends[p] for p in seen):
            assert time.monotonic() < deadline, (
                f"read-back of {topic} stalled: read up to {[(p, s[-1][0] if s else -1) for p, s in seen.items()]} "
                f"of high watermarks {ends}")
            batch: list[Any] = consumer.consume(500, 0.5)   # confluent-kafka's Message: optional fields
            for msg in batch:
                if msg.error() is None and msg.offset() < ends[msg.partition()]:
                    seen[msg.partition()].append((msg.offset(), msg.value()))
        return seen
    finally:
        consumer.close()


class Checker:
    """Assertions over a History plus a final read (``read_back``). Each raises AssertionError with
    what broke, where, and a few examples."""

    def __init__(self, history: History, read: Read) -> None:
        self.h = history
        self.read = read
        self.at = {(p, off): v for p, recs in read.items() for off, v in recs}

    def lost(self, clients: Iterable[str] | None = None) -> list[Ack]:
        """Acked records whose value is not at their acked offset."""
        wanted = None if clients is None else set(clients)
        return [a for a in self.h.acks if (wanted is None or a.client in wanted)
                and self.at.get((a.partition, a.offset)) != a.value]

    def no_acked_write_lost(self) -> None:
        lost = self.lost()
        if lost:
            examples = [(a.client, a.partition, a.offset, a.value, self.at.get((a.partition, a.offset)))
                        for a in lost[:5]]
            raise AssertionError(f"{len(lost)} of {len(self.h.acks)} acknowledged records lost or changed; "
                                 f"(client, partition, offset, acked value, value now) e.g. {examples}")

    def no_duplicates(self) -> None:
        where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for p, recs in self.read.items():
            for off, v in recs:
                where[v].append((p, off))
        dups = {v: w for v, w in where.items() if len(w) > 1}
        if dups:
            raise AssertionError(f"{len(dups)} values written more than once under idempotence, "
                                 f"e.g. {list(dups.items())[:5]}")

    def produce_order_kept(self) -> None:
        """Per partition and producer, the producer's sequence numbers rise with the offset."""
        for p, recs in self.read.items():
            last: dict[str, tuple[int, int]] = {}
            for off, v in recs:
                client, _, n = v.decode().rpartition(".")
                if not n.isdigit():
                    continue
                if client in last and int(n) <= last[client][1]:
                    raise AssertionError(f"partition {p}: {client}'s record {n} at offset {off} follows its "
                                         f"record {last[client][1]} at offset {last[client][0]}")
                last[client] = (off, int(n))

    def offsets_dense(self) -> None:
        for p, recs in self.read.items():
            offsets = [off for off, _ in recs]
            if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                holes = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1]
                raise AssertionError(f"partition {p}: offsets not dense as read back, jumps {holes[:5]}")

    def consumed_dense_and_monotonic(self) -> None:
        """Each member, within one assignment, reads each partition's offsets one after another."""
        last: dict[tuple[str, int, int], Consumed] = {}
        with self.h.lock:
            consumed = list(self.h.consumed)
        for c in consumed:
            key = (c.member, c.session, c.partition)
            prev = last.get(key)
            if prev is not None and c.offset != prev.offset + 1:
                what = "went backwards" if c.offset <= prev.offset else "skipped"
                around = [(x.offset, x.epoch, x.hw, round(x.at - c.at, 3)) for x in consumed
                          if (x.member, x.partition) == (c.member, c.partition) and abs(x.at - c.at) < 2]
                raise AssertionError(f"consumer {c.member} (assignment {c.session}) partition {c.partition} "
                                     f"{what}: offset {c.offset} (leader epoch {c.epoch}, HW {c.hw}) after "
                                     f"{prev.offset} (leader epoch {prev.epoch}, HW {prev.hw}), "
                                     f"{c.at - prev.at:.2f} s later; (offset, epoch, HW, s) around: {around}")
            if c.value != self.at.get((c.partition, c.offset)):
                raise AssertionError(f"consumer {c.member} read {c.value!r} at {c.partition}/{c.offset}, the log "
                                     f"now holds {self.at.get((c.partition, c.offset))!r}")
            last[key] = c

    def consumer_hw_monotonic(self) -> None:
        last: dict[tuple[str, int], Consumed] = {}
        with self.h.lock:
            consumed = list(self.h.consumed)
        for c in consumed:
            if c.hw < 0:
                continue
            prev = last.get((c.member, c.partition))
            if prev is not None and c.hw < prev.hw:
                raise AssertionError(f"consumer {c.member} saw partition {c.partition}'s high watermark go back "
                                     f"from {prev.hw} to {c.hw} ({c.at - prev.at:.2f} s later)")
            last[(c.member, c.partition)] = c

    def one_leader_per_epoch(self) -> None:
        seen: dict[tuple[int, int], LeaderSeen] = {}
        with self.h.lock:
            leaders = list(self.h.leaders)
        for s in leaders:
            # Leader -1 is "no live leader known here" (Kafka's metadata cache answers it, with the
            # partition's epoch, while the leader's registration is missing), not a second leader.
            if s.epoch < 0 or s.leader < 0:
                continue
            first = seen.setdefault((s.partition, s.epoch), s)
            if first.leader != s.leader:
                raise AssertionError(f"partition {s.partition} leader epoch {s.epoch} has two leaders: broker "
                                     f"{first.via} said {first.leader}, broker {s.via} said {s.leader} "
                                     f"({s.at - first.at:.2f} s later)")

    def commits_monotonic(self) -> None:
        last: dict[int, Commit] = {}
        with self.h.lock:
            commits = list(self.h.commits)
        for c in commits:
            prev = last.get(c.partition)
            if prev is not None and c.offset < prev.offset:
                raise AssertionError(f"the group's committed offset of partition {c.partition} went back from "
                                     f"{prev.offset} ({prev.member}) to {c.offset} ({c.member})")
            last[c.partition] = c

    def committed_to_the_end(self) -> None:
        """The group's last commit of each partition is the end of what was read back (it drained
        the topic and committed on the way out)."""
        with self.h.lock:
            last = {c.partition: c.offset for c in self.h.commits}
        ends = {p: recs[-1][0] + 1 for p, recs in self.read.items() if recs}
        short = {p: (last.get(p), end) for p, end in ends.items() if last.get(p) != end}
        if short:
            raise AssertionError(f"the group's last commits are not the partitions' ends: "
                                 f"partition -> (committed, end) {short}")

    def consumed_everything_acked(self) -> None:
        """The group read every acked record at least once (it ran to the end: ``GroupConsumer.drain``)."""
        with self.h.lock:
            got = {(c.partition, c.offset) for c in self.h.consumed}
        missing = [a for a in self.h.acks if (a.partition, a.offset) not in got]
        if missing:
            raise AssertionError(f"the consumer group never read {len(missing)} acked records, e.g. "
                                 f"{[(a.partition, a.offset) for a in missing[:5]]}")

    def _where(self) -> dict[bytes, list[tuple[int, int]]]:
        """Value -> every (partition, offset) holding it in the final read."""
        where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for p, recs in self.read.items():
            for off, v in recs:
                where[v].append((p, off))
        return where

    def _order_around(self, partition: int, offset: int, value: bytes) -> str | None:
        """Why the record ``value`` at ``partition``/``offset`` breaks its producer's order (its
        "<client>.<n>" between the same client's neighbours in that partition), None if it does not."""
        client, _, n = value.decode(errors="replace").rpartition(".")
        if not n.isdigit():
            return "no sequence number in its value"
        before = after = None
        for off, v in self.read.get(partition, []):
            c, _, m = v.decode(errors="replace").rpartition(".")
            if c != client or not m.isdigit() or off == offset:
                continue
            if off < offset:
                before = (off, int(m))
            elif after is None:
                after = (off, int(m))
        if before is not None and before[1] >= int(n):
            return f"follows its record {before[1]} at offset {before[0]}"
        if after is not None and after[1] <= int(n):
            return f"precedes its record {after[1]} at offset {after[0]}"
        return None

    def _final_outcomes(self) -> list[tuple[ProduceError, str | None]]:
        """Each final error with None when it is an ambiguous outcome (its record is in the final read
        exactly once, in the named partition if the client named one, in its producer's order), or
        why it is not (unidentified, absent, duplicated, misplaced, out of order)."""
        with self.h.lock:
            final = [e for e in self.h.errors if e.final]
        where = self._where() if final else {}
        out: list[tuple[ProduceError, str | None]] = []
        for e in final:
            found = [] if e.value is None else where.get(e.value, [])
            if e.value is None:
                why: str | None = "the error names no record"
            elif not found:
                why = "not in the log"
            elif len(found) > 1:
                why = f"in the log {len(found)} times, at {found[:5]}"
            elif e.partition >= 0 and found[0][0] != e.partition:
                why = f"at {found[0]}, not in partition {e.partition}"
            else:
                why = self._order_around(found[0][0], found[0][1], e.value)
                why = None if why is None else f"at {found[0]}: {why}"
            out.append((e, why))
        return out

    def failed_but_written(self) -> list[ProduceError]:
        """Final errors whose record is nevertheless written, once and in order: an ambiguous outcome
        Kafka's contract allows (a failed delivery does not promise the record is not written). E.g.
        the Java client expires a batch it kept retrying on a new leader that already holds it but
        more than 5 batches back (ProducerStateEntry's duplicate window), so OUT_OF_ORDER_SEQUENCE_NUMBER."""
        return [e for e, why in self._final_outcomes() if why is None]

    def producer_errors(self, allow_final: bool = False, allow_retriable: bool = True) -> None:
        """Errors reaching producers. A final error (a delivery failure) passes only as an ambiguous
        outcome (``failed_but_written``: its record written exactly once, in its producer's order),
        unless ``allow_final``: then any may. Transient ones (client events, failed attempts it
        retried) must be retriable unless they are allowed not to be. (A final error's retriable flag
        says whether the application could resend; librdkafka's delivery reports never set it.)"""
        with self.h.lock:
            errors = list(self.h.errors)
        failed = [(e, why) for e, why in self._final_outcomes() if why is not None]
        if failed and not allow_final:
            written = sum(e.final for e in errors) - len(failed)
            examples = [(e.client, e.name, e.detail, e.value, why) for e, why in failed[:5]]
            raise AssertionError(
                f"{len(failed)} deliveries failed ({written} more failed but were written once, in order), "
                f"(client, error, detail, record, why not written once in order) e.g. {examples}"
            )
        bad = [e for e in errors if not e.retriable and not e.final]
        if bad or (errors and not allow_retriable):
            raise AssertionError(f"non-retriable errors reached producers: "
                                 f"{[(e.client, e.name, e.detail) for e in (bad or errors)[:5]]}")

    def no_unknown_server_error(self) -> None:
        """No client got Kafka's catch-all error: producers (final or transient), group members,
        the Metadata poller."""
        with self.h.lock:
            seen = [(e.client, e.name, e.detail) for e in self.h.errors if is_unknown_server_error(e.name, e.detail)]
            seen += [(e.client, e.name, e.detail) for e in self.h.client_errors
                     if is_unknown_server_error(e.name, e.detail)]
            seen += [(f"metadata via {s.via}", "UNKNOWN_SERVER_ERROR", f"partition {s.partition}")
                     for s in self.h.leaders if s.error == UNKNOWN_SERVER_ERROR_CODE]
        if seen:
            raise AssertionError(f"{len(seen)} client results were UNKNOWN_SERVER_ERROR, (client, error, detail) "
                                 f"e.g. {seen[:5]}")

    def summary(self) -> str:
        """What the run's history holds, so a passing run shows it checked something."""
        written = len(self.failed_but_written())  # (takes the lock itself)
        with self.h.lock:
            acks: dict[str, int] = defaultdict(int)
            for a in self.h.acks:
                acks[a.client] += 1
            epochs = {(s.partition, s.epoch) for s in self.h.leaders}
            return (f"acks {dict(acks)}, produce errors {len(self.h.errors)} "
                    f"({sum(e.final for e in self.h.errors)} final, {written} of them failed but written), "
                    f"records read back "
                    f"{sum(len(r) for r in self.read.values())}, consumed by the group {len(self.h.consumed)} "
                    f"(HW seen {sum(c.hw >= 0 for c in self.h.consumed)} times), commits {len(self.h.commits)}, "
                    f"Metadata views {len(self.h.leaders)} over {len(epochs)} (partition, leader epoch)s")

    def all(self, *, idempotent: bool = True, group: bool = True, allow_final_errors: bool = False) -> None:
        self.no_acked_write_lost()
        self.offsets_dense()
        if idempotent:
            self.no_duplicates()
            self.produce_order_kept()
        if group:
            self.consumed_dense_and_monotonic()
            self.consumer_hw_monotonic()
            self.commits_monotonic()
            self.committed_to_the_end()
            self.consumed_everything_acked()
        self.one_leader_per_epoch()
        self.producer_errors(allow_final=allow_final_errors)
        self.no_unknown_server_error()


# --- load clients ------------------------------------------------------------------------------

class RdkafkaProducer:
    """librdkafka producer writing "<name>.<n>" round-robin over the partitions at about ``rate``
    records/s until stopped; every ack and error goes to the history."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History, name: str = "rdkafka",
                 rate: float = 300.0, acks: str = "all", idempotent: bool = True,
                 extra: dict[str, Any] | None = None) -> None:
        self.topic, self.partitions, self.history, self.name = topic, partitions, history, name
        self.interval = 1.0 / rate
        self.pids: set[int] = set()   # the producer ids it was given (from its statistics)
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
            "message.timeout.ms": 120000, "linger.ms": 5, "retry.backoff.ms": 100,
            "error_cb": self._on_error, "statistics.interval.ms": 1000, "stats_cb": self._on_stats,
            **(extra or {})})
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)

    def _on_stats(self, text: str) -> None:
        pid = json.loads(text).get("eos", {}).get("producer_id", -1)
        if pid >= 0:
            self.pids.add(pid)

    def _on_error(self, err: Any) -> None:
        self.history.add(ProduceError(self.name, err.name(), err.retriable() or not err.fatal(), False,
                                      time.monotonic(), err.str()))

    def _on_delivery(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        if err is not None:
            error = ProduceError(
                self.name, err.name(), err.retriable(), True, now, err.str(), msg.value(), _partition_of(msg)
            )
            self.history.add(error)
        else:
            self.history.add(Ack(self.name, msg.partition(), msg.offset(), msg.value(), now))

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = f"{self.name}.{self.sent}".encode()
            try:
                self.producer.produce(self.topic, value, partition=self.sent % self.partitions,
                                      on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            next_at += self.interval
            self.producer.poll(max(0.0, next_at - time.monotonic()))

    def start(self) -> RdkafkaProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(30)
        try:
            left = self.producer.flush(timeout)
        finally:
            # Destroy the client now: a failed test's traceback keeps this object alive for the rest
            # of the worker's session, and a live librdkafka client keeps reconnecting to the
            # cluster's addresses long after its processes and namespaces are gone.
            producer, self.producer = self.producer, _StoppedProducer()
            del producer
        assert left == 0, f"{self.name}: {left} records still undelivered after {timeout} s"


def _partition_of(msg: Any) -> int:
    """A librdkafka message's partition, -1 when it was never assigned one."""
    p = msg.partition()
    return -1 if p is None or p < 0 else int(p)


class _StoppedProducer:
    """Stands in for a stopped RdkafkaProducer's client: polling is a no-op, producing a mistake."""

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 0.0) -> int:
        return 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the producer was stopped")


def produce_batch(bootstrap: str, topic: str, partition: int, values: list[bytes], history: History,
                  client: str, acks: str = "all", timeout: float = 30.0) -> list[Ack]:
    """Produce ``values`` to one partition and wait for each answer; returns this batch's acks."""
    acked: list[Ack] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
                                         "message.timeout.ms": int(timeout * 1000), "linger.ms": 2})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            ack = Ack(client, msg.partition(), msg.offset(), msg.value(), time.monotonic())
            acked.append(ack)
            history.add(ack)
        else:
            now = time.monotonic()
            error = ProduceError(
                client, err.name(), err.retriable(), True, now, err.str(), msg.value(), _partition_of(msg)
            )
            history.add(error)

    for v in values:
        producer.produce(topic, v, partition=partition, on_delivery=on_delivery)
    producer.flush(timeout + 5)
    return acked


class JavaVerifiableProducer:
    """Kafka's VerifiableProducer (the Java client, acks=all, idempotent) at ``throughput`` records/s;
    values are "<prefix>.<n>" (the tool takes only a number as prefix). It prints a JSON line per ack
    (partition, offset) or failed send."""

    def __init__(self, bootstrap: str, topic: str, history: History, name: str = "java",
                 throughput: int = 200, acks: str = "-1", prefix: int = 2) -> None:
        self.history, self.name = history, name
        self._config = tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False)
        self._config.write("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\nretry.backoff.ms=100\n"
                           "delivery.timeout.ms=120000\nrequest.timeout.ms=10000\nmetadata.max.age.ms=5000\n")
        self._config.close()
        cmd = tool_command(VERIFIABLE_PRODUCER, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--acks", acks,
            "--throughput", str(throughput), "--value-prefix", str(prefix), "--command-config", self._config.name])
        # The tools' log4j (WARN) plus the producer ids it is given (INFO), and with
        # ODRADEK_FAULT_CLIENT_DEBUG its sequence/epoch bookkeeping (DEBUG).
        debug = bool(os.environ.get("ODRADEK_FAULT_CLIENT_DEBUG"))
        levels = {"org.apache.kafka.clients.producer.internals": "DEBUG" if debug else "INFO"}
        if debug:
            levels["org.apache.kafka.clients.producer.internals.RecordAccumulator"] = "INFO"
        self._log4j = tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False)
        self._log4j.write(LOG4J_TOOLS + log_levels(levels))
        self._log4j.close()
        default_log = log_config_option("")
        cmd = [log_config_option(self._log4j.name) if a.startswith(default_log) else a for a in cmd]
        # Its log (the client's WARNs: retries, errors) goes to a file: ``log_path``.
        self._log = tempfile.NamedTemporaryFile("w+", prefix=f"verifiable-{name}-", suffix=".log", delete=False)
        self.log_path = self._log.name
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        self.started = threading.Event()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, name=f"producer-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            try:
                event = json.loads(line)
            except ValueError:
                self.lines.append(line)
                continue
            name = event.get("name")
            if name == "producer_send_success":
                self.history.add(Ack(self.name, event["partition"], event["offset"], event["value"].encode(), now))
            elif name == "producer_send_error":
                # Its FailedSend names the record (topic, key, value) but not the partition.
                cls = str(event.get("exception", "")).rsplit(".", 1)[-1]
                value = None if event.get("value") is None else str(event["value"]).encode()
                message = str(event.get("message", ""))
                error = ProduceError(self.name, cls, cls in JAVA_RETRIABLE, True, now, message, value)
                self.history.add(error)
            elif name == "startup_complete":
                self.started.set()
            else:
                self.lines.append(line)

    def stop(self, timeout: float = 120.0) -> None:
        """SIGTERM: its shutdown hook closes the producer, which first delivers what it holds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired as exc:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"{self.name}: the VerifiableProducer did not finish within {timeout} s") from exc
        self._reader.join(10)

    def producer_ids(self) -> set[int]:
        """The producer ids InitProducerId gave it (its log's "ProducerId set to N")."""
        import re

        with open(self.log_path, errors="replace") as f:
            return {int(m) for m in re.findall(r"ProducerId set to (\d+) with epoch", f.read())}

    def out_of_order_retries(self) -> int:
        """Attempts answered OUT_OF_ORDER_SEQUENCE_NUMBER that the client retried (WARN lines): a
        batch that reached a new leader before the retries of the batches ahead of it, which then
        fill the gap, as with Kafka. One that never resolves also fails a delivery."""
        with open(self.log_path, errors="replace") as f:
            return sum(1 for line in f if "Error: OUT_OF_ORDER_SEQUENCE_NUMBER" in line)

    def unknown_server_errors(self) -> list[str]:
        """Lines of its log naming UNKNOWN_SERVER_ERROR: the client logs a failed attempt it retries
        (a WARN with the error's name) that never reaches a producer_send_error line."""
        with open(self.log_path, errors="replace") as f:
            return [line.strip() for line in f if any(t in line for t in UNKNOWN_SERVER_ERROR_TEXTS)]

    def remove_files(self) -> None:
        """Its config and log (kept after a failure to read)."""
        for path in (self._config.name, self._log4j.name, self.log_path):
            try:
                os.unlink(path)
            except OSError:
                pass

    def stderr_text(self, limit: int = 20000) -> str:
        with open(self.log_path, errors="replace") as f:
            text = f.read()
        return f"({self.log_path})\n" + text[-limit:]


class GroupConsumer:
    """``members`` confluent-kafka consumers of one group subscribed to ``topic``, each in its thread,
    committing synchronously every ``commit_every`` s; every record, HW and commit goes to the history,
    and every error a member sees (error callback, fetch, commit) as a ClientError."""

    def __init__(self, bootstrap: str, topic: str, history: History, group: str = "faults", members: int = 2,
                 commit_every: float = 0.5, extra: dict[str, Any] | None = None) -> None:
        self.bootstrap, self.topic, self.history, self.group = bootstrap, topic, history, group
        self.commit_every = commit_every
        self.extra = dict(extra or {})   # more librdkafka settings for every member
        self._stop = threading.Event()
        self.assigned: dict[str, set[int]] = {}
        self.commit_failures: list[str] = []
        self._threads = [threading.Thread(target=self._run, args=(f"{group}-{i}",), daemon=True)
                         for i in range(members)]

    def start(self) -> GroupConsumer:
        for t in self._threads:
            t.start()
        return self

    def _run(self, member: str) -> None:
        session = 0

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            nonlocal session
            session += 1
            self.assigned[member] = {tp.partition for tp in partitions}

        def on_revoke(consumer: Any, partitions: list[Any]) -> None:
            self._commit(consumer, member)
            self.assigned[member] = set()

        def on_error(err: Any) -> None:
            self.history.add(ClientError(member, err.name(), time.monotonic(), err.str()))

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": member,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000, "topic.metadata.refresh.interval.ms": 2000,
            **self.extra, "error_cb": on_error}
        debug_dir = os.environ.get("ODRADEK_FAULT_CLIENT_DEBUG")   # librdkafka's own trace, to diagnose
        if debug_dir:
            import logging

            logger = logging.getLogger(f"rdkafka.{member}")
            logger.addHandler(logging.FileHandler(os.path.join(debug_dir, f"{member}.log")))
            logger.setLevel(logging.DEBUG)
            config.update({"debug": "consumer,fetch,topic", "logger": logger})
        consumer = confluent_kafka.Consumer(config)
        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        last_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                msgs: list[Any] = consumer.consume(200, 0.2)
                hws: dict[int, int] = {}
                for msg in msgs:
                    if msg.error() is not None:
                        err = msg.error()
                        self.history.add(ClientError(member, err.name(), time.monotonic(), err.str()))
                        continue
                    p = msg.partition()
                    if p not in hws:
                        hws[p] = consumer.get_watermark_offsets(
                            confluent_kafka.TopicPartition(self.topic, p), cached=True)[1]
                    self.history.add(Consumed(member, session, p, msg.offset(), msg.value(), hws[p],
                                              time.monotonic(), -1 if msg.leader_epoch() is None else msg.leader_epoch()))
                if time.monotonic() - last_commit >= self.commit_every:
                    self._commit(consumer, member)
                    last_commit = time.monotonic()
            self._commit(consumer, member)
        finally:
            consumer.close()

    def _commit(self, consumer: Any, member: str) -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            if err.code() != confluent_kafka.KafkaError._NO_OFFSET:
                self.commit_failures.append(str(exc))
                self.history.add(ClientError(member, err.name(), time.monotonic(), f"commit: {err.str()}"))
            return
        now = time.monotonic()
        for tp in done or []:
            if tp.error is not None:
                self.history.add(ClientError(member, tp.error.name(), now,
                                             f"commit of partition {tp.partition}: {tp.error.str()}"))
            elif tp.offset >= 0:
                self.history.add(Commit(member, tp.partition, tp.offset, now))

    def drain(self, ends: dict[int, int], timeout: float = 60.0) -> bool:
        """Wait until the group consumed every offset below ``ends`` (partition -> end offset)."""
        def done() -> bool:
            with self.history.lock:
                top: dict[int, int] = {}
                for c in self.history.consumed:
                    top[c.partition] = max(top.get(c.partition, -1), c.offset)
            return all(top.get(p, -1) + 1 >= end for p, end in ends.items())
        return _wait(done, timeout)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


class MetadataPoller:
    """Asks every broker (except ``skip``: paused ones) for ``topic``'s Metadata every ``interval`` s
    and records each partition's leader, leader epoch and ISR as that broker sees it."""

    def __init__(self, cluster: ClusterProcesses, topic: str, history: History, interval: float = 0.25) -> None:
        self.cluster, self.topic, self.history, self.interval = cluster, topic, history, interval
        self.skip: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metadata-poller", daemon=True)

    def start(self) -> MetadataPoller:
        self._thread.start()
        return self

    def poll_once(self, node: int) -> None:
        md = self.cluster.request(node, "Metadata", 12, {"topics": [{"name": self.topic, "topic_id": None}]},
                                  timeout=1.0)
        now = time.monotonic()
        for topic in md["topics"]:
            if topic["error_code"]:
                self.history.add(ClientError(f"metadata via {node}", _error_name(topic["error_code"]), now,
                                             f"topic {topic['name']}"))
            for p in topic["partitions"]:
                self.history.add(LeaderSeen(p["partition_index"], p["leader_id"], p["leader_epoch"],
                                            tuple(sorted(p["isr_nodes"])), node, p["error_code"], now))

    def _run(self) -> None:
        while not self._stop.is_set():
            for node in self.cluster.live_ids():
                if node in self.skip or self._stop.is_set():
                    continue
                try:
                    self.poll_once(node)
                except (OSError, ConnectionError, ValueError):
                    pass
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _error_name(code: int) -> str:
    """Kafka's name of an error code (its number if unknown here)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class FaultLoad:
    """One scenario's load and observers over ``topic``: the librdkafka producer (250/s), Kafka's Java
    VerifiableProducer (150/s; ``java=False`` leaves it out), a 2-member consumer group committing as
    it reads (every ``commit_every`` s), and a Metadata poller, every event in one History. ``finish``
    stops the producers, lets the group read to the end, reads the topic back and returns the Checker;
    ``check`` runs every check plus "each client its own producer id" and "no broker logged an
    UNKNOWN_SERVER_ERROR", printing the Java producer's log on a failure."""

    def __init__(self, c: ClusterProcesses, topic: str, partitions: int, *, java: bool = True,
                 rdkafka_extra: dict[str, Any] | None = None, commit_every: float = 0.5) -> None:
        self.c, self.topic, self.partitions = c, topic, partitions
        self.history = History()
        self.poller = MetadataPoller(c, topic, self.history).start()
        self.group = GroupConsumer(c.bootstrap, topic, self.history, commit_every=commit_every).start()
        self.rdkafka = RdkafkaProducer(c.bootstrap, topic, partitions, self.history, rate=250,
                                       extra=rdkafka_extra).start()
        self.java = JavaVerifiableProducer(c.bootstrap, topic, self.history, throughput=150) if java else None
        self.failovers: list[Failover] = []
        self.java_log = ""
        self._stopped = False

    def clients(self) -> list[str]:
        return ["rdkafka"] + (["java"] if self.java else [])

    def acks_since(self, when: float, partitions: Iterable[int], client: str | None = None) -> int:
        wanted = set(partitions)
        with self.history.lock:
            return sum(1 for a in self.history.acks if a.at >= when and a.partition in wanted
                       and (client is None or a.client == client))

    def errors(self) -> list[Any]:
        with self.history.lock:
            return self.history.errors[-5:]

    def wait_acks(self, count: int, since: float = 0.0, partitions: list[int] | None = None,
                  timeout: float = 60.0) -> None:
        wanted = range(self.partitions) if partitions is None else partitions
        assert self.c.wait_until(lambda: self.acks_since(since, wanted) >= count, timeout), (
            f"fewer than {count} acks on partitions {sorted(wanted)} within {timeout} s; errors "
            f"{self.errors()}; java: {self.java.stderr_text() if self.java else ''}\n{self.c.logs()}")

    def wait_both_clients(self, count: int = 200) -> None:
        """Until both producers are acked (the JVM needs a few seconds to start)."""
        def both() -> bool:
            assert self.java is None or self.java.proc.poll() is None, self.java.stderr_text()
            return all(self.history.acked(name) >= count for name in self.clients())
        assert self.c.wait_until(both, 90), (
            {n: self.history.acked(n) for n in self.clients()}, self.errors(),
            self.java.stderr_text() if self.java else "")

    def wait_every_partition(self, timeout: float = 90.0) -> None:
        """Until each producer has been acknowledged on every partition, so every replica holds its
        producer state. A leader paused while a producer's *first* batches to a partition are in
        flight to it (they hang until request.timeout.ms) lets the Java producer send its next
        batches to the new leader, which has no state for that producer and, as Kafka 4.4 does
        (KIP-360: any first sequence from an unknown producer is accepted), appends them; the first
        batches then get OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms. That race is
        Kafka's own (KAFKA-15591, KAFKA-19880; docs/replication-faults.md), not the failover
        under test."""
        def everywhere() -> bool:
            return all(self.history.acked(name, [p]) > 0 for name in self.clients() for p in range(self.partitions))
        assert self.c.wait_until(everywhere, timeout), {
            name: {p: self.history.acked(name, [p]) for p in range(self.partitions)} for name in self.clients()}

    def note(self, f: Failover) -> None:
        self.failovers.append(f)
        print(f.line(), flush=True)

    def stop_producers(self) -> None:
        if not self._stopped:
            self._stopped = True
            try:
                self.rdkafka.stop()
            finally:
                if self.java:
                    self.java.stop()

    def producer_ids(self) -> dict[str, set[int]]:
        """Each producer's ids from InitProducerId: no two clients may ever share one."""
        return {"rdkafka": self.rdkafka.pids, **({"java": self.java.producer_ids()} if self.java else {})}

    def finish(self, read_from: str | None = None) -> Checker:
        """``read_from``: the bootstrap to read the topic back from (default the cluster's)."""
        self.stop_producers()
        read = read_back(read_from or self.c.bootstrap, self.topic, self.partitions)
        ends = {p: (recs[-1][0] + 1 if recs else 0) for p, recs in read.items()}
        assert self.group.drain(ends, 60), "the consumer group did not read up to the end within 60 s"
        self.close()
        if self.java:
            now = time.monotonic()
            for line in self.java.unknown_server_errors():
                self.history.add(ClientError(self.java.name, "UNKNOWN_SERVER_ERROR", now, line))
        checker = Checker(self.history, read)
        print(f"\n{checker.summary()}", flush=True)
        self.java_log = self.java.stderr_text() if self.java else ""
        return checker

    def check(self, checker: Checker) -> None:
        try:
            ids = self.producer_ids()
            print(f"producer ids: {ids}", flush=True)
            if self.java:
                print(f"the Java producer's attempts answered OUT_OF_ORDER_SEQUENCE_NUMBER and retried: "
                      f"{self.java.out_of_order_retries()}", flush=True)
            shared = set.intersection(*ids.values()) if len(ids) > 1 else set()
            assert not shared, f"InitProducerId gave the same producer id to two clients: {ids}"
            checker.all()
            assert_no_unknown_server_error_logged(self.c)
        except AssertionError:
            print(f"--- the Java producer's log ---\n{self.java_log}", flush=True)
            raise
        if self.java:
            self.java.remove_files()

    def close(self) -> None:
        try:
            self.stop_producers()
        finally:
            self.group.stop()
            self.poller.stop()
