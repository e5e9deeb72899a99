"""Turn bench/compare.py's raw runs into the published summary: medians per broker and case, the
Odradek/Kafka ratio, the issue's targets, a markdown document and a PNG of the ratios.

Ratios are always Odradek divided by Kafka. For throughput higher is better (target: ratio >= t);
for latency, start-up and memory lower is better (target: ratio <= t). A median of 0 ms on Kafka's
side (EndToEndLatency truncates samples to whole ms) makes a ratio meaningless; it is shown as n/a.

Who may call it: any thread; pure functions apart from the file writes in ``plot``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

# (case key, metric field) -> (comparison, target ratio): the targets, 1 KiB records.
TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("produce 1024B acks=1 1p", "mb_per_sec"): (">=", 0.5),
    ("produce 1024B acks=1 8p", "mb_per_sec"): (">=", 0.5),
    ("consume 1024B 1p", "fetch_mb_per_sec"): (">=", 0.7),
    ("consume 1024B 8p", "fetch_mb_per_sec"): (">=", 0.7),
    ("e2e 1024B acks=all", "p99_ms"): ("<=", 2.0),
    ("start-up", "ms"): ("<=", 0.1),
    # Issue 18, the broker-bound case.
    ("saturate 1024B 3+3 procs 6p", "produce_mb_per_sec"): (">=", 2.0),
    ("saturate 1024B 3+3 procs 6p", "produce_cpu_s_per_gb"): ("<=", 0.3),
    ("saturate 1024B 3+3 procs 6p", "consume_mb_per_sec"): (">=", 1.5),
    ("half-rate 1024B 3 procs 6p", "p99_ms"): ("<=", 1.0),
    # Issue 13, the 3-node case (bench/cluster_bench.py): RF=3, acks=all, 1 KiB.
    ("cluster3 1024B acks=all RF=3 3p", "produce_mb_per_sec"): (">=", 0.7),
    ("cluster3 1024B acks=all RF=3 3p", "consume_mb_per_sec"): (">=", 0.7),
    ("cluster3 1024B acks=all RF=3 3p", "e2e_p99_ms"): ("<=", 1.5),
}

# The goals beyond the targets, same form (shown beside the target; "met" is the target's).
GOALS: dict[tuple[str, str], tuple[str, float]] = {
    ("cluster3 1024B acks=all RF=3 3p", "produce_mb_per_sec"): (">=", 1.0),
    ("cluster3 1024B acks=all RF=3 3p", "consume_mb_per_sec"): (">=", 1.0),
    ("cluster3 1024B acks=all RF=3 3p", "e2e_p99_ms"): ("<=", 1.0),
}

# kind -> [(field, label, unit, higher_is_better)]
METRICS: dict[str, list[tuple[str, str, str, bool]]] = {
    "produce": [("mb_per_sec", "throughput", "MB/s", True), ("p99_ms", "p99 send latency", "ms", False),
                ("broker_cpu_s_per_gb", "broker CPU per GB", "CPU-s/GB", False)],
    "consume": [("fetch_mb_per_sec", "fetch throughput", "MB/s", True),
                ("mb_per_sec", "throughput incl. group join", "MB/s", True),
                ("broker_cpu_s_per_gb", "broker CPU per GB", "CPU-s/GB", False)],
    # Records per transaction is shown, not judged: the tool commits on a timer, so it follows the rate.
    "txn": [("mb_per_sec", "transactional throughput", "MB/s", True), ("p99_ms", "p99 send latency", "ms", False),
            ("broker_cpu_s_per_gb", "broker CPU per GB", "CPU-s/GB", False),
            ("records_per_transaction", "records per transaction", "records", True)],
    "e2e": [("p50_ms", "p50", "ms", False), ("p99_ms", "p99", "ms", False), ("avg_ms", "average", "ms", False),
            ("broker_cpu_s_per_gb", "broker CPU per GB", "CPU-s/GB", False)],
    # Broker cores are shown as a figure, not judged: more cores used is how a broker scales.
    "saturate": [("produce_mb_per_sec", "produce throughput", "MB/s", True),
                 ("produce_broker_cores", "broker cores while producing", "cores", True),
                 ("produce_cpu_s_per_gb", "broker CPU per GB produced", "CPU-s/GB", False),
                 ("produce_kernel_cpu_s_per_gb", "of which kernel (sockets, page cache)", "CPU-s/GB", False),
                 ("produce_clients_cpu_s_per_gb", "producer processes' CPU per GB (same cores)", "CPU-s/GB", False),
                 ("consume_mb_per_sec", "consume throughput", "MB/s", True),
                 ("consume_broker_cores", "broker cores while consuming", "cores", True),
                 ("consume_cpu_s_per_gb", "broker CPU per GB consumed", "CPU-s/GB", False),
                 ("consume_kernel_cpu_s_per_gb", "of which kernel (sockets, sendfile)", "CPU-s/GB", False),
                 ("consume_clients_cpu_s_per_gb", "consumer processes' CPU per GB (same cores)", "CPU-s/GB", False)],
    "halfrate": [("p50_ms", "p50 delivery latency at half saturation", "ms", False),
                 ("p99_ms", "p99 delivery latency at half saturation", "ms", False),
                 ("rate_mb_per_sec", "rate achieved", "MB/s", True),
                 ("rate_cpu_s_per_gb", "broker CPU per GB", "CPU-s/GB", False)],
    # Broker CPU is the sum over the 3 broker processes; Odradek's etcd is its own row (Kafka's
    # controllers run inside its brokers, so its etcd figure is 0 and the ratio n/a).
    "cluster3": [("idle_broker_cores", "3 brokers' cores while idle (fixed cost)", "cores", False),
                 ("idle_etcd_cores", "etcd cores while idle", "cores", False),
                 ("produce_mb_per_sec", "produce throughput", "MB/s", True),
                 ("produce_p99_ms", "p99 send latency", "ms", False),
                 ("produce_cpu_s_per_gb", "3 brokers' CPU per GB produced", "CPU-s/GB", False),
                 ("produce_etcd_cpu_s_per_gb", "etcd CPU per GB produced", "CPU-s/GB", False),
                 ("consume_mb_per_sec", "consume fetch throughput", "MB/s", True),
                 ("consume_cpu_s_per_gb", "3 brokers' CPU per GB consumed", "CPU-s/GB", False),
                 ("e2e_p50_ms", "end-to-end p50", "ms", False),
                 ("e2e_p99_ms", "end-to-end p99", "ms", False),
                 ("e2e_avg_ms", "end-to-end average", "ms", False)],
}


@dataclass
class Row:
    case: str
    metric: str
    label: str
    unit: str
    higher_better: bool
    kafka: float
    odradek: float
    kafka_runs: list[float]
    odradek_runs: list[float]
    load: tuple[float, float]
    kafka_cpu: float | None = None
    odradek_cpu: float | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.kafka == 0 else self.odradek / self.kafka

    @property
    def target(self) -> tuple[str, float] | None:
        return TARGETS.get((self.case, self.metric))

    @property
    def goal(self) -> tuple[str, float] | None:
        return GOALS.get((self.case, self.metric))

    @property
    def met(self) -> bool | None:
        return _meets(self.target, self.ratio)

    @property
    def goal_met(self) -> bool | None:
        return _meets(self.goal, self.ratio)


def _meets(bound: tuple[str, float] | None, ratio: float | None) -> bool | None:
    if bound is None or ratio is None:
        return None
    return ratio >= bound[1] if bound[0] == ">=" else ratio <= bound[1]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(data: dict, reference: str = "kafka") -> list[Row]:
    """Rows of Odradek (this checkout) against ``reference``: "kafka", or "baseline" for a before/after
    run. The Row fields named kafka_* hold the reference's figures."""
    rows: list[Row] = []
    runs = data["runs"]
    seen: list[str] = []
    for r in runs:
        if r["case"] not in seen:
            seen.append(r["case"])
    for case in seen:
        of_case = [r for r in runs if r["case"] == case]
        kind = of_case[0]["kind"]
        loads = [r["load1"] for r in of_case]
        for metric, label, unit, higher in METRICS[kind]:
            # Runs recorded before a metric existed lack it (broker_cpu_s_per_gb): left out.
            k = [r[metric] for r in of_case if r["target"] == reference and metric in r]
            o = [r[metric] for r in of_case if r["target"] == "odradek" and metric in r]
            if not k or not o:
                continue
            # A case with phases (saturate, cluster3) has each phase's cores; the rest one figure.
            phase_cores = metric.split("_", 1)[0] + "_broker_cores"
            cores = phase_cores if all(phase_cores in r for r in of_case) else "broker_cpu_cores"
            kc = _median([r[cores] for r in of_case if r["target"] == reference])
            oc = _median([r[cores] for r in of_case if r["target"] == "odradek"])
            rows.append(Row(case, metric, label, unit, higher, _median(k), _median(o), k, o,
                            (min(loads), max(loads)), kc, oc))
    su = data["startup_s"]
    if su.get(reference) and su.get("odradek"):
        k = [s * 1000 for s in su[reference]]
        o = [s * 1000 for s in su["odradek"]]
        rows.append(Row("start-up", "ms", "to first answered ApiVersions", "ms", False, _median(k), _median(o),
                        k, o, (float("nan"), float("nan"))))
    idle = data["idle_rss_mb"]
    if idle.get(reference) and idle.get("odradek"):
        rows.append(Row("memory idle", "rss", "resident set, idle", "MiB", False, idle[reference], idle["odradek"],
                        [idle[reference]], [idle["odradek"]], (float("nan"), float("nan"))))
        peak = {t: max([r["rss_peak_mb"] for r in runs if r["target"] == t] or [0.0]) for t in (reference, "odradek")}
        if peak[reference] and peak["odradek"]:
            rows.append(Row("memory under load", "rss", "peak resident set over all runs", "MiB", False,
                            peak[reference], peak["odradek"], [peak[reference]], [peak["odradek"]],
                            (float("nan"), float("nan"))))
    return rows


def _fmt(x: float) -> str:
    if x != x:  # nan
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def markdown_table(rows: list[Row], reference: str = "kafka") -> str:
    ref = "Kafka" if reference == "kafka" else reference
    out = [f"| case | metric | {ref} | Odradek | Odradek/{ref} | target | met | {ref} runs | Odradek runs "
           f"| broker CPU cores {ref[0].upper()} / O | load avg (1 min) |",
           "|---|---|---:|---:|---:|---|---|---|---|---|---|"]
    for row in rows:
        ratio = "n/a" if row.ratio is None else f"{row.ratio:.2f}x"
        # The targets are ratios against Kafka; against a baseline there are none.
        target = f"{row.target[0]} {row.target[1]}x" if row.target and reference == "kafka" else ""
        met = {None: "", True: "yes", False: "**no**"}[row.met if reference == "kafka" else None]
        if row.goal and reference == "kafka":
            target += f" (goal {row.goal[1]}x)"
            met += {None: "", True: " (goal: yes)", False: " (goal: no)"}[row.goal_met]
        cpu = "" if row.kafka_cpu is None else f"{row.kafka_cpu:.2f} / {row.odradek_cpu:.2f}"
        load = "" if row.load[0] != row.load[0] else f"{row.load[0]:.1f}-{row.load[1]:.1f}"
        out.append(f"| {row.case} | {row.label} ({row.unit}) | {_fmt(row.kafka)} | {_fmt(row.odradek)} | {ratio} "
                   f"| {target} | {met} | {', '.join(_fmt(v) for v in row.kafka_runs)} "
                   f"| {', '.join(_fmt(v) for v in row.odradek_runs)} | {cpu} | {load} |")
    return "\n".join(out) + "\n"


def markdown(data: dict, rows: list[Row]) -> str:
    m = data["machine"]
    c = data["commands"]
    plan = data["plan"]
    cases = ", ".join(f"{x['key']} ({x['records']:,} records)" if x["kind"] != "halfrate"
                      else f"{x['key']} ({x['seconds']:.0f} s)" for x in plan["cases"])
    return f"""# Odradek vs Apache Kafka {m['kafka']}: Kafka's own perf tools, same machine, same run

Generated by `{c['this']}` on {m['date']} in {data['duration_s'] / 60:.1f} minutes
(`make bench` runs exactly this). Medians of {plan['runs']} run(s) per case; runs alternate between the
brokers, flipping the order every run. Ratios are Odradek / Kafka.

## Machine

- {m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']} GiB RAM, Linux {m['kernel']}, loopback networking
- Python {m['python']}, {m['java']}, Apache Kafka {m['kafka']} (Maven Central jars), Odradek {m['odradek_commit']}
- 1-minute load average when the run started: {m['load_at_start']}. The machine may be shared; every figure
  below carries the load average range seen while it was measured. Both brokers and the tools share the
  same {m['nproc']} cores.

## Results

{markdown_table(rows)}
"broker CPU cores" is the broker process's CPU time divided by the run's wall time (1.00 = one core busy
for the whole run). Consume "fetch throughput" excludes the consumer group join (ConsumerPerformance's
fetch.MB.sec); "incl. group join" is its MB.sec. EndToEndLatency reports whole milliseconds.
The saturate and half-rate rows are the broker-bound case (librdkafka clients, bench/native_load.py;
docs/performance.md explains them); a consume row's cores are those of the consume phase.
The cluster3 rows are the 3-node case (bench/cluster_bench.py: RF=3, min.insync.replicas=2, acks=all,
one cluster up at a time): broker CPU and cores are summed over the three broker processes; Odradek's
etcd is its own row (Kafka's controllers run inside its brokers, so its etcd figure is 0).

![Odradek/Kafka ratios](ratios.png)

## Exact commands

- Kafka: `{c['kafka']}`; settings: KRaft single node (broker+controller), num.partitions=1,
  offsets.topic.num.partitions=5, group.initial.rebalance.delay.ms=0, everything else Kafka's default.
- Odradek: `{c['odradek']}`
- Produce: `{c['produce']}`
- Consume: `{c['consume']}`
- End-to-end: `{c['e2e']}`
- Transactional produce: `{c.get('txn', '')}`
- 3-node Kafka: `{c.get('kafka_cluster3', '')}`
- 3-node Odradek: `{c.get('odradek_cluster3', '')}`
- Cases: {cases}
- Start-up: spawn of the server process to the first ApiVersions v0 answered with error 0 on a fresh
  connection, empty data dir (Kafka's log dir formatted beforehand); {len(data['startup_s'].get('kafka', []))} start(s) each.
- Memory: VmRSS of the server process; idle = 5 s after start-up with no topics; under load = the highest
  200 ms sample over all runs.

Raw runs: results.json (every run with its load average, wall time, broker CPU and peak RSS).
"""


def baseline_markdown(data: dict, rows: list[Row]) -> str:
    m = data["machine"]
    return f"""# Odradek {m['odradek_commit']} against a baseline checkout ({data['commands']['baseline']})

Generated by `{data['commands']['this']}` on {m['date']} in {data['duration_s'] / 60:.1f} minutes. Medians of
{data['plan']['runs']} run(s) per case, the brokers alternated in every run. Ratio = this checkout / baseline.

{markdown_table(rows, reference="baseline")}
"""


def plot(rows: list[Row], machine: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tput = [r for r in rows if r.higher_better and r.ratio is not None]
    # A producer's p99 at full speed is queueing in its own buffer, not a latency target: left out.
    lower = [r for r in rows if not r.higher_better and r.ratio is not None and not r.case.startswith("produce")]
    fig, axes = plt.subplots(1, 2, figsize=(14, max(4.0, 0.42 * max(len(tput), len(lower)) + 1.8)))
    for ax, group, title in ((axes[0], tput, "throughput (higher is better)"),
                             (axes[1], lower, "latency, start-up, memory (lower is better)")):
        labels = [f"{r.case} - {r.label}" for r in group]
        values = [r.ratio for r in group]
        colours = ["#2a9d8f" if r.met else "#e76f51" if r.met is False else "#8d99ae" for r in group]
        ys = range(len(group))
        ax.barh(list(ys), values, color=colours)
        for y, r in zip(ys, group, strict=True):
            ax.text(r.ratio, y, f" {r.ratio:.2f}x", va="center", fontsize=8)
            if r.target:
                ax.plot([r.target[1], r.target[1]], [y - 0.4, y + 0.4], color="black", linewidth=2)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(title, fontsize=10)
        if group is lower:
            ax.set_xscale("log")
    fig.suptitle(f"Odradek vs Kafka {machine['kafka']} - {machine['nproc']} CPUs, {machine['date']} "
                 f"(black ticks: targets; green met, red not met)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def one_line(row: dict) -> str:
    per_gb = row.get("broker_cpu_s_per_gb")
    per_gb = "" if per_gb is None or per_gb != per_gb else f", {per_gb:.1f} CPU-s/GB"
    extra = f"cpu {row['broker_cpu_cores']:.2f} cores{per_gb}, rss {row['rss_peak_mb']:.0f} MiB, load {row['load1']:.1f}"
    if row["kind"] == "produce":
        return f"{row['mb_per_sec']:.1f} MB/s, p99 {row['p99_ms']:.0f} ms ({extra})"
    if row["kind"] == "txn":
        return (f"{row['mb_per_sec']:.1f} MB/s, p99 {row['p99_ms']:.0f} ms, "
                f"{row['records_per_transaction']:.0f} records/transaction ({extra})")
    if row["kind"] == "consume":
        return f"{row['fetch_mb_per_sec']:.1f} MB/s fetch, {row['mb_per_sec']:.1f} MB/s overall ({extra})"
    if row["kind"] == "saturate":
        return (f"produce {row['produce_mb_per_sec']:.1f} MB/s, {row['produce_broker_cores']:.2f} cores, "
                f"{row['produce_cpu_s_per_gb']:.1f} CPU-s/GB; consume {row['consume_mb_per_sec']:.1f} MB/s, "
                f"{row['consume_broker_cores']:.2f} cores, {row['consume_cpu_s_per_gb']:.2f} CPU-s/GB "
                f"(rss {row['rss_peak_mb']:.0f} MiB, load {row['load1']:.1f})")
    if row["kind"] == "cluster3":
        return (f"idle {row.get('idle_broker_cores', float('nan')):.2f} cores; "
                f"produce {row['produce_mb_per_sec']:.1f} MB/s ({row['produce_broker_cores']:.2f} cores, "
                f"{row['produce_cpu_s_per_gb']:.1f} CPU-s/GB + etcd {row['produce_etcd_cpu_s_per_gb']:.2f}); "
                f"consume {row['consume_mb_per_sec']:.1f} MB/s ({row['consume_cpu_s_per_gb']:.1f} CPU-s/GB); "
                f"e2e p50 {row['e2e_p50_ms']:.0f} ms, p99 {row['e2e_p99_ms']:.0f} ms "
                f"(rss {row['rss_peak_mb']:.0f} MiB, load {row['load1']:.1f})")
    if row["kind"] == "halfrate":
        return (f"{row['rate_mb_per_sec']:.1f} of {row['target_mb_per_sec']:.1f} MB/s, p50 {row['p50_ms']:.1f} ms, "
                f"p99 {row['p99_ms']:.1f} ms ({extra})")
    return f"p50 {row['p50_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms, avg {row['avg_ms']:.2f} ms ({extra})"
