"""A broker-bound load for ``make bench``: N producer and N consumer processes on librdkafka
(confluent-kafka), fast enough that the broker, not the client, is the bottleneck.

Three phases, each run by ``bench/compare.py`` against one broker at a time:

- ``produce_phase``: N processes write ``records`` records of ``size`` bytes as fast as they can
  (acks=1, linger.ms=5, batch.size=64 KiB, no compression, librdkafka's sticky partitioner);
- ``consume_phase``: N processes read the topic back from the beginning, each assigned every N-th
  partition (``assign``, no group join), until they reach the high watermarks taken before the start;
- ``rate_phase``: the same producers, each held to ``rate`` bytes/s / N, for ``seconds``; every record's
  delivery latency (librdkafka's ``Message.latency()``: produce() call to acknowledgement) is kept.

Each worker builds its client and connects (metadata, watermarks) before a shared start event, so
connecting and process start-up are outside the measured time. The phase's wall time is from the
first worker's start to the last worker's end (CLOCK_MONOTONIC is system-wide on Linux, so the
workers' clocks agree); the broker's CPU time is read by the caller around the phase. Each
worker also reports its own process's CPU time over the same span (Python and every librdkafka
thread): on a machine the clients share with the broker, the clients' CPU per GB bounds what any
broker can reach there.

MB here is 2**20 bytes (MiB), as Kafka's perf tools count it; only record values are counted.

Who may call it: the harness's main thread (it spawns and joins the workers).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MB = 2**20

PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "1",
    "linger.ms": 5,
    "batch.size": 64 * 1024,
    "compression.type": "none",
    "log_level": 3,
}

_EVENTS = ("page_view", "click", "add_to_cart", "checkout", "login", "logout", "search")


def compressible_value(i: int, size: int) -> bytes:
    """An event record of ``size`` bytes: JSON fields with varying numbers and ids (64 KiB of 1 KiB ones
    take about 15 KiB with lz4 or snappy, 8.5 KiB with gzip, 8 KiB with zstd)."""
    rnd = int.from_bytes(os.urandom(8), "big")
    text = (f'{{"event":"{_EVENTS[rnd % 7]}","user":"user-{rnd % 100_000}","session":"{rnd:016x}",'
            f'"seq":{i},"price":{rnd % 10_000 / 100},"items":[')
    while len(text) < size:
        rnd = rnd * 6364136223846793005 + 1442695040888963407 & (2**64 - 1)
        text += f'{{"sku":"SKU-{rnd % 5000:05d}","qty":{rnd % 5 + 1}}},'
    return text.encode()[:size]


@dataclass
class WorkerResult:
    """What one worker process moved, and when (monotonic seconds)."""

    records: int
    bytes: int
    start: float
    end: float
    latencies: list[float] = field(default_factory=list)  # seconds, rate phase only
    error: str = ""
    # Rate phase: librdkafka's own split of a record's wait, from its statistics every second, as
    # (int_latency p99, rtt p99) in ms per interval: time queued in the client before its request
    # was sent, and the broker round trip of the Produce requests.
    client_split: list[tuple[float, float]] = field(default_factory=list)
    cpu_s: float = 0.0  # the worker process's CPU time (user + system, all threads) from start to end


@dataclass
class PhaseResult:
    """The workers of one phase taken together."""

    records: int
    bytes: int
    wall_s: float
    latencies: list[float]
    errors: list[str]
    client_split: list[tuple[float, float]] = field(default_factory=list)  # every worker's, see WorkerResult
    clients_cpu_s: float = 0.0  # all workers' CPU time over their measured spans

    @property
    def mb_per_sec(self) -> float:
        return self.bytes / MB / self.wall_s if self.wall_s > 0 else float("nan")


def aggregate(results: list[WorkerResult]) -> PhaseResult:
    """One figure for a phase: the bytes of all workers over the span from the first start to the
    last end (not the sum of each worker's rate, which would overstate a staggered start)."""
    if not results:
        return PhaseResult(0, 0, 0.0, [], ["no worker reported"])
    wall = max(r.end for r in results) - min(r.start for r in results)
    latencies = [x for r in results for x in r.latencies]
    return PhaseResult(sum(r.records for r in results), sum(r.bytes for r in results), wall, latencies,
                       [r.error for r in results if r.error], [x for r in results for x in r.client_split],
                       sum(r.cpu_s for r in results))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def records_due(rate_records_per_s: float, elapsed_s: float, sent: int, total: int) -> int:
    """How many records a rate-limited producer may send now: the schedule allows
    ``rate * elapsed`` by this time (at least one, so the first record goes at once), never more
    than ``total`` in all."""
    allowed = min(total, int(rate_records_per_s * elapsed_s) + 1)
    return max(0, allowed - sent)


# librdkafka's poll takes whole milliseconds (confluent-kafka truncates the float): a shorter wait is
# a poll(0), and a loop of those spins a core per producer. Waits are at least this long.
MIN_POLL_S = 0.001


def seconds_until_due(rate_records_per_s: float, elapsed_s: float, sent: int) -> float:
    """How long a rate-limited producer that has sent ``sent`` records may wait for the next one
    to be due (see records_due), at least MIN_POLL_S and at most 10 ms (delivery reports are served
    while it waits)."""
    return min(0.01, max(MIN_POLL_S, sent / rate_records_per_s - elapsed_s))


def split(total: int, parts: int) -> list[int]:
    """``total`` records over ``parts`` workers, the remainder going to the first ones."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# -- workers (run in spawned processes: librdkafka's threads do not survive a fork) ---------------

def _produce_worker(bootstrap: str, topic: str, records: int, size: int, rate: float | None,
                    config: dict[str, Any] | None, compressible: bool, ready: Any, go: Any, out: Any) -> None:
    from confluent_kafka import KafkaException, Producer

    latencies = array("d")
    errors: list[str] = []
    split_ms: list[tuple[float, float]] = []

    def stats(raw: str) -> None:
        for b in json.loads(raw).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt", 0):
                split_ms.append((b["int_latency"]["p99"] / 1000, b["rtt"]["p99"] / 1000))

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            if len(errors) < 5:
                errors.append(str(err))
        elif rate is not None:
            latencies.append(msg.latency())

    try:
        extra = {"statistics.interval.ms": 1000, "stats_cb": stats} if rate is not None else {}
        producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **(config or {}), **extra})
        producer.list_topics(topic, timeout=30)  # connected, metadata known: outside the clock
    except KafkaException as exc:
        ready.put(None)
        out.put(WorkerResult(0, 0, 0.0, 0.0, error=str(exc)))
        return
    if compressible:  # JSON-like event records, 256 of them in turn (what a codec is chosen for)
        values = [compressible_value(i, size) for i in range(256)]
    else:
        values = [os.urandom(size)]
    ready.put(None)
    go.wait()
    start, cpu0 = time.monotonic(), time.process_time()
    sent = 0
    per_s = None if rate is None else rate / size  # records per second
    while sent < records:
        elapsed = time.monotonic() - start
        n = records - sent if per_s is None else records_due(per_s, elapsed, sent, records)
        if per_s is not None and n == 0:
            # Serves delivery reports while waiting for the schedule. (This was poll(0.0005), which
            # librdkafka gets as poll(0): the three rate-limited producers spun 1.5 of the
            # machine's 2 cores, and the half-rate latency measured that.)
            producer.poll(seconds_until_due(per_s, elapsed, sent))
            continue
        for _ in range(n):
            try:
                producer.produce(topic, values[sent % len(values)], on_delivery=delivered)
            except BufferError:  # the local queue is full: let librdkafka drain it
                producer.poll(0.01)
                break
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)
    producer.flush(120)
    end, cpu_s = time.monotonic(), time.process_time() - cpu0
    out.put(WorkerResult(sent, sent * size, start, end, list(latencies), "; ".join(errors), split_ms, cpu_s))


def _consume_worker(bootstrap: str, topic: str, partitions: list[int], ready: Any, go: Any, out: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"native-load-{os.getpid()}",
                             "enable.auto.commit": False, "log_level": 3})
        # What to read: up to the high watermark of each assigned partition, taken before the start.
        remaining = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                     for p in partitions}
    except KafkaException as exc:
        ready.put(None)
        out.put(WorkerResult(0, 0, 0.0, 0.0, error=str(exc)))
        return
    remaining = {p: high for p, high in remaining.items() if high > 0}
    ready.put(None)
    go.wait()
    start, cpu0 = time.monotonic(), time.process_time()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
    records = nbytes = 0
    error = ""
    deadline = start + 600
    while remaining and time.monotonic() < deadline:
        # consume() returns when it has num_messages or at the timeout: a short timeout, so the
        # last, partial batch does not add up to a second to the phase.
        batch = consumer.consume(num_messages=2000, timeout=0.02)
        # Per message: bytes and the last offset seen; the end check once per partition and batch
        # (the less Python per record, the less the client is the bottleneck).
        last: dict[int, int] = {}
        for msg in batch:
            value, partition, offset = msg.value(), msg.partition(), msg.offset()
            if msg.error() is not None or value is None or partition is None or offset is None:
                error = str(msg.error())
                continue
            nbytes += len(value)
            records += 1
            last[partition] = offset
        for p, offset in last.items():
            if p in remaining and offset + 1 >= remaining[p]:
                del remaining[p]
    end, cpu_s = time.monotonic(), time.process_time() - cpu0
    if remaining:
        error = error or f"partitions {sorted(remaining)} not read to the end within 600 s"
    consumer.close()
    out.put(WorkerResult(records, nbytes, start, end, error=error, cpu_s=cpu_s))


# -- phases ---------------------------------------------------------------------------------------

class Probe:
    """The caller's measurement around a phase (the broker's CPU time): ``start`` just before the
    workers are released, ``end`` when the last has reported."""

    def start(self) -> None:
        pass

    def end(self) -> None:
        pass


def _run_workers(target: Callable[..., None], args_per_worker: list[tuple], around: Probe | None) -> list[WorkerResult]:
    """Start the workers, wait until every one is connected, release them together, collect.
    ``around`` is called just before the release and as soon as the last result is in (before the
    workers close their clients and exit), so the caller's probe covers the phase only."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(*a, ready, go, out), daemon=True) for a in args_per_worker]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    if around is not None:
        around.start()
    go.set()
    results = [out.get(timeout=900) for _ in procs]
    if around is not None:
        around.end()
    for p in procs:
        p.join(30)
    return results


def produce_phase(bootstrap: str, topic: str, records: int, size: int, processes: int,
                  probe: Probe | None = None, config: dict[str, Any] | None = None,
                  compressible: bool = False) -> PhaseResult:
    """``config``: producer settings over PRODUCER_CONFIG (e.g. compression.type); ``compressible``:
    JSON-like values instead of random bytes."""
    args = [(bootstrap, topic, n, size, None, config, compressible) for n in split(records, processes)]
    return aggregate(_run_workers(_produce_worker, args, probe))


def consume_phase(bootstrap: str, topic: str, partitions: int, processes: int,
                  probe: Probe | None = None) -> PhaseResult:
    args = [(bootstrap, topic, list(range(i, partitions, processes))) for i in range(processes)]
    return aggregate(_run_workers(_consume_worker, args, probe))


def rate_phase(bootstrap: str, topic: str, rate_bytes_per_s: float, seconds: float, size: int, processes: int,
               probe: Probe | None = None) -> PhaseResult:
    """Producers held to ``rate_bytes_per_s`` in all (split evenly) for about ``seconds``."""
    per_worker = rate_bytes_per_s / processes
    records = max(1, int(per_worker * seconds / size))
    args = [(bootstrap, topic, records, size, per_worker, None, False) for _ in range(processes)]
    return aggregate(_run_workers(_produce_worker, args, probe))
