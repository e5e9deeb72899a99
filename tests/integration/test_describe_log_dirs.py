"""DescribeLogDirs reports every log dir, the partitions in it and their real on-disk sizes."""

from __future__ import annotations

import os

from odradek.protocol.records import Record, encode_batch
from tests.support.wire import WireClient


def segment_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))


def test_describe_log_dirs_sizes_and_filters(broker_factory, tmp_path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    broker = broker_factory({"log.dirs": ",".join(str(d) for d in dirs)})
    with WireClient(broker.host, broker.port) as c:
        c.request(19, 7, {"topics": [{"name": "ld", "num_partitions": 4, "replication_factor": 1}], "timeout_ms": 5000})
        for p in range(4):
            records = encode_batch([Record(timestamp=1, value=b"x" * (100 * (p + 1)))])
            c.request(0, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
                {"name": "ld", "partition_data": [{"index": p, "records": records}]}]})
        everything = c.request(35, 5, {"topics": None})
        only = c.request(35, 4, {"topics": [{"topic": "ld", "partitions": [1]}]})
        old = c.request(35, 1, {"topics": None})
    assert everything["error_code"] == 0
    assert sorted(r["log_dir"] for r in everything["results"]) == sorted(str(d) for d in dirs)
    seen = {}
    for r in everything["results"]:
        assert r["error_code"] == 0 and r["total_bytes"] > 0 and 0 < r["usable_bytes"] <= r["total_bytes"]
        assert r["is_cordoned"] is False  # v5: no cordoned.log.dirs
        for t in r["topics"]:
            for p in t["partitions"]:
                on_disk = segment_bytes(os.path.join(r["log_dir"], f"ld-{p['partition_index']}"))
                assert p["partition_size"] == on_disk > 0
                assert p["offset_lag"] == 0
                seen[p["partition_index"]] = r["log_dir"]
    assert sorted(seen) == [0, 1, 2, 3]
    assert len(set(seen.values())) == 2, "partitions spread over both log dirs"
    filtered = [p["partition_index"] for r in only["results"] for t in r["topics"] for p in t["partitions"]]
    assert filtered == [1]
    # v1 (non-flexible) carries the same listing: the topic appears once per dir holding it.
    assert sum(len(r["topics"]) for r in old["results"]) == 2


def test_kafka_python_admin_describe_log_dirs(broker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-ld", 2, 1)])
        result = admin.describe_log_dirs()
    finally:
        admin.close()
    text = repr(result)
    assert "kp-ld" in text
