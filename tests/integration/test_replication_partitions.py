"""Issue 13's fault scenarios 3 and 5 under the fault suite's load (tests/support/fault_checker, as
in tests/integration/test_cluster_faults.py): a librdkafka producer and Kafka's Java
VerifiableProducer (acks=all, idempotent), a consumer group of 2 members committing as it reads and
a Metadata poller, on RF=3, min.insync.replicas=2; each run ends with fault_checker's Checker (no
acked write lost, no duplicate, produce order, dense offsets, the group's reads, high watermark and
commits, one leader per leader epoch, only retriable errors reaching the producers).

3. A partition's leader is cut off from the other brokers and from etcd (every broker a host in its
   own network namespace, tests/support/netns_cluster.py); the clients, in the root namespace, keep
   their route to the old leader. The old leader keeps believing it leads (its registration lapses,
   it serves on the metadata it has, as Kafka's brokers do) and may append, but must acknowledge
   nothing it cannot replicate (writes sent straight to it after the cut, before and after its
   registration lapsed, time out, and are gone after healing); another replica takes over; healed,
   the old leader truncates its divergent suffix (OffsetForLeaderEpoch) and rejoins the ISR with a
   log and leader-epoch checkpoint byte-identical to the leader's. Run with the victim a plain
   broker and with it the controller too. The failover times are printed (``pytest -s`` shows them).
5. A follower's log dir is a small tmpfs that fills up: its append fails with ENOSPC, the dir goes
   offline (DescribeLogDirs: KAFKA_STORAGE_ERROR), the follower stays up (its other log dir holds
   the metadata) and reports the replica offline: the controller takes it out of the ISR at once and
   every broker's Metadata lists it in offline_replicas; the partition keeps taking acks=all writes
   and serving reads from the two healthy replicas.
7. etcd, the metadata store, goes away for 60 s under the same load: paused (SIGSTOP), or cut off
   from every broker in network namespaces (the brokers still reach each other). Leaders keep
   leading and followers keep following on the metadata they hold, so acknowledgements go on with
   no gap on any partition longer than ``MAX_ACK_GAP_S``; what needs the controller waits (a
   CreateTopics sent meanwhile answers the retriable REQUEST_TIMED_OUT). When etcd is back every
   lease it held has lapsed at once: the brokers register again (same process, same incarnation),
   a controller is elected, and no broker is fenced and no leadership moves for it.

Needs root (namespaces, mount), iproute2, etcd and the Java tool chain; each test skips with the reason otherwise.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, encode_batch
from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip
from tests.support.disks import Disks
from tests.support.netns_cluster import NetnsCluster, running_netns_cluster
from tests.support.real_kafka import require_toolchain

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import (  # noqa: E402 (needs confluent_kafka)
    FaultLoad,
    failover,
)

TOPIC = "partitioned"
PARTITIONS = 3
OVERRIDES = {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "4000"}


# --- load ------------------------------------------------------------------------------------------

@contextmanager
def load_on(c: ClusterProcesses, partitions: int = PARTITIONS) -> Iterator[FaultLoad]:
    require_toolchain()
    load = FaultLoad(c, TOPIC, partitions, rdkafka_extra={
        "request.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000})
    try:
        yield load
    finally:
        load.close()


# --- looking at the cluster ------------------------------------------------------------------------

def create_topic(c: ClusterProcesses, partitions: int = PARTITIONS) -> None:
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [{
        "name": TOPIC, "num_partitions": partitions, "replication_factor": 3,
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    assert c.wait_until(lambda: all(partition_state(c, p, n)["leader_id"] >= 0 and
                                    len(partition_state(c, p, n)["isr_nodes"]) == 3
                                    for p in range(partitions) for n in c.live_ids()), 20), c.logs()


def partition_state(c: ClusterProcesses, partition: int, via: int) -> dict[str, Any]:
    """The partition as broker ``via``'s Metadata shows it (leader_id, leader_epoch, isr_nodes, ...)."""
    md = c.request(via, "Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}]})
    return next(p for p in md["topics"][0]["partitions"] if p["partition_index"] == partition)


def log_dir_partitions(c: ClusterProcesses, node_id: int) -> dict[str, dict[str, Any]]:
    """DescribeLogDirs of broker ``node_id``: log dir -> {"error_code", "sizes": {partition: bytes}}."""
    reply = c.request(node_id, "DescribeLogDirs", 4, {"topics": None})
    out = {}
    for d in reply["results"]:
        sizes = {p["partition_index"]: p["partition_size"] for t in d["topics"] if t["name"] == TOPIC
                 for p in t["partitions"]}
        out[d["log_dir"]] = {"error_code": d["error_code"], "sizes": sizes}
    return out


def partition_size(c: ClusterProcesses, node_id: int, partition: int) -> int:
    return sum(d["sizes"].get(partition, 0) for d in log_dir_partitions(c, node_id).values())


def produce_directly(c: ClusterProcesses, node_id: int, partition: int, value: bytes, timeout_ms: int) -> int:
    """One acks=all Produce of ``value`` straight to broker ``node_id`` (the raw protocol): its error code."""
    records = encode_batch([Record(timestamp=int(time.time() * 1000), value=value)])
    reply = c.request(node_id, "Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
                                              "topic_data": [{"name": TOPIC, "partition_data": [
                                                  {"index": partition, "records": records}]}]},
                      timeout=timeout_ms / 1000 + 10)
    return int(reply["responses"][0]["partition_responses"][0]["error_code"])


def segment_bytes(partition_dir: Path) -> bytes:
    """The partition's records as stored: its segment files, in offset order, concatenated."""
    return b"".join(f.read_bytes() for f in sorted(partition_dir.glob("*.log")))


def last_epoch_start(partition_dir: Path) -> tuple[int, int]:
    """The newest (epoch, start offset) of the partition's leader-epoch-checkpoint."""
    lines = (partition_dir / "leader-epoch-checkpoint").read_text().split("\n")
    entries = [tuple(int(x) for x in line.split()) for line in lines[2:] if line.strip()]
    return entries[-1]  # type: ignore[return-value]


# --- scenario 3: the leader cut off from the other brokers and from etcd ------------------------------

@pytest.fixture
def netns_cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    with running_netns_cluster(tmp_path, OVERRIDES) as c:
        yield c
    leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert c.network.prefix not in leftovers, leftovers


@pytest.mark.parametrize("victim_role", ["broker", "controller"])
def test_a_leader_cut_off_from_brokers_and_etcd_acknowledges_nothing_and_truncates_when_healed(
        netns_cluster: NetnsCluster, victim_role: str) -> None:
    """The victim leads a partition and is (``controller``) or is not (``broker``) the controller too:
    then the controller role moves first. The producer, in the root namespace, keeps reaching it."""
    c = netns_cluster
    create_topic(c)
    controller = c.controller_id()
    leaders = {p: partition_state(c, p, controller)["leader_id"] for p in range(PARTITIONS)}
    wanted = [p for p, leader in leaders.items() if (leader == controller) == (victim_role == "controller")]
    if not wanted:  # placement gave the controller no leadership, or every one
        pytest.skip(f"no partition led by a {victim_role} node: {leaders}, controller {controller}")
    part = wanted[0]
    victim = leaders[part]
    survivors = [n for n in c.node_ids if n != victim]
    old_epoch = partition_state(c, part, controller)["leader_epoch"]

    with load_on(c) as load:
        load.wait_both_clients()
        # Both producers have an acks=all write on that partition before the cut, so every replica
        # holds their producer state. Otherwise (the Java client's sticky partitioner may not have
        # written there yet) its first batches go to the cut-off leader, the next ones to the new
        # leader, which knows no state for the producer and, as Kafka's ProducerAppendInfo, takes
        # them at any sequence; the retried first batches are then OUT_OF_ORDER_SEQUENCE_NUMBER
        # until delivery.timeout.ms expires them (a client race Kafka's brokers would equally allow).
        # The same race remains with state: batches the old leader appended and replicated to the
        # new leader only (never acked: the HW stayed below them) are still in flight on the old
        # connection while the client sends its next batches to the new leader, in order there. The
        # retried batches are then more than 5 batches back (Kafka's ProducerStateEntry duplicate
        # window): OUT_OF_ORDER_SEQUENCE_NUMBER until expired, though written. The checker takes such
        # a failure only if its record is in the log exactly once, in order ("failed but written").
        assert c.wait_until(lambda: all(load.acks_since(0.0, [part], client) > 0 for client in ("rdkafka", "java")),
                            60), (load.errors(), load.java.stderr_text())
        cut = load.history.mark(f"isolate {victim}")
        c.isolate(victim)
        try:
            # Straight to the old leader, which does not know yet (in the background, not to delay
            # the failover's clock): it appends, and must not acknowledge.
            size_at_cut = partition_size(c, victim, part)
            direct: list[int] = []
            writer = threading.Thread(target=lambda: direct.append(
                produce_directly(c, victim, part, b"written to the cut-off leader", 1000)), daemon=True)
            writer.start()

            # A new leader among the others, in a newer epoch, as the survivors' metadata shows it.
            def moved() -> bool:
                state = partition_state(c, part, survivors[0])
                return state["leader_id"] in survivors and state["leader_epoch"] > old_epoch
            assert c.wait_until(moved, 30, 0.05), c.logs()
            new_leader_seen = time.monotonic()
            writer.join(20)
            assert direct and direct[0] != ErrorCode.NONE, direct
            assert partition_size(c, victim, part) > size_at_cut, "the old leader did not append the write"
            new_leader = partition_state(c, part, survivors[0])["leader_id"]
            # Writes go on: acks=all acknowledged by the new leader and the remaining follower.
            assert c.wait_until(lambda: load.acks_since(new_leader_seen, [part]) >= 100, 60), \
                (load.errors(), c.logs())
            # Its registration lapsed, and it still believes it leads (as a Kafka broker cut off from the
            # controller does): it appends a write sent to it, and still acknowledges nothing, since
            # its followers fetch from the new leader now and its ISR cannot shrink without etcd.
            assert c.wait_until(lambda: "its registration has lapsed" in c.log_text(victim, 200_000), 30), \
                c.log_text(victim)
            size_before_second = partition_size(c, victim, part)
            assert produce_directly(c, victim, part, b"written to the deposed leader", 1000) \
                == ErrorCode.REQUEST_TIMED_OUT
            assert partition_size(c, victim, part) > size_before_second, "the deposed leader refused the write"
            appended_alone = partition_size(c, victim, part) - size_at_cut
        finally:
            c.heal(victim)
        healed = load.history.mark(f"heal {victim}")
        assert c.wait_until(lambda: victim in partition_state(c, part, new_leader)["isr_nodes"], 60), c.logs()
        rejoined = time.monotonic()
        assert c.wait_until(lambda: load.acks_since(rejoined, [part]) >= 100, 30), (load.errors(), c.logs())
        # Read back from the survivors (the old leader's copy is compared byte for byte below).
        checker = load.finish(",".join(c.broker(n).bootstrap for n in survivors))
    load.check(checker)

    # The old leader truncated what it had appended alone: its log is now the leader's, byte for byte.
    part_dir = {n: c.broker(n).data_dir / f"{TOPIC}-{part}" for n in c.node_ids}
    assert c.wait_until(lambda: len({segment_bytes(d) for d in part_dir.values()}) == 1, 30), \
        {n: len(segment_bytes(d)) for n, d in part_dir.items()}
    assert f"Truncating {TOPIC}-{part}" in c.log_text(victim, 500_000), c.log_text(victim)
    new_epoch, new_epoch_start = last_epoch_start(part_dir[new_leader])
    assert new_epoch > old_epoch
    # One history of leader epochs: every replica's leader-epoch-checkpoint says the same.
    checkpoints = {n: (d / "leader-epoch-checkpoint").read_text() for n, d in part_dir.items()}
    assert len(set(checkpoints.values())) == 1, checkpoints

    # Every ack is there (checked above): none came from the old leader for a write only it had
    # (those were truncated), and neither direct write survived.
    assert not [v for records in checker.read.values() for _, v in records if v.startswith(b"written to")]
    first_new_ack = min(a.at for a in load.history.acks if a.partition == part and a.offset >= new_epoch_start)
    stall = failover(load.history, f"isolate {victim}", cut, victim, [part])
    print(f"\n[scenario 3] leader {victim} ({victim_role}) of {TOPIC}-{part} cut off from brokers and etcd: "
          f"new leader {new_leader} (epoch {old_epoch} -> {new_epoch}) in metadata after "
          f"{new_leader_seen - cut:.2f} s, first ack on it after {first_new_ack - cut:.2f} s, longest ack "
          f"stall on it {'-' if stall.ack_stall_s is None else f'{stall.ack_stall_s:.2f} s'}; "
          f"healed, back in the ISR after {rejoined - healed:.2f} s; the old leader's "
          f"{appended_alone} bytes appended alone after the cut truncated (both direct writes among them, "
          f"the first answered {ErrorCode(direct[0]).name}); {len(load.history.acks)} acks checked "
          f"(rdkafka {load.history.acked('rdkafka')}, java {load.history.acked('java')})")


# --- scenario 5: a follower's disk fills up ---------------------------------------------------------

FULL_FOLLOWER = 3


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[Disks]:
    d = Disks(tmp_path / "disks")
    try:
        yield d
    finally:
        d.cleanup()


def test_a_follower_whose_disk_fills_up_goes_offline_for_that_dir_and_the_partition_keeps_serving(
        tmp_path: Path, disks: Disks) -> None:
    small = disks.tmpfs("small", "4m")
    c = cluster_or_skip(tmp_path / "cluster", 3, OVERRIDES)
    # The follower keeps the topic on the small tmpfs (first of its log.dirs: new logs go to the dir with
    # fewest, the first on a tie) and its metadata on a normal dir, so a full tmpfs does not stop it.
    follower = c.broker(FULL_FOLLOWER)
    healthy_dir = follower.data_dir / "healthy"
    follower.overrides.update({"log.dirs": f"{small},{healthy_dir}", "metadata.log.dir": str(healthy_dir)})
    with c:
        assert c.wait_members(30), c.logs()
        reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [{
            "name": TOPIC, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [1, 2, FULL_FOLLOWER]}],
            "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 10000})
        assert reply["topics"][0]["error_code"] == 0, reply
        assert c.wait_until(lambda: partition_state(c, 0, 1)["leader_id"] == 1 and
                            len(partition_state(c, 0, 1)["isr_nodes"]) == 3, 20), c.logs()
        assert c.wait_until(lambda: 0 in log_dir_partitions(c, FULL_FOLLOWER)[str(small)]["sizes"], 20), \
            log_dir_partitions(c, FULL_FOLLOWER)

        with load_on(c, partitions=1) as load:
            load.wait_both_clients()
            filled = load.history.mark(f"fill broker {FULL_FOLLOWER}'s log dir")
            Disks.fill(small)
            # The follower's next append fails with ENOSPC: that dir goes offline, the broker stays up.
            assert c.wait_until(lambda: log_dir_partitions(c, FULL_FOLLOWER)[str(small)]["error_code"]
                                == ErrorCode.KAFKA_STORAGE_ERROR, 30), c.log_text(FULL_FOLLOWER)
            offline_seen = time.monotonic()
            assert log_dir_partitions(c, FULL_FOLLOWER)[str(healthy_dir)]["error_code"] == ErrorCode.NONE
            assert "No space left on device" in c.log_text(FULL_FOLLOWER), c.log_text(FULL_FOLLOWER)
            # Its broker reports the replica offline (KIP-858): the controller takes it out of the ISR
            # and every broker's Metadata lists it offline; writes go on with the two healthy replicas.
            assert c.wait_until(lambda: all(sorted(partition_state(c, 0, n)["isr_nodes"]) == [1, 2]
                                            for n in c.node_ids), 30), c.logs()
            shrunk = time.monotonic()
            assert c.wait_until(lambda: all(partition_state(c, 0, n)["offline_replicas"] == [FULL_FOLLOWER]
                                            for n in c.node_ids), 10), c.logs()
            assert c.wait_until(lambda: load.acks_since(shrunk, [0]) >= 300, 30), (load.errors(), c.logs())
            assert follower.alive(), c.log_text(FULL_FOLLOWER)
            state = partition_state(c, 0, 2)
            assert state["leader_id"] == 1 and state["replica_nodes"] == [1, 2, FULL_FOLLOWER], state
            # Reads from the two healthy replicas: the leader, and the other follower's copy byte for byte.
            checker = load.finish(",".join(c.broker(n).bootstrap for n in (1, 2)))
        load.check(checker)
        with load.history.lock:
            first_ack_after = min((a.at for a in load.history.acks if a.at >= offline_seen), default=None)
            acks_checked = len(load.history.acks)
        stall = failover(load.history, "fill", filled, FULL_FOLLOWER, [0])
        dirs = [c.broker(n).data_dir / f"{TOPIC}-0" for n in (1, 2)]
        assert c.wait_until(lambda: segment_bytes(dirs[0]) == segment_bytes(dirs[1]), 30)
        assert follower.alive(), c.log_text(FULL_FOLLOWER)

        # Space freed and the follower restarted (an offline dir stays offline until then, as in
        # Kafka): its replica is online again, catches up and rejoins the ISR, identical to the others.
        c.stop(FULL_FOLLOWER)
        (small / "filler").unlink()
        c.start(FULL_FOLLOWER)
        restarted = time.monotonic()
        assert c.wait_until(lambda: all(partition_state(c, 0, n)["offline_replicas"] == [] and
                                        sorted(partition_state(c, 0, n)["isr_nodes"]) == [1, 2, FULL_FOLLOWER]
                                        for n in c.node_ids), 30), c.logs()
        back = time.monotonic()
        dirs.append(small / f"{TOPIC}-0")
        assert c.wait_until(lambda: len({segment_bytes(d) for d in dirs}) == 1, 30)
        print(f"\n[scenario 5] follower {FULL_FOLLOWER}'s log dir full: offline after "
              f"{offline_seen - filled:.2f} s, out of the ISR after {shrunk - filled:.2f} s, "
              f"acks=all kept going (first ack after the dir went offline: "
              f"{'-' if first_ack_after is None else f'{first_ack_after - offline_seen:.2f} s'} later); "
              f"restarted with space, online and in the ISR again after {back - restarted:.2f} s; "
              f"longest ack stall {'-' if stall.ack_stall_s is None else f'{stall.ack_stall_s:.2f} s'}; "
              f"{acks_checked} acks checked")


# --- scenario 7: etcd paused or cut off from every broker ---------------------------------------------

ETCD_OUTAGE_S = 60.0
# The longest gap allowed between two acknowledgements on one partition while etcd is away. Nothing
# in the data plane waits for etcd, so what is left are the pauses of this loaded 2-core machine
# (the JVM, fsyncs, a consumer rebalance) and etcd's return (every lease lapsed at once: three
# re-registrations and a controller election, which move no partition). Without a fault the longest
# gap is a few hundred ms; 3 s stays under replica.lag.time.max.ms (4 s here), and a data plane that
# stops with etcd shows the whole outage (~60 s).
MAX_ACK_GAP_S = 3.0


def longest_ack_gap(load: FaultLoad, partition: int, start: float, end: float) -> float:
    """The longest time in [start, end] without an acknowledgement on ``partition`` (the whole window
    when there was none)."""
    with load.history.lock:
        times = sorted(a.at for a in load.history.acks if a.partition == partition and start <= a.at <= end)
    points = [start, *times, end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def create_topic_error(c: ClusterProcesses, node_id: int, name: str, timeout_s: float) -> int:
    """One CreateTopics of ``name`` (1 partition, RF 3) sent to broker ``node_id``: its error code."""
    reply = c.request(node_id, "CreateTopics", 7, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 5000}, timeout=timeout_s)
    return int(reply["topics"][0]["error_code"])


def registered_everywhere(c: ClusterProcesses) -> bool:
    """Every broker lists every broker as registered and unfenced (DescribeCluster), and names the
    same controller."""
    views = [c.request(n, "DescribeCluster", 0, {}, timeout=2.0) for n in c.node_ids]
    return (all(sorted(b["broker_id"] for b in v["brokers"]) == c.node_ids for v in views)
            and len({v["controller_id"] for v in views}) == 1 and views[0]["controller_id"] in c.node_ids)


@pytest.mark.parametrize("outage", ["SIGSTOP", "cut-off"])
def test_an_etcd_outage_stops_no_acknowledgement_and_moves_no_leader(netns_cluster: NetnsCluster,
                                                                      outage: str) -> None:
    c = netns_cluster
    create_topic(c)
    before = {p: partition_state(c, p, c.node_ids[0]) for p in range(PARTITIONS)}
    with load_on(c) as load:
        load.wait_both_clients()
        at = load.history.mark(f"etcd {outage}")
        if outage == "SIGSTOP":
            c.etcd.send_signal(signal.SIGSTOP)
        else:
            c.cut_off_etcd()
        try:
            # A metadata change meanwhile waits for a controller, and answers a retriable error.
            create_during: list[int] = []
            creator = threading.Thread(target=lambda: create_during.append(
                create_topic_error(c, c.node_ids[0], "created-during-the-outage", 45.0)), daemon=True)
            creator.start()
            time.sleep(ETCD_OUTAGE_S)
            creator.join(15)
        finally:
            back = load.history.mark("etcd back")
            if outage == "SIGSTOP":
                c.etcd.send_signal(signal.SIGCONT)
            else:
                c.heal_etcd()
        gaps = {p: longest_ack_gap(load, p, at, back) for p in range(PARTITIONS)}
        acked_during = load.acks_since(at, range(PARTITIONS)) - load.acks_since(back, range(PARTITIONS))
        print(f"\n[scenario 7] etcd {outage} for {back - at:.1f} s: {acked_during} acks meanwhile, longest gap "
              f"between acks per partition {', '.join(f'{g:.2f} s' for g in gaps.values())}", flush=True)
        # The cluster converges: every broker registered and unfenced, one controller, full ISRs.
        assert c.wait_until(lambda: registered_everywhere(c), 60, 0.25), c.logs()
        assert c.wait_until(lambda: all(len(partition_state(c, p, n)["isr_nodes"]) == 3
                                        for p in range(PARTITIONS) for n in c.node_ids), 60, 0.25), c.logs()
        converged = time.monotonic()
        # The controller takes metadata changes again.
        assert create_topic_error(c, c.node_ids[0], "created-after-the-outage", 40.0) == ErrorCode.NONE
        load.wait_acks(100, since=converged)
        gap_after = {p: longest_ack_gap(load, p, back, time.monotonic()) for p in range(PARTITIONS)}
        after = {p: partition_state(c, p, c.node_ids[0]) for p in range(PARTITIONS)}
        checker = load.finish()
    load.check(checker)
    print(f"[scenario 7] etcd {outage}: after etcd returned: converged in {converged - back:.2f} s, longest gap "
          f"{max(gap_after.values()):.2f} s; leaders/epochs before {[(s['leader_id'], s['leader_epoch']) for s in before.values()]} "
          f"after {[(s['leader_id'], s['leader_epoch']) for s in after.values()]}; a CreateTopics during "
          f"the outage answered {[ErrorCode(e).name for e in create_during]}", flush=True)
    assert max(gaps.values()) <= MAX_ACK_GAP_S, gaps
    assert max(gap_after.values()) <= MAX_ACK_GAP_S, gap_after
    assert create_during == [ErrorCode.REQUEST_TIMED_OUT], create_during
    # etcd dropped every registration at once: the brokers came back as the same processes, within
    # the controller's grace, so nobody was fenced and no leadership moved.
    assert [(s["leader_id"], s["leader_epoch"]) for s in after.values()] == \
        [(s["leader_id"], s["leader_epoch"]) for s in before.values()], (before, after)
