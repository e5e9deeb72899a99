"""Load test of the Reactor: one network loop vs several, uvloop vs asyncio, on the real daemon.

What it does
1. For each configuration ``num.network.threads`` x ``odradek.event.loop`` (default {1,2,3,4} x
   {uvloop, asyncio}) and each repeat, it starts the real daemon
   (``python -m odradek.broker.main --override ...``) on a fresh, empty data dir on 127.0.0.1, creates a
   few topics, and then, for each connection count K, runs the load generator.
2. The load generator runs in separate processes (``--gen-procs``, default 1), so its Python work
   does not share the broker's GIL. It opens K connections and keeps exactly ``--depth`` requests
   in flight on each (a closed loop: every response releases the next request, like a client with
   ``max.in.flight.requests.per.connection`` = depth). Requests are encoded once with our codecs;
   only the correlation id is patched per send. Every response is checked to carry the
   correlation id of the oldest outstanding request on its connection (Kafka's ordering
   guarantee); a mismatch or a lost response is reported and fails the run.
3. Responses completed during ``--warmup`` seconds are discarded; those completed during the next
   ``--duration`` seconds count. Per run: requests/s, p50 and p99 latency (send of a request to
   receipt of its whole response, so it includes time the request spent queued behind others on
   its connection), and CPU seconds used by the broker process (all its threads, from
   /proc/<pid>/stat) and by the generators, both as % of one core over the window.
4. Each configuration is repeated ``--repeats`` times (repeats interleave, so drift hits every
   configuration alike); the table reports the median of each metric and the range of requests/s.
5. ``--startup N`` also measures the time from spawning the daemon to its first accepted TCP
   connection, on an empty data dir, N times (median, min, max).

The request mix is pluggable: ``MIXES`` maps a name to a function returning the requests one
connection cycles through (api key, version, body). Produce and Fetch mixes are added there when
those APIs land (a ``setup`` step that produces data first can go next to ``create_topics``).

The machine has 2 cores: with one generator process, generator and broker each get roughly one
core; the broker's CPU % column shows whether the broker (not the generator) was the bottleneck.

Usage:
    .venv/bin/python bench/reactor_bench.py                      # full matrix, ~8 minutes
    .venv/bin/python bench/reactor_bench.py --threads 1,3 --loops uvloop --conns 16 --repeats 1
    .venv/bin/python bench/reactor_bench.py --startup 10 --threads 3 --loops uvloop --conns ''

Loopback only; each run is bounded by --warmup + --duration (+ at most 10 s of drain).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from odradek.protocol.codec import codec, is_flexible  # noqa: E402
from odradek.protocol.headers import encode_request_header  # noqa: E402

API_VERSIONS, METADATA, CREATE_TOPICS = 18, 3, 19
API_NAMES = {API_VERSIONS: "ApiVersions", METADATA: "Metadata", CREATE_TOPICS: "CreateTopics"}
TOPICS = [f"bench-{i}" for i in range(3)]
PARTITIONS = 3
CORRELATION_AT = 8  # size(4) api_key(2) api_version(2), then the correlation id
CLK_TCK = os.sysconf("SC_CLK_TCK")

RequestSpec = tuple[int, int, dict]  # api key, version, body

# -- request mixes (pluggable) -----------------------------------------------------------------


def mix_api_versions() -> list[RequestSpec]:
    return [(API_VERSIONS, 3, {"client_software_name": "reactor-bench", "client_software_version": "1"})]


def mix_metadata() -> list[RequestSpec]:
    body = {"topics": [{"topic_id": uuid.UUID(int=0), "name": t} for t in TOPICS], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    return [(METADATA, 12, body)]


def mix_mixed() -> list[RequestSpec]:
    return mix_api_versions() + mix_metadata()


MIXES: dict[str, Callable[[], list[RequestSpec]]] = {
    "api_versions": mix_api_versions,
    "metadata": mix_metadata,
    "mixed": mix_mixed,
}


def encode_frame(api_key: int, version: int, body: dict, correlation_id: int = 0) -> bytes:
    name = API_NAMES[api_key] + "Request"
    out = bytearray()
    encode_request_header(out, api_key, version, correlation_id, "reactor-bench", is_flexible(name, version))
    codec(name, version).encode_into(body, out)
    return struct.pack(">i", len(out)) + bytes(out)


# -- load generator (runs in its own process) --------------------------------------------------


class Generator:
    def __init__(self, templates: list[bytes], depth: int) -> None:
        self.templates = templates
        self.depth = depth
        self.sending = True
        self.measuring = False
        self.count = 0
        self.latencies_ns: list[int] = []
        self.errors: list[str] = []
        self.conns: list[LoadConnection] = []


class LoadConnection(asyncio.Protocol):
    """One client connection keeping ``depth`` requests in flight, checking response order."""

    def __init__(self, gen: Generator, index: int) -> None:
        self.gen = gen
        self.index = index
        self.next_template = index  # connections start at different points of the mix
        self.correlation_id = 0
        self.in_flight: deque[tuple[int, int]] = deque()
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self._requests(self.gen.depth))  # type: ignore[union-attr]

    def _requests(self, n: int) -> bytes:
        templates = self.gen.templates
        parts = []
        now = time.perf_counter_ns()
        for _ in range(n):
            frame = bytearray(templates[self.next_template % len(templates)])
            self.next_template += 1
            self.correlation_id += 1
            struct.pack_into(">i", frame, CORRELATION_AT, self.correlation_id)
            self.in_flight.append((self.correlation_id, now))
            parts.append(frame)
        return b"".join(parts)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        done = 0
        gen = self.gen
        now = time.perf_counter_ns()
        while end - pos >= 8:
            size = struct.unpack_from(">i", buf, pos)[0]
            if end - pos - 4 < size:
                break
            corr = struct.unpack_from(">i", buf, pos + 4)[0]
            pos += 4 + size
            if not self.in_flight:
                gen.errors.append(f"conn {self.index}: unexpected response {corr}")
                continue
            expected, sent_at = self.in_flight.popleft()
            if corr != expected:
                gen.errors.append(f"conn {self.index}: response {corr} where {expected} was due")
            if gen.measuring:
                gen.count += 1
                gen.latencies_ns.append(now - sent_at)
            done += 1
        del buf[:pos]
        if done and gen.sending:
            self.transport.write(self._requests(done))  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.gen.sending or self.in_flight:
            self.lost = True
            self.gen.errors.append(f"conn {self.index}: closed by broker ({exc})")


def system_busy_seconds() -> float:
    """CPU seconds all cores spent busy (not idle/iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


async def generate(args: argparse.Namespace) -> dict[str, Any]:
    templates = [encode_frame(k, v, b) for k, v, b in MIXES[args.mix]()]
    gen = Generator(templates, args.depth)
    loop = asyncio.get_running_loop()
    for i in range(args.conns):
        _, proto = await loop.create_connection(lambda i=i: LoadConnection(gen, i), args.host, args.port)
        gen.conns.append(proto)
    await asyncio.sleep(args.warmup)
    gen.measuring = True
    cpu0, broker0, t0 = time.process_time(), proc_cpu_seconds(args.broker_pid), time.perf_counter()
    busy0 = system_busy_seconds()
    await asyncio.sleep(args.duration)
    gen.measuring = False
    window = time.perf_counter() - t0
    cpu1, broker1 = time.process_time(), proc_cpu_seconds(args.broker_pid)
    busy1 = system_busy_seconds()
    gen.sending = False
    deadline = time.monotonic() + 10
    while any(c.in_flight and not c.lost for c in gen.conns) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    unanswered = sum(len(c.in_flight) for c in gen.conns)
    if unanswered:
        gen.errors.append(f"{unanswered} requests never answered")
    for c in gen.conns:
        c.transport.close()  # type: ignore[union-attr]
    lat_us = sorted(n // 1000 for n in gen.latencies_ns)
    return {
        "count": gen.count,
        "window": window,
        "latencies_us": lat_us,
        "gen_cpu": cpu1 - cpu0,
        "broker_cpu": broker1 - broker0,
        "system_busy": busy1 - busy0,
        "errors": gen.errors[:20],
    }


def generator_main(args: argparse.Namespace) -> None:
    import uvloop

    result = uvloop.run(generate(args))
    json.dump(result, sys.stdout)


# -- orchestration -----------------------------------------------------------------------------


class Daemon:
    """The real broker in a subprocess, on a fresh data dir, logging warnings only."""

    def __init__(self, threads: int, loop_kind: str, workdir: Path) -> None:
        self.port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="reactor-bench-", dir=workdir))
        overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir / "logs"),
            "node.id": "1",
            "num.network.threads": str(threads),
            "odradek.event.loop": loop_kind,
        }
        self.cmd = [sys.executable, "-m", "odradek.broker.main", "--log-level", "WARNING"]
        for k, v in overrides.items():
            self.cmd += ["--override", f"{k}={v}"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> float:
        """Spawn and wait for the first accepted connection; returns the seconds that took."""
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = open(self.data_dir / "broker.log", "wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: {(self.data_dir / 'broker.log').read_text()[-4000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return time.perf_counter() - t0
            except OSError:
                time.sleep(0.001)
        self.stop()
        raise RuntimeError("broker did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_topics(port: int) -> None:
    body = {"topics": [{"name": t, "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
                        "configs": []} for t in TOPICS], "timeout_ms": 30000, "validate_only": False}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(encode_frame(CREATE_TOPICS, 7, body, correlation_id=1))
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        frame = recv_exact(s, size)
    resp, _ = codec("CreateTopicsResponse", 7).decode(frame, 5)
    bad = [t for t in resp["topics"] if t["error_code"] != 0]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad}")


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def run_load(port: int, broker_pid: int, conns: int, args: argparse.Namespace) -> dict[str, Any]:
    procs = min(args.gen_procs, conns)
    shares = [conns // procs + (1 if i < conns % procs else 0) for i in range(procs)]
    children = []
    for share in shares:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--generate", "--port", str(port),
               "--broker-pid", str(broker_pid), "--conns-one", str(share), "--depth", str(args.depth),
               "--warmup", str(args.warmup), "--duration", str(args.duration), "--mix", args.mix]
        children.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=REPO))
    results = []
    for child in children:
        out, _ = child.communicate(timeout=args.warmup + args.duration + 60)
        if child.returncode != 0:
            raise RuntimeError(f"generator failed with {child.returncode}")
        results.append(json.loads(out))
    lat = sorted(x for r in results for x in r["latencies_us"])
    window = statistics.mean(r["window"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    return {
        "rps": sum(r["count"] for r in results) / window,
        "p50_ms": percentile(lat, 0.50) / 1000,
        "p99_ms": percentile(lat, 0.99) / 1000,
        # Every generator read the broker's counters over (nearly) the same window: take one.
        "broker_cpu_pct": 100 * results[0]["broker_cpu"] / window,
        "gen_cpu_pct": 100 * sum(r["gen_cpu"] for r in results) / window,
        # Everything else on the machine (other processes): busy CPU minus broker and generators.
        "other_cpu_pct": 100 * (results[0]["system_busy"] - results[0]["broker_cpu"]
                                - sum(r["gen_cpu"] for r in results)) / window,
        "req_per_broker_cpu_s": sum(r["count"] for r in results) / max(results[0]["broker_cpu"], 1e-9),
        "errors": errors,
    }


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return float(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))])


def measure_startup(n: int, threads: int, loop_kind: str, workdir: Path) -> list[float]:
    times = []
    for _ in range(n):
        d = Daemon(threads, loop_kind, workdir)
        times.append(d.start())
        d.stop()
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2,3,4", help="num.network.threads values")
    p.add_argument("--loops", default="uvloop,asyncio", help="odradek.event.loop values")
    p.add_argument("--conns", default="1,16,128", help="connection counts K ('' = no load runs)")
    p.add_argument("--depth", type=int, default=5, help="requests in flight per connection")
    p.add_argument("--mix", default="mixed", choices=sorted(MIXES))
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gen-procs", type=int, default=1, help="load generator processes")
    p.add_argument("--startup", type=int, default=0, help="also measure start-up N times")
    p.add_argument("--json", help="write raw per-run results here")
    # internal: generator mode
    p.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--conns-one", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.generate:
        args.conns = args.conns_one
        generator_main(args)
        return 0

    threads = [int(x) for x in args.threads.split(",") if x]
    loops = [x for x in args.loops.split(",") if x]
    conns = [int(x) for x in args.conns.split(",") if x]
    workdir = Path(tempfile.mkdtemp(prefix="reactor-bench-"))
    print(f"# machine: {os.cpu_count()} cpus, {cpu_model()}, Python {sys.version.split()[0]}", flush=True)
    print(f"# mix={args.mix} depth={args.depth} warmup={args.warmup}s duration={args.duration}s "
          f"repeats={args.repeats} generator processes={args.gen_procs}", flush=True)

    if args.startup:
        for t in threads:
            for lk in loops:
                times = measure_startup(args.startup, t, lk, workdir)
                print(f"startup threads={t} loop={lk}: median {statistics.median(times) * 1000:.0f} ms "
                      f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, n={len(times)})", flush=True)

    if not conns:
        return 0
    runs: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    failed = False
    for rep in range(args.repeats):
        for t in threads:
            for lk in loops:
                daemon = Daemon(t, lk, workdir)
                daemon.start()
                try:
                    create_topics(daemon.port)
                    for k in conns:
                        r = run_load(daemon.port, daemon.proc.pid, k, args)  # type: ignore[union-attr]
                        runs.setdefault((k, t, lk), []).append(r)
                        status = "ERRORS " + "; ".join(r["errors"][:3]) if r["errors"] else "ok"
                        failed |= bool(r["errors"])
                        print(f"rep {rep} K={k} threads={t} loop={lk}: {r['rps']:.0f} req/s "
                              f"p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                              f"broker {r['broker_cpu_pct']:.0f}% gen {r['gen_cpu_pct']:.0f}% "
                              f"other {r['other_cpu_pct']:.0f}% {r['req_per_broker_cpu_s']:.0f} req/cpu-s {status}",
                              file=sys.stderr, flush=True)
                finally:
                    daemon.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({f"{k}/{t}/{lk}": v for (k, t, lk), v in runs.items()}, indent=1))
    print()
    print("| conns | network threads | loop | req/s (median) | req/s range | p50 ms | p99 ms | "
          "req per broker CPU-s | broker CPU % | generator CPU % | other load % |")
    print("|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for (k, t, lk), rs in sorted(runs.items()):
        rps = [r["rps"] for r in rs]

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        print(f"| {k} | {t} | {lk} | {statistics.median(rps):,.0f} | {min(rps):,.0f}–{max(rps):,.0f} | "
              f"{med('p50_ms'):.2f} | {med('p99_ms'):.2f} | {med('req_per_broker_cpu_s'):,.0f} | "
              f"{med('broker_cpu_pct'):.0f} | {med('gen_cpu_pct'):.0f} | {med('other_cpu_pct'):.0f} |")
    return 1 if failed else 0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
