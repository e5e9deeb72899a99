"""The saturate load (bench/native_load.py) against one Odradek node or a local cluster, on its own,
for profiling and for the scale-out question of issue 18 (one node against N nodes on one host).

    python bench/saturate_probe.py --nodes 1 --records 150000 [--py-spy /tmp/ppb.txt] [--runs 3]
    python bench/saturate_probe.py --nodes 2 ...    # `odradek cluster`'s LocalCluster, RF=1, partitions spread
    python bench/saturate_probe.py --alternate 1,2  # one node and two nodes, alternated, --runs each

The brokers run from the checkout this script is in (odradek.broker.launcher.cluster_launcher's PACKAGE_ROOT): for a
before/after, copy the script into a `git archive` of the base and run both copies in turn.

Per run: produce MB/s, broker cores (all broker processes' CPU over the phase's wall time) and
broker CPU-s per GB, then the same for consume; the cluster's etcd is counted apart (etcd CPU-s).
``--rate-mb R --seconds S``: instead, the half-rate latency case of bench/compare.py on its own: the
producers held to R MB/s in all for S s; p50/p99/max delivery latency, the broker's own Produce
times (its metrics endpoint, so ``--metrics`` is implied), librdkafka's own split of the wait
(queued in the client vs the request round trip) and, sampled every 20 ms from /proc, per broker
thread its CPU, its wait for a CPU and its time in uninterruptible sleep (D, with the wchans).

``--metrics``: the broker(s) run with the metrics endpoint, and the Produce and Fetch request
counts are scraped after each phase, which gives bytes and broker CPU per request (the endpoint itself costs a
few us per request: use it for the count, not for the CPU figure).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import native_load  # noqa: E402
from bench.compare import create_topic  # noqa: E402
from bench.servers import COMMON_SETTINGS, cpu_seconds, cpu_times  # noqa: E402

PARTITIONS = 6


class Nodes:
    """One broker (a bare LocalCluster-free odradek.testing.single_broker.RunningBroker) or ``n`` cluster nodes."""

    def __init__(self, n: int, data_dir: Path, metrics: bool, extra: dict[str, str] | None = None) -> None:
        self.n = n
        self.data_dir = data_dir
        self.metrics_ports: list[int] = []
        self.cluster: Any = None
        self.single: Any = None
        from odradek.broker.launcher.cluster_launcher import free_port

        overrides = {**COMMON_SETTINGS, **(extra or {})}
        if metrics:
            port = free_port("127.0.0.1")
            self.metrics_ports.append(port)
            overrides["odradek.metrics.port"] = str(port)
        if n == 1:
            from odradek.testing.single_broker import RunningBroker

            self.single = RunningBroker(data_dir, overrides=overrides)
            self.single.log_level = "WARNING"
            self.single.start()
            self.bootstrap = self.single.bootstrap
            self.pids = [self.single.pid]
        else:
            from odradek.broker.launcher.cluster_launcher import LocalCluster

            overrides.pop("odradek.metrics.port", None)
            self.cluster = LocalCluster(data_dir, n, base_port=None, etcd_port=None,
                                        overrides={**overrides, "default.replication.factor": "1"},
                                        log_level="WARNING")
            self.cluster.start(timeout=60)
            if not self.cluster.wait_members(60):
                raise RuntimeError("cluster nodes did not see each other")
            self.bootstrap = str(self.cluster.bootstrap)
            self.pids = [b.pid for b in self.cluster.brokers.values()]

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def sys_cpu(self) -> float:
        """stime alone (the kernel's share: socket reads and writes, page-cache copies)."""
        return sum(cpu_times(pid)[1] for pid in self.pids)

    def etcd_cpu(self) -> float:
        if self.cluster is None or self.cluster.etcd.pid is None:
            return 0.0
        return cpu_seconds(self.cluster.etcd.pid)

    def requests(self, api: str = "Produce") -> int:
        total = 0
        for port in self.metrics_ports:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            for line in text.splitlines():
                if line.startswith("odradek_requests_total") and f'api="{api}"' in line:
                    total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def stop(self) -> None:
        if self.single is not None:
            self.single.stop()
        if self.cluster is not None:
            self.cluster.stop()


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(topic, timeout=30)
    return {p: part.leader for p, part in md.topics[topic].partitions.items()}


def one_run(nodes: Nodes, records: int, processes: int, py_spy: str | None) -> dict[str, Any]:
    topic = f"sat-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic, PARTITIONS)
    spread = leaders(nodes.bootstrap, topic)
    out: dict[str, Any] = {"nodes": nodes.n, "load1": round(os.getloadavg()[0], 2),
                           "leaders": sorted(spread.values())}

    class Cpu(native_load.Probe):
        def start(self) -> None:
            self.c0, self.e0, self.t0 = nodes.cpu(), nodes.etcd_cpu(), time.monotonic()
            self.s0 = nodes.sys_cpu()
            self.r0 = nodes.requests() if nodes.metrics_ports else 0
            self.f0 = nodes.requests("Fetch") if nodes.metrics_ports else 0

        def end(self) -> None:
            self.cpu, self.wall = nodes.cpu() - self.c0, time.monotonic() - self.t0
            self.etcd = nodes.etcd_cpu() - self.e0
            self.sys = nodes.sys_cpu() - self.s0
            self.requests = nodes.requests() - self.r0 if nodes.metrics_ports else 0
            self.fetches = nodes.requests("Fetch") - self.f0 if nodes.metrics_ports else 0

    probe = Cpu()
    spy = None
    if py_spy:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(nodes.pids[0]),
                                "-r", "250", "-f", "raw", "-o", py_spy, *(["--native"] if os.environ.get("PYSPY_NATIVE") else ["--nonblocking"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    phase = native_load.produce_phase(nodes.bootstrap, topic, records, 1024, processes, probe)
    if spy is not None:
        spy.send_signal(2)
        spy.wait(30)
    gb = phase.bytes / 1e9
    out.update(produce_mb_s=round(phase.mb_per_sec, 1), produce_cores=round(probe.cpu / probe.wall, 3),
               produce_cpu_s_per_gb=round(probe.cpu / gb, 2),
               produce_sys_share=round(probe.sys / probe.cpu, 2) if probe.cpu else None, produce_etcd_cpu_s=round(probe.etcd, 2))
    if probe.requests:
        out.update(produce_requests=probe.requests, kib_per_request=round(phase.bytes / probe.requests / 1024, 1),
                   us_cpu_per_request=round(probe.cpu / probe.requests * 1e6, 1))
    if phase.errors:
        out["errors"] = phase.errors[:1]
    cphase = native_load.consume_phase(nodes.bootstrap, topic, PARTITIONS, processes, probe)
    out.update(consume_mb_s=round(cphase.mb_per_sec, 1), consume_cores=round(probe.cpu / probe.wall, 3),
               consume_cpu_s_per_gb=round(probe.cpu / (cphase.bytes / 1e9), 2) if cphase.bytes else None,
               consume_sys_share=round(probe.sys / probe.cpu, 2) if probe.cpu else None)
    if probe.fetches:
        out.update(fetch_requests=probe.fetches, kib_per_fetch=round(cphase.bytes / probe.fetches / 1024, 1))
    return out


class ThreadSampler:
    """Samples every thread of ``pid`` every ``interval`` s from /proc (the broker's threads all
    show as "python", so they are told apart by id and ranked by CPU): per thread its CPU time,
    its wait for a CPU (schedstat's run_delay: runnable but not running), how often it was found
    in uninterruptible sleep (D) with the wchans seen there, and its longest unbroken D run."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid, self.interval = pid, interval
        self.d_samples: dict[int, int] = {}
        self.wchans: dict[int, dict[str, int]] = {}
        self.longest_d: dict[int, float] = {}
        self._d_since: dict[int, float] = {}
        self._first: dict[int, tuple[int, int]] = {}
        self._last: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(5)
        rows = []
        for tid, (cpu1, wait1) in self._last.items():
            cpu0, wait0 = self._first[tid]
            rows.append({"tid": tid, "cpu_s": round((cpu1 - cpu0) / 1e9, 2), "run_wait_s": round((wait1 - wait0) / 1e9, 2),
                         "d_samples": self.d_samples.get(tid, 0), "longest_d_ms": round(self.longest_d.get(tid, 0) * 1000, 1),
                         "d_wchans": self.wchans.get(tid, {})})
        rows.sort(key=lambda r: -r["cpu_s"])
        return [r for r in rows if r["cpu_s"] >= 0.05 or r["d_samples"]]

    def _run(self) -> None:
        task_dir = Path(f"/proc/{self.pid}/task")
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                tids = os.listdir(task_dir)
            except OSError:
                return
            for name in tids:
                tid = int(name)
                try:
                    stat = (task_dir / name / "stat").read_text()
                    cpu_ns, wait_ns = ((task_dir / name / "schedstat").read_text().split()[:2])
                except OSError:
                    continue
                sample = (int(cpu_ns), int(wait_ns))
                self._first.setdefault(tid, sample)
                self._last[tid] = sample
                if stat[stat.rindex(")") + 2] == "D":
                    self.d_samples[tid] = self.d_samples.get(tid, 0) + 1
                    try:
                        wchan = (task_dir / name / "wchan").read_text() or "?"
                    except OSError:
                        wchan = "?"
                    w = self.wchans.setdefault(tid, {})
                    w[wchan] = w.get(wchan, 0) + 1
                    began = self._d_since.setdefault(tid, now)
                    self.longest_d[tid] = max(self.longest_d.get(tid, 0.0), now - began)
                else:
                    self._d_since.pop(tid, None)
            time.sleep(self.interval)


def produce_time_quantiles(port: int) -> dict[str, float]:
    """The broker's Produce TotalTimeMs histogram: the share of requests over each bucket bound."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_totaltimems_bucket") and 'request="Produce"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    if not buckets:
        return {}
    total = buckets[-1][1]
    return {f"over_{le:g}ms": round(1 - n / total, 4) for le, n in buckets if le != float("inf") and 5 <= le <= 1000}


def rate_run(nodes: Nodes, rate_mb: float, seconds: float, processes: int) -> dict[str, Any]:
    topic = f"rate-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic, PARTITIONS)
    out: dict[str, Any] = {"nodes": nodes.n, "load1": round(os.getloadavg()[0], 2), "rate_mb": rate_mb}
    sampler = ThreadSampler(nodes.pids[0])
    c0, t0 = nodes.cpu(), time.monotonic()
    sampler.start()
    phase = native_load.rate_phase(nodes.bootstrap, topic, rate_mb * native_load.MB, seconds, 1024, processes)
    threads = sampler.stop()
    ms = [x * 1000 for x in phase.latencies]
    out.update(mb_s=round(phase.mb_per_sec, 1), cores=round((nodes.cpu() - c0) / (time.monotonic() - t0), 3),
               p50_ms=round(native_load.percentile(ms, 50), 1), p99_ms=round(native_load.percentile(ms, 99), 1),
               max_ms=round(max(ms, default=float("nan")), 1),
               clients_cores=round(phase.clients_cpu_s / phase.wall_s, 2) if phase.wall_s else None)
    if phase.client_split:
        out["client_int_latency_p99_ms_median"] = round(statistics.median(q for q, _ in phase.client_split), 1)
        out["client_int_latency_p99_ms_max"] = round(max(q for q, _ in phase.client_split), 1)
        out["client_rtt_p99_ms_median"] = round(statistics.median(r for _, r in phase.client_split), 1)
        out["client_rtt_p99_ms_max"] = round(max(r for _, r in phase.client_split), 1)
    if nodes.metrics_ports:
        out["broker_produce"] = produce_time_quantiles(nodes.metrics_ports[0])
    out["threads"] = threads
    if phase.errors:
        out["errors"] = phase.errors[:1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--alternate", help="comma list of node counts to alternate, e.g. 1,2")
    ap.add_argument("--records", type=int, default=150_000)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--py-spy", help="write a py-spy raw profile of the (first) broker to this file")
    ap.add_argument("--override", action="append", default=[], help="broker property key=value (every node)")
    ap.add_argument("--metrics", action="store_true", help="count Produce requests (metrics endpoint on)")
    ap.add_argument("--rate-mb", type=float, help="run the half-rate latency case at this total MB/s instead")
    ap.add_argument("--seconds", type=float, default=20.0, help="--rate-mb: how long the producers run")
    args = ap.parse_args()
    if args.rate_mb:
        args.metrics = True
    counts = [int(x) for x in args.alternate.split(",")] if args.alternate else [args.nodes]
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for n in counts:
            tmp = Path(tempfile.mkdtemp(prefix=f"odradek-sat{n}-"))
            nodes = Nodes(n, tmp, args.metrics, dict(kv.split("=", 1) for kv in args.override))
            try:
                time.sleep(1.0)
                if args.rate_mb:
                    row = rate_run(nodes, args.rate_mb, args.seconds, args.processes)
                else:
                    row = one_run(nodes, args.records, args.processes, args.py_spy if run == 0 else None)
            finally:
                nodes.stop()
                shutil.rmtree(tmp, ignore_errors=True)
            row["run"] = run
            rows.append(row)
            print(row, flush=True)
    if args.rate_mb:
        return
    for n in counts:
        mine = [r for r in rows if r["nodes"] == n]
        keys = ("produce_mb_s", "produce_cores", "produce_cpu_s_per_gb", "consume_mb_s", "consume_cores",
                "consume_cpu_s_per_gb")
        print(f"{n} node(s), medians of {len(mine)}: "
              + ", ".join(f"{k} {statistics.median(r[k] for r in mine if r.get(k) is not None)}" for k in keys))


if __name__ == "__main__":
    main()
