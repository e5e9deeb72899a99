"""``make bench``'s 3-node case (``--only cluster3``): a 3-node Apache Kafka against a 3-node Odradek
(bench/clusters.py), replication factor 3, acks=all, 1 KiB records, min.insync.replicas=2.

One run, for each cluster in turn (the order flips every run; only one cluster is up at a time, so
the idle one costs the other nothing on the shared cores):
1. start the cluster (all nodes answering and in Metadata), then warm it up: ``records`` records
   produced (acks=all) and consumed on a throwaway topic, unmeasured. A JVM fresh from start-up runs
   interpreted code for its first tens of MB (a cold 3-node Kafka measured 6 MB/s at 1.4 cores where a
   warm one does several times that); the single-node case's brokers are warm from the start-up runs;
2. a topic with 3 partitions (one leader per broker), RF=3, min.insync.replicas=2, every replica in
   the ISR; ProducerPerformance acks=all writes ``records`` 1 KiB records into it, then
   ConsumerPerformance reads them back (a new group);
3. a 1-partition RF=3 topic for EndToEndLatency, acks=all, 1 KiB (send one, poll it, repeat);
4. stop the cluster, remove its data.

Before the measured phases the warm cluster sits idle for ``IDLE_S`` seconds: its cores then are
the fixed cost every phase's CPU figure contains (heartbeats, quorum and replica fetch polls, JIT
and GC threads), which weighs heavily on a short phase's CPU-s per GB.

Each phase carries the CPU time of all broker processes over it (cores = CPU-s / wall; CPU-s per GB
of record values moved, counted once, not once per replica). Odradek's etcd is measured apart
(``*_etcd_cpu_s_per_gb``), not folded into the brokers' figure; Kafka's controllers live inside its
broker JVMs, so they are in its figure.

Who may call it: bench/compare.py's main thread.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

from bench import perf_tools
from bench.clusters import MIN_INSYNC_REPLICAS, NODES
from bench.servers import RssSampler

CASE_KEY = "cluster3 1024B acks=all RF=3 3p"
IDLE_S = 3.0  # the idle phase: what the warm cluster burns doing nothing (a fixed cost per second)
RECORD_SIZE = 1024
PARTITIONS = 3


class ClusterTarget(Protocol):
    name: str

    @property
    def bootstrap(self) -> str: ...

    @property
    def pids(self) -> list[int]: ...

    def start(self) -> float: ...

    def stop(self) -> None: ...

    def cpu(self) -> float: ...

    def etcd_cpu(self) -> float: ...

    def command_line(self) -> str: ...


def phase_figures(prefix: str, moved_bytes: float, wall_s: float, cpu_s: float, etcd_s: float) -> dict[str, float]:
    """One phase's broker cost: cores busy over the phase and CPU-seconds per GB of record values
    moved, for the brokers (all processes summed) and for etcd on its own."""
    gb = moved_bytes / 1e9
    nan = float("nan")
    return {f"{prefix}_broker_cores": round(cpu_s / wall_s, 3) if wall_s > 0 else nan,
            f"{prefix}_cpu_s_per_gb": round(cpu_s / gb, 3) if gb > 0 else nan,
            f"{prefix}_etcd_cpu_s_per_gb": round(etcd_s / gb, 3) if gb > 0 else nan}


def measured(target: ClusterTarget, work: Callable[[], dict]) -> tuple[dict, float, float, float]:
    """Run ``work``; return its result with the wall time, brokers' CPU-s and etcd's CPU-s over it."""
    cpu0, etcd0, t0 = target.cpu(), target.etcd_cpu(), time.monotonic()
    result = work()
    return result, time.monotonic() - t0, target.cpu() - cpu0, target.etcd_cpu() - etcd0


TOPIC_CONFIG = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}


def warm_up(target: ClusterTarget, records: int) -> None:
    """Produce and consume ``records`` on a throwaway RF=3 topic, unmeasured (JIT, page cache, pools)."""
    from bench.compare import create_topic, delete_topic

    topic = f"bench-cluster3-warmup-{uuid.uuid4().hex[:6]}"
    create_topic(target.bootstrap, topic, PARTITIONS, NODES, TOPIC_CONFIG)
    perf_tools.produce(target.bootstrap, topic, records, RECORD_SIZE, "all")
    perf_tools.consume(target.bootstrap, topic, records, f"warmup-{uuid.uuid4().hex[:8]}")
    delete_topic(target.bootstrap, topic)


def sit_idle() -> dict:
    time.sleep(IDLE_S)
    return {}


def measure_cluster(target: ClusterTarget, records: int, e2e_messages: int, run: int) -> dict:
    """Produce, consume and end-to-end latency against a running cluster: one row of figures."""
    from bench.compare import create_topic, delete_topic

    boot = target.bootstrap
    topic_config = TOPIC_CONFIG
    _, i_wall, i_cpu, i_etcd = measured(target, sit_idle)
    topic = f"bench-cluster3-r{run}-{uuid.uuid4().hex[:6]}"
    create_topic(boot, topic, PARTITIONS, NODES, topic_config)
    produced, p_wall, p_cpu, p_etcd = measured(
        target, lambda: asdict(perf_tools.produce(boot, topic, records, RECORD_SIZE, "all")))
    consumed, c_wall, c_cpu, c_etcd = measured(
        target, lambda: asdict(perf_tools.consume(boot, topic, records, f"perf-{uuid.uuid4().hex[:8]}")))
    delete_topic(boot, topic)
    e2e_topic = f"bench-cluster3-e2e-r{run}-{uuid.uuid4().hex[:6]}"
    create_topic(boot, e2e_topic, 1, NODES, topic_config)
    latency, e_wall, e_cpu, e_etcd = measured(
        target, lambda: asdict(perf_tools.end_to_end(boot, e2e_topic, e2e_messages, "all", RECORD_SIZE)))
    delete_topic(boot, e2e_topic)
    row = {
        "idle_broker_cores": round(i_cpu / i_wall, 3), "idle_etcd_cores": round(i_etcd / i_wall, 3),
        "produce_mb_per_sec": produced["mb_per_sec"], "produce_p99_ms": produced["p99_ms"],
        "produce_wall_s": round(p_wall, 2),
        **phase_figures("produce", records * RECORD_SIZE, p_wall, p_cpu, p_etcd),
        "consume_mb_per_sec": consumed["fetch_mb_per_sec"], "consume_incl_join_mb_per_sec": consumed["mb_per_sec"],
        "consume_wall_s": round(c_wall, 2),
        **phase_figures("consume", consumed["mb"] * 2**20, c_wall, c_cpu, c_etcd),
        "e2e_p50_ms": latency["p50_ms"], "e2e_p99_ms": latency["p99_ms"], "e2e_avg_ms": latency["avg_ms"],
        **phase_figures("e2e", e2e_messages * RECORD_SIZE, e_wall, e_cpu, e_etcd),
    }
    # The columns every row has (report.one_line, the summary's cores column): the produce phase's.
    row["broker_cpu_cores"] = row["produce_broker_cores"]
    row["broker_cpu_s_per_gb"] = row["produce_cpu_s_per_gb"]
    return row


def run_cluster_cases(targets: list[ClusterTarget], runs_count: int, records: int, e2e_messages: int,
                      sampler: RssSampler, runs: list[dict], on_row: Callable[[dict], None]) -> None:
    """``runs_count`` runs; in each, every cluster in turn is started, measured and stopped."""
    for r in range(runs_count):
        order = targets if r % 2 == 0 else list(reversed(targets))
        for target in order:
            load = os.getloadavg()[0]
            print(f"[run {r + 1}/{runs_count}] {target.name:8s} {CASE_KEY}: starting {NODES} nodes ...",
                  end=" ", flush=True)
            try:
                startup = target.start()
                print(f"up in {startup:.1f} s, warming up ...", end=" ", flush=True)
                warm_up(target, records)
                for pid in target.pids:
                    sampler.watch(pid)
                sampler.reset()
                t0 = time.monotonic()
                figures = measure_cluster(target, records, e2e_messages, r)
                rss = sum(sampler.peak(pid) for pid in target.pids)
            finally:
                target.stop()
            row = {"target": target.name, "case": CASE_KEY, "kind": "cluster3", "run": r, "load1": round(load, 2),
                   "wall_s": round(time.monotonic() - t0, 2), "startup_s": round(startup, 2),
                   "rss_peak_mb": round(rss / 2**20, 1), **figures}
            runs.append(row)
            on_row(row)
