"""Scale figures against the real daemon: Metadata for a 10,000-partition topic, and 1,000 open
connections.

1. Creates one topic of --partitions partitions (CreateTopics through confluent-kafka's AdminClient;
   the time until every partition has a leader in Metadata is reported), then times --repeats
   Metadata v12 requests for all topics on one connection twice: "raw" (request write to the last
   response byte read, nothing decoded: the broker's share) and "decoded" (including the Python
   client's decode of the response, which is the same work for both brokers). The first raw
   request is reported on its own: Odradek encodes a topic's entry once per metadata image and
   reuses it after (broker/metadata/topic_metadata_cache.py).
2. Opens --connections TCP connections, sends one ApiVersions v3 on each and reads the answers;
   reports the resident set before and after (memory per connection) and the round trip of one
   ApiVersions on every connection in turn while all stay open.

    python bench/scale_bench.py [--partitions 10000] [--connections 1000] [--kafka]

``--kafka`` runs the same against a real Apache Kafka (bench/servers.py) after Odradek.
Who may call it: the command line; single-threaded.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.compare import create_topic  # noqa: E402
from bench.servers import KafkaTarget, OdradekTarget, Target  # noqa: E402
from tests.support.wire import WireClient  # noqa: E402

# ApiVersions v3 (flexible header v2): key 18, version 3, correlation 1, client id "scale", no tags;
# body: client_software_name "b", client_software_version "1", no tags (compact strings).
_BODY = struct.pack(">hhih", 18, 3, 1, 5) + b"scale" + b"\x00" + b"\x02b" + b"\x021" + b"\x00"
API_VERSIONS_V3 = struct.pack(">i", len(_BODY)) + _BODY


def recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def metadata_figures(target: Target, partitions: int, repeats: int) -> dict:
    t0 = time.monotonic()
    create_topic(target.bootstrap, "scale", partitions)
    created = time.monotonic() - t0
    times, raw = [], []
    with WireClient(target.host, target.port, timeout=120) as c:
        for _ in range(repeats + 1):
            _, frame = c.encode_request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
            t = time.perf_counter()
            c.sock.sendall(frame)
            recv_frame(c.sock)
            raw.append(time.perf_counter() - t)
        for _ in range(repeats):
            t = time.perf_counter()
            body = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
            times.append(time.perf_counter() - t)
    got = sum(len(t["partitions"]) for t in body["topics"] if t["name"] == "scale")
    assert got == partitions, f"Metadata listed {got} of {partitions} partitions"
    return {"create_s": round(created, 2),
            "raw_first_ms": round(raw[0] * 1000, 1),
            "raw_ms_median": round(statistics.median(raw[1:]) * 1000, 1),
            "decoded_ms_median": round(statistics.median(times) * 1000, 1),
            "decoded_ms_min": round(min(times) * 1000, 1)}


def connection_figures(target: Target, n: int) -> dict:
    rss0 = target.rss()
    socks = []
    t0 = time.monotonic()
    try:
        for _ in range(n):
            s = socket.create_connection((target.host, target.port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        for s in socks:
            s.sendall(API_VERSIONS_V3)
        for s in socks:
            recv_frame(s)
        opened = time.monotonic() - t0
        time.sleep(1)
        rss1 = target.rss()
        rtts = []
        for s in socks:
            t = time.perf_counter()
            s.sendall(API_VERSIONS_V3)
            recv_frame(s)
            rtts.append(time.perf_counter() - t)
    finally:
        for s in socks:
            s.close()
    rtts.sort()
    return {"connections": n, "open_and_first_request_s": round(opened, 2),
            "rss_before_mb": round(rss0 / 2**20, 1), "rss_after_mb": round(rss1 / 2**20, 1),
            "kib_per_connection": round((rss1 - rss0) / n / 1024, 1),
            "api_versions_p50_ms": round(rtts[len(rtts) // 2] * 1000, 3),
            "api_versions_p99_ms": round(rtts[int(len(rtts) * 0.99)] * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kafka", action="store_true", help="also measure a real Apache Kafka")
    ap.add_argument("--work", type=Path, default=REPO / ".cache" / "bench-scale")
    args = ap.parse_args(argv)
    targets: list[Target] = [OdradekTarget(args.work / "odradek")]
    if args.kafka:
        targets.append(KafkaTarget(args.work / "kafka"))
    for target in targets:
        target.start()
        try:
            conns = connection_figures(target, args.connections)
            print(f"{target.name}: {conns}", flush=True)
            meta = metadata_figures(target, args.partitions, args.repeats)
            print(f"{target.name}: {args.partitions} partitions: {meta}", flush=True)
        finally:
            target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
