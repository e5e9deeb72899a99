"""Apache Kafka's own command-line tools (4.4.0) over the jars tools.kafka_dist already fetches, so a
newcomer can use kafka-topics, kafka-console-consumer, kafka-consumer-groups ... without downloading
a Kafka distribution. ``bin/kafka-tool NAME ARGS...`` (and the ``bin/kafka-topics``-style links) run
``python -m tools.kafka_cli NAME ARGS...``, which replaces itself with the JVM: stdin, stdout, the
exit code and Ctrl-C are the tool's own.

Kafka 4.4.0's CLI entry points (what Kafka's bin/kafka-*.sh run; found in .cache/jars/kafka; 4.x
moved the last Scala ones, ConsoleProducer, ConfigCommand and AclCommand, to kafka-tools):

    kafka-topics            org.apache.kafka.tools.TopicCommand
    kafka-console-producer  org.apache.kafka.tools.ConsoleProducer
    kafka-console-consumer  org.apache.kafka.tools.consumer.ConsoleConsumer
    kafka-consumer-groups   org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
    kafka-configs           org.apache.kafka.tools.ConfigCommand
    kafka-client-metrics    org.apache.kafka.tools.ClientMetricsCommand
    kafka-acls              org.apache.kafka.tools.AclCommand
    kafka-get-offsets       org.apache.kafka.tools.GetOffsetShell
    kafka-delete-records    org.apache.kafka.tools.DeleteRecordsCommand
    kafka-dump-log          org.apache.kafka.tools.DumpLogSegments   (kafka.tools.DumpLogSegments in 3.9)
    kafka-features          org.apache.kafka.tools.FeatureCommand
    kafka-transactions      org.apache.kafka.tools.TransactionsCommand
    kafka-cluster           org.apache.kafka.tools.ClusterTool
    kafka-log-dirs          org.apache.kafka.tools.LogDirsCommand
    kafka-leader-election   org.apache.kafka.tools.LeaderElectionCommand
    kafka-reassign-partitions  org.apache.kafka.tools.reassign.ReassignPartitionsCommand
    kafka-producer-perf-test  org.apache.kafka.tools.ProducerPerformance
    kafka-consumer-perf-test  org.apache.kafka.tools.ConsumerPerformance
    kafka-e2e-latency       org.apache.kafka.tools.EndToEndLatency

The tools log through log4j 2 at WARN to stderr (Kafka's tools-log4j2.yaml does the same), so
stdout holds only the tool's output. The tests (tests/support/java_tools.py) launch them the same way.
"""

from __future__ import annotations

import os
import sys

from tools.kafka_dist import (
    LOG4J_TOOLS,
    ToolchainUnavailable,
    classpath,
    java_command,
    log_config_option,
    temp_config_file,
)

TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
}

# Short-lived JVMs: C1 only and a small serial heap start noticeably faster than the defaults.
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def tool_command(tool: str, args: list[str]) -> list[str]:
    """The java command line running ``tool`` (a name from TOOLS, or any fully qualified main class)."""
    main_class = TOOLS.get(tool, tool)
    log4j = temp_config_file("odradek-tools-log4j2.properties", LOG4J_TOOLS)
    opts = [*TOOL_JVM_OPTS, log_config_option(log4j)]
    return java_command(main_class, list(args), classpath("kafka"), opts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in TOOLS:
        print("usage: bin/kafka-tool NAME [ARGS...]   (e.g. bin/kafka-topics --bootstrap-server localhost:9092 "
              "--list)\nNAME is one of: " + ", ".join(TOOLS), file=sys.stderr)
        return 2
    try:
        cmd = tool_command(argv[0], argv[1:])
    except ToolchainUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main())
