"""What TLS costs: produce and consume over PLAINTEXT and SSL listeners of the same broker.

Starts the real daemon once with both listeners (test certificates from tests/support/certs.py,
TLS 1.3, server authentication only), then per protocol and run:

- produce: one confluent-kafka producer sends ``--mb`` MiB of ``--record-kib`` KiB values (acks=1, lz4 off,
  linger 5 ms) to a fresh topic; MB/s from first send to flush;
- consume: one confluent-kafka consumer (assign, from offset 0) reads a pre-filled topic of
  ``--mb`` MiB; MB/s from assign to the last record.

Broker CPU seconds (user + system, /proc/<pid>/stat) are sampled around each step and reported
per GB moved. On PLAINTEXT the consume path is sendfile (zero-copy); on SSL every fetched byte is
read from the segment and encrypted by OpenSSL in the broker process.

    python bench/tls_bench.py [--mb 256] [--runs 3] [--record-kib 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.support.certs import TestPki  # noqa: E402

VALUE = b"x" * 1024  # replaced by --record-kib


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, conf: dict[str, str], topic: str, mb: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": "5", "batch.size": "1000000",
                  "queue.buffering.max.kbytes": "1048576", **conf})
    n = mb * 1024 * 1024 // len(VALUE)
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.monotonic() - t0


def consume(bootstrap: str, conf: dict[str, str], topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": "false", "fetch.max.bytes": str(64 << 20),
                  "max.partition.fetch.bytes": str(16 << 20), **conf})
    t0 = time.monotonic()
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    while got < count:
        msgs = c.consume(10000, 5.0)
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.monotonic() - t0
    c.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--record-kib", type=int, default=1, help="value size of each record")
    args = ap.parse_args()
    global VALUE
    VALUE = b"x" * (1024 * args.record_kib)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-tls-bench-"))
    pki = TestPki(tmp / "pki")
    server = pki.server()
    plain, tls = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}"
    broker = BrokerProcess(tmp / "broker", port=plain, overrides={
        "listeners": listeners, "advertised.listeners": listeners, **server.broker_props()}).start()
    pid = broker.proc.pid  # type: ignore[union-attr]
    modes = {
        "PLAINTEXT": (f"127.0.0.1:{plain}", {}),
        "SSL": (f"127.0.0.1:{tls}", {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}),
    }
    results: dict[str, dict[str, list[tuple[float, float]]]] = {m: {"produce": [], "consume": []} for m in modes}
    try:
        filled = f"bench-fill-{uuid.uuid4().hex[:6]}"
        produce(modes["PLAINTEXT"][0], {}, filled, args.mb)
        for _ in range(args.runs):
            for mode, (bootstrap, conf) in modes.items():
                topic = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
                c0 = cpu_seconds(pid)
                secs = produce(bootstrap, conf, topic, args.mb)
                results[mode]["produce"].append((args.mb / secs, (cpu_seconds(pid) - c0) * 1024 / args.mb))
                c0 = cpu_seconds(pid)
                secs = consume(bootstrap, conf, filled, args.mb * 1024 * 1024 // len(VALUE))
                results[mode]["consume"].append((args.mb / secs, (cpu_seconds(pid) - c0) * 1024 / args.mb))
    finally:
        broker.stop()
    print(f"{args.mb} MiB of {args.record_kib} KiB records, {args.runs} runs, medians")
    print(f"{'':10} {'produce MB/s':>13} {'CPU-s/GB':>9} {'consume MB/s':>13} {'CPU-s/GB':>9}")
    for mode in modes:
        p = results[mode]["produce"]
        c = results[mode]["consume"]
        print(f"{mode:10} {statistics.median(x for x, _ in p):13.0f} {statistics.median(y for _, y in p):9.2f} "
              f"{statistics.median(x for x, _ in c):13.0f} {statistics.median(y for _, y in c):9.2f}")


if __name__ == "__main__":
    main()
