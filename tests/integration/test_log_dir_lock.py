"""A second process on a live node's data dirs (Odradek issue 27, item 1): it is refused by the
``.lock`` of the first dir it shares (odradek.storage.log_dir_lock), exits non-zero within seconds naming
that dir and the holder's PID, and changes nothing there.

Each test starts broker A, produces acknowledged records with a real client (acks=all), then runs a
second process B with A's configuration. A is paused (SIGSTOP) from just before the first snapshot
until B has exited: A itself rewrites checkpoints and its lease file every few seconds, and the
snapshots must show what B did, nothing else. The snapshot is path, size, mtime_ns and sha256 of
every file under A's log dirs and metadata dir (and every directory's mtime_ns: a file created or
removed there changes it). Then A is SIGKILLed and restarted: a refused B must not have left a
clean-shutdown marker that makes the restart skip recovery, and every acknowledged record is read
back.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, BrokerNode, kafka_request
from odradek.testing.single_broker import BrokerStartError, RunningBroker, running_broker
from tests.support.cluster import cluster_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import read_back  # noqa: E402 (needs confluent_kafka)

TOPIC = "locked"
PARTITIONS = 4
RECORDS = 200
# B must give up "within seconds": Python's start-up and imports take about a second of that on a
# loaded 2-core machine. (The old code, on another port, stayed up 12 s in cluster mode
# before its registration was refused.)
REFUSED_WITHIN_S = 8.0

Snapshot = dict[str, tuple[int, int, str]]


def snapshot(*roots: Path) -> Snapshot:
    """Path -> (size, mtime_ns, sha256) of every file under ``roots``; a directory as (-1, mtime_ns, "")."""
    found: Snapshot = {}
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            found[dirpath] = (-1, os.stat(dirpath).st_mtime_ns, "")
            for name in files:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                st = os.stat(path)
                found[path] = (st.st_size, st.st_mtime_ns, digest)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    return ([f"removed {p}" for p in sorted(before.keys() - after.keys())]
            + [f"created {p}" for p in sorted(after.keys() - before.keys())]
            + [f"changed {p}: {before[p]} -> {after[p]}" for p in sorted(before.keys() & after.keys())
               if before[p] != after[p]])


def create_topic(host: str, port: int) -> None:
    body = {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 10000, "validate_only": False}
    result = kafka_request(host, port, "CreateTopics", 7, body, 15.0)["topics"][0]
    assert result["error_code"] == 0, result


def produce_acked(bootstrap: str) -> dict[tuple[int, int], bytes]:
    """RECORDS records over every partition, acks=all; (partition, offset) -> value of each acked one."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5})
    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    for i in range(RECORDS):
        producer.produce(TOPIC, value=f"record-{i}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(acked) == RECORDS
    return acked


def assert_all_read_back(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> None:
    read = read_back(bootstrap, TOPIC, PARTITIONS)
    at = {(p, off): v for p, recs in read.items() for off, v in recs}
    lost = [(tp, v) for tp, v in sorted(acked.items()) if at.get(tp) != v]
    assert not lost, f"{len(lost)} acknowledged records lost after the restart, e.g. {lost[:5]}"


def run_second_process(node: BrokerNode, cwd: Path | str) -> tuple[int, str, float]:
    """Run A's exact command line as a second process; (exit code, its output, seconds it ran)."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(node.command(), cwd=cwd, env=node.environment(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it
        out = exc.stderr  # bytes, even with text=True
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        pytest.fail(f"the second process was still running after 30 s:\n{text}")
    return done.returncode, done.stdout + done.stderr, time.monotonic() - t0


def second_process_is_refused(a: BrokerNode, dirs: list[Path], named_dir: Path,
                              b: BrokerNode | None = None, cwd: Path | str = PACKAGE_ROOT) -> None:
    """Pause A, run B (A's config unless ``b``), resume A; B exited non-zero within seconds,
    naming ``named_dir`` and A's PID, and nothing in ``dirs`` changed."""
    assert a.pid is not None
    a.send_signal(signal.SIGSTOP)
    try:
        before = snapshot(*dirs)
        code, output, seconds = run_second_process(b or a, cwd)
        after = snapshot(*dirs)
    finally:
        a.send_signal(signal.SIGCONT)
    print(f"second process refused in {seconds:.2f} s:\n{output}")  # pytest -s shows it
    assert not changes(before, after), "\n".join(changes(before, after)[:30]) + "\n" + output
    assert code != 0, output
    assert seconds < REFUSED_WITHIN_S, f"refused only after {seconds:.1f} s:\n{output}"
    refusals = [line for line in output.splitlines() if "Failed to acquire lock on file .lock" in line]
    assert len(refusals) == 1, output
    assert f" in {named_dir}:" in refusals[0] and f"process {a.pid}" in refusals[0], output
    assert "Traceback" not in output, output


def _layout(tmp_path: Path, name: str) -> dict[str, str]:
    a = tmp_path / "a"
    if name == "default":  # log.dirs' first dir holds the metadata too
        return {"log.dirs": str(a / "logs")}
    return {"log.dirs": f"{a / 'logs-1'},{a / 'logs-2'}", "metadata.log.dir": str(a / "meta")}


@pytest.mark.parametrize("layout", ["default", "separate-metadata-dir"])
def test_a_second_local_broker_with_the_same_config_is_refused_and_changes_nothing(tmp_path: Path,
                                                                                     layout: str) -> None:
    overrides = _layout(tmp_path, layout)
    a = RunningBroker(tmp_path / "a", overrides=overrides)
    try:
        a.start()
        create_topic(a.host, a.port)
        acked = produce_acked(a.bootstrap)
        dirs = [Path(d) for d in overrides["log.dirs"].split(",")]
        meta = Path(overrides.get("metadata.log.dir", dirs[0]))
        all_dirs = dirs + ([meta] if meta not in dirs else [])
        assert all(any(d.glob(f"{TOPIC}-*")) for d in dirs), "every log dir holds a partition"
        # The first dir B locks is the first of log.dirs.
        second_process_is_refused(a, all_dirs, dirs[0], cwd=a.data_dir)
        a.kill()
        a.start()
        assert_all_read_back(a.bootstrap, acked)
    finally:
        a.kill()


def test_a_broker_on_one_of_the_live_log_dirs_is_refused_before_it_touches_it(tmp_path: Path) -> None:
    """B's log.dirs is A's second log dir alone: its controller lease lives in that dir (a file A does
    not use, so the lease's lock cannot stop it) and its meta.properties names A's cluster and node.
    The old code made B a controller there, recovered A's live partitions and left its own files."""
    overrides = _layout(tmp_path, "separate-metadata-dir")
    a = RunningBroker(tmp_path / "a", overrides=overrides)
    try:
        a.start()
        create_topic(a.host, a.port)
        acked = produce_acked(a.bootstrap)
        dirs = [Path(d) for d in overrides["log.dirs"].split(",")]
        b = RunningBroker(tmp_path / "b", overrides={"log.dirs": str(dirs[1])})
        second_process_is_refused(a, [*dirs, Path(overrides["metadata.log.dir"])], dirs[1], b=b, cwd=a.data_dir)
        a.kill()
        a.start()
        assert_all_read_back(a.bootstrap, acked)
    finally:
        a.kill()


def test_a_second_cluster_broker_is_refused_before_it_contacts_etcd_and_changes_nothing(tmp_path: Path) -> None:
    with cluster_or_skip(tmp_path, 1, {"controller.lease.ttl.ms": "2000"}) as cluster:
        a = cluster.broker(1)
        assert cluster.wait_members(30), cluster.logs()
        create_topic(a.host, a.port)
        acked = produce_acked(a.bootstrap)
        log_dir = a.data_dir  # the launcher's layout: one log dir, which holds the metadata too
        second_process_is_refused(a, [log_dir], log_dir)
        cluster.kill(1)
        cluster.start(1)
        assert_all_read_back(a.bootstrap, acked)


def test_running_broker_on_a_live_brokers_data_dir_fails_naming_the_holder(tmp_path: Path) -> None:
    """odradek.testing.single_broker (and the pytest plugin, which uses it): a second broker on the same data dir."""
    with running_broker(tmp_path / "data") as first:
        second = RunningBroker(first.data_dir)  # its own port: the first one's would answer for it
        with pytest.raises(BrokerStartError) as refused:
            second.start(timeout=20)
        text = str(refused.value)
        assert f"Failed to acquire lock on file .lock in {first.data_dir / 'logs'}:" in text, text
        assert f"process {first.pid}" in text, text


def test_a_log_dir_that_cannot_be_locked_starts_offline_and_the_others_serve(tmp_path: Path) -> None:
    """An I/O error while locking is a disk fault, not a refusal (Kafka's "Disk error while locking
    directory"): that dir is offline (KAFKA_STORAGE_ERROR in DescribeLogDirs), the other serves."""
    good, bad = tmp_path / "a" / "logs-1", tmp_path / "a" / "logs-2"
    (bad / ".lock").mkdir(parents=True)  # open(".lock") fails with EISDIR
    a = RunningBroker(tmp_path / "a", overrides={"log.dirs": f"{good},{bad}",
                                                 "metadata.log.dir": str(tmp_path / "a" / "meta")})
    try:
        a.start()
        create_topic(a.host, a.port)
        dirs = {r["log_dir"]: r for r in
                kafka_request(a.host, a.port, "DescribeLogDirs", 4, {"topics": None})["results"]}
        assert dirs[str(bad)]["error_code"] == 56, dirs  # KAFKA_STORAGE_ERROR
        assert dirs[str(good)]["error_code"] == 0, dirs
        assert {p["partition_index"] for t in dirs[str(good)]["topics"] if t["name"] == TOPIC
                for p in t["partitions"]} == set(range(PARTITIONS))
        assert sorted(os.listdir(bad)) == [".lock"], "nothing was written in the dir it could not lock"
    finally:
        a.kill()
    assert f"Disk error while locking log dir {bad}, it is offline: [Errno 21] Is a directory" in a.log_text()


def test_a_metadata_dir_that_cannot_be_locked_stops_the_start(tmp_path: Path) -> None:
    meta = tmp_path / "a" / "meta"
    (meta / ".lock").mkdir(parents=True)
    a = RunningBroker(tmp_path / "a", overrides={"metadata.log.dir": str(meta)})
    with pytest.raises(BrokerStartError) as failed:
        a.start()
    assert f"Disk error while locking the metadata log dir {meta}: [Errno 21] Is a directory" in str(failed.value)
    assert a.returncode() == 1
    assert sorted(os.listdir(meta)) == [".lock"]
