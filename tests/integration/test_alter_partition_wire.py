"""AlterPartition (api 56) on the wire: the controller checks the leader's epochs (Kafka's codes).

The broker's one listener is its inter-broker listener, where AlterPartition is served; it is
advertised on none (tests/integration/test_api_versions_surface.py has a client-only listener).
"""

from __future__ import annotations

from tests.support.wire import WireClient, create_topic


def alter(c: WireClient, topic_id: object, leader_epoch: int, partition_epoch: int, isr: list[int],
          broker_epoch: int = -1) -> dict:
    body = {"broker_id": 1, "broker_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [{
        "partition_index": 0, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
        "leader_recovery_state": 0,
        "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": broker_epoch} for b in isr]}]}]}
    return c.request(56, 3, body)["topics"][0]["partitions"][0]


def test_alter_partition_checks_epochs_and_answers_the_state(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in c.request(18, 3, {
            "client_software_name": "t", "client_software_version": "1"})["api_keys"]}
        assert 56 not in versions  # Kafka 4.4's broker listeners do not advertise it either
        topic_id = create_topic(c, "isr-changes", 1)
        md = c.request(3, 12, {"topics": [{"name": "isr-changes", "topic_id": None}]})
        p = md["topics"][0]["partitions"][0]
        epoch = p["leader_epoch"]
        unchanged = alter(c, topic_id, epoch, 0, [1])
        assert unchanged["error_code"] == 0 and unchanged["isr"] == [1] and unchanged["leader_id"] == 1
        pe = unchanged["partition_epoch"]
        # Kafka's order: epochs newer than the controller's mean the controller is behind
        # (NOT_CONTROLLER); an older leader epoch is fenced; an older partition epoch is stale.
        assert alter(c, topic_id, epoch + 1, pe, [1])["error_code"] == 41  # NOT_CONTROLLER
        assert alter(c, topic_id, epoch - 1, pe, [1])["error_code"] == 74  # FENCED_LEADER_EPOCH
        assert alter(c, topic_id, epoch, pe - 1, [1])["error_code"] == 95  # INVALID_UPDATE_VERSION
        assert alter(c, topic_id, epoch, pe, [])["error_code"] != 0  # an empty ISR is never accepted
        # KIP-903: a member named with a broker epoch that is not its registration's is ineligible.
        assert alter(c, topic_id, epoch, pe, [1], broker_epoch=1 << 40)["error_code"] == 107  # INELIGIBLE_REPLICA
