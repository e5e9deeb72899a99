"""Forwarding to the controller (KIP-590) against a real single-node broker.

The same calls go to an in-process ``Controller`` (through ``LocalControllerClient``) and, over the
Kafka protocol, to the broker's controller (``ForwardingControllerClient``); the results must be the
same, success and error alike, so handlers cannot tell a forwarded call from a local one. Then the
retry rules: a target that is down until it comes up, a target that never answers (REQUEST_TIMED_OUT
at the deadline), and ``RoutingControllerClient``'s choice between local and remote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.metadata.controller_client import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ClientQuotaAlteration,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    FeatureUpdate,
    LocalControllerClient,
    ReassignmentTarget,
    ReplicaAssignment,
)
from odradek.broker.metadata.forwarding_controller_client import (
    ForwardingControllerClient,
    RoutingControllerClient,
)
from odradek.controller import Controller, LocalLeaseStore
from odradek.controller.image import BrokerRegistration, MetadataImage
from odradek.controller.records import ConfigResourceType
from odradek.protocol.errors import ErrorCode, KafkaApiError
from tests.support.broker_process import BrokerProcess, free_port

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("forwarding"), overrides={"odradek.metrics.port": "-1"}).start()
    yield b
    b.stop()


def _forwarding(broker: BrokerProcess, timeout_s: float = 10.0) -> ForwardingControllerClient:
    return ForwardingControllerClient(lambda: (1, broker.host, broker.port), timeout_s=timeout_s)


def _comparable(results: Any) -> Any:
    """Results with their random parts (topic ids) blanked."""
    if isinstance(results, list):
        return [_comparable(r) for r in results]
    if dataclasses.is_dataclass(results) and hasattr(results, "topic_id"):
        return dataclasses.replace(results, topic_id=uuid.UUID(int=0))  # type: ignore[type-var]
    return results


async def _both(local: LocalControllerClient, remote: ForwardingControllerClient, call: Any) -> Any:
    """Run ``call`` on both clients; assert equal results (or equal errors); return the result."""
    outcomes = []
    for client in (local, remote):
        try:
            outcomes.append(("ok", _comparable(await call(client))))
        except KafkaApiError as exc:
            outcomes.append(("error", (exc.code, exc.message)))
    assert outcomes[0] == outcomes[1]
    return outcomes[0][1]


async def test_forwarded_results_equal_the_local_controllers(broker: BrokerProcess, tmp_path: Path) -> None:
    controller = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"))
    await controller.start(host=broker.host, port=broker.port)
    local, remote = LocalControllerClient(controller), _forwarding(broker)
    try:
        created = await _both(local, remote, lambda c: c.create_topics([
            CreatableTopic("fwd-a", 2, 1, configs={"retention.ms": "100"}),
            CreatableTopic("bad name!"),
            CreatableTopic("fwd-cfg", configs={"cleanup.policy": "nope"}),
            CreatableTopic("fwd-rf", 1, 3),
            CreatableTopic("fwd-asg", assignments=[ReplicaAssignment(0, (1, 1))]),
            CreatableTopic("fwd-dup"), CreatableTopic("fwd-dup"),
        ]))
        assert [r.error_code for r in created] == [
            ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_CONFIG,
            ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.INVALID_REQUEST]
        assert created[0].configs == {"retention.ms": "100"} and created[0].num_partitions == 2
        (exists,) = await _both(local, remote, lambda c: c.create_topics([CreatableTopic("fwd-a")]))
        assert exists.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        (dry,) = await _both(local, remote, lambda c: c.create_topics([CreatableTopic("fwd-dry")], validate_only=True))
        assert dry.error_code == ErrorCode.NONE
        (internal,) = [await _both(local, remote, lambda c: c.create_internal_topic("__fwd_internal", 1, 1))]
        assert internal.error_code == ErrorCode.NONE

        grown = await _both(local, remote, lambda c: c.create_partitions([
            CreatePartitionsTopic("fwd-a", 3), CreatePartitionsTopic("fwd-a-none", 2)]))
        assert [r.error_code for r in grown] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        (shrink,) = await _both(local, remote, lambda c: c.create_partitions([CreatePartitionsTopic("fwd-a", 1)],
                                                                               validate_only=True))
        assert shrink.error_code == ErrorCode.INVALID_PARTITIONS

        # (Duplicate resources never reach the controller: the handlers answer them.)
        altered = await _both(local, remote, lambda c: c.incremental_alter_configs([
            AlterConfigsResource(TOPIC, "fwd-a", [AlterableConfig("segment.ms", AlterConfigOp.SET, "5000"),
                                                  AlterableConfig("cleanup.policy", AlterConfigOp.APPEND, "compact")]),
            AlterConfigsResource(TOPIC, "fwd-nope", [AlterableConfig("segment.ms", AlterConfigOp.SET, "1")]),
            AlterConfigsResource(TOPIC, "__fwd_internal", [AlterableConfig("cleanup.policy", AlterConfigOp.SET, "x")]),
        ]))
        assert [r.error_code for r in altered] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                   ErrorCode.INVALID_CONFIG]
        legacy = await _both(local, remote, lambda c: c.alter_configs([
            AlterConfigsResource(TOPIC, "fwd-a", {"retention.ms": "200"}),
            AlterConfigsResource(TOPIC, "fwd-a-none", {"retention.ms": "200"})], validate_only=True))
        assert [r.error_code for r in legacy] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        (cluster,) = await _both(local, remote, lambda c: c.incremental_alter_configs([AlterConfigsResource(
            BROKER, "", [AlterableConfig("log.retention.ms", AlterConfigOp.SET, "3600000")])], validate_only=True))
        assert cluster.error_code == ErrorCode.NONE
        # Another broker's own resource: preprocessed by that broker, so the controller node takes it
        # (here: it knows no broker 2) rather than refusing a broker id that is not its own.
        (other,) = await _both(local, remote, lambda c: c.incremental_alter_configs([AlterConfigsResource(
            BROKER, "2", [AlterableConfig("log.retention.ms", AlterConfigOp.SET, "3600000")])], validate_only=True))
        assert (other.error_code, other.error_message) == (ErrorCode.BROKER_ID_NOT_REGISTERED, "No node with id 2 found.")
        (mine,) = await _both(local, remote, lambda c: c.alter_configs([AlterConfigsResource(
            BROKER, "1", {"log.retention.ms": "3600000"})], validate_only=True))
        assert mine.error_code == ErrorCode.NONE

        elected = await _both(local, remote, lambda c: c.elect_leaders(ElectionType.PREFERRED,
                                                                         [("fwd-a", 0), ("fwd-a", 9)]))
        assert [r.error_code for r in elected] == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert await _both(local, remote, lambda c: c.elect_leaders(ElectionType.UNCLEAN, None)) == []

        moved = await _both(local, remote, lambda c: c.alter_partition_reassignments([
            ReassignmentTarget("fwd-a", 0, (1,)), ReassignmentTarget("fwd-a", 1, None),
            ReassignmentTarget("fwd-a", 2, (5,)), ReassignmentTarget("fwd-x", 0, (1,))]))
        assert [r.error_code for r in moved] == [ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                                 ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert await _both(local, remote, lambda c: c.list_partition_reassignments(None)) == []
        assert await _both(local, remote, lambda c: c.list_partition_reassignments([("fwd-a", 0)])) == []

        deleted = await _both(local, remote, lambda c: c.delete_topics(["fwd-a", "fwd-missing"], [uuid.uuid4()]))
        assert sorted(r.error_code for r in deleted) == sorted([ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                                ErrorCode.UNKNOWN_TOPIC_ID])

        quotas = await _both(local, remote, lambda c: c.alter_client_quotas([
            ClientQuotaAlteration((("client-id", "fwd"),), (("producer_byte_rate", 1024.0), ("nope", None))),
            ClientQuotaAlteration((("ip", "1.2.3.4"), ("user", "u")), (("connection_creation_rate", 1.0),)),
            ClientQuotaAlteration((("user", None),), (("nope", 1.0),)),
        ]))
        assert [(r.error_code, r.error_message) for r in quotas] == [
            (ErrorCode.NONE, None), (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"),
            (ErrorCode.INVALID_REQUEST, "Invalid configuration key nope")]

        # UpdateFeatures: one answer for the whole request, forwarded as v2 (no per-feature results).
        for updates, dry_run, code in [
            ([FeatureUpdate("group.version", 0, 2)], True, ErrorCode.NONE),
            ([FeatureUpdate("group.version", 0, 2), FeatureUpdate("transaction.version", 0, 3)], False, ErrorCode.NONE),
            ([FeatureUpdate("group.version", 1), FeatureUpdate("foo.bar", 1)], False, ErrorCode.INVALID_UPDATE_VERSION),
            ([FeatureUpdate("group.version", 1, 2)], False, ErrorCode.INVALID_UPDATE_VERSION),
        ]:
            result = await _both(local, remote, lambda c, u=updates, d=dry_run: c.update_features(u, d))
            assert result.error_code == code, result
    finally:
        await remote.close()
        await controller.stop()


async def test_retries_until_the_controller_comes_up(tmp_path: Path) -> None:
    port = free_port()
    late = BrokerProcess(tmp_path, port=port, overrides={"odradek.metrics.port": "-1"})
    starter = threading.Timer(0.5, late.start)
    starter.start()
    remote = ForwardingControllerClient(lambda: (1, late.host, port), timeout_s=30.0)
    try:
        began = time.monotonic()
        (r,) = await remote.create_topics([CreatableTopic("late-topic", 1, 1)])
        assert r.error_code == ErrorCode.NONE and time.monotonic() - began >= 0.4
    finally:
        starter.join()
        await remote.close()
        late.stop()


async def test_no_controller_until_the_deadline_times_out() -> None:
    dead_port = free_port()
    for target in (lambda: None, lambda: (1, "127.0.0.1", dead_port)):
        remote = ForwardingControllerClient(target, timeout_s=0.4)
        began = time.monotonic()
        with pytest.raises(KafkaApiError) as e:
            await remote.create_topics([CreatableTopic("never")])
        assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert 0.3 <= time.monotonic() - began < 3
        await remote.close()


async def test_routing_local_remote_and_never_itself(broker: BrokerProcess, tmp_path: Path) -> None:
    controller = Controller(2, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"))
    await controller.start(host="127.0.0.1", port=1)
    image = MetadataImage(controller_id=1)
    image.brokers[1] = BrokerRegistration(1, broker.host, broker.port)
    image.brokers[2] = BrokerRegistration(2, "127.0.0.1", 1)
    routing = RoutingControllerClient(2, lambda: controller, lambda: image, timeout_s=0.5)
    try:
        # Active here: the local controller takes it (the topic exists here, not on the broker).
        (r,) = await routing.create_topics([CreatableTopic("routed-local", 1, 1)])
        assert r.error_code == ErrorCode.NONE and "routed-local" in controller.image.topics
        # Not active here: forwarded to the image's controller, node 1.
        await controller.stop()
        (r,) = await routing.create_topics([CreatableTopic("routed-remote", 1, 1)])
        assert r.error_code == ErrorCode.NONE and "routed-remote" not in controller.image.topics
        with pytest.raises(KafkaApiError) as e:
            await routing.register_broker(2, "127.0.0.1", 1)
        assert e.value.code == ErrorCode.NOT_CONTROLLER
        # The image still names this node but its controller is gone: wait, never forward to itself.
        image.controller_id = 2
        began = time.monotonic()
        with pytest.raises(KafkaApiError) as e:
            await routing.create_topics([CreatableTopic("routed-nowhere", 1, 1)])
        assert e.value.code == ErrorCode.REQUEST_TIMED_OUT and time.monotonic() - began >= 0.4
        # ...and as soon as the image names the new controller, the waiting call goes there.
        image.controller_id = -1
        asyncio.get_running_loop().call_later(0.2, setattr, image, "controller_id", 1)
        patient = RoutingControllerClient(2, lambda: controller, lambda: image, timeout_s=5.0)
        (r,) = await patient.create_topics([CreatableTopic("routed-later", 1, 1)])
        assert r.error_code == ErrorCode.NONE
        await patient.close()
    finally:
        await routing.close()
        await controller.stop()


async def test_routing_after_the_local_lease_is_lost(broker: BrokerProcess, tmp_path: Path) -> None:
    """The local controller believes it is active, but its lease expired (it could not renew in
    time): the call fails with NOT_CONTROLLER there, and the routing client sends it to the image's
    controller instead."""
    now = [1_000_000]
    deposed = Controller(2, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"), lease_ttl_ms=1000,
                         clock=lambda: now[0])
    await deposed.start(host="127.0.0.1", port=1)
    now[0] += 5000
    image = MetadataImage(controller_id=1)
    image.brokers[1] = BrokerRegistration(1, broker.host, broker.port)
    routing = RoutingControllerClient(2, lambda: deposed, lambda: image, timeout_s=5.0)
    try:
        assert deposed.is_active
        (r,) = await routing.create_topics([CreatableTopic("routed-after-loss", 1, 1)])
        assert r.error_code == ErrorCode.NONE
        assert not deposed.is_active and "routed-after-loss" not in deposed.image.topics
    finally:
        await routing.close()
        await deposed.stop()


async def test_deletion_disabled_is_raised_as_locally(broker_factory, tmp_path: Path) -> None:
    b = broker_factory({"delete.topic.enable": "false", "odradek.metrics.port": "-1"})
    controller = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"), delete_topic_enable=False)
    await controller.start(host=b.host, port=b.port)
    remote = _forwarding(b)
    try:
        error = await _both(LocalControllerClient(controller), remote, lambda c: c.delete_topics(["any"]))
        assert error[0] == ErrorCode.TOPIC_DELETION_DISABLED
    finally:
        await remote.close()
        await controller.stop()


async def test_follows_the_controller_when_it_moves(broker: BrokerProcess) -> None:
    """The target is re-read on every attempt: a dead node, then the live one."""
    target: list[tuple[int, str, int]] = [(2, "127.0.0.1", free_port())]
    asyncio.get_running_loop().call_later(0.3, target.__setitem__, 0, (1, broker.host, broker.port))
    remote = ForwardingControllerClient(lambda: target[0], timeout_s=10.0)
    try:
        (r,) = await remote.create_topics([CreatableTopic("moved-controller", 1, 1)])
        assert r.error_code == ErrorCode.NONE
    finally:
        await remote.close()


def test_a_forwarded_broker_change_is_still_validated_on_the_controller_node(broker: BrokerProcess) -> None:
    """The forwarding marker (the client id) only relaxes "the resource is this node": the change
    itself is validated for the broker it names, so a request that claims to be forwarded cannot
    store a broker config the broker would refuse, nor a resource name that is no broker id."""
    from tests.support.wire import WireClient

    with WireClient(broker.host, broker.port, client_id="odradek-forwarding-7") as c:
        for name, key, value in (("1", "max.connections", "many"), ("not-a-number", "log.retention.ms", "1")):
            reply = c.request(33, 2, {"resources": [{"resource_type": 4, "resource_name": name,
                                                     "configs": [{"name": key, "value": value}]}],
                                      "validate_only": False})
            assert reply["responses"][0]["error_code"] == ErrorCode.INVALID_REQUEST, reply
        described = c.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                     "configuration_keys": ["max.connections"]}],
                                      "include_synonyms": False, "include_documentation": False})
        assert described["results"][0]["configs"][0]["value"] != "many"
