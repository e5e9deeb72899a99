"""The fault suite of issue 13: faults under real client load, judged by tests/support/fault_checker.

Each scenario runs 3 brokers (etcd-coordinated, odradek.testing.cluster) with a replicated topic
(RF=3, min.insync.replicas=2) under load: a librdkafka producer (acks=all, idempotent), Kafka's Java
VerifiableProducer (acks=all, idempotent), a confluent-kafka consumer group of 2 members committing
as it reads, and a Metadata poller recording leaders and leader epochs. After the run the checker
reads the topic back and asserts no acked write was lost, no duplicates, dense offsets, a consumer's
high watermark never went back, one leader per leader epoch, the group's commits never went back,
and that producers saw only the errors the scenario allows.

1. SIGKILL the broker leading most partitions, restart it; each broker in turn.
2. SIGSTOP a follower past replica.lag.time.max.ms: it leaves the ISR; SIGCONT: it returns.
4. Rolling restart (SIGTERM: controlled shutdown, then start) of every broker: no delivery fails.
6. Unclean election disabled vs enabled on two topics: offline and lossless vs available and losing
   exactly the records past the out-of-sync replica's log end.
8. A follower of the group coordinator's __consumer_offsets partition paused (SIGSTOP) or cut off
   from the other brokers and etcd (network namespaces) under the group's commit load: commits that
   wait for it past offsets.commit.timeout.ms, appended or still queued, answer COORDINATOR_NOT_AVAILABLE
   (Kafka's GroupCoordinatorService), never UNKNOWN_SERVER_ERROR (issue 27).
(3 and 5, network cut-off and full disk, have their own files.)

Every run also fails on an UNKNOWN_SERVER_ERROR any client saw or any broker logged (the checker's
``no_unknown_server_error`` and ``assert_no_unknown_server_error_logged``; ``running_cluster`` checks
the logs of the tests that have no FaultLoad).

Each scenario prints its failover times (pytest -s); docs/replication-faults.md keeps the figures.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.bad_batches import records, wrap
from tests.support.cluster import cluster_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import (  # noqa: E402 (needs confluent_kafka)
    Checker,
    FaultLoad,
    History,
    assert_no_unknown_server_error_logged,
    failover,
    produce_batch,
    read_back,
)

TOPIC = "durable"
PARTITIONS = 4
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
FAST = {"controller.lease.ttl.ms": "2000", "replica.lag.time.max.ms": "3000"}
# Rounds of scenarios 1 and 4 (every broker once per round); `make faults-soak` sets more.
ROUNDS = int(os.environ.get("ODRADEK_FAULT_ROUNDS", "1"))


@contextmanager
def running_cluster(tmp_path: Path, overrides: Mapping[str, str]) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, overrides)
    with c:
        assert c.wait_members(30), c.logs()
        yield c
        assert_no_unknown_server_error_logged(c)


def java_or_skip() -> None:
    from tests.support.real_kafka import require_toolchain

    require_toolchain()


def create_topic(c: ClusterProcesses, name: str, partitions: int = PARTITIONS,
                 assignments: list[list[int]] | None = None, configs: Mapping[str, str] | None = None) -> None:
    body: dict[str, Any] = {"name": name, "num_partitions": -1 if assignments else partitions,
                            "replication_factor": -1 if assignments else 3,
                            "assignments": [{"partition_index": i, "broker_ids": b}
                                            for i, b in enumerate(assignments or [])],
                            "configs": [{"name": k, "value": v}
                                        for k, v in {"min.insync.replicas": "2", **(configs or {})}.items()]}
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [body], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply


def partitions_now(c: ClusterProcesses, topic: str = TOPIC, via: int | None = None) -> dict[int, dict[str, Any]]:
    """partition -> Metadata's view (leader_id, leader_epoch, isr_nodes, error_code) from ``via``."""
    node = via if via is not None else c.live_ids()[0]
    md = c.request(node, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]}, timeout=2.0)
    return {p["partition_index"]: p for p in md["topics"][0]["partitions"]}


def wait_full_isr(c: ClusterProcesses, topic: str = TOPIC, size: int = 3, timeout: float = 60.0) -> None:
    """Until every live broker says each partition has a leader and an ISR of ``size``."""
    def full() -> bool:
        return all(p["leader_id"] >= 0 and len(p["isr_nodes"]) == size
                   for n in c.live_ids() for p in partitions_now(c, topic, n).values())
    assert c.wait_until(full, timeout, 0.25), (partitions_now(c, topic), c.logs())


@contextmanager
def load_on(c: ClusterProcesses, commit_every: float = 0.5) -> Iterator[FaultLoad]:
    java_or_skip()
    load = FaultLoad(c, TOPIC, PARTITIONS, commit_every=commit_every)
    try:
        yield load
    finally:
        load.close()


# A round pauses or kills each of the 3 brokers (about 35 s on 2 cores); the default 300 s would cut
# a soak run (ODRADEK_FAULT_ROUNDS=10) short.
@pytest.mark.timeout(180 + 90 * ROUNDS)
@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_lose_the_leader_of_most_partitions_each_broker_in_turn(tmp_path: Path, fault: str) -> None:
    """Scenario 1: SIGKILL the broker leading most partitions, restart it; each broker once (ROUNDS
    times). The SIGSTOP variant pauses it past its etcd lease instead and resumes it: the stale
    leader comes back believing it leads, and must acknowledge nothing the new leader does not hold."""
    with running_cluster(tmp_path, FAST) as c:
        create_topic(c, TOPIC)
        wait_full_isr(c)
        with load_on(c) as load:
            load.wait_both_clients()
            load.wait_every_partition()  # see its docstring: the first batches' race is Kafka's
            for _ in range(ROUNDS):
                done: set[int] = set()
                for _ in c.node_ids:
                    leaders = {p: s["leader_id"] for p, s in partitions_now(c).items()}
                    victim = max((n for n in c.node_ids if n not in done),
                                 key=lambda n: sum(1 for lead in leaders.values() if lead == n))
                    led = [p for p, lead in leaders.items() if lead == victim]
                    done.add(victim)
                    at = load.history.mark(f"{fault} {victim}")
                    if fault == "SIGKILL":
                        c.kill(victim)
                    else:
                        load.poller.skip.add(victim)
                        c.pause(victim)
                    assert c.wait_until(lambda v=victim, led=led: all(
                        partitions_now(c, via=next(n for n in c.live_ids() if n != v))[p]["leader_id"]
                        not in (v, -1) for p in led), 30), c.logs()
                    if led:
                        load.wait_acks(50 * len(led), since=at + 0.5, partitions=led)
                    if fault == "SIGKILL":
                        c.start(victim)
                    else:
                        c.resume(victim)
                        load.poller.skip.discard(victim)
                    wait_full_isr(c)
                    load.note(failover(load.history, f"scenario 1: {fault} broker {victim}", at, victim, led))
            checker = load.finish()
        load.check(checker)


def test_a_paused_follower_leaves_the_isr_and_returns(tmp_path: Path) -> None:
    """Scenario 2: SIGSTOP a follower past replica.lag.time.max.ms (3 s; its etcd lease of 30 s
    holds, so only the lag can take it out): the ISR shrinks to 2; SIGCONT: back to 3. The producers
    keep being acked while it is stopped."""
    with running_cluster(tmp_path, {"controller.lease.ttl.ms": "30000", "replica.lag.time.max.ms": "3000"}) as c:
        controller = c.controller_id()
        found = c.request(controller, "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": ["faults"]})
        coordinator = found["coordinators"][0]["node_id"]
        # The follower leads nothing: not the controller, not the group's coordinator, last in every assignment.
        follower = next(n for n in reversed(c.node_ids) if n not in (controller, coordinator))
        leaders = [n for n in c.node_ids if n != follower]
        create_topic(c, TOPIC, assignments=[[leaders[p % 2], leaders[(p + 1) % 2], follower]
                                            for p in range(PARTITIONS)])
        wait_full_isr(c)
        with load_on(c) as load:
            load.wait_both_clients()
            load.poller.skip.add(follower)
            at = load.history.mark(f"SIGSTOP {follower}")
            c.pause(follower)
            try:
                shrunk = c.wait_until(lambda: all(follower not in s["isr_nodes"] and len(s["isr_nodes"]) == 2
                                                  for s in partitions_now(c, via=controller).values()), 20, 0.1)
                out_after = time.monotonic() - at
                assert shrunk, (partitions_now(c, via=controller), c.logs())
                load.wait_acks(300, since=time.monotonic())   # acks=all goes on with an ISR of 2
            finally:
                resumed = load.history.mark(f"SIGCONT {follower}")
                c.resume(follower)
                load.poller.skip.discard(follower)
            assert c.wait_until(lambda: all(follower in s["isr_nodes"]
                                            for s in partitions_now(c, via=controller).values()), 30, 0.1), \
                (partitions_now(c, via=controller), c.logs())
            back_after = time.monotonic() - resumed
            load.wait_acks(200, since=time.monotonic())
            stall = failover(load.history, "pause", at, -2, range(PARTITIONS)).ack_stall_s
            line = (f"scenario 2: SIGSTOP follower {follower}: out of the ISR after {out_after:.2f} s, back "
                    f"{back_after:.2f} s after SIGCONT, longest ack stall {stall or 0:.2f} s")
            print(line, flush=True)
            checker = load.finish()
        load.check(checker)


def test_rolling_restart_reaches_producers_with_no_error(tmp_path: Path) -> None:
    """Scenario 4: controlled shutdown (SIGTERM) and restart of each broker in turn under load; no
    delivery fails and no non-retriable error reaches either producer."""
    with running_cluster(tmp_path, FAST) as c:
        create_topic(c, TOPIC)
        wait_full_isr(c)
        with load_on(c) as load:
            load.wait_both_clients()
            for node in [n for _ in range(ROUNDS) for n in c.node_ids]:
                led = [p for p, s in partitions_now(c).items() if s["leader_id"] == node]
                at = load.history.mark(f"SIGTERM {node}")
                code = c.stop(node)
                assert code == 0, (code, c.log_text(node))
                stopped = time.monotonic() - at
                c.start(node)
                wait_full_isr(c)
                load.note(failover(load.history, f"scenario 4: controlled shutdown of broker {node} "
                                   f"(exit after {stopped:.2f} s)", at, node, led))
            checker = load.finish()
        load.check(checker)   # includes: no final produce error, only retriable transient ones


def test_unclean_election_loses_exactly_what_the_setting_allows(tmp_path: Path) -> None:
    """Scenario 6: two topics on the same two replicas [A, C] (the controller B holds neither),
    min.insync.replicas=1: "clean" keeps unclean.leader.election.enable=false, "unclean" sets it.
    batch 1 reaches both replicas; C dies; batch 2 is acked by A alone; A dies; C comes back.
    clean: offline (leader -1, LEADER_NOT_AVAILABLE) until A returns, then nothing is lost.
    unclean: C leads at once, and the records lost are exactly batch 2, the ones above C's log end."""
    with running_cluster(tmp_path, FAST) as c:
        b = c.controller_id()
        a, cc = (n for n in c.node_ids if n != b)
        topics = {"clean": "false", "unclean": "true"}
        histories = {t: History() for t in topics}
        for t, enable_unclean in topics.items():
            create_topic(c, t, assignments=[[a, cc]],
                         configs={"min.insync.replicas": "1", "unclean.leader.election.enable": enable_unclean})
            wait_full_isr(c, t, size=2)
        only_a = ",".join(c.broker(n).bootstrap for n in (a, b))
        batches: dict[str, dict[int, list[Any]]] = {t: {} for t in topics}
        for t in topics:
            batches[t][1] = produce_batch(c.bootstrap, t, 0, [f"{t}.{i}".encode() for i in range(50)],
                                          histories[t], "batch1", acks="all")
            assert len(batches[t][1]) == 50, histories[t].errors[:3]
        c.kill(cc)
        for t in topics:
            assert c.wait_until(lambda t=t: partitions_now(c, t, b)[0]["isr_nodes"] == [a], 20), \
                (partitions_now(c, t, b), c.logs())
            batches[t][2] = produce_batch(only_a, t, 0, [f"{t}.{i}".encode() for i in range(50, 80)],
                                          histories[t], "batch2", acks="1")
            assert len(batches[t][2]) == 30, histories[t].errors[:3]
        c.kill(a)
        for t in topics:
            assert c.wait_until(lambda t=t: partitions_now(c, t, b)[0]["leader_id"] == -1, 20), \
                (partitions_now(c, t, b), c.logs())
        at = time.monotonic()
        c.start(cc)
        # unclean: C leads (its ISR becomes [C]); its log end is batch 1's end, the loss is batch 2.
        assert c.wait_until(lambda: partitions_now(c, "unclean", b)[0]["leader_id"] == cc, 30), c.logs()
        elected_after = time.monotonic() - at
        probe = confluent_kafka.Consumer({"bootstrap.servers": c.broker(cc).bootstrap, "group.id": "probe"})
        try:
            log_end = probe.get_watermark_offsets(confluent_kafka.TopicPartition("unclean", 0), timeout=10)[1]
        finally:
            probe.close()
        assert log_end == 50, f"the out-of-sync replica's log end at election is {log_end}, not batch 1's end"
        # clean: C is alive but out of sync, so it stays offline; clients are told so.
        time.sleep(3)
        state = partitions_now(c, "clean", b)[0]
        assert state["leader_id"] == -1 and state["error_code"] == LEADER_NOT_AVAILABLE, state
        refused = produce_batch(c.bootstrap, "clean", 0, [b"clean.refused"], histories["clean"], "offline",
                                acks="all", timeout=3)
        assert not refused and [e.name for e in histories["clean"].errors] == ["_MSG_TIMED_OUT"], \
            histories["clean"].errors
        for n in (b, cc):   # a Produce sent anyway: no broker leads it
            answer = c.request(n, "Produce", 9, {"acks": -1, "timeout_ms": 1000, "transactional_id": None,
                                                 "topic_data": [{"name": "clean", "partition_data": [
                                                     {"index": 0, "records": wrap(records(1), 1)}]}]})
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == NOT_LEADER_OR_FOLLOWER, answer
        batches["unclean"][3] = produce_batch(c.bootstrap, "unclean", 0,
                                              [f"unclean.{i}".encode() for i in range(80, 100)],
                                              histories["unclean"], "batch3", acks="all")
        assert len(batches["unclean"][3]) == 20
        at_a = time.monotonic()
        c.start(a)
        assert c.wait_until(lambda: partitions_now(c, "clean", b)[0]["leader_id"] == a, 30), c.logs()
        clean_back = time.monotonic() - at_a
        for t in topics:
            wait_full_isr(c, t, size=2)
        print(f"scenario 6: unclean leader elected {elected_after:.2f} s after the out-of-sync replica started; "
              f"the clean topic was offline until its ISR member returned ({clean_back:.2f} s after its start)",
              flush=True)

        clean = Checker(histories["clean"], read_back(c.bootstrap, "clean", 1))
        clean.no_acked_write_lost()
        clean.offsets_dense()
        clean.no_unknown_server_error()
        unclean = Checker(histories["unclean"], read_back(c.bootstrap, "unclean", 1))
        unclean.offsets_dense()
        unclean.no_unknown_server_error()
        lost = {(x.offset, x.value) for x in unclean.lost()}
        above_log_end = {(x.offset, x.value) for x in histories["unclean"].acks if x.offset >= log_end}
        assert lost == {(x.offset, x.value) for x in batches["unclean"][2]} == above_log_end - {
            (x.offset, x.value) for x in batches["unclean"][3]}, (sorted(lost)[:5], log_end)
        print(f"scenario 6: unclean election lost {len(lost)} acked records (acks=1, offsets {log_end}.."
              f"{log_end + len(lost) - 1}), exactly those above the new leader's log end", flush=True)
        # The loss is in the brokers' logs: the controller's unclean election and A's truncation.
        assert "Unclean leader election" in c.log_text(b, 200000), c.log_text(b)
        assert f"Truncating unclean-0 to offset {log_end}" in c.log_text(a, 200000), c.log_text(a)


# --- scenario 8: a follower of the group coordinator's partition paused or cut off -------------------

OFFSETS_TOPIC = "__consumer_offsets"
GROUP = "faults"   # FaultLoad's consumer group
COORDINATOR_NOT_AVAILABLE = 15
# The follower stays in the ISR for replica.lag.time.max.ms (3 s) after it stops fetching, and the
# coordinator's writes wait for it: with offsets.commit.timeout.ms at 1 s, commits time out meanwhile,
# the first while its records await replication, the next ones still queued behind it. The lease TTL
# (30 s) outlasts the fault, so only the lag takes the follower out.
GROUP_FAULT_OVERRIDES = {"controller.lease.ttl.ms": "30000", "replica.lag.time.max.ms": "3000",
                         "offsets.commit.timeout.ms": "1000"}


@contextmanager
def netns_running_cluster(tmp_path: Path, overrides: Mapping[str, str]) -> Iterator[ClusterProcesses]:
    """``running_cluster`` with every process in a network namespace of its own (``isolate``/``heal``)."""
    from tests.support.netns_cluster import running_netns_cluster

    with running_netns_cluster(tmp_path, overrides) as c:
        yield c
        assert_no_unknown_server_error_logged(c)


def offsets_partition(c: ClusterProcesses, via: int) -> dict[str, Any]:
    md = c.request(via, "Metadata", 12, {"topics": [{"name": OFFSETS_TOPIC, "topic_id": None}]}, timeout=2.0)
    (partition,) = md["topics"][0]["partitions"]   # offsets.topic.num.partitions=1 in test clusters
    return dict(partition)


def raw_commit(c: ClusterProcesses, node: int, group: str, offset: int) -> int:
    """One OffsetCommit v8 of a simple group (no generation) straight to broker ``node``: its error code."""
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    reply = c.request(node, "OffsetCommit", 8, body, timeout=10.0)
    return int(reply["topics"][0]["partitions"][0]["error_code"])


@pytest.mark.parametrize("fault", ["SIGSTOP", "cut-off"])
def test_a_group_coordinators_follower_lost_under_commit_load_answers_retriable_coordinator_errors(
        tmp_path: Path, fault: str) -> None:
    """Scenario 8: the follower (neither the coordinator nor the controller; last replica of every
    partition of the topic, so it leads nothing) is paused or cut off while the group commits every
    0.2 s. Two raw commits sent at once to the coordinator meanwhile (one awaits replication, the
    other waits in the partition's queue) both answer COORDINATOR_NOT_AVAILABLE; the group goes on
    committing once the ISR shrank; after SIGCONT/healing the follower is back in both ISRs, and
    the run passes every check, no UNKNOWN_SERVER_ERROR seen or logged among them."""
    cluster = running_cluster if fault == "SIGSTOP" else netns_running_cluster
    with cluster(tmp_path, GROUP_FAULT_OVERRIDES) as c:
        controller = c.controller_id()
        found = c.request(controller, "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": [GROUP]})
        assert c.wait_until(lambda: c.request(controller, "FindCoordinator", 4, {
            "key_type": 0, "coordinator_keys": [GROUP]})["coordinators"][0]["error_code"] == 0, 30), found
        assert c.wait_until(lambda: len(offsets_partition(c, controller)["isr_nodes"]) == 3, 30), c.logs()
        coordinator = offsets_partition(c, controller)["leader_id"]
        follower = next(n for n in reversed(c.node_ids) if n not in (controller, coordinator))
        leaders = [n for n in c.node_ids if n != follower]
        create_topic(c, TOPIC, assignments=[[leaders[p % 2], leaders[(p + 1) % 2], follower]
                                            for p in range(PARTITIONS)])
        wait_full_isr(c)
        with load_on(c, commit_every=0.2) as load:
            load.wait_both_clients()
            assert c.wait_until(lambda: len(load.history.commits) >= 10, 30), load.history.client_errors[-5:]
            load.poller.skip.add(follower)
            at = load.history.mark(f"{fault} {follower}")
            if fault == "SIGSTOP":
                c.pause(follower)
            else:
                c.isolate(follower)   # type: ignore[attr-defined]
            try:
                probes: list[int] = []
                senders = [threading.Thread(target=lambda i=i: probes.append(raw_commit(c, coordinator, "probe", i)))
                           for i in range(2)]
                for t in senders:
                    t.start()
                for t in senders:
                    t.join(15)
                assert probes == [COORDINATOR_NOT_AVAILABLE] * 2, probes
                assert c.wait_until(lambda: follower not in offsets_partition(c, controller)["isr_nodes"], 20, 0.1), \
                    (offsets_partition(c, controller), c.logs())
                shrunk = time.monotonic()
                # The coordinator writes again with the ISR it has left: the group's commits go on.
                assert c.wait_until(lambda: any(x.at > shrunk for x in list(load.history.commits)), 30), \
                    load.history.client_errors[-5:]
                load.wait_acks(200, since=shrunk)
            finally:
                back = load.history.mark(f"{fault} {follower} over")
                if fault == "SIGSTOP":
                    c.resume(follower)
                else:
                    c.heal(follower)   # type: ignore[attr-defined]
                load.poller.skip.discard(follower)
            assert c.wait_until(lambda: follower in offsets_partition(c, controller)["isr_nodes"], 30), c.logs()
            wait_full_isr(c)
            assert raw_commit(c, coordinator, "probe", 7) == 0
            with load.history.lock:
                refused = [e for e in load.history.client_errors if e.at >= at and "commit" in e.detail]
                commits = sum(1 for x in load.history.commits if at <= x.at <= back)
            print(f"scenario 8: {fault} of follower {follower} of {OFFSETS_TOPIC}-0 (coordinator {coordinator}): "
                  f"out of its ISR after {shrunk - at:.2f} s; the group's commits meanwhile: {commits} taken, "
                  f"{len(refused)} refused ({sorted({e.name for e in refused})})", flush=True)
            checker = load.finish()
        load.check(checker)

