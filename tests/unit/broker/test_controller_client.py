"""LocalControllerClient against a real Controller on a temp dir, and the EmbeddedController around it.

Every call a handler makes goes through the client; the results are the controller's, and the
changes reach the broker through its BrokerMetadata (the publisher), not through the client.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.metadata.broker_metadata import BrokerMetadata, metadata_dir_of
from odradek.broker.metadata.broker_registration import register_this_broker
from odradek.broker.metadata.controller_client import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    CreatableTopic,
    CreatePartitionsTopic,
    LocalControllerClient,
)
from odradek.broker.metadata.embedded_controller import EmbeddedController
from odradek.controller import Controller, LocalLeaseStore
from odradek.controller.records import ConfigResourceType
from odradek.protocol.errors import ErrorCode, KafkaApiError

TOPIC = ConfigResourceType.TOPIC


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[tuple[Controller, LocalControllerClient, BrokerMetadata]]:
    controller = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"), default_num_partitions=3)
    metadata = BrokerMetadata(tmp_path)
    controller.add_publisher(metadata)
    await controller.start(host="localhost", port=9092)
    yield controller, LocalControllerClient(controller), metadata
    await controller.stop()


async def test_topic_life_cycle_through_the_client(started) -> None:
    _, client, metadata = started
    (created,) = await client.create_topics([CreatableTopic("a", configs={"retention.ms": "100"})])
    assert created.error_code == ErrorCode.NONE and created.num_partitions == 3
    assert metadata.image.topics["a"].topic_id == created.topic_id
    (dry,) = await client.create_topics([CreatableTopic("dry")], validate_only=True)
    assert dry.error_code == ErrorCode.NONE and "dry" not in metadata.image.topics
    (dup,) = await client.create_topics([CreatableTopic("a")])
    assert dup.error_code == ErrorCode.TOPIC_ALREADY_EXISTS

    (grown,) = await client.create_partitions([CreatePartitionsTopic("a", 5)])
    assert grown.error_code == ErrorCode.NONE and len(metadata.image.topics["a"].partitions) == 5
    (shrunk,) = await client.create_partitions([CreatePartitionsTopic("a", 2)])
    assert shrunk.error_code == ErrorCode.INVALID_PARTITIONS

    (inc,) = await client.incremental_alter_configs(
        [AlterConfigsResource(TOPIC, "a", [AlterableConfig("segment.ms", AlterConfigOp.SET, "5000")])])
    assert inc.error_code == ErrorCode.NONE
    assert metadata.image.topics["a"].configs == {"retention.ms": "100", "segment.ms": "5000"}
    (legacy,) = await client.alter_configs([AlterConfigsResource(TOPIC, "a", {"cleanup.policy": "compact"})])
    assert legacy.error_code == ErrorCode.NONE
    assert metadata.image.topics["a"].configs == {"cleanup.policy": "compact"}

    internal = await client.create_internal_topic("__consumer_offsets", 2, 1, {"cleanup.policy": "compact"})
    assert internal.error_code == ErrorCode.NONE and metadata.image.topics["__consumer_offsets"].is_internal

    deleted = await client.delete_topics(names=["a"], topic_ids=[internal.topic_id])
    assert {(r.name, r.error_code) for r in deleted} == {("a", ErrorCode.NONE),
                                                                ("__consumer_offsets", ErrorCode.NONE)}
    assert metadata.image.topics == {}


async def test_register_broker_through_the_client(started) -> None:
    _, client, metadata = started
    config = BrokerConfig.from_props({"node.id": "1", "log.dirs": "/unused",
                                      "listeners": "PLAINTEXT://127.0.0.1:0", "broker.rack": "r1"})
    await register_this_broker(client, config, {"PLAINTEXT": 40123})  # port 0: the bound one
    broker = metadata.image.brokers[1]
    assert (broker.host, broker.port, broker.rack, broker.fenced) == ("127.0.0.1", 40123, "r1", False)
    epoch = await client.register_broker(2, "h2", 9093)
    assert metadata.image.brokers[2].broker_epoch == epoch


async def test_a_stopped_controller_answers_not_controller(started) -> None:
    controller, client, _ = started
    await controller.stop()
    with pytest.raises(KafkaApiError) as e:
        await client.create_topics([CreatableTopic("x")])
    assert e.value.code == ErrorCode.NOT_CONTROLLER


async def test_deletion_disabled_is_the_controllers_error(tmp_path: Path) -> None:
    controller = Controller(1, tmp_path, LocalLeaseStore(tmp_path / "controller.lease"), delete_topic_enable=False)
    await controller.start(host="localhost", port=9092)
    with pytest.raises(KafkaApiError) as e:
        await LocalControllerClient(controller).delete_topics(names=["a"])
    assert e.value.code == ErrorCode.TOPIC_DELETION_DISABLED
    await controller.stop()


async def test_embedded_controller_publishes_and_refuses_a_second_one_on_its_dir(tmp_path: Path) -> None:
    config = BrokerConfig.from_props({"node.id": "1", "log.dirs": str(tmp_path / "logs"), "num.partitions": "2"})
    metadata = BrokerMetadata(metadata_dir_of(config))
    assert metadata.metadata_dir == tmp_path / "logs"
    embedded = EmbeddedController(config, metadata.metadata_dir)
    embedded.add_publisher(metadata)
    await embedded.start()
    client = LocalControllerClient(embedded.controller)
    await register_this_broker(client, config, {})
    await client.create_topics([CreatableTopic("t")])
    assert len(metadata.image.topics["t"].partitions) == 2

    second = EmbeddedController(config, metadata.metadata_dir)
    with pytest.raises(KafkaApiError) as e:
        await second.start()
    assert e.value.code == ErrorCode.NOT_CONTROLLER
    assert f"is in use by process {os.getpid()}" in str(e.value)
    await second.shutdown()

    await embedded.shutdown()
    again = EmbeddedController(config, metadata.metadata_dir)
    await again.start()  # the lease was released
    assert again.controller.controller_epoch == 2 and "t" in again.controller.image.topics
    await again.shutdown()
