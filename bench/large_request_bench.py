"""One large legal request against a live broker: how long it takes, how long another client's
small requests stall meanwhile, and the broker's peak RSS.

    python bench/large_request_bench.py [--mb 10] [--version 12] [--existing 20]

Sends a Metadata request of about ``--mb`` MB (unknown topic names, plus ``--existing`` real
topics in the middle) while a second connection loops ApiVersions v0 and records each latency.
Prints request size, time to answer, the worst and p99 latency the other client saw, and the
broker's RSS before and its peak (VmHWM) after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.wire import WireClient, create_topic  # noqa: E402


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--version", type=int, default=12)
    ap.add_argument("--existing", type=int, default=20)
    args = ap.parse_args()
    broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="large-req-"))).start()
    try:
        with WireClient(broker.host, broker.port, timeout=600) as c:
            for i in range(args.existing):
                create_topic(c, f"real-{i}", 2)
            name_len = 24
            per = name_len + (18 if args.version >= 10 else 2) + 2
            n = int(args.mb * 1e6 / per)
            names = [f"unknown-topic-{i:0{name_len - 14}d}" for i in range(n)]
            for i in range(args.existing):
                names[n // 2 + i] = f"real-{i}"
            corr, frame = c.encode_request(3, args.version, {
                "topics": [{"name": s} for s in names], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            del names
            rss_before = status_kb(broker.proc.pid, "VmRSS")
            latencies: list[float] = []
            done = threading.Event()

            def other() -> None:
                with WireClient(broker.host, broker.port, timeout=600) as o:
                    while not done.is_set():
                        t = time.perf_counter()
                        o.request(18, 0, {})
                        latencies.append(time.perf_counter() - t)
                        time.sleep(0.002)

            th = threading.Thread(target=other)
            th.start()
            time.sleep(0.3)
            t0 = time.perf_counter()
            c.send_raw(frame)
            resp = c.read_response(3, args.version, corr)
            elapsed = time.perf_counter() - t0
            time.sleep(0.2)
            done.set()
            th.join()
            found = sum(1 for t in resp["topics"] if t["error_code"] == 0)
            peak = status_kb(broker.proc.pid, "VmHWM")
            lat = sorted(latencies)
            print(f"request {len(frame) / 1e6:.1f} MB, {n} topics, Metadata v{args.version}: answered in "
                  f"{elapsed:.2f} s ({found} found)")
            print(f"other client: {len(lat)} ApiVersions, worst {lat[-1] * 1000:.0f} ms, p99 "
                  f"{lat[int(len(lat) * 0.99)] * 1000:.1f} ms, median {statistics.median(lat) * 1000:.2f} ms")
            print(f"broker RSS before {rss_before / 1024:.0f} MB, peak {peak / 1024:.0f} MB "
                  f"(+{(peak - rss_before) / 1024:.0f} MB = {(peak - rss_before) * 1024 / len(frame):.1f}x the request)")
    finally:
        broker.kill()


if __name__ == "__main__":
    main()
