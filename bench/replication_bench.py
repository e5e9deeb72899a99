"""The replication path's cost on this machine (issue 31 item 3): a 3-node Odradek cluster (etcd plus
three brokers, bench/clusters.py's settings), RF=3, min.insync.replicas=2, acks=all, 1 KiB records.

Each round starts a fresh cluster from one source tree (``--tree``: a checkout's root, so two trees
give an A/B; rounds alternate the trees), creates the topics, then runs two phases:

1. **latency**: one confluent-kafka producer (acks=all, linger 0) sends one record and waits for its
   delivery before the next, at ``--rate`` records/s at most, on a 1-partition RF=3 topic: each
   delivery is one replication round (leader append, the followers' fetches, the HW, the produce's
   answer). p50 / p99 of those round trips.
2. **throughput**: one producer (acks=all, linger 5 ms, 64 KiB batches) writes ``--mb`` MB into a
   3-partition RF=3 topic (a leader on each broker). The brokers' CPU time over the phase, by thread
   (the handler loop's, the others'), the Fetch and Produce requests the brokers
   handled (their metrics endpoints; no consumer runs, so every Fetch is a follower's), and from
   them CPU-s per GB produced (record values, counted once) and the handler thread's microseconds per
   request.

``--idle-partitions N`` adds an idle N-partition RF=3 topic: each follower then follows about N/3
partitions of every leader besides the busy ones, as on a broker hosting many partitions.

On a 2-core machine the producer competes with the brokers: MB/s is client-bound, the CPU per GB and
per request are what compare. The medians over rounds are printed per tree, with every round.

    .venv/bin/python -m bench.replication_bench --tree /tmp/base --tree . --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.clusters import CLUSTER_SETTINGS, NODES, wait_for_brokers  # noqa: E402
from odradek.broker.launcher.cluster_launcher import LocalCluster, free_port  # noqa: E402

RECORD = b"x" * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (utime + stime) of a broker's threads: "handler" (the main thread, which runs
    the handler loop) and "other" (network threads, the IO pool, the metadata client...: CPython
    3.11 leaves every thread the process's name, so they are not told apart)."""
    out = {"handler": 0.0, "other": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out["handler" if task.name == str(pid) else "other"] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def request_counts(port: int) -> dict[str, float]:
    """Requests handled by API name (kafka_network_requestmetrics_requests_total, all versions)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            api = labels.split('request="', 1)[1].split('"', 1)[0]
            counts[api] = counts.get(api, 0.0) + float(value)
    return counts


class Cluster:
    def __init__(self, tree: Path, data_dir: Path) -> None:
        self.metrics_ports = {n: free_port() for n in range(1, NODES + 1)}
        self.cluster = LocalCluster(data_dir, NODES, base_port=None, etcd_port=None, overrides=CLUSTER_SETTINGS,
                                    log_level="WARNING",
                                    node_overrides={n: {"odradek.metrics.port": str(p)}
                                                    for n, p in self.metrics_ports.items()})
        for node in self.cluster.brokers.values():
            node.package_root = str(tree)

    def start(self) -> None:
        self.cluster.start(timeout=60)
        if not self.cluster.wait_members(60):
            raise RuntimeError("brokers did not see each other")
        wait_for_brokers(self.cluster.bootstrap, NODES)

    def stop(self) -> None:
        self.cluster.stop()

    def pids(self) -> list[int]:
        return [b.pid for b in self.cluster.brokers.values() if b.pid is not None]

    def cpu_by_group(self) -> dict[str, float]:
        groups = {"handler": 0.0, "other": 0.0}
        for pid in self.pids():
            for name, cpu in thread_cpu(pid).items():
                groups[name] += cpu
        return groups

    def cpu_by_broker(self) -> dict[int, dict[str, float]]:
        return {n: thread_cpu(b.pid) for n, b in self.cluster.brokers.items() if b.pid is not None}

    def requests(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for port in self.metrics_ports.values():
            for api, n in request_counts(port).items():
                total[api] = total.get(api, 0.0) + n
        return total


def create_topic(bootstrap: str, name: str, partitions: int) -> list[int]:
    """The topic, RF=3, every replica in the ISR; returns each partition's leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, NODES, config={"min.insync.replicas": "2"})])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every replica in the ISR: acks=all then waits for all three
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == NODES for p in md.partitions.values()):
            return [md.partitions[i].leader for i in range(partitions)]
        time.sleep(0.2)
    raise RuntimeError(f"{name}: not every replica in the ISR after 30 s")


def latency_phase(cluster: Cluster, topic: str, leader: int, rate: float, seconds: float) -> dict[str, float]:
    """Rounds one at a time; with them the brokers' CPU per round, the leader's and the two
    followers' (each round is one Produce and one Fetch per follower, plus the idle fetch polls
    of the other partitions: small next to a round's work at 100 rounds/s)."""
    from confluent_kafka import Producer

    bootstrap = cluster.cluster.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": True})
    for _ in range(20):  # connections and metadata: not measured
        producer.produce(topic, RECORD)
        producer.flush(10)
    rounds: list[float] = []
    done: list[float] = []
    interval = 1.0 / rate
    cpu0 = cluster.cpu_by_broker()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        producer.produce(topic, RECORD, on_delivery=lambda err, _msg: done.append(time.monotonic()) if err is None
                         else None)
        while not done:
            producer.poll(0.0005)
        rounds.append((done.pop() - start) * 1000)
        left = interval - (time.monotonic() - start)
        if left > 0:
            time.sleep(left)
    cpu1 = cluster.cpu_by_broker()
    producer.flush(10)
    n = len(rounds)
    followers = [b for b in cpu1 if b != leader]
    rounds.sort()
    return {"rounds": n, "p50_ms": statistics.median(rounds), "p99_ms": rounds[min(n - 1, int(n * 0.99))],
            "leader_handler_us_per_round": (cpu1[leader]["handler"] - cpu0[leader]["handler"]) / n * 1e6,
            "leader_other_us_per_round": (cpu1[leader]["other"] - cpu0[leader]["other"]) / n * 1e6,
            "follower_handler_us_per_round": sum(cpu1[b]["handler"] - cpu0[b]["handler"] for b in followers)
            / len(followers) / n * 1e6,
            "follower_other_us_per_round": sum(cpu1[b]["other"] - cpu0[b]["other"] for b in followers)
            / len(followers) / n * 1e6}


def throughput_phase(cluster: Cluster, topic: str, mb: float) -> dict[str, float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 65536, "enable.idempotence": True, "queue.buffering.max.kbytes": 65536})
    producer.produce(topic, RECORD)
    producer.flush(10)
    count = int(mb * 1_000_000 / len(RECORD))
    cpu0, req0, t0 = cluster.cpu_by_group(), cluster.requests(), time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records left unsent")
    wall = time.monotonic() - t0
    cpu1, req1 = cluster.cpu_by_group(), cluster.requests()
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    fetches = req1.get("Fetch", 0) - req0.get("Fetch", 0)
    produces = req1.get("Produce", 0) - req0.get("Produce", 0)
    gb = count * len(RECORD) / 1e9
    total = sum(cpu.values())
    return {
        "mb_s": count * len(RECORD) / 1e6 / wall, "cpu_s_per_gb": total / gb,
        "handler_cpu_s_per_gb": cpu["handler"] / gb, "other_cpu_s_per_gb": cpu["other"] / gb,
        "fetches": fetches, "produces": produces, "fetches_per_produce": fetches / max(produces, 1),
        "handler_us_per_request": cpu["handler"] / max(fetches + produces, 1) * 1e6,
        "broker_us_per_request": total / max(fetches + produces, 1) * 1e6,
    }


class Profiles:
    """A profiler on every broker over a phase (``--profile DIR``): py-spy's collapsed stacks (idle
    frames left out), or ``perf record`` (``--profiler perf``: the kernel, uvloop and the C
    extensions, which py-spy sees as one frame), one file per broker and phase. It costs CPU on a
    shared machine: not for A/B figures."""

    def __init__(self, out_dir: Path | None, cluster: Cluster, phase: str, tool: str = "py-spy") -> None:
        self.out_dir, self.cluster, self.phase, self.tool = out_dir, cluster, phase, tool
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Profiles:
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            spy = str(Path(sys.executable).with_name("py-spy"))
            for node_id, node in self.cluster.cluster.brokers.items():
                out = self.out_dir / f"{self.phase}-broker-{node_id}"
                if self.tool == "perf":
                    cmd = ["perf", "record", "-F", "499", "-g", "-p", str(node.pid), "-o", f"{out}.perf"]
                else:
                    cmd = [spy, "record", "-p", str(node.pid), "-r", "250", "--format", "raw", "-o", f"{out}.txt",
                           "--threads", "--nonblocking"]
                self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)  # attached before the phase starts
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            proc.wait(30)


def one_round(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        cluster = Cluster(tree, Path(tmp))
        try:
            cluster.start()
            bootstrap = cluster.cluster.bootstrap
            suffix = uuid.uuid4().hex[:6]
            (leader,) = create_topic(bootstrap, f"lat-{suffix}", 1)
            create_topic(bootstrap, f"tput-{suffix}", 3)
            if args.idle_partitions:
                create_topic(bootstrap, f"idle-{suffix}", args.idle_partitions)
            with Profiles(args.profile, cluster, "latency", args.profiler):
                out = latency_phase(cluster, f"lat-{suffix}", leader, args.rate, args.latency_s)
            with Profiles(args.profile, cluster, "throughput", args.profiler):
                out.update(throughput_phase(cluster, f"tput-{suffix}", args.mb))
            return out
        finally:
            cluster.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path, help="source tree to run the brokers from (repeat: A/B)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per tree (alternated)")
    ap.add_argument("--rate", type=float, default=100.0, help="latency phase: records/s at most")
    ap.add_argument("--latency-s", type=float, default=10.0, help="latency phase length")
    ap.add_argument("--mb", type=float, default=100.0, help="throughput phase: MB produced")
    ap.add_argument("--idle-partitions", type=int, default=0,
                    help="also an idle RF=3 topic of this many partitions (a broker's followers fetch them too)")
    ap.add_argument("--json", type=Path, help="write every round here")
    ap.add_argument("--profile", type=Path, help="profile every broker per phase into this folder (1 round)")
    ap.add_argument("--profiler", choices=("py-spy", "perf"), default="py-spy")
    args = ap.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [REPO])]
    results: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for tree in order:
            res = one_round(tree, args)
            results[str(tree)].append(res)
            print(f"round {r + 1} {tree}: " + ", ".join(f"{k}={v:.4g}" for k, v in res.items()), flush=True)
    for tree, rows in results.items():
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        print(f"median {tree}: " + ", ".join(f"{k}={v:.4g}" for k, v in med.items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
