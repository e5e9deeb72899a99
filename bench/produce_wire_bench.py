"""Broker CPU per Produce request over real sockets, split by thread (issue 18's budget).

Starts one Odradek broker process from this checkout, creates a 6-partition topic, then a single
client (raw sockets, pre-built Produce v9 frames: one partition, a 64 KiB batch of 1 KiB records,
acks=1, like librdkafka's requests under the saturate load) keeps ``--in-flight`` requests
outstanding on each of ``--connections`` connections. The client's own cost is one send and one
small receive per request, so the broker is what is measured: its CPU time per request, for the
handler thread (the main thread: decode, handler, append, encode) and for the other threads (the
network threads: socket reads, framing, the hand-offs, response writes; the IO pool), user and
kernel time apart, from /proc/<pid>/task/*/stat.

    python bench/produce_wire_bench.py [--requests 6000] [--connections 3] [--in-flight 5] [--rounds 3]
                                       [--override num.network.threads=1]
                                       [--codec lz4 --compressible --topic-config compression.type=zstd]

The same batch bytes are sent again and again (the broker does not deduplicate batches without a
producer id), so the client spends no time building them.

Broker-side recompression (a topic whose compression.type is not the batches' codec): ``--codec``
compresses the batches, ``--compressible`` fills them with JSON-like event records instead of random
bytes, ``--topic-config`` sets the topic's configs. The rebuild runs on the IO pool, so its CPU time
is in "other threads". "CPU per GB" is the broker's CPU seconds per GiB of record values appended.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.produce_path_bench import make_batch, produce_frame  # noqa: E402
from odradek.protocol.batch_header import parse_header  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def records_count(batch: bytes) -> int:
    return parse_header(batch).records_count


def thread_times(pid: int) -> dict[int, tuple[float, float]]:
    """tid -> (user s, system s) for every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) / TICK, int(fields[12]) / TICK)
        except (OSError, IndexError, ValueError):
            pass
    return out


def drive(port: int, frames: list[bytes], connections: int, in_flight: int) -> float:
    """Send every frame (spread over the connections), wait for every response; returns seconds."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    sel = selectors.DefaultSelector()
    todo = list(reversed(frames))
    pending = {s: 0 for s in socks}
    bufs = {s: bytearray() for s in socks}
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    done, total = 0, len(frames)
    t0 = time.perf_counter()

    def top_up(s: socket.socket) -> None:
        nonlocal todo
        while todo and pending[s] < in_flight:
            s.setblocking(True)
            s.sendall(todo.pop())
            s.setblocking(False)
            pending[s] += 1

    for s in socks:
        top_up(s)
    while done < total:
        for key, _ in sel.select(timeout=10):
            s = key.fileobj  # type: ignore[assignment]
            data = s.recv(1 << 16)  # type: ignore[union-attr]
            if not data:
                raise RuntimeError("broker closed a connection")
            buf = bufs[s]  # type: ignore[index]
            buf += data
            while len(buf) >= 4 and len(buf) - 4 >= struct.unpack_from(">i", buf)[0]:
                del buf[: 4 + struct.unpack_from(">i", buf)[0]]
                pending[s] -= 1  # type: ignore[index]
                done += 1
            top_up(s)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - t0
    for s in socks:
        s.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--connections", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-kib", type=int, default=64)
    ap.add_argument("--override", action="append", default=[], help="broker property key=value")
    ap.add_argument("--codec", default="none", choices=list(CODECS), help="the batches' compression")
    ap.add_argument("--compressible", action="store_true", help="JSON-like records instead of random bytes")
    ap.add_argument("--topic-config", action="append", default=[], help="topic config key=value")
    args = ap.parse_args()
    from bench.produce_path_bench import TOPIC
    from odradek.testing.single_broker import RunningBroker

    overrides = dict(kv.split("=", 1) for kv in args.override)
    topic_configs = dict(kv.split("=", 1) for kv in args.topic_config)
    with tempfile.TemporaryDirectory(prefix="odradek-pwb-") as tmp:
        broker = RunningBroker(Path(tmp), overrides={"num.partitions": "6", **overrides}).start()
        try:
            broker.create_topic(TOPIC, 6, configs=topic_configs)
            batches = [make_batch(1024, args.batch_kib * 1024, CODECS[args.codec], args.compressible)
                       for _ in range(6)]
            record_bytes = records_count(batches[0]) * 1024
            frames = []
            for i in range(args.requests):
                body = produce_frame(i, [i % 6], batches[i % 6])
                frames.append(struct.pack(">i", len(body)) + body)
            drive(broker.port, frames[:300], args.connections, args.in_flight)  # warm-up
            rows = []
            for _ in range(args.rounds):
                before = thread_times(broker.pid)
                wall = drive(broker.port, frames, args.connections, args.in_flight)
                after = thread_times(broker.pid)
                main_u = after[broker.pid][0] - before.get(broker.pid, (0, 0))[0]
                main_s = after[broker.pid][1] - before.get(broker.pid, (0, 0))[1]
                net_u = sum(u - before.get(t, (0, 0))[0] for t, (u, _) in after.items() if t != broker.pid)
                net_s = sum(s - before.get(t, (0, 0))[1] for t, (_, s) in after.items() if t != broker.pid)
                n = len(frames)
                total_cpu = main_u + main_s + net_u + net_s
                rows.append((main_u / n * 1e6, main_s / n * 1e6, net_u / n * 1e6, net_s / n * 1e6,
                             total_cpu / n * 1e6, n / wall, n * record_bytes / wall / 2**20,
                             total_cpu / (n * record_bytes / 2**30)))
            print(f"Produce v9 over {args.connections} connections x {args.in_flight} in flight, "
                  f"{len(batches[0])} B batches ({args.codec}, {record_bytes} B of records"
                  f"{', compressible' if args.compressible else ''}), topic {topic_configs or 'defaults'}, "
                  f"{args.requests} requests x {args.rounds} rounds, "
                  f"load {os.getloadavg()[0]:.2f}, overrides {overrides or '-'}")
            names = ("handler user", "handler sys", "other user", "other sys", "total", "requests/s",
                     "records MiB/s", "CPU per GB")
            units = {5: "", 6: "", 7: " CPU-s/GiB of records"}
            for i, name in enumerate(names):
                values = [r[i] for r in rows]
                unit = units.get(i, " us/request")
                print(f"  {name:14s} median {statistics.median(values):8.1f}{unit}   "
                      f"({' '.join(f'{v:.1f}' for v in values)})")
            with open(f"/proc/{broker.pid}/status") as f:
                rss = next(line.split()[1] for line in f if line.startswith("VmRSS:"))
            print(f"  broker resident set after the rounds: {int(rss) / 1024:.1f} MiB")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
