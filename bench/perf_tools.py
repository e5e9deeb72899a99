"""Kafka's own performance tools (kafka-tools 4.4.0 main classes), run as one JVM each, and parsers
for what they print.

    ProducerPerformance  final line: "N records sent, R records/sec (M MB/sec), A ms avg latency,
                         X ms max latency, p50 ms 50th, p95 ms 95th, p99 ms 99th, p999 ms 99.9th."
    ConsumerPerformance  a CSV header and one row: start.time, end.time, data.consumed.in.MB, MB.sec,
                         data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
                         fetch.MB.sec, fetch.nMsg.sec (MB.sec includes the group join; fetch.MB.sec
                         does not)
    EndToEndLatency      "Avg latency: A ms" and "Percentiles: 50th = a, 99th = b, 99.9th = c"
                         (whole milliseconds: the tool truncates each sample to ms)

JVM options are those of bin/kafka-run-class.sh with the heap bin/kafka-*-perf-test.sh sets
(-Xmx512M, G1 with a 20 ms pause goal), so the clients run as they would from Kafka's scripts.
Logging goes to stderr at WARN.

Who may call it: any thread; each call blocks on its subprocess.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.kafka_dist import LOG4J_TOOLS, classpath, java_command, log_config_option, temp_config_file  # noqa: E402

PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END = "org.apache.kafka.tools.EndToEndLatency"

JVM_OPTS = ["-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true"]


class ToolFailed(RuntimeError):
    pass


def command(main_class: str, args: list[str]) -> list[str]:
    log4j = temp_config_file("odradek-bench-log4j2.properties", LOG4J_TOOLS)
    return java_command(main_class, args, classpath("kafka"), [*JVM_OPTS, log_config_option(log4j)])


def run(main_class: str, args: list[str], timeout: float) -> str:
    proc = subprocess.run(command(main_class, args), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ToolFailed(f"{main_class.rsplit('.', 1)[1]} {' '.join(args)} exited {proc.returncode}\n"
                         f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}")
    return proc.stdout


# -- ProducerPerformance ------------------------------------------------------------------------

@dataclass
class ProduceResult:
    records: int
    records_per_sec: float
    mb_per_sec: float
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


_PRODUCE_RE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max "
    r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")


def producer_args(bootstrap: str, topic: str, records: int, size: int, acks: str, linger_ms: int = 5,
                  batch_size: int = 65536) -> list[str]:
    return ["--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
            "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}", f"linger.ms={linger_ms}",
            f"batch.size={batch_size}"]


def parse_producer(stdout: str) -> ProduceResult:
    matches = _PRODUCE_RE.findall(stdout)
    if not matches:
        raise ToolFailed(f"no summary line in ProducerPerformance output:\n{stdout[-2000:]}")
    m = matches[-1]  # progress lines every 5 s look alike but lack the percentiles
    return ProduceResult(int(m[0]), float(m[1]), float(m[2]), float(m[3]), float(m[4]),
                         float(m[5]), float(m[6]), float(m[7]), float(m[8]))


def produce(bootstrap: str, topic: str, records: int, size: int, acks: str, timeout: float = 900) -> ProduceResult:
    return parse_producer(run(PRODUCER_PERF, producer_args(bootstrap, topic, records, size, acks), timeout))


def transactional_args(transactional_id: str, transaction_ms: int) -> list[str]:
    """ProducerPerformance's transactions: it commits one every ``transaction_ms`` (acks=all and
    idempotence follow from the transactional id)."""
    return ["--transactional-id", transactional_id, "--transaction-duration-ms", str(transaction_ms)]


def produce_transactional(bootstrap: str, topic: str, records: int, size: int, transactional_id: str,
                          transaction_ms: int, timeout: float = 900) -> ProduceResult:
    args = producer_args(bootstrap, topic, records, size, "all") + transactional_args(transactional_id, transaction_ms)
    return parse_producer(run(PRODUCER_PERF, args, timeout))


# -- ConsumerPerformance ------------------------------------------------------------------------

@dataclass
class ConsumeResult:
    mb: float
    mb_per_sec: float
    messages: int
    rebalance_ms: float
    fetch_ms: float
    fetch_mb_per_sec: float


def consumer_args(bootstrap: str, topic: str, messages: int, group: str) -> list[str]:
    return ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(messages),
            "--group", group, "--timeout", "30000"]


def parse_consumer(stdout: str) -> ConsumeResult:
    lines = [line for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time"):
            header = [h.strip() for h in line.split(",")]
            row = dict(zip(header, (v.strip() for v in next(csv.reader([lines[i + 1]]))), strict=False))
            return ConsumeResult(float(row["data.consumed.in.MB"]), float(row["MB.sec"]),
                                 int(row["data.consumed.in.nMsg"]), float(row["rebalance.time.ms"]),
                                 float(row["fetch.time.ms"]), float(row["fetch.MB.sec"]))
    raise ToolFailed(f"no result row in ConsumerPerformance output:\n{stdout[-2000:]}")


def consume(bootstrap: str, topic: str, messages: int, group: str, timeout: float = 900) -> ConsumeResult:
    result = parse_consumer(run(CONSUMER_PERF, consumer_args(bootstrap, topic, messages, group), timeout))
    if result.messages < messages:
        raise ToolFailed(f"ConsumerPerformance read {result.messages} of {messages} messages from {topic}")
    return result


# -- EndToEndLatency ----------------------------------------------------------------------------

@dataclass
class LatencyResult:
    avg_ms: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


_AVG_RE = re.compile(r"Avg latency: ([\d.]+) ms")
_PCT_RE = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)")


def e2e_args(bootstrap: str, topic: str, messages: int, acks: str, size: int) -> list[str]:
    return ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(messages), "--producer-acks", acks,
            "--record-size", str(size)]


def parse_e2e(stdout: str) -> LatencyResult:
    avg, pct = _AVG_RE.search(stdout), _PCT_RE.search(stdout)
    if avg is None or pct is None:
        raise ToolFailed(f"no result in EndToEndLatency output:\n{stdout[-2000:]}")
    return LatencyResult(float(avg.group(1)), float(pct.group(1)), float(pct.group(2)), float(pct.group(3)))


def end_to_end(bootstrap: str, topic: str, messages: int, acks: str, size: int,
               timeout: float = 900) -> LatencyResult:
    return parse_e2e(run(END_TO_END, e2e_args(bootstrap, topic, messages, acks, size), timeout))
