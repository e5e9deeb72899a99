"""Throughput of three share consumers (Kafka 4.4's KafkaShareConsumer, implicit acknowledgement) on
one two-partition topic, against Kafka 4.4 and Odradek on this machine (issue 30 step 5).

Per round and broker (alternated, a fresh broker each time, both at their defaults): three consumers
join one share group; probes are written until both partitions delivered one (share.auto.offset.reset
is "latest", so a share-partition starts when the first ShareFetch reaches it); then RECORDS records
of VALUE_BYTES are written as fast as librdkafka goes, and the figure is the records consumed per
second between the first and the last poll that returned some, summed over the three consumers.
The producer's own duration is printed beside it: when it is as long as the consumption, the
producer, not the consumers, bounded the figure.

    python -m bench.share_consumer_bench [--records 200000] [--rounds 2] [--kafka/--no-kafka]
        [--repo CHECKOUT] [--baseline CHECKOUT]

``--baseline`` adds a third broker per round, Odradek from another checkout (e.g. ``git archive``
of the commit a change is measured against), alternated with the others; ``--repo`` measures
another checkout than this one as "odradek".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.servers import KafkaTarget, OdradekTarget, Target
from tests.support.share_consumer import ShareConsumer

VALUE_BYTES = 100
PARTITIONS = 2
CONSUMERS = 3


def one_round(target: Target, records: int) -> tuple[float, float]:
    """(records/s consumed, producer seconds) for one fresh target."""
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic("share-bench", PARTITIONS, 1)])["share-bench"].result(30)
    consumers = [ShareConsumer(target.bootstrap, "share-bench", "share-bench", "implicit", "count", f"c{i}")
                 for i in range(CONSUMERS)]
    try:
        for c in consumers:
            c.wait_subscribed()
        producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 5, "batch.size": 262144,
                             "queue.buffering.max.messages": 1_000_000})
        deadline = time.monotonic() + 120
        while {p for c in consumers for p in c.partitions} != set(range(PARTITIONS)):
            assert time.monotonic() < deadline, "share-partitions never delivered a probe"
            for p in range(PARTITIONS):
                producer.produce("share-bench", b"probe", partition=p)
            producer.flush(30)
            time.sleep(0.3)
        time.sleep(1.0)  # the probes delivered (those written before a share-partition started never are)
        base = sum(c.count for c in consumers)
        value = b"x" * VALUE_BYTES
        t0 = time.monotonic()
        for i in range(records):
            while True:
                try:
                    producer.produce("share-bench", value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)
        produced_s = time.monotonic() - t0
        deadline = time.monotonic() + 600
        while sum(c.count for c in consumers) < base + records:
            assert time.monotonic() < deadline, [c.count for c in consumers]
            time.sleep(0.1)
        time.sleep(0.5)
        for c in consumers:
            c.stop()
        first = min(c.first_ms for c in consumers if c.count)
        # The first poll after the probes: probes came before t0, so the first real batch's poll
        # time is at or after the producer started; measure from the producer's start instead of a
        # probe's poll.
        last = max(c.last_ms for c in consumers)
        start_ms = time.time() * 1000 - (time.monotonic() - t0) * 1000
        span = (last - max(first, start_ms)) / 1000
        return records / span, produced_s
    finally:
        for c in consumers:
            if c.proc.poll() is None:
                c.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kafka", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--repo", type=Path, default=None, help="the checkout measured as odradek")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout, measured as baseline")
    args = ap.parse_args()
    names = (["kafka"] if args.kafka else []) + (["baseline"] if args.baseline else []) + ["odradek"]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="share-bench-") as tmp:
        for r in range(args.rounds):
            for name in names:
                target: Target
                if name == "kafka":
                    target = KafkaTarget(Path(tmp) / f"k{r}")
                elif name == "baseline":
                    target = OdradekTarget(Path(tmp) / f"b{r}", repo=args.baseline, name="baseline")
                else:
                    target = OdradekTarget(Path(tmp) / f"o{r}", **({"repo": args.repo} if args.repo else {}))
                target.start()
                try:
                    rate, produced = one_round(target, args.records)
                finally:
                    target.stop()
                results[name].append((rate, produced))
                print(f"round {r} {name}: {rate:,.0f} records/s consumed by {CONSUMERS} share consumers "
                      f"({args.records} x {VALUE_BYTES} B; the producer took {produced:.2f} s)", flush=True)
    for name, rs in results.items():
        print(f"{name}: median {statistics.median(r for r, _ in rs):,.0f} records/s over {len(rs)} rounds")


if __name__ == "__main__":
    main()
