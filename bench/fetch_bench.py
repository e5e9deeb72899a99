"""Fetch throughput with sendfile (zero-copy) against copying the record bytes through Python.

Starts the real daemon twice on loopback (``odradek.fetch.sendfile`` true and false), fills a
topic once per run with raw Produce requests, then has several consumer processes fetch the
whole topic from offset 0 repeatedly with large ``max_bytes``, counting record bytes received.
Prints MB/s per mode (median of the runs) and their ratio.

    python bench/fetch_bench.py [--mb 256] [--partitions 8] [--consumers 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odradek.protocol.records import Record, encode_batch  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.wire import WireClient  # noqa: E402

TOPIC = "fetch-bench"


def fill(host: str, port: int, mb: int, partitions: int) -> None:
    value = b"v" * 1024
    batch = encode_batch([Record(timestamp=1, value=value) for _ in range(256)])  # ~256 KiB
    per_partition = mb * 1024 * 1024 // len(batch) // partitions
    with WireClient(host, port) as c:
        c.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 1}],
                          "timeout_ms": 5000})
        for _ in range(per_partition):
            c.request(0, 9, {"acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}]})


def consume(args: tuple[str, int, int, float]) -> int:
    """Fetch every partition from offset 0 (8 MiB each) until the time is up; page cache stays hot."""
    host, port, partitions, seconds = args
    received = 0
    deadline = time.monotonic() + seconds
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 64 << 20, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 8 << 20} for p in range(partitions)]}]}
    with WireClient(host, port) as c:
        while time.monotonic() < deadline:
            resp = c.request(1, 12, body)
            received += sum(len(part["records"] or b"") for part in resp["responses"][0]["partitions"])
    return received


def run(sendfile: bool, mb: int, partitions: int, consumers: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), overrides={"odradek.fetch.sendfile": str(sendfile).lower(),
                                                     "num.network.threads": "1"}).start()
        try:
            fill(broker.host, broker.port, mb, partitions)
            with multiprocessing.Pool(consumers) as pool:
                t0 = time.monotonic()
                total = sum(pool.map(consume, [(broker.host, broker.port, partitions, seconds)] * consumers))
                elapsed = time.monotonic() - t0
            return total / elapsed / 1e6
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.runs):
        for mode in (True, False):
            results[mode].append(run(mode, args.mb, args.partitions, args.consumers, args.seconds))
    zc, cp = statistics.median(results[True]), statistics.median(results[False])
    print(f"| mode | fetch MB/s (median of {args.runs}) |\n|---|---|")
    print(f"| sendfile (zero-copy) | {zc:.0f} |\n| copy through Python | {cp:.0f} |")
    print(f"\nsendfile / copy = {zc / cp:.2f}x  ({args.mb} MB in {args.partitions} partitions, "
          f"{args.consumers} consumer process(es), {args.seconds}s per run)")


if __name__ == "__main__":
    main()
