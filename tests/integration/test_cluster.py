"""A 3-broker cluster on etcd (issue 12): membership, controller failover, leader election, fencing.

Every test runs real processes: one etcd and three ``python -m odradek.broker.main`` brokers with
``metadata.store=etcd://...`` (tests/support/cluster.py), killed, stopped and cut off for real. The
controller lease TTL is 2 s (etcd runs with a 1 s minimum), so failovers take a few seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.records import Record, decode_records, encode_batch
from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip
from tests.support.tcp_proxy import TcpProxy

TTL_MS = 2000
FAST = {"controller.lease.ttl.ms": str(TTL_MS)}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 3, FAST)
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def create_topic(c: ClusterProcesses, node_id: int, name: str, partitions: int, rf: int) -> dict[str, Any]:
    response = c.request(node_id, "CreateTopics", 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf}], "timeout_ms": 10000})
    return response["topics"][0]


def partitions(c: ClusterProcesses, node_id: int, topic: str) -> dict[int, dict[str, Any]]:
    md = c.request(node_id, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return {p["partition_index"]: p for p in md["topics"][0]["partitions"]}


def live_broker_ids(c: ClusterProcesses, node_id: int) -> list[int]:
    return sorted(b["node_id"] for b in c.metadata(node_id)["brokers"])


def values_in(c: ClusterProcesses, node_id: int, topic: str, partition: int) -> list[bytes | None]:
    """The values of every record up to the HW of ``topic``-``partition``, read from its leader ``node_id``."""
    reply = c.request(node_id, "Fetch", 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 24}]}]})
    data = reply["responses"][0]["partitions"][0]
    assert data["error_code"] == 0, data
    return [r.value for b in decode_records(data["records"] or b"", allow_partial=True) for r in b.records]


def test_three_brokers_form_one_cluster_and_spread_leaders(cluster: ClusterProcesses) -> None:
    controllers = {cluster.controller_id(n) for n in cluster.node_ids}
    assert len(controllers) == 1 and controllers.pop() in cluster.node_ids
    cluster_ids = {cluster.metadata(n)["cluster_id"] for n in cluster.node_ids}
    assert len(cluster_ids) == 1
    for n in cluster.node_ids:
        assert live_broker_ids(cluster, n) == [1, 2, 3]
    controller = cluster.controller_id()
    assert create_topic(cluster, controller, "spread", 6, 3)["error_code"] == 0
    for n in cluster.node_ids:  # every broker's image follows the controller's writes
        assert cluster.wait_until(lambda n=n: len(partitions(cluster, n, "spread")) == 6, 10)
    parts = partitions(cluster, 1, "spread")
    assert {p["leader_id"] for p in parts.values()} == {1, 2, 3}
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in parts.values())


def test_kafka_cli_and_java_admin_see_the_cluster(cluster: ClusterProcesses) -> None:
    from tests.support.java_tools import JavaDriver, run_tool

    bootstrap = cluster.bootstrap
    run_tool("kafka-topics", ["--bootstrap-server", bootstrap, "--create", "--topic", "cli-rf3",
                              "--partitions", "3", "--replication-factor", "3"])
    described = run_tool("kafka-topics", ["--bootstrap-server", bootstrap, "--describe", "--topic", "cli-rf3"]).stdout
    leaders = {line.split("Leader:")[1].split()[0] for line in described.splitlines() if "Leader:" in line}
    assert leaders == {"1", "2", "3"}, described
    with JavaDriver(bootstrap) as driver:
        info = driver.admin("describe_cluster")
    assert sorted(n["id"] for n in info["nodes"]) == [1, 2, 3]
    assert info["controller"] == cluster.controller_id()


def test_sigkill_of_the_controller_elects_another_within_the_ttl(cluster: ClusterProcesses) -> None:
    old = cluster.controller_id()
    survivor = next(n for n in cluster.node_ids if n != old)
    cluster.kill(old)
    t0 = time.monotonic()
    assert cluster.wait_until(lambda: cluster.controller_id(survivor) not in (-1, old), TTL_MS / 1000 + 5), \
        cluster.logs()
    took = time.monotonic() - t0
    new = cluster.controller_id(survivor)
    assert took < TTL_MS / 1000 + 5
    assert cluster.wait_until(lambda: old not in live_broker_ids(cluster, survivor), 10)
    assert create_topic(cluster, new, "after-failover", 2, 2)["error_code"] == 0
    assert cluster.wait_until(lambda: len(partitions(cluster, survivor, "after-failover")) == 2, 10)


def test_sigkill_of_a_broker_moves_its_leaderships_with_bumped_epochs(cluster: ClusterProcesses) -> None:
    controller = cluster.controller_id()
    assert create_topic(cluster, controller, "failover", 6, 3)["error_code"] == 0
    victim = next(n for n in cluster.node_ids if n != controller)
    assert cluster.wait_until(lambda: len(partitions(cluster, controller, "failover")) == 6, 10)
    before = partitions(cluster, controller, "failover")
    led = {i for i, p in before.items() if p["leader_id"] == victim}
    assert led, before
    cluster.kill(victim)
    t0 = time.monotonic()

    def moved() -> bool:
        now = partitions(cluster, controller, "failover")
        return all(now[i]["leader_id"] not in (victim, -1) for i in led)

    assert cluster.wait_until(moved, 30), cluster.logs()
    assert time.monotonic() - t0 < 30
    after = partitions(cluster, controller, "failover")
    for i in led:
        assert after[i]["leader_epoch"] > before[i]["leader_epoch"]
        assert after[i]["leader_id"] in before[i]["isr_nodes"]
        assert victim not in after[i]["isr_nodes"]
    for i in set(before) - led:  # partitions the victim did not lead keep their leader
        assert after[i]["leader_id"] == before[i]["leader_id"]
    # Clients continue: a producer bootstrapped on the cluster writes to the moved partitions.
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=[cluster.broker(n).bootstrap for n in cluster.live_ids()],
                             acks=1, retries=10, request_timeout_ms=10000)
    try:
        sent = [producer.send("failover", b"after", partition=i) for i in sorted(led)]
        for future in sent:
            assert future.get(timeout=30).partition in led
    finally:
        producer.close()


def test_controlled_shutdown_moves_leaderships_before_the_process_exits(cluster: ClusterProcesses) -> None:
    controller = cluster.controller_id()
    assert create_topic(cluster, controller, "controlled", 6, 3)["error_code"] == 0
    victim = next(n for n in cluster.node_ids if n != controller)
    assert cluster.wait_until(lambda: len(partitions(cluster, victim, "controlled")) == 6, 10)
    assert any(p["leader_id"] == victim for p in partitions(cluster, controller, "controlled").values())
    assert cluster.stop(victim) == 0, cluster.log_text(victim)
    # The move happened before the exit, not a lease TTL later: the survivors show it at once.
    after = partitions(cluster, controller, "controlled")
    assert all(p["leader_id"] != victim for p in after.values()), after
    assert "controlled shutdown of broker" in cluster.log_text(victim)


def test_a_registration_marked_shutting_down_moves_leaderships_while_its_key_lives(cluster: ClusterProcesses) -> None:
    """A controlled shutdown is announced in the broker's registration (Kafka's heartbeat with
    wantShutDown), so the controller moves the leaderships at once rather than on the key's deletion,
    which it trusts only after a grace when its own contact with etcd was broken lately. The mark is
    written here into a live broker's key (same lease): the controller must fence it and move its
    leaderships while the key is still there."""
    controller = cluster.controller_id()
    assert create_topic(cluster, controller, "announced", 6, 3)["error_code"] == 0
    victim = next(n for n in cluster.node_ids if n != controller)
    assert cluster.wait_until(lambda: any(p["leader_id"] == victim
                                          for p in partitions(cluster, controller, "announced").values()), 10)

    async def mark(shutting_down: bool) -> None:
        import json

        from odradek.controller.etcd_client import etcd_client

        client = etcd_client(cluster.etcd.endpoint)
        try:
            (kv,) = [kv for kv in await client.get_prefix(b"/odradek/")
                     if bytes(kv.key).endswith(f"/brokers/{victim}".encode())]
            value = json.loads(bytes(kv.value))
            value["shutting_down"] = shutting_down
            await client.put(bytes(kv.key), json.dumps(value).encode(), lease=int(kv.lease))
        finally:
            await client.close()

    asyncio.run(mark(True))
    assert cluster.wait_until(lambda: all(p["leader_id"] != victim
                                          for p in partitions(cluster, controller, "announced").values()), 5), (
        partitions(cluster, controller, "announced"), cluster.log_text(controller))
    assert victim not in [n for p in partitions(cluster, controller, "announced").values() for n in p["isr_nodes"]]
    assert cluster.broker(victim).alive()


def test_a_revoked_controller_lease_fences_the_next_write(tmp_path: Path) -> None:
    """The epoch guard: the controller's lease is revoked in etcd behind its back (what a lapse while cut
    off looks like to etcd). Its next write is refused by etcd itself - the transaction compares the
    leader key with "me at my epoch" - nothing is written, and another node becomes controller.

    A long TTL (renewals every 10 s) leaves the controller believing it leads when the write comes."""
    with cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "30000"}) as c:
        assert c.wait_members(30), c.logs()
        old = c.controller_id()

        async def revoke_controller_lease() -> None:
            from odradek.controller.etcd_client import etcd_client

            client = etcd_client(c.etcd.endpoint)
            try:
                found = [kv for kv in await client.get_prefix(b"/odradek/") if bytes(kv.key).endswith(b"/controller")]
                assert len(found) == 1
                await client.revoke_lease(int(found[0].lease))
            finally:
                await client.close()

        asyncio.run(revoke_controller_lease())
        create_topic(c, old, "fenced-write", 1, 1)
        assert c.wait_until(lambda: "no longer holds the lease" in c.log_text(old), 10), c.log_text(old)
        assert "nothing was written" in c.log_text(old)
        assert c.wait_until(lambda: c.controller_id(old) not in (-1, old), 10), c.logs()


def test_a_broker_cut_off_from_etcd_keeps_serving_and_acknowledges_nothing_a_new_leader_lacks(
        tmp_path: Path) -> None:
    """Node 3 loses etcd, not the other brokers: the controller fences it and moves its leaderships.
    Node 3 cannot know and goes on as the leader it was (Kafka's broker cut off from the controller
    does the same): an acks=all write is appended but never acknowledged, since its followers now
    fetch from the new leaders and it cannot shrink its ISR without the controller; an acks=1 write
    is acknowledged, and truncated when it comes back as a follower (Kafka's semantics for acks=1)."""
    c = cluster_or_skip(tmp_path, 3, FAST)
    c.cluster.etcd.start()
    proxy = TcpProxy("127.0.0.1", int(c.etcd.endpoint.rsplit(":", 1)[1])).start()
    try:
        c.broker(3).overrides["metadata.store"] = f"etcd://{proxy.endpoint}"
        # Nodes 1 and 2 first, so the controller is one of them and node 3 a plain broker.
        for n in (1, 2):
            c.start(n)
        assert c.wait_until(lambda: c.controller_id(1) in (1, 2), 10), c.logs()
        c.start(3)
        assert c.wait_members(30), c.logs()
        controller = c.controller_id(1)
        assert create_topic(c, controller, "cutoff", 6, 3)["error_code"] == 0
        assert c.wait_until(lambda: len(partitions(c, 3, "cutoff")) == 6, 10)
        assert c.wait_until(lambda: all(len(p["isr_nodes"]) == 3 for p in partitions(c, 3, "cutoff").values()), 10)
        led = [i for i, p in partitions(c, controller, "cutoff").items() if p["leader_id"] == 3]
        assert led
        old_epoch = partitions(c, 3, "cutoff")[led[0]]["leader_epoch"]
        proxy.cut()
        # The controller moves its leaderships to the others once its registration lapsed...
        assert c.wait_until(lambda: all(partitions(c, controller, "cutoff")[i]["leader_id"] != 3 for i in led),
                            TTL_MS / 1000 + 10), c.logs()
        # ...while node 3 still serves them as the leader of the old epoch: it knows of no other.
        state = partitions(c, 3, "cutoff")[led[0]]
        assert (state["leader_id"], state["leader_epoch"]) == (3, old_epoch), state

        def produce(acks: int, value: bytes) -> int:
            batch = encode_batch([Record(timestamp=int(time.time() * 1000), value=value)])
            reply = c.request(3, "Produce", 9, {"acks": acks, "timeout_ms": 1000, "transactional_id": None,
                                                "topic_data": [{"name": "cutoff", "partition_data": [
                                                    {"index": led[0], "records": batch}]}]}, timeout=10)
            return int(reply["responses"][0]["partition_responses"][0]["error_code"])

        assert produce(-1, b"acks=all on the deposed leader") == 7  # REQUEST_TIMED_OUT: never acknowledged
        assert produce(1, b"acks=1 on the deposed leader") == 0  # acknowledged by the leader alone
        assert c.wait_until(lambda: "its registration has lapsed" in c.log_text(3), TTL_MS / 1000 + 15), c.log_text(3)
        proxy.heal()
        assert c.wait_until(lambda: 3 in live_broker_ids(c, controller), 30), c.log_text(3)
        assert "registered again" in c.log_text(3)
        # Back as a follower of the new leader, it truncated what it appended alone; both writes are
        # gone from every replica (read from the new leader, which node 3's log now equals).
        assert c.wait_until(lambda: f"Truncating cutoff-{led[0]}" in c.log_text(3, 200_000), 30), c.log_text(3)
        assert c.wait_until(lambda: 3 in partitions(c, controller, "cutoff")[led[0]]["isr_nodes"], 30), c.logs()
        new_leader = partitions(c, controller, "cutoff")[led[0]]["leader_id"]
        values = values_in(c, new_leader, "cutoff", led[0])
        assert not [v for v in values if v is not None and v.endswith(b"on the deposed leader")], values
    finally:
        proxy.close()
        c.close()


def test_the_first_find_coordinator_while_etcd_is_away_answers_coordinator_not_available(
        cluster: ClusterProcesses) -> None:
    """The first group lookup creates __consumer_offsets through the controller; with etcd paused
    there is none, and the lookup answers COORDINATOR_NOT_AVAILABLE (Kafka's answer while its auto
    topic creation cannot go through), which clients retry, not the forwarding's REQUEST_TIMED_OUT.
    Once etcd is back the next lookups create the topic and name the coordinator."""
    import signal

    def find(timeout: float) -> dict[str, Any]:
        reply = cluster.request(1, "FindCoordinator", 4, {"key_type": 0, "coordinator_keys": ["g"]}, timeout=timeout)
        return dict(reply["coordinators"][0])

    cluster.etcd.send_signal(signal.SIGSTOP)
    try:
        answer = find(60.0)
    finally:
        cluster.etcd.send_signal(signal.SIGCONT)
    assert answer["error_code"] == 15, answer  # COORDINATOR_NOT_AVAILABLE
    assert cluster.wait_until(lambda: find(60.0)["error_code"] == 0, 60, 0.5), cluster.logs()
    assert "handler failed" not in "".join(cluster.log_text(n, 200_000) for n in cluster.node_ids)


def test_admin_requests_sent_to_a_non_controller_are_forwarded(cluster: ClusterProcesses) -> None:
    controller = cluster.controller_id()
    other = next(n for n in cluster.node_ids if n != controller)
    created = create_topic(cluster, other, "forwarded", 3, 3)
    assert created["error_code"] == 0, created
    # Read your writes: the receiving broker's own Metadata shows the topic at once.
    assert len(partitions(cluster, other, "forwarded")) == 3
    # Errors come back as the controller gave them.
    again = create_topic(cluster, other, "forwarded", 3, 3)
    assert again["error_code"] == 36 and "already exists" in again["error_message"]  # TOPIC_ALREADY_EXISTS
    deleted = cluster.request(other, "DeleteTopics", 6, {"topics": [{"name": "forwarded", "topic_id": None}],
                                                         "timeout_ms": 10000})
    assert deleted["responses"][0]["error_code"] == 0, deleted
    assert cluster.wait_until(lambda: "forwarded" not in {t["name"] for t in cluster.metadata(controller)["topics"]}, 10)


def test_preferred_election_and_reassignment_with_kafkas_tools(cluster: ClusterProcesses, tmp_path: Path) -> None:
    """A broker that died and came back leads nothing until a preferred election (kafka-leader-election)
    gives its partitions back - once it is in the ISR again; kafka-reassign-partitions moves a partition
    to other brokers and completes when the new replicas caught up."""
    import json

    from tests.support.java_tools import run_tool

    controller = cluster.controller_id()
    assert create_topic(cluster, controller, "prefer", 3, 3)["error_code"] == 0
    victim = next(n for n in cluster.node_ids if n != controller)
    assert cluster.wait_until(lambda: len(partitions(cluster, victim, "prefer")) == 3, 10)
    preferred = {i for i, p in partitions(cluster, controller, "prefer").items() if p["replica_nodes"][0] == victim}
    assert preferred
    cluster.kill(victim)
    assert cluster.wait_until(lambda: all(partitions(cluster, controller, "prefer")[i]["leader_id"] != victim
                                          for i in preferred), 30)
    cluster.start(victim)
    # Back in every ISR once its fetchers caught up (the leaders expand the ISR through AlterPartition).
    assert cluster.wait_until(lambda: all(victim in p["isr_nodes"]
                                          for p in partitions(cluster, controller, "prefer").values()), 60), \
        cluster.logs()
    out = run_tool("kafka-leader-election", ["--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
                                             "--topic", "prefer", "--partition", str(min(preferred))])
    assert "Successfully completed leader election (PREFERRED)" in out.stdout, out.stdout
    assert cluster.wait_until(lambda: partitions(cluster, controller, "prefer")[min(preferred)]["leader_id"] == victim,
                              10)

    # Reassign partition 0 of a new RF-2 topic to the two brokers that do not hold it.
    assert create_topic(cluster, controller, "moving", 1, 2)["error_code"] == 0
    assert cluster.wait_until(lambda: len(partitions(cluster, controller, "moving")) == 1, 10)
    before = partitions(cluster, controller, "moving")[0]["replica_nodes"]
    outside = next(n for n in cluster.node_ids if n not in before)
    target = [outside, before[0]]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": target,
                                                              "log_dirs": ["any", "any"]}]}))
    args = ["--bootstrap-server", cluster.bootstrap, "--reassignment-json-file", str(plan)]
    out = run_tool("kafka-reassign-partitions", [*args, "--execute"])
    assert "Successfully started partition reassignment" in out.stdout, out.stdout

    def completed() -> bool:
        return "is completed" in run_tool("kafka-reassign-partitions", [*args, "--verify"], check=False).stdout

    assert cluster.wait_until(completed, 60, interval=2), cluster.logs()
    assert sorted(partitions(cluster, controller, "moving")[0]["replica_nodes"]) == sorted(target)
