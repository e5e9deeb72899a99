"""What consuming a GB costs the broker (issue 31, item 4): broker CPU-s per GB read by librdkafka
consumers, split into user and system time, per broker thread, with the client's own count of
Fetch requests (how many, how full), for Kafka 4.4 and Odradek on the same data, or for two
Odradek checkouts (a change against its baseline).

    python bench/consume_cost.py [--mb 512] [--partitions 16] [--consumers 2] [--pairs 5]
                                 [--targets kafka,odradek] [--baseline DIR] [--data-dir DIR]

Each target is started once (data dir under ``--data-dir``, /dev/shm by default, as issue 31's
runs used tmpfs), gets the same topic (``--partitions``, ``--mb`` MiB of 1 KiB random records
produced by bench/native_load.py's librdkafka producers: acks=1, linger.ms=5, 64 KiB batches),
then the targets take turns, ``--pairs`` rounds, each reading the whole topic from the beginning
with ``--consumers`` librdkafka consumer processes (assign, no group; librdkafka's default fetch
settings: fetch.min.bytes 1, fetch.wait.max.ms 500, 1 MiB per partition). Per run: the broker
process's utime and stime over the phase (/proc/<pid>/stat), each broker thread's CPU
(/proc/<pid>/task/*/stat, grouped by thread name), and from librdkafka's statistics the Fetch
requests each consumer sent and the bytes it received. Figures are medians over the rounds.

``--baseline DIR``: another checkout (``git worktree add`` or ``git archive``) run as the target
``baseline`` beside this checkout's ``odradek``, for before/after figures of a change.

Who may call it: the command line (it owns the brokers and stops them on exit).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import native_load  # noqa: E402
from bench.servers import KafkaTarget, OdradekTarget, Target, cpu_times  # noqa: E402

MB = native_load.MB
GB = 2**30
TOPIC = "consume-cost"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread of ``pid``, keyed ``name/tid`` (Python threads all
    bear the process's name; a JVM's are named by their pool)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = defaultdict(float)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[f"{name}/{tid}"] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def _consume_worker(bootstrap: str, topic: str, partitions: list[int], ready: Any, go: Any, out: Any) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    stats: list[dict] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"consume-cost-{os.getpid()}",
                         "enable.auto.commit": False, "log_level": 3, "statistics.interval.ms": 200,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    remaining = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    remaining = {p: high for p, high in remaining.items() if high > 0}
    ready.put(None)
    go.wait()
    stats.clear()
    consumer.poll(0)  # a first statistics snapshot before the reading starts, if one is due
    base = _fetch_counts(stats[-1]) if stats else (0, 0)
    start, cpu0 = time.monotonic(), time.process_time()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
    nbytes = records = 0
    while remaining and time.monotonic() < start + 600:
        last: dict[int, int] = {}
        for msg in consumer.consume(num_messages=2000, timeout=0.02):
            value = msg.value()
            if msg.error() is not None or value is None:
                continue
            nbytes += len(value)
            records += 1
            last[msg.partition()] = msg.offset()  # type: ignore[index]
        for p, offset in last.items():
            if p in remaining and offset + 1 >= remaining[p]:
                del remaining[p]
    end, cpu_s = time.monotonic(), time.process_time() - cpu0
    # One more statistics interval, so the counts include the last fetches.
    consumer.pause(consumer.assignment())
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        consumer.poll(0.05)
    fetches, rx = _fetch_counts(stats[-1]) if stats else (0, 0)
    consumer.close()
    out.put({"records": records, "bytes": nbytes, "start": start, "end": end, "cpu_s": cpu_s,
             "fetches": fetches - base[0], "rx": rx - base[1], "error": "" if not remaining else "incomplete"})


def _fetch_counts(stats: dict) -> tuple[int, int]:
    """(Fetch requests sent, bytes received) to the brokers (not the bootstrap connection)."""
    fetches = rx = 0
    for b in stats.get("brokers", {}).values():
        if b.get("nodeid", -1) < 0:
            continue
        fetches += b.get("req", {}).get("Fetch", 0)
        rx += b.get("rxbytes", 0)
    return fetches, rx


# Syscalls counted per run with ``--syscalls`` (perf stat on the broker's pid, tracepoints):
# sendfile calls and those that met a full socket (EAGAIN: -11, the pread fallback follows each),
# preads, socket writes, and event-loop wake-ups.
SYSCALLS: list[tuple[str, str]] = [
    ("sendfile", "syscalls:sys_enter_sendfile64"),
    ("sendfile_eagain", "syscalls:sys_exit_sendfile64 --filter ret == -11"),
    ("pread", "syscalls:sys_enter_pread64"),
    ("write", "syscalls:sys_enter_write"),
    ("writev", "syscalls:sys_enter_writev"),
    ("sendmsg", "syscalls:sys_enter_sendmsg"),
    ("epoll_wait", "syscalls:sys_enter_epoll_wait"),
]


def start_syscall_count(pid: int) -> subprocess.Popen:
    cmd = ["perf", "stat", "-x,", "-p", str(pid)]
    for _, spec in SYSCALLS:
        event, _, flt = spec.partition(" --filter ")
        cmd += ["-e", event] + (["--filter", flt] if flt else [])
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)


def end_syscall_count(proc: subprocess.Popen) -> dict[str, int]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    counts = [int(line.split(",")[0]) for line in err.splitlines() if line and line[0].isdigit()]
    return {name: n for (name, _), n in zip(SYSCALLS, counts, strict=False)}


def consume_run(target: Target, partitions: int, consumers: int, syscalls: bool = False,
                perf_record: Path | None = None) -> dict:
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    args = [(target.bootstrap, TOPIC, list(range(i, partitions, consumers))) for i in range(consumers)]
    procs = [ctx.Process(target=_consume_worker, args=(*a, ready, go, out), daemon=True) for a in args]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    u0, s0 = cpu_times(target.pid)
    t0 = thread_cpu(target.pid)
    counter = start_syscall_count(target.pid) if syscalls else None
    recorder = (subprocess.Popen(["perf", "record", "-q", "-g", "-F", "499", "-p", str(target.pid), "-o",
                                  str(perf_record)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if perf_record is not None else None)
    if counter is not None or recorder is not None:
        time.sleep(0.3)  # perf attaches
    go.set()
    results = [out.get(timeout=900) for _ in procs]
    u1, s1 = cpu_times(target.pid)
    t1 = thread_cpu(target.pid)
    counts = end_syscall_count(counter) if counter is not None else {}
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)
    for p in procs:
        p.join(30)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    gb = nbytes / GB
    fetches = sum(r["fetches"] for r in results)
    threads = {k: round((t1.get(k, 0.0) - v) / gb, 3) for k, v in t0.items() if t1.get(k, 0.0) - v > 0.005 * gb}
    return {
        "target": target.name, "mb_s": nbytes / MB / wall, "cpu_s_per_gb": (u1 - u0 + s1 - s0) / gb,
        "user_s_per_gb": (u1 - u0) / gb, "sys_s_per_gb": (s1 - s0) / gb,
        "client_cpu_s_per_gb": sum(r["cpu_s"] for r in results) / gb,
        "fetches_per_s_per_consumer": fetches / wall / consumers,
        "kib_per_fetch": (sum(r["rx"] for r in results) / fetches / 1024) if fetches else 0.0,
        "broker_cpu_ms_per_fetch": (u1 - u0 + s1 - s0) * 1000 / fetches if fetches else 0.0,
        "threads_cpu_s_per_gb": threads,
        **({"syscalls_per_fetch": {k: round(v / fetches, 2) for k, v in counts.items()},
            "kib_per_sendfile": nbytes / 1024 / counts["sendfile"]} if counts.get("sendfile") and fetches else {}),
        "errors": [r["error"] for r in results if r["error"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--targets", default="kafka,odradek")
    ap.add_argument("--baseline", type=Path, help="another checkout, run as target 'baseline'")
    ap.add_argument("--data-dir", type=Path, default=Path("/dev/shm/consume-cost"))
    ap.add_argument("--odradek-override", action="append", default=[], help="k=v for this checkout's broker")
    ap.add_argument("--syscalls", action="store_true", help="count the broker's syscalls per run (perf stat)")
    ap.add_argument("--perf-record", type=Path, help="a folder: perf record -g of each run's broker goes there")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout run as target 'odradek'")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args(argv)

    extra = dict(kv.split("=", 1) for kv in args.odradek_override)
    targets: list[Target] = []
    for name in args.targets.split(","):
        if name == "kafka":
            targets.append(KafkaTarget(args.data_dir / "kafka", heap="1g"))
        elif name == "odradek":
            targets.append(OdradekTarget(args.data_dir / "odradek", extra=extra, repo=args.repo))
        elif name == "baseline":
            if args.baseline is None:
                ap.error("target baseline needs --baseline DIR")
            targets.append(OdradekTarget(args.data_dir / "baseline", repo=args.baseline, name="baseline"))
        else:
            ap.error(f"unknown target {name}")
    runs: list[dict] = []
    try:
        for t in targets:
            t.start()
            _create_topic(t.bootstrap, args.partitions)
            records = args.mb * MB // 1024
            native_load.produce_phase(t.bootstrap, TOPIC, records, 1024, args.producers)
            consume_run(t, args.partitions, args.consumers)  # warm-up: JIT, page cache, connections
        for i in range(args.pairs):
            order = targets if i % 2 == 0 else list(reversed(targets))
            for t in order:
                record = None
                if args.perf_record is not None:
                    args.perf_record.mkdir(parents=True, exist_ok=True)
                    record = args.perf_record / f"{t.name}-{i}.data"
                r = consume_run(t, args.partitions, args.consumers, args.syscalls, record)
                runs.append(r)
                print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
    finally:
        for t in targets:
            t.stop()
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    print(f"\nmedians over {args.pairs} rounds ({args.mb} MiB, {args.partitions} partitions, "
          f"{args.consumers} consumers, {os.cpu_count()} cores)")
    keys = ["mb_s", "cpu_s_per_gb", "user_s_per_gb", "sys_s_per_gb", "client_cpu_s_per_gb",
            "fetches_per_s_per_consumer", "kib_per_fetch", "broker_cpu_ms_per_fetch"]
    print("| target | " + " | ".join(keys) + " |")
    for t in targets:
        mine = [r for r in runs if r["target"] == t.name]
        print(f"| {t.name} | " + " | ".join(f"{statistics.median(r[k] for r in mine):.3f}" for k in keys) + " |")
        names = sorted({n for r in mine for n in r["threads_cpu_s_per_gb"]})
        per_thread = {n: statistics.median(r["threads_cpu_s_per_gb"].get(n, 0.0) for r in mine) for n in names}
        print("   threads (CPU-s/GB):", ", ".join(f"{n} {v:.3f}" for n, v in
                                                 sorted(per_thread.items(), key=lambda kv: -kv[1]) if v >= 0.005))
    return 0


def _create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
