"""Broker-side recompression with real clients (issue 27): what a topic's compression.type costs when it
is not the producers' codec.

One Odradek broker from this checkout; per case a fresh 6-partition topic with the case's
compression.type, and bench/native_load.py's produce phase (the saturate case of bench/compare.py:
3 librdkafka processes, 1 KiB records, acks=1, linger.ms=5, batch.size=64 KiB) with the case's
producer codec and JSON-like records (random bytes do not compress, and librdkafka then sends them
uncompressed). Per case: MB/s of record values, the broker's cores while producing and its CPU
seconds per GiB of record values (utime+stime of the whole process: the rebuild runs on its IO pool).
Cases alternate within every run, medians over the runs; each topic is deleted after its case.

    python bench/recompression_bench.py [--records 150000] [--runs 3]
        [--case lz4:producer --case lz4:lz4 --case lz4:zstd --case lz4:gzip --case none:zstd]

``producer:topic`` names a case: the producers' compression.type, then the topic's.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import native_load  # noqa: E402
from bench.servers import cpu_seconds  # noqa: E402

DEFAULT_CASES = ["lz4:producer", "lz4:lz4", "lz4:zstd", "lz4:gzip", "none:zstd"]


class BrokerCpu(native_load.Probe):
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = self.wall = 0.0

    def start(self) -> None:
        self.cpu, self.wall = cpu_seconds(self.pid), time.monotonic()

    def end(self) -> None:
        self.cpu, self.wall = cpu_seconds(self.pid) - self.cpu, time.monotonic() - self.wall


def delete_topic(port: int, name: str) -> None:
    from tests.support.wire import WireClient

    with WireClient("127.0.0.1", port) as c:
        resp = c.request(20, 4, {"topic_names": [name], "timeout_ms": 30000})
    assert resp["responses"][0]["error_code"] == 0, resp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--case", action="append", default=[])
    args = ap.parse_args()
    from odradek.testing.single_broker import RunningBroker

    cases = args.case or DEFAULT_CASES
    rows: dict[str, list[tuple[float, float, float, float]]] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory(prefix="odradek-rcb-") as tmp:
        broker = RunningBroker(Path(tmp), overrides={"log.segment.delete.delay.ms": "0"}).start()
        try:
            for run in range(args.runs):
                for case in cases:
                    codec, topic_codec = case.split(":")
                    topic = f"rcb-{uuid.uuid4().hex[:8]}"
                    broker.create_topic(topic, 6, configs={} if topic_codec == "producer"
                                        else {"compression.type": topic_codec})
                    probe = BrokerCpu(broker.pid)
                    load = os.getloadavg()[0]
                    result = native_load.produce_phase(broker.bootstrap, topic, args.records, 1024, args.processes,
                                                       probe, config={"compression.type": codec}, compressible=True)
                    if result.errors:
                        raise RuntimeError(f"{case}: {result.errors}")
                    gib = result.bytes / 2**30
                    rows[case].append((result.mb_per_sec, probe.cpu / probe.wall, probe.cpu / gib, load))
                    print(f"[run {run + 1}/{args.runs}] {case:14s} {result.mb_per_sec:7.1f} MB/s, broker "
                          f"{probe.cpu / probe.wall:.2f} cores, {probe.cpu / gib:.2f} CPU-s/GiB (load {load:.1f})",
                          flush=True)
                    delete_topic(broker.port, topic)
        finally:
            broker.stop()
    print(f"\n{args.records} records of 1 KiB by {args.processes} librdkafka producers, medians of {args.runs} runs")
    print("| producer codec -> topic compression.type | MB/s | broker cores | broker CPU-s/GiB | load (1 min) |")
    print("|---|---:|---:|---:|---|")
    for case, values in rows.items():
        mb, cores, per_gib, loads = (statistics.median(v) for v in zip(*values, strict=True))
        print(f"| {case.replace(':', ' -> ')} | {mb:.1f} | {cores:.2f} | {per_gib:.2f} | "
              f"{min(v[3] for v in values):.1f}-{max(v[3] for v in values):.1f} |")


if __name__ == "__main__":
    main()
