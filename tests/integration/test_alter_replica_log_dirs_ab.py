"""AlterReplicaLogDirs' answers compared with a real Kafka 4.4: the same raw requests (v1 and v2) to both
brokers, each with its one log dir, and the same per-partition codes required - the expected table is
Kafka's, so the Kafka run checks the table and the Odradek run checks Odradek against it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.log_dirs import DESCRIBE_LOG_DIRS, alter
from tests.support.real_kafka import TARGETS, create_topic, open_target, unique
from tests.support.wire import WireClient

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, LOG_DIR_NOT_FOUND = 0, 3, 17, 57


@pytest.mark.parametrize("target_name", TARGETS)
def test_alter_replica_log_dirs_answers_as_kafka_4_4(target_name: str, tmp_path: Path) -> None:
    with open_target(target_name, tmp_path) as target:
        target.require("AlterReplicaLogDirs", "DescribeLogDirs")
        topic, missing = unique("ard"), unique("ard-missing")
        create_topic(target, topic, 2)
        with WireClient(target.host, target.port) as c:
            (log_dir,) = [r["log_dir"] for r in c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})["results"]]
            for version in (1, 2):
                got = alter(c, [
                    ("/no/such/dir", missing, [0]),
                    ("logs", missing, [1]),  # relative
                    (log_dir + "/", missing, [2]),  # not the dir's path exactly
                    (log_dir, topic, [0]),  # where it is already
                    (log_dir, topic, [5]),
                    (log_dir, missing, [3]),
                    (log_dir, "x" * 214, [0]),  # its "-future" dir name would be 256 characters long
                    (log_dir, "y" * 213, [0]),  # 255 characters: allowed
                    ("/no/such/dir", topic, [1]),  # the last dir named for a partition wins
                    (log_dir, topic, [1]),
                ], version)
                assert got == sorted([
                    (missing, 0, LOG_DIR_NOT_FOUND), (missing, 1, LOG_DIR_NOT_FOUND), (missing, 2, LOG_DIR_NOT_FOUND),
                    (topic, 0, NONE), (topic, 5, UNKNOWN_TOPIC_OR_PARTITION), (missing, 3, UNKNOWN_TOPIC_OR_PARTITION),
                    ("x" * 214, 0, INVALID_TOPIC), ("y" * 213, 0, UNKNOWN_TOPIC_OR_PARTITION), (topic, 1, NONE),
                ]), f"{target_name} v{version}"
