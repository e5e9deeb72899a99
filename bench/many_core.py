"""``make bench``'s many-core mode (issue 31, item 5): what one host's cores buy, brokers and clients on
disjoint cores, Kafka 4.4 against Odradek as one process, as N processes (``odradek --processes``)
and as a 3-process RF=3 deployment.

    python -m bench.many_core [--broker-cores N] [--clients N] [--gb G] [--cases a,b,...] [--out DIR]
                              [--data-dir DIR] [--heap 4g] [--halfrate-s S] [--quick]
    make bench BENCH_ARGS="--many-core ..."        (bench/compare.py hands the rest to this module)

The cores. The usable cores (this process's CPU affinity) are split: the first ``--broker-cores``
(default half) run the brokers, the rest the clients. Pinning is the ``sched_setaffinity`` call
``taskset`` makes: the harness pins its own thread to the broker cores while it spawns a broker (the
processes and their threads inherit the mask), re-pins every thread of every broker process once it
serves (Kafka's JVM, Odradek's supervisor and its children), then pins itself to the client cores,
which the client processes it spawns inherit. With fewer than 8 usable cores the clients cannot
outrun a broker, and the report says its figures are client-bound (issue 31: on 2 cores the
single-broker figures measured the clients).

The cases (``--cases``, all by default), each on a fresh data dir, one at a time:
- ``kafka-1``: one Kafka 4.4.0 node (KRaft combined, ``--heap``), acks=1;
- ``odradek-1``: one Odradek process, acks=1;
- ``odradek-N``: ``odradek --processes N`` (N = the broker cores), RF=1, acks=1;
- ``kafka-3-rf3``: three Kafka nodes, RF=3, min.insync.replicas=2, acks=all;
- ``odradek-3-rf3``: ``odradek --processes 3``, RF=3, min.insync.replicas=2, acks=all.
Each: a warm-up (``--warmup-gb`` produced and consumed on a throwaway topic, unmeasured: a cold
JVM runs interpreted code), then a topic of ``--partitions`` (16) partitions; the clients' producer processes (librdkafka,
bench/native_load.py: 1 KiB random records, linger.ms=5, 64 KiB batches, no compression) write
``--gb`` GB as fast as they can; as many consumer processes read it back; then the producers are held
to half of that case's produce rate for ``--halfrate-s`` seconds and every record's delivery latency
is kept (p50/p99 "at half saturation").

Figures per case and phase: MB/s (MiB of record values per second), broker cores (CPU-s of every
broker-side process over the phase / wall: JVMs; Odradek's supervisor with its metadata store and
every child), broker CPU-s per GB, client CPU-s per GB (the client processes' own CPU time), and the
half-rate p50/p99. Written to ``<out>/many-core.json`` (with the machine: cores, the split, Python,
Kafka version) and ``<out>/many-core.md`` (a table).

Who may call it: the command line (one process; it owns the brokers and stops them on exit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import native_load  # noqa: E402
from bench.servers import COMMON_SETTINGS, cpu_seconds, wait_until_serving  # noqa: E402

MB = native_load.MB
RECORD_SIZE = 1024
CLIENT_BOUND_BELOW_CORES = 8
CASES = ("kafka-1", "odradek-1", "odradek-N", "kafka-3-rf3", "odradek-3-rf3")
RF3_SETTINGS = {"default.replication.factor": "3", "min.insync.replicas": "2",
                "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2"}


# -- cores ------------------------------------------------------------------------------------------

def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def split_cores(cores: list[int], broker_cores: int | None) -> tuple[list[int], list[int]]:
    """(broker cores, client cores): the first ``broker_cores`` (default half, at least one) and the
    rest (at least one; on a single core both share it)."""
    if len(cores) == 1:
        return cores, cores
    count = broker_cores if broker_cores else max(1, len(cores) // 2)
    count = min(max(count, 1), len(cores) - 1)
    return cores[:count], cores[count:]


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (an Odradek supervisor's children; /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in _tasks(current):
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
    return found


def precise_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid``'s live threads to the nanosecond (``/proc/PID/task/TID/schedstat``).

    /proc/PID/stat counts in clock ticks (10 ms): a tiny run's broker could read 0.0 s, which CI once did.
    Threads that exited are missing here; the brokers' threads live as long as the phase. Falls back to
    the tick count where schedstat is absent (kernels without schedstats)."""
    total, seen = 0.0, False
    for tid in _tasks(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
            seen = True
    return total if seen else cpu_seconds(pid)


def pin(pids: list[int], cores: list[int]) -> None:
    """Every thread of every process in ``pids`` to ``cores`` (what ``taskset -a -p`` does)."""
    for pid in pids:
        for tid in _tasks(pid):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cores)


def affinity(pids: list[int]) -> list[int]:
    """Every core some thread of ``pids`` may run on (what the report shows the brokers were held to)."""
    cores: set[int] = set()
    for pid in pids:
        for tid in _tasks(pid):
            with contextlib.suppress(OSError):
                cores |= os.sched_getaffinity(tid)
    return sorted(cores)


@contextlib.contextmanager
def pinned_self(cores: list[int]) -> Iterator[None]:
    """This thread on ``cores`` for the block (what it spawns inherits), then back."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- targets ----------------------------------------------------------------------------------------

class Deployment:
    """What a case runs its clients against: ``start()``, ``stop()``, ``bootstrap``, ``pids()``."""

    name = "?"
    replication_factor = 1
    acks = "1"

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pids(self) -> list[int]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def cpu(self) -> float:
        return sum(precise_cpu_seconds(pid) for pid in self.pids())


class KafkaNodes(Deployment):
    """One Kafka 4.4.0 node (bench/servers' settings) or three (bench/clusters': RF=3, min ISR 2)."""

    def __init__(self, data_dir: Path, nodes: int, heap: str) -> None:
        self.nodes, self.heap, self.data_dir = nodes, heap, data_dir
        self.name = "kafka-1" if nodes == 1 else "kafka-3-rf3"
        self.replication_factor = 1 if nodes == 1 else 3
        self.acks = "1" if nodes == 1 else "all"
        self._target: Any = None

    @property
    def bootstrap(self) -> str:
        return str(self._target.bootstrap)

    def start(self) -> None:
        if self.nodes == 1:
            from bench.servers import KafkaTarget

            self._target = KafkaTarget(self.data_dir, heap=self.heap)
        else:
            from bench.clusters import KafkaClusterTarget

            self._target = KafkaClusterTarget(self.data_dir, heap=self.heap)
        self._target.start()

    def stop(self) -> None:
        if self._target is not None:
            self._target.stop()

    def pids(self) -> list[int]:
        return [self._target.pid] if self.nodes == 1 else list(self._target.pids)

    def describe(self) -> str:
        return f"Kafka 4.4.0 x{self.nodes} (KRaft combined, -Xmx{self.heap} G1)"


class OdradekProcesses(Deployment):
    """``python -m odradek.broker.main --processes N`` (N=1: the plain broker) on loopback, data in ``data_dir``."""

    def __init__(self, data_dir: Path, processes: int, name: str, extra: dict[str, str] | None = None,
                 acks: str = "1") -> None:
        self.data_dir, self.processes, self.name = data_dir, processes, name
        self.extra = dict(extra or {})
        self.replication_factor = int(self.extra.get("default.replication.factor", "1"))
        self.acks = acks
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    def command(self) -> list[str]:
        settings = {"node.id": "1", "log.dirs": str(self.data_dir / "logs"),
                    "listeners": f"PLAINTEXT://127.0.0.1:{self.base_port}", **COMMON_SETTINGS, **self.extra}
        cmd = [sys.executable, "-m", "odradek.broker.main", "--log-level", "WARNING", "--processes", str(self.processes)]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True)
        self.base_port = free_port_run(self.processes)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.data_dir / "odradek.log", "ab")
        self.proc = subprocess.Popen(self.command(), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        for i in range(self.processes):
            try:
                wait_until_serving("127.0.0.1", self.base_port + i, self.proc, timeout=120)
            except RuntimeError:
                self.stop()
                tail = (self.data_dir / "odradek.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"{self.name} did not start:\n{tail}") from None
        if self.processes > 1:
            from bench.clusters import wait_for_brokers

            wait_for_brokers(self.bootstrap, self.processes)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                for pid in reversed(process_tree(self.proc.pid)):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.proc.wait()

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid) if self.proc is not None else []

    def describe(self) -> str:
        return f"Odradek x{self.processes} process(es) (--processes {self.processes})"


def free_port_run(count: int) -> int:
    import random
    import socket

    for _ in range(500):
        base = random.randrange(20000, 30000 - count)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def make_deployment(case: str, work: Path, broker_cores: int, heap: str) -> Deployment:
    data = work / case
    if case == "kafka-1":
        return KafkaNodes(data, 1, heap)
    if case == "kafka-3-rf3":
        return KafkaNodes(data, 3, heap)
    if case == "odradek-1":
        return OdradekProcesses(data, 1, case)
    if case == "odradek-N":
        return OdradekProcesses(data, max(1, broker_cores), f"odradek-N={max(1, broker_cores)}")
    if case == "odradek-3-rf3":
        return OdradekProcesses(data, 3, case, RF3_SETTINGS, acks="all")
    raise ValueError(f"unknown case {case!r}; one of {', '.join(CASES)}")


# -- one case ---------------------------------------------------------------------------------------

class _CpuProbe(native_load.Probe):
    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.cpu_s = 0.0

    def start(self) -> None:
        self._cpu0 = self.deployment.cpu()

    def end(self) -> None:
        self.cpu_s = self.deployment.cpu() - self._cpu0


def phase_figures(prefix: str, phase: native_load.PhaseResult, broker_cpu_s: float) -> dict[str, Any]:
    gb = phase.bytes / 1e9
    nan = float("nan")
    return {
        f"{prefix}_mb_s": round(phase.mb_per_sec, 1),
        f"{prefix}_broker_cores": round(broker_cpu_s / phase.wall_s, 2) if phase.wall_s > 0 else nan,
        f"{prefix}_broker_cpu_s_per_gb": round(broker_cpu_s / gb, 3) if gb > 0 else nan,
        f"{prefix}_client_cpu_s_per_gb": round(phase.clients_cpu_s / gb, 3) if gb > 0 else nan,
        f"{prefix}_errors": phase.errors[:3],
    }


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, replication_factor)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        described = admin.list_topics(topic, timeout=10).topics.get(topic)
        if described is not None and described.error is None and len(described.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == replication_factor for p in described.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic}: not every partition led and in sync within 60 s")


def run_case(deployment: Deployment, broker_cores: list[int], client_cores: list[int], clients: int,
             records: int, partitions: int, halfrate_s: float, say: Callable[[str], None],
             warmup_records: int = 0) -> dict[str, Any]:
    with pinned_self(broker_cores):
        t0 = time.monotonic()
        deployment.start()
        started_s = time.monotonic() - t0
    try:
        pin(deployment.pids(), broker_cores)
        os.sched_setaffinity(0, client_cores)  # the client processes spawned from here inherit it
        config = {"acks": deployment.acks}
        if warmup_records:
            # Unmeasured: a JVM fresh from start-up runs interpreted code for its first tens of MB
            # (bench/cluster_bench.py measured a cold 3-node Kafka at a fraction of a warm one's rate).
            warm = f"many-core-warm-up-{deployment.name}"
            create_topic(deployment.bootstrap, warm, partitions, deployment.replication_factor)
            native_load.produce_phase(deployment.bootstrap, warm, warmup_records, RECORD_SIZE, clients, config=config)
            native_load.consume_phase(deployment.bootstrap, warm, partitions, clients)
        topic = f"many-core-{deployment.name}"
        create_topic(deployment.bootstrap, topic, partitions, deployment.replication_factor)
        pin(deployment.pids(), broker_cores)  # threads a broker started since (handler pools, fetchers)
        probe = _CpuProbe(deployment)
        produced = native_load.produce_phase(deployment.bootstrap, topic, records, RECORD_SIZE, clients, probe,
                                             config=config)
        result: dict[str, Any] = {"case": deployment.name, "deployment": deployment.describe(),
                                  "acks": deployment.acks, "replication_factor": deployment.replication_factor,
                                  "start_s": round(started_s, 2), "broker_affinity": affinity(deployment.pids())}
        result.update(phase_figures("produce", produced, probe.cpu_s))
        say(f"{deployment.name}: produce {result['produce_mb_s']} MB/s at {result['produce_broker_cores']} "
            f"broker cores")
        probe = _CpuProbe(deployment)
        consumed = native_load.consume_phase(deployment.bootstrap, topic, partitions, clients, probe)
        result.update(phase_figures("consume", consumed, probe.cpu_s))
        say(f"{deployment.name}: consume {result['consume_mb_s']} MB/s at {result['consume_broker_cores']} "
            f"broker cores")
        if halfrate_s > 0 and produced.mb_per_sec > 0:
            half = produced.mb_per_sec / 2
            probe = _CpuProbe(deployment)
            paced = native_load.rate_phase(deployment.bootstrap, topic, half * MB, halfrate_s, RECORD_SIZE,
                                           clients, probe)
            result.update({
                "halfrate_target_mb_s": round(half, 1),
                "halfrate_mb_s": round(paced.mb_per_sec, 1),
                "halfrate_p50_ms": round(native_load.percentile(paced.latencies, 50) * 1000, 2),
                "halfrate_p99_ms": round(native_load.percentile(paced.latencies, 99) * 1000, 2),
                "halfrate_broker_cores": round(probe.cpu_s / paced.wall_s, 2) if paced.wall_s > 0 else None,
                "halfrate_errors": paced.errors[:3],
            })
            say(f"{deployment.name}: half rate {result['halfrate_mb_s']} MB/s, p99 {result['halfrate_p99_ms']} ms")
        return result
    finally:
        deployment.stop()


# -- the report -------------------------------------------------------------------------------------

COLUMNS = (("case", "case"), ("produce_mb_s", "produce MB/s"), ("produce_broker_cores", "broker cores"),
           ("produce_broker_cpu_s_per_gb", "broker CPU-s/GB"), ("produce_client_cpu_s_per_gb", "client CPU-s/GB"),
           ("consume_mb_s", "consume MB/s"), ("consume_broker_cores", "broker cores"),
           ("consume_broker_cpu_s_per_gb", "broker CPU-s/GB"), ("consume_client_cpu_s_per_gb", "client CPU-s/GB"),
           ("halfrate_p99_ms", "p99 at half rate (ms)"))


def markdown(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [f"# Many-core bench ({report['started']})", "",
             f"{machine['cores']} usable cores ({machine['cpu']}); brokers pinned to {machine['broker_cores']}, "
             f"{report['clients']} producer and {report['clients']} consumer processes pinned to "
             f"{machine['client_cores']}; {report['records']} records of {RECORD_SIZE} B per case into "
             f"{report['partitions']} partitions; Python {machine['python']}, Kafka {machine['kafka']}.", ""]
    if report["client_bound"]:
        lines += [f"**Client-bound**: fewer than {CLIENT_BOUND_BELOW_CORES} usable cores, so the clients "
                  "cannot outrun a broker; these figures measure the clients, not the brokers' speed.", ""]
    lines.append("| " + " | ".join(title for _, title in COLUMNS) + " |")
    lines.append("|" + "|".join("---" if key == "case" else "---:" for key, _ in COLUMNS) + "|")
    for result in report["results"]:
        if "error" in result:
            reason = " ".join(result["error"].split())[:200].replace("|", "/")
            lines.append(f"| {result['case']} | failed: {reason} |")
            continue
        lines.append("| " + " | ".join(str(result.get(key, "")) for key, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def default_data_dir() -> Path:
    """tmpfs when there is one with room (the issue's runs kept data there), else the cache."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 8 * 2**30:
        return Path(tempfile.mkdtemp(prefix="odradek-many-core-", dir=shm))
    return Path(tempfile.mkdtemp(prefix="many-core-", dir=REPO / ".cache"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.many_core", description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker-cores", type=int, help="cores for the brokers (default: half of the usable ones)")
    ap.add_argument("--clients", type=int, help="producer (and consumer) processes (default: the client cores)")
    ap.add_argument("--gb", type=float, default=2.0, help="GB produced per case (default 2; --quick 0.05)")
    ap.add_argument("--warmup-gb", type=float, default=0.5,
                    help="GB produced and consumed, unmeasured, on a throwaway topic first (default 0.5; --quick 0.05)")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--halfrate-s", type=float, default=20.0, help="seconds of the half-rate phase (0: none)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    ap.add_argument("--heap", default="4g", help="Kafka's heap (default 4g, as issue 31's runs)")
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "bench-many-core")
    ap.add_argument("--data-dir", type=Path, help="where the brokers' data goes (default: tmpfs if it has room)")
    ap.add_argument("--quick", action="store_true", help="0.05 GB per case, 3 s half-rate, 1 GiB heap")
    args = ap.parse_args(argv)
    if args.quick:
        args.gb, args.halfrate_s, args.heap = min(args.gb, 0.05), min(args.halfrate_s, 3.0), "1g"
        args.warmup_gb = min(args.warmup_gb, 0.05)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            print(f"unknown case {case!r}; one of {', '.join(CASES)}", file=sys.stderr)
            return 2
    cores = usable_cores()
    broker_cores, client_cores = split_cores(cores, args.broker_cores)
    clients = args.clients or len(client_cores)
    records = int(args.gb * 1e9 / RECORD_SIZE)
    client_bound = len(cores) < CLIENT_BOUND_BELOW_CORES
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.data_dir or default_data_dir()

    def say(message: str) -> None:
        print(f"[many-core] {message}", flush=True)

    say(f"{len(cores)} usable cores: brokers on {broker_cores}, {clients} client processes on {client_cores}; "
        f"data in {work}")
    if client_bound:
        say(f"fewer than {CLIENT_BOUND_BELOW_CORES} cores: the figures are client-bound (they measure the "
            "clients, not the brokers)")
    from tools.kafka_dist import KAFKA_VERSION

    report: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "records": records, "partitions": args.partitions,
        "clients": clients, "client_bound": client_bound, "gb_per_case": args.gb, "halfrate_s": args.halfrate_s,
        "warmup_gb": args.warmup_gb,
        "machine": {"cores": len(cores), "broker_cores": broker_cores, "client_cores": client_cores,
                    "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                    "kafka": KAFKA_VERSION, "host": platform.node()},
        "results": [],
    }
    home = os.sched_getaffinity(0)
    try:
        for case in cases:
            deployment = make_deployment(case, work, len(broker_cores), args.heap)
            say(f"{case}: {deployment.describe()}")
            try:
                result = run_case(deployment, broker_cores, client_cores, clients, records, args.partitions,
                                  args.halfrate_s, say, int(args.warmup_gb * 1e9 / RECORD_SIZE))
            except Exception as exc:  # one case failing must not lose the others' figures
                result = {"case": deployment.name, "error": f"{type(exc).__name__}: {exc}"}
                say(f"{case} failed: {result['error']}")
            finally:
                os.sched_setaffinity(0, home)
                shutil.rmtree(work / case, ignore_errors=True)
            report["results"].append(result)
            (args.out / "many-core.json").write_text(json.dumps(report, indent=2) + "\n")
            (args.out / "many-core.md").write_text(markdown(report))
    finally:
        if args.data_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    say(f"wrote {args.out / 'many-core.md'} and many-core.json")
    print(markdown(report))
    return 0 if all("error" not in r for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
