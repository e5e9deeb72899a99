"""``make bench``: Kafka's own performance tools against a real Apache Kafka and against Odradek, on
this machine, alternating, median of the runs; writes a markdown table, the raw runs (JSON) and a
plot of the Odradek/Kafka ratios.

    python -m bench.compare [--quick] [--runs N] [--out DIR]
                            [--only produce,consume,e2e,txn,startup,saturate,cluster3]
                            [--baseline CHECKOUT] [--no-kafka]

What one full run does (about 15-25 minutes on 2 cores, plus the 3-node case, not yet timed at its
full 200 MB per phase; ``--quick --runs 3 --only cluster3`` took 3.5 minutes):
1. Fetch Kafka 4.4.0's jars from Maven Central if needed (tools/kafka_dist.py, cached in .cache/).
2. Start-up: ``--runs`` times each, alternating, start the broker on an empty data dir and time
   the spawn to the first answered ApiVersions (bench/servers.py). The last pair stays up; after
   5 s idle their resident memory is "idle RSS".
3. For each run, for each case, both brokers in turn (order flipped every run, so neither is
   always first on a warmer machine): a fresh topic, then
   - ProducerPerformance: 100 B and 1 KiB records x acks=1/all x 1/8 partitions, linger.ms=5,
     batch.size=64 KiB, unthrottled;
   - ConsumerPerformance over the topic just written (after the acks=1 cases; acks does not
     change what is stored), a new group each time;
   - EndToEndLatency: 1 KiB, acks=all, 1 partition (sequential send-then-poll);
   - txn: ProducerPerformance with ``--transactional-id`` and ``--transaction-duration-ms 15``
     (1 KiB, 1 partition; acks=all and idempotence come with transactions): a commit every 15 ms,
     about 1,000 records per transaction here; the records per transaction achieved (records over
     COMMIT markers, from the log end) is reported beside the throughput;
   - saturate (broker-bound, bench/native_load.py): 3 librdkafka producer processes write 1.2 GB of
     1 KiB records (acks=1, linger.ms=5, batch.size=64 KiB, no compression) into 6 partitions, then 3
     consumer processes read it back: MB/s, broker cores and broker CPU-s/GB of each phase;
   - half-rate: the same producers held to half the slower broker's saturation MB/s of this run,
     for 20 s: p50/p99 of every record's delivery latency.
   Each figure is stored with the 1-minute load average when it started, the broker's CPU time
   over the run (cores used) and the peak resident set sampled every 200 ms ("RSS under load").
4. Topics are deleted after use so the disk does not fill; data dirs are removed at the end.
5. cluster3 (bench/cluster_bench.py), after the single brokers are stopped: a 3-node Kafka (KRaft,
   combined broker+controller) and etcd + 3 Odradek brokers, one cluster up at a time, alternating
   every run: RF=3, min.insync.replicas=2, acks=all, 1 KiB records into 3 partitions with
   ProducerPerformance, read back with ConsumerPerformance, then EndToEndLatency on an RF=3
   partition; broker CPU is the sum over the three broker processes (Odradek's etcd apart).
   ``--only cluster3`` runs this case alone.

``--quick`` (< 5 minutes): one run, fewer records, the 1 KiB acks=1 cases plus one 100 B case,
end-to-end latency, the broker-bound case with 150 MB and a 5 s half-rate run, and the 3-node case
with 30 MB. It writes to .cache/bench-quick unless --out is given, so iteration never overwrites the
published table in docs/benchmarks/.

Before/after a change: ``--baseline DIR`` adds a third broker, Odradek from another checkout (e.g.
``git worktree add /tmp/base <commit>``), alternated with the others in every run; the report then
has a second table, this checkout against the baseline. ``--no-kafka`` leaves Kafka out (a quicker
before/after; without ``--baseline`` it only prints and stores Odradek's raw runs). Every produce
and consume figure carries the broker's CPU-seconds per GB moved (process CPU time over the bytes
of the run): on a machine where the Java clients use most of the CPU it is the fairest efficiency
figure.

``--many-core`` runs the many-core mode instead (bench/many_core.py: brokers and clients pinned to
disjoint cores, Kafka 4.4 against Odradek as 1 process, N processes and 3 processes with RF=3); the
other arguments are that mode's.

Who may call it: the command line (one process; it owns both brokers and stops them on exit).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cluster_bench, native_load, perf_tools, report  # noqa: E402
from bench.clusters import KafkaClusterTarget, OdradekClusterTarget  # noqa: E402
from bench.servers import KafkaTarget, OdradekTarget, RssSampler, Target  # noqa: E402
from tools.kafka_dist import KAFKA_VERSION, ensure_jars  # noqa: E402

TXN_MS = 15  # ProducerPerformance --transaction-duration-ms of the txn case


@dataclass(frozen=True)
class Case:
    kind: str  # "produce", "consume", "e2e", "txn", "saturate", "halfrate" or "cluster3" (bench/cluster_bench.py)
    size: int
    acks: str
    partitions: int
    records: int
    processes: int = 1  # saturate/halfrate: producer processes, and as many consumers
    seconds: float = 0.0  # halfrate: how long the rate-limited producers run
    rate_mb: float = 0.0  # halfrate: total MB/s, set in the run from the saturate results
    transaction_ms: int = 0  # txn: ProducerPerformance's --transaction-duration-ms

    @property
    def key(self) -> str:
        if self.kind == "cluster3":
            return cluster_bench.CASE_KEY
        if self.kind == "saturate":
            return f"saturate {self.size}B {self.processes}+{self.processes} procs {self.partitions}p"
        if self.kind == "halfrate":
            return f"half-rate {self.size}B {self.processes} procs {self.partitions}p"
        if self.kind == "e2e":
            return f"e2e {self.size}B acks={self.acks}"
        if self.kind == "txn":
            return f"txn produce {self.size}B {self.transaction_ms}ms txns {self.partitions}p"
        if self.kind == "consume":
            return f"consume {self.size}B {self.partitions}p"
        return f"produce {self.size}B acks={self.acks} {self.partitions}p"


@dataclass
class Plan:
    runs: int
    cases: list[Case]
    e2e_messages: int
    startup_runs: int
    quick: bool
    kinds: set[str] = field(default_factory=lambda: {"startup", "produce", "consume", "e2e", "txn", "saturate",
                                                     "cluster3"})

    @property
    def single_node(self) -> bool:
        """Whether any single-node case (or the start-up figure) is to be measured."""
        return bool(self.kinds - {"cluster3"})


def make_plan(quick: bool, runs: int | None, only: set[str] | None) -> Plan:
    if quick:
        counts = {100: 150_000, 1024: 30_000}
        shapes = [(1024, "1", 1), (1024, "1", 8), (1024, "all", 1), (100, "1", 1)]
        e2e = 500
        saturate_records, halfrate_s = 150_000, 5.0  # ~150 MB
    else:
        counts = {100: 1_000_000, 1024: 200_000}  # ~100 MB and ~200 MB of values per run
        shapes = [(size, acks, parts) for size in (100, 1024) for acks in ("1", "all") for parts in (1, 8)]
        e2e = 3000
        saturate_records, halfrate_s = 1_200_000, 20.0  # ~1.2 GB, the issue 18 reference load
    cases: list[Case] = []
    for size, acks, parts in shapes:
        cases.append(Case("produce", size, acks, parts, counts[size]))
        if acks == "1":
            cases.append(Case("consume", size, acks, parts, counts[size]))
    cases.append(Case("e2e", 1024, "all", 1, e2e))
    # Transactional produce: 1 KiB records, a commit every TXN_MS (about 1,000 records per
    # transaction at this machine's rates; the achieved figure is measured and reported).
    cases.append(Case("txn", 1024, "all", 1, counts[1024], transaction_ms=TXN_MS))
    # Broker-bound: 3 librdkafka producers then 3 consumers on 6 partitions, then the producers at
    # half the slower broker's saturation rate for the latency figure (bench/native_load.py).
    cases.append(Case("saturate", 1024, "1", 6, saturate_records, processes=3))
    cases.append(Case("halfrate", 1024, "1", 6, 0, processes=3, seconds=halfrate_s))
    # 3 Kafka nodes against etcd + 3 Odradek brokers: RF=3, acks=all, produce + consume + end-to-end.
    cases.append(Case("cluster3", 1024, "all", cluster_bench.PARTITIONS, counts[1024]))
    plan = Plan(runs or (1 if quick else 3), cases, e2e, 1 if quick else 3, quick)
    if only:
        plan.kinds = set(only)
        plan.cases = [c for c in cases if c.kind in only or (c.kind == "produce" and "consume" in only)
                      or (c.kind == "halfrate" and "saturate" in only)]
    return plan


# -- topics (confluent-kafka's AdminClient: no JVM start per topic) ----------------------------

def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                            config=dict(config or {}))], operation_timeout=30)
    futures[name].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # leaders elected, every replica in sync, visible in Metadata
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) >= replication_factor for p in md.partitions.values()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {name} has no leaders (or a short ISR) after 30 s")


def records_per_transaction(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Records over transactions: every committed transaction leaves one COMMIT marker per
    partition it wrote, which takes an offset, so the log end minus the records is the markers."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-ends"})
    try:
        end = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()
    markers = end - records
    return round(records / markers, 1) if markers > 0 else float("nan")


# file.delete.delay.ms (1 s, bench/servers.py) plus Kafka's log-deletion scheduling: by then the
# deleted topic's files are unlinked, so that kernel work stays out of the next measurement.
DELETE_SETTLE_S = 3.0


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        admin.delete_topics([name], operation_timeout=30)[name].result(60)
    except Exception as exc:  # a leftover topic costs disk only
        print(f"  (could not delete {name}: {exc})", flush=True)
        return
    time.sleep(DELETE_SETTLE_S)


# -- one measurement ----------------------------------------------------------------------------

def measure_native(target: Target, case: Case, topic: str) -> dict:
    """The broker-bound case: saturation produce then consume (each phase with its own broker CPU
    time), or the half-rate latency run. Cores = broker CPU-s over the phase's wall time."""
    boot = target.bootstrap

    class BrokerCpu(native_load.Probe):
        def start(self) -> None:
            self.cpu0, self.kernel0, self.t0 = target.cpu(), target.kernel_cpu(), time.monotonic()

        def end(self) -> None:
            self.cpu_s, self.wall = target.cpu() - self.cpu0, time.monotonic() - self.t0
            self.kernel_s = target.kernel_cpu() - self.kernel0

    started = BrokerCpu()

    def figures(prefix: str, phase: native_load.PhaseResult) -> dict:
        cpu_s, kernel_s, wall = started.cpu_s, started.kernel_s, started.wall
        if phase.errors:
            print(f"  ({prefix}: {phase.errors[0]})", flush=True)
        gb = phase.bytes / 1e9
        # The kernel's part (socket and page-cache work) is what no broker can trim in its own
        # code: it bounds how far apart two brokers' CPU per GB can be.
        return {f"{prefix}_mb_per_sec": round(phase.mb_per_sec, 2), f"{prefix}_records": phase.records,
                f"{prefix}_wall_s": round(phase.wall_s, 2), f"{prefix}_broker_cores": round(cpu_s / wall, 3),
                f"{prefix}_cpu_s_per_gb": round(cpu_s / gb, 3) if gb else float("nan"),
                f"{prefix}_kernel_cpu_s_per_gb": round(kernel_s / gb, 3) if gb else float("nan"),
                # The load's own CPU on the same cores: with it, a broker's CPU per GB decides the
                # rate only in the sum (docs/benchmarks/archive/issue18-produce-path.md, "The
                # clients' share").
                f"{prefix}_clients_cpu_s_per_gb": round(phase.clients_cpu_s / gb, 3) if gb else float("nan")}

    if case.kind == "halfrate":
        phase = native_load.rate_phase(boot, topic, case.rate_mb * native_load.MB, case.seconds, case.size,
                                       case.processes, started)
        row = figures("rate", phase)
        ms = [x * 1000 for x in phase.latencies]
        return {**row, "target_mb_per_sec": round(case.rate_mb, 2), "p50_ms": round(native_load.percentile(ms, 50), 2),
                "p99_ms": round(native_load.percentile(ms, 99), 2), "max_ms": round(max(ms, default=float("nan")), 2),
                "broker_cpu_cores": row["rate_broker_cores"], "broker_cpu_s_per_gb": row["rate_cpu_s_per_gb"]}
    produced = figures("produce", native_load.produce_phase(boot, topic, case.records, case.size, case.processes,
                                                            started))
    consumed = figures("consume", native_load.consume_phase(boot, topic, case.partitions, case.processes, started))
    return {**produced, **consumed, "broker_cpu_cores": produced["produce_broker_cores"],
            "broker_cpu_s_per_gb": produced["produce_cpu_s_per_gb"]}


def measure(target: Target, case: Case, sampler: RssSampler, topic: str, run: int) -> dict:
    load = os.getloadavg()[0]
    sampler.reset()
    if case.kind in ("saturate", "halfrate"):
        t0 = time.monotonic()
        result = measure_native(target, case, topic)
        return {"target": target.name, "case": case.key, "kind": case.kind, "run": run, "load1": round(load, 2),
                "wall_s": round(time.monotonic() - t0, 2), "rss_peak_mb": round(sampler.peak(target.pid) / 2**20, 1),
                **result}
    cpu0, t0 = target.cpu(), time.monotonic()
    boot = target.bootstrap
    if case.kind == "produce":
        result = asdict(perf_tools.produce(boot, topic, case.records, case.size, case.acks))
    elif case.kind == "consume":
        result = asdict(perf_tools.consume(boot, topic, case.records, f"perf-{uuid.uuid4().hex[:8]}"))
    elif case.kind == "txn":
        result = asdict(perf_tools.produce_transactional(boot, topic, case.records, case.size,
                                                         f"bench-txn-{uuid.uuid4().hex[:8]}", case.transaction_ms))
        result["records_per_transaction"] = records_per_transaction(boot, topic, case.partitions, result["records"])
    else:
        result = asdict(perf_tools.end_to_end(boot, topic, case.records, case.acks, case.size))
    wall = time.monotonic() - t0
    cpu_s = target.cpu() - cpu0
    # Bytes of record values moved: what the client asked for (produce, end-to-end) or what the
    # consumer reported reading.
    moved = result["mb"] * 2**20 if case.kind == "consume" else case.records * case.size
    return {"target": target.name, "case": case.key, "kind": case.kind, "run": run, "load1": round(load, 2),
            "wall_s": round(wall, 2), "broker_cpu_cores": round(cpu_s / wall, 3),
            "broker_cpu_s_per_gb": round(cpu_s / (moved / 1e9), 3) if moved else float("nan"),
            "rss_peak_mb": round(sampler.peak(target.pid) / 2**20, 1), **result}


def halfrate_mb(runs: list[dict], run: int) -> float:
    """The half-rate case's total rate: half the slowest broker's saturation produce MB/s in this
    run, so every broker is measured at the same rate and none of them is near its limit."""
    rates = [row["produce_mb_per_sec"] for row in runs if row["kind"] == "saturate" and row["run"] == run
             and row.get("produce_mb_per_sec", 0) > 0]
    return min(rates) / 2 if rates else float("nan")


def run_cases(plan: Plan, targets: list[Target], sampler: RssSampler, runs: list[dict]) -> None:
    for r in range(plan.runs):
        order = targets if r % 2 == 0 else list(reversed(targets))
        if len(targets) > 2:  # rotate as well, so no broker always runs in the middle
            order = order[r // 2 % len(order):] + order[:r // 2 % len(order)]
        topics: dict[tuple[str, int, int, str], str] = {}
        for case in plan.cases:
            if case.kind == "cluster3":  # its own clusters: run_cluster_cases
                continue
            if case.kind == "halfrate":
                case = replace(case, rate_mb=halfrate_mb(runs, r))
                if case.rate_mb != case.rate_mb or case.rate_mb <= 0:
                    print(f"[run {r + 1}/{plan.runs}] {case.key}: no saturation figure, skipped", flush=True)
                    continue
            for target in order:
                if case.kind == "consume":
                    topic = topics[(target.name, case.size, case.partitions, "1")]
                else:
                    topic = f"bench-{case.kind}-{case.size}-{case.acks}-{case.partitions}-r{r}"
                    create_topic(target.bootstrap, topic, case.partitions)
                    if case.kind == "produce":
                        topics[(target.name, case.size, case.partitions, case.acks)] = topic
                print(f"[run {r + 1}/{plan.runs}] {target.name:8s} {case.key} ...", end=" ", flush=True)
                # Write back what earlier cases (and the other broker) left dirty, so that no case
                # pays for another's writeback: with the saturate case's 1.2 GB in the page cache, a
                # half-rate run otherwise met ext4 stalls of 100+ ms in its own writes
                # (docs/benchmarks/archive/issue18-produce-path.md, "The half-rate tail"). Cached
                # pages stay for consumers.
                os.sync()
                row = measure(target, case, sampler, topic, r)
                runs.append(row)
                print(report.one_line(row), flush=True)
                consumed_later = case.kind == "produce" and case.acks == "1" and "consume" in plan.kinds
                if not consumed_later:
                    delete_topic(target.bootstrap, topic)


# -- machine and versions -----------------------------------------------------------------------

def machine_info() -> dict:
    def cmd(args: list[str]) -> str:
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=REPO)
            return (out.stdout or out.stderr).strip()
        except OSError:
            return "?"

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError):
        mem_kb = 0
    dirty = bool(cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
    return {
        "nproc": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem_kb / 2**20, 1), "kernel": platform.release(),
        "python": platform.python_version(), "java": cmd(["java", "-version"]).splitlines()[0],
        "kafka": KAFKA_VERSION, "odradek_commit": cmd(["git", "rev-parse", "--short", "HEAD"]) + (" (+ local changes)" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "load_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--many-core" in argv:  # its own mode with its own options (bench/many_core.py)
        from bench import many_core

        return many_core.main([a for a in argv if a != "--many-core"])
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short run of the main cases (< 5 minutes)")
    ap.add_argument("--runs", type=int, help="runs per case (default 3, --quick 1)")
    ap.add_argument("--out", type=Path, help="output dir (default docs/benchmarks, --quick .cache/bench-quick)")
    ap.add_argument("--work", type=Path, default=REPO / ".cache" / "bench-run", help="broker data dirs")
    ap.add_argument("--only", help="comma list of startup,produce,consume,e2e,txn,saturate,cluster3")
    ap.add_argument("--baseline", type=Path, help="another Odradek checkout to run alongside (before/after)")
    ap.add_argument("--no-kafka", action="store_true",
                    help="leave Apache Kafka out (with --baseline: a before/after; alone: Odradek's raw runs only)")
    args = ap.parse_args(argv)
    plan = make_plan(args.quick, args.runs, set(args.only.split(",")) if args.only else None)
    out = args.out or (REPO / ".cache" / "bench-quick" if args.quick else REPO / "docs" / "benchmarks")
    out.mkdir(parents=True, exist_ok=True)

    t_begin = time.monotonic()
    ensure_jars(quiet=False)
    info = machine_info()
    kafka = KafkaTarget(args.work / "kafka")
    odradek = OdradekTarget(args.work / "odradek")
    targets: list[Target] = [odradek] if args.no_kafka else [kafka, odradek]
    if args.baseline is not None:
        targets.append(OdradekTarget(args.work / "baseline", repo=args.baseline.resolve(), name="baseline"))
    cluster_targets: list[cluster_bench.ClusterTarget] = [KafkaClusterTarget(args.work / "kafka-cluster3"),
                                                          OdradekClusterTarget(args.work / "odradek-cluster3")]
    sampler = RssSampler()
    runs: list[dict] = []
    startup: dict[str, list[float]] = {t.name: [] for t in targets}
    idle: dict[str, float] = {}
    try:
        n = (plan.startup_runs if "startup" in plan.kinds else 1) if plan.single_node else 0
        for i in range(n):
            for target in (targets if i % 2 == 0 else list(reversed(targets))):
                load = os.getloadavg()[0]
                seconds = target.start()
                startup[target.name].append(round(seconds, 3))
                print(f"start-up {target.name}: {seconds * 1000:.0f} ms (load {load:.2f})", flush=True)
                if i < n - 1:
                    target.stop()
        if plan.single_node:
            time.sleep(5)
            for target in targets:
                idle[target.name] = round(target.rss() / 2**20, 1)
                sampler.watch(target.pid)
            print(f"idle RSS: {idle}", flush=True)
            run_cases(plan, targets, sampler, runs)
        for target in targets:  # the single brokers leave the cores to the clusters
            target.stop()
        if "cluster3" in plan.kinds:
            cluster_case = next(c for c in plan.cases if c.kind == "cluster3")
            clusters = [c for c in cluster_targets if c.name in {t.name for t in targets}]
            cluster_bench.run_cluster_cases(clusters, plan.runs, cluster_case.records, plan.e2e_messages, sampler,
                                            runs, lambda row: print(report.one_line(row), flush=True))
    finally:
        for target in targets:
            target.stop()
        for cluster in cluster_targets:
            cluster.stop()
        sampler.close()
        shutil.rmtree(args.work, ignore_errors=True)

    commands = {
        "kafka": kafka.command_line(),
        "baseline": f"{args.baseline} (same command)" if args.baseline else "",
        "odradek": odradek.command_line(),
        "produce": "java " + " ".join(perf_tools.JVM_OPTS) + " -cp <kafka jars> " + perf_tools.PRODUCER_PERF + " "
                   + " ".join(perf_tools.producer_args("<bootstrap>", "<topic>", 0, 0, "<acks>"))
                   .replace("--num-records 0", "--num-records <N>").replace("--record-size 0", "--record-size <size>"),
        "consume": "java ... " + perf_tools.CONSUMER_PERF + " "
                   + " ".join(perf_tools.consumer_args("<bootstrap>", "<topic>", 0, "<new group>"))
                   .replace("--messages 0", "--messages <N>"),
        "e2e": "java ... " + perf_tools.END_TO_END + " <bootstrap> <topic> <N> all 1024",
        "txn": "java ... " + perf_tools.PRODUCER_PERF + " " + " ".join(
            perf_tools.producer_args("<bootstrap>", "<topic>", 0, 1024, "all")
            + perf_tools.transactional_args("<new id>", TXN_MS)).replace("--num-records 0", "--num-records <N>"),
        "kafka_cluster3": cluster_targets[0].command_line(),
        "odradek_cluster3": cluster_targets[1].command_line(),
        "saturate": "bench/native_load.py: confluent-kafka " + " ".join(
            f"{k}={v}" for k, v in native_load.PRODUCER_CONFIG.items() if k != "log_level"),
        "this": "python -m bench.compare" + (" --quick" if args.quick else "") + (f" --runs {args.runs}" if args.runs else "")
                + (f" --only {args.only}" if args.only else "")
                + (f" --baseline {args.baseline}" if args.baseline else "") + (" --no-kafka" if args.no_kafka else ""),
    }
    data = {"machine": info, "plan": {"runs": plan.runs, "quick": plan.quick,
                                      "cases": [asdict(c) | {"key": c.key} for c in plan.cases]},
            "startup_s": startup, "idle_rss_mb": idle, "runs": runs, "commands": commands,
            "duration_s": round(time.monotonic() - t_begin, 1)}
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    if args.baseline is not None:
        against_base = report.summarise(data, reference="baseline")
        (out / "results-vs-baseline.md").write_text(report.baseline_markdown(data, against_base))
        print("\nthis checkout against the baseline (ratio = this / baseline):")
        print(report.markdown_table(against_base, reference="baseline"))
    if args.no_kafka:
        if args.baseline is None:  # nothing to compare with: the per-run lines above and the JSON
            print(f"\nwrote {out / 'results.json'} (Odradek only: no comparison table)")
        return 0
    summary = report.summarise(data)
    (out / "results.md").write_text(report.markdown(data, summary))
    try:
        report.plot(summary, info, out / "ratios.png")
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib, or the bench extra): no plot written")
    print(report.markdown_table(summary))
    print(f"\nwrote {out / 'results.md'}, {out / 'results.json'}, {out / 'ratios.png'} "
          f"in {data['duration_s'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
