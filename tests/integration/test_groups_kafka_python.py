"""Consumer groups end to end: the real daemon, kafka-python clients, raw-socket error cases.

Needs the group coordinator wired into broker/server.py (``broker.group_coordinator``) and the
replica manager's Produce/Fetch. Short session timeouts keep the whole file well under a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import KafkaAdminClient, NewTopic

from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(120)

GROUP_OVERRIDES = {"group.min.session.timeout.ms": "500"}


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(count):
        producer.send(topic, str(i).encode(), partition=i % partitions)
    producer.flush()
    producer.close()


def _consumer(bootstrap: str, name: str, topic: str, group: str = "g1", **kw) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=300, **kw)
    # Fetch the topic's metadata before subscribing. Otherwise, on a loaded machine, the member may
    # join (and, as leader, assign) before it knows the topic's partitions, and kafka-python
    # 3.0.12 then rejoins at once. Once in the full suite that left the client silent after the
    # second SyncGroup: the broker's request log (odradek.request at DEBUG) showed every
    # JoinGroup and SyncGroup answered in order, and then no request from the client at all.
    # The same pipelined requests on one connection, 300 times on a loaded machine, were all
    # answered.
    assert consumer.partitions_for_topic(topic), f"no metadata for {topic}"
    consumer.subscribe([topic])
    return consumer


@dataclass
class Seen:
    """What one consumer's polling thread saw, as of its last poll."""

    records: list[bytes] = field(default_factory=list)
    assignment: frozenset[TopicPartition] = frozenset()
    # The sum of the assigned partitions' positions: what ``commit()`` would store.
    positions: int = 0


def _poll_until(consumers: list[KafkaConsumer], done: Callable[[dict[str, Seen]], bool],
                timeout: float = 30.0) -> dict[str, Seen]:
    """Poll each consumer in its own thread, as applications run them, until ``done(seen)``.

    Not one thread taking turns: kafka-python 3.0.12 keeps a JoinGroup+SyncGroup task across
    poll() calls, but when that task completes while its consumer is not inside poll() (here:
    while the other consumers were being polled), the next poll() finds it done and sends a new
    JoinGroup, dropping the assignment it got (``join_group_async``: ``_join_task.is_done`` starts
    a new task before looking at the finished one's result). A leader's JoinGroup in a stable group
    forces a rebalance, in Kafka as here. On a loaded machine the group then rebalanced every
    300-600 ms: generations 3 to 65 in 27 s in one kept run, the first member keeping the whole
    assignment of generation 1 until the test timed out; in another a commit taken between two
    rebalances stored 50 of the 60 records read. Each consumer in its own thread re-enters poll()
    at once, which all but closes that window.
    """
    seen = {c.config["client_id"]: Seen() for c in consumers}
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(c: KafkaConsumer, mine: Seen) -> None:
        try:
            while not stop.is_set():
                for recs in c.poll(200).values():
                    mine.records.extend(r.value for r in recs)
                assigned = frozenset(c.assignment())
                mine.positions = sum(c.position(tp, timeout_ms=0) or 0 for tp in assigned)
                mine.assignment = assigned
        except BaseException as exc:  # noqa: BLE001 - reported by the waiting test below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(c, seen[c.config["client_id"]]), daemon=True)
               for c in consumers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not failures:
            if done(seen):
                return seen
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not failures, failures
    raise AssertionError(f"timed out: {[(name, sorted(s.assignment)) for name, s in seen.items()]}")


def _balanced(partitions: int) -> Callable[[dict[str, Seen]], bool]:
    def check(seen: dict[str, Seen]) -> bool:
        owned = [tp.partition for s in seen.values() for tp in s.assignment]
        return sorted(owned) == list(range(partitions)) and all(s.assignment for s in seen.values())
    return check


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_three_members_share_partitions_and_commits_survive_restart(broker_factory, assignor: str) -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    strategy = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[assignor]
    broker = broker_factory(GROUP_OVERRIDES)
    _produce(broker.bootstrap, "gt", 6, 60)
    consumers = [_consumer(broker.bootstrap, f"c{i}", "gt", partition_assignment_strategy=[strategy])
                 for i in range(3)]
    # Balanced, and every member has read to the end of its partitions: the commits below store 60.
    balanced = _balanced(6)
    _poll_until(consumers, lambda seen: balanced(seen) and sum(s.positions for s in seen.values()) == 60)
    # Every partition is owned by exactly one member of the generation.
    owned = sorted(tp.partition for c in consumers for tp in c.assignment())
    assert owned == list(range(6))
    for c in consumers:
        c.commit()
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    committed = admin.list_group_offsets("g1")["g1"]
    admin.close()
    assert sum(o.offset for o in committed.values()) == 60
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert sum(o.offset for o in admin.list_group_offsets("g1")["g1"].values()) == 60
    admin.close()
    # A new member resumes exactly after the last commit: nothing is consumed again.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("gt", b"after-restart", partition=2)
    producer.flush()
    producer.close()
    c = _consumer(broker.bootstrap, "late", "gt")
    late = _poll_until([c], lambda seen: len(seen["late"].records) >= 1)["late"].records
    time.sleep(0.5)
    for recs in c.poll(300).values():
        late.extend(r.value for r in recs)
    assert late == [b"after-restart"]
    c.close()


def test_member_leaving_triggers_rebalance(broker) -> None:
    broker_bootstrap = broker.bootstrap
    _produce(broker_bootstrap, "lv", 4, 8)
    a, b = _consumer(broker_bootstrap, "a", "lv"), _consumer(broker_bootstrap, "b", "lv")
    _poll_until([a, b], _balanced(4))
    b.close()  # sends LeaveGroup
    t0 = time.monotonic()
    _poll_until([a], lambda seen: len(seen["a"].assignment) == 4, timeout=10)
    assert time.monotonic() - t0 < 5
    a.close()


def test_admin_describe_list_delete_groups(broker) -> None:
    _produce(broker.bootstrap, "ad", 2, 4)
    c = _consumer(broker.bootstrap, "solo", "ad", group="adm")
    _poll_until([c], lambda seen: len(seen["solo"].records) == 4)
    c.commit()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    # kafka-python 3: list_groups() gives ListGroups entries as dicts; describe_groups() a dict
    # keyed by group id with the consumer protocol's subscription and assignment decoded.
    assert admin.list_groups() == [{"group_id": "adm", "protocol_type": "consumer", "group_state": "Stable",
                                    "group_type": "classic"}]
    assert admin.list_groups(states_filter=["Empty"]) == []
    assert [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])] == ["adm"]
    desc = admin.describe_groups(["adm"], include_authorized_operations=True)["adm"]
    # No authorizer: every operation Kafka supports on a group.
    assert sorted(desc["authorized_operations"]) == ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
    assert (desc["error"], desc["group_state"], desc["protocol_type"], desc["protocol_data"]) == \
        (None, "Stable", "consumer", "range")
    (member,) = desc["members"]
    assert member["client_id"] == "solo" and member["member_id"].startswith("solo-")
    assert member["member_metadata"]["topics"] == ["ad"]
    assert member["member_assignment"]["assigned_partitions"] == [{"topic": "ad", "partitions": [0, 1]}]
    # OffsetDelete: refused for the topic a member subscribes to, and the offsets stay.
    tps = [TopicPartition("ad", 0), TopicPartition("ad", 1)]
    assert admin.delete_group_offsets("adm", tps) == dict.fromkeys(tps, Errors.GroupSubscribedToTopicError)
    assert len(admin.list_group_offsets("adm")["adm"]) == 2
    c.close()  # LeaveGroup: the group is Empty but keeps its offsets
    desc = admin.describe_groups(["adm"])["adm"]
    assert (desc["group_state"], desc["protocol_type"], desc["members"]) == ("Empty", "consumer", [])
    assert [g["group_state"] for g in admin.list_groups(states_filter=["empty"])] == ["Empty"]
    offsets = admin.list_group_offsets("adm")["adm"]
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 2, 1: 2}
    # Once Empty, OffsetDelete removes the offset; the group stays.
    assert admin.delete_group_offsets("adm", tps[:1]) == {tps[0]: Errors.NoError}
    assert {tp.partition for tp in admin.list_group_offsets("adm")["adm"]} == {1}
    with pytest.raises(Errors.GroupIdNotFoundError):
        admin.delete_group_offsets("no-such-group", tps)
    assert admin.delete_groups(["adm"]) == {"adm": "OK"}
    assert admin.describe_groups(["adm"])["adm"]["group_state"] == "Dead"
    assert admin.list_group_offsets("adm") == {"adm": {}}
    assert admin.list_groups() == []
    assert admin.delete_groups(["adm"]) == {"adm": "GroupIdNotFoundError"}
    admin.close()


def _find_coordinator(w: WireClient, group: str) -> None:
    for _ in range(100):
        r = w.request(10, 3, {"key": group, "key_type": 0})
        if r["error_code"] == ErrorCode.NONE:
            return
        time.sleep(0.05)
    raise AssertionError("no coordinator")


def _join(w: WireClient, version: int, member_id: str = "", session: int = 6000, instance: str | None = None) -> dict:
    return w.request(11, version, {"group_id": "wire", "session_timeout_ms": session, "rebalance_timeout_ms": 3000,
                                   "member_id": member_id, "group_instance_id": instance,
                                   "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})


def test_raw_error_cases(broker) -> None:
    with WireClient(broker.host, broker.port) as w:
        _find_coordinator(w, "wire")
        # KIP-394: a first join without member id gets MEMBER_ID_REQUIRED and an id to use.
        first = _join(w, 5)
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"].startswith("wire-test-")
        assert _join(w, 5, session=1)["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
        assert _join(w, 5, member_id="unknown-member")["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        joined = _join(w, 5, member_id=first["member_id"])
        assert joined["error_code"] == ErrorCode.NONE and joined["generation_id"] == 1
        member = joined["member_id"]
        hb = {"group_id": "wire", "generation_id": 7, "member_id": member, "group_instance_id": None}
        assert w.request(12, 3, hb)["error_code"] == ErrorCode.ILLEGAL_GENERATION
        hb.update(generation_id=1, member_id="nobody")
        assert w.request(12, 3, hb)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        # Static membership: a second instance id join replaces the first; the old id is fenced.
        s1 = w.request(11, 5, {"group_id": "static", "session_timeout_ms": 6000, "rebalance_timeout_ms": 3000,
                               "member_id": "", "group_instance_id": "i1", "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]}) \
            if _find_coordinator(w, "static") is None else None
        assert s1["error_code"] == ErrorCode.NONE
        # SyncGroup v3 has no protocol_type/protocol_name: the broker must not compare them.
        synced = w.request(14, 3, {"group_id": "static", "generation_id": s1["generation_id"],
                                   "member_id": s1["member_id"], "group_instance_id": "i1",
                                   "assignments": [{"member_id": s1["member_id"], "assignment": b"a1"}]})
        assert (synced["error_code"], synced["assignment"]) == (ErrorCode.NONE, b"a1")
        s2 = w.request(11, 5, {"group_id": "static", "session_timeout_ms": 6000, "rebalance_timeout_ms": 3000,
                               "member_id": "", "group_instance_id": "i1", "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]})
        assert s2["error_code"] == ErrorCode.NONE and s2["member_id"] != s1["member_id"]
        assert s2["generation_id"] == s1["generation_id"]  # no rebalance
        # The replacement keeps the assignment: its SyncGroup answers at once in the Stable group.
        kept = w.request(14, 3, {"group_id": "static", "generation_id": s2["generation_id"],
                                 "member_id": s2["member_id"], "group_instance_id": "i1", "assignments": []})
        assert (kept["error_code"], kept["assignment"]) == (ErrorCode.NONE, b"a1")
        fenced = w.request(12, 3, {"group_id": "static", "generation_id": s1["generation_id"],
                                   "member_id": s1["member_id"], "group_instance_id": "i1"})
        assert fenced["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        # Commit metadata round-trips; unknown topics are refused per partition.
        w.request(19, 4, {"topics": [{"name": "ct", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                      "configs": []}], "timeout_ms": 5000, "validate_only": False})
        commit = w.request(8, 2, {"group_id": "simple", "generation_id_or_member_epoch": -1, "member_id": "",
                                  "retention_time_ms": -1, "topics": [
                                      {"name": "ct", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                                     "committed_metadata": "hello"}]},
                                      {"name": "missing", "partitions": [{"partition_index": 0,
                                                                          "committed_offset": 1,
                                                                          "committed_metadata": ""}]}]}) \
            if _find_coordinator(w, "simple") is None else None
        codes = [p["error_code"] for t in commit["topics"] for p in t["partitions"]]
        assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        fetched = w.request(9, 5, {"group_id": "simple", "topics": [{"name": "ct", "partition_indexes": [0]}]})
        (p,) = fetched["topics"][0]["partitions"]
        assert (p["committed_offset"], p["metadata"], p["error_code"]) == (5, "hello", ErrorCode.NONE)
