"""DescribeCluster against the real daemon: raw-socket semantics for v0/v1 and the endpoint-type
errors, then confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

from tests.support.wire import WireClient

CLUSTER_OPS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
OMITTED = -(2**31)


def describe_cluster(broker, version: int, include_ops: bool = False, endpoint_type: int = 1) -> dict:
    with WireClient(broker.host, broker.port) as c:
        return c.request(60, version, {"include_cluster_authorized_operations": include_ops,
                                       "endpoint_type": endpoint_type})


def cluster_id(broker) -> str:
    with WireClient(broker.host, broker.port) as c:
        return c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["cluster_id"]


def test_v0_and_v1_brokers_cluster_and_controller(broker) -> None:
    expected_id = cluster_id(broker)
    for version in (0, 1):
        resp = describe_cluster(broker, version)
        assert resp["error_code"] == 0 and resp["error_message"] is None
        assert resp["cluster_id"] == expected_id
        assert resp["controller_id"] == 1
        # is_fenced (v2) is not in v0/v1: the decoder's default, false.
        assert resp["brokers"] == [{"broker_id": 1, "host": broker.host, "port": broker.port, "rack": None,
                                    "is_fenced": False}]
        assert resp["cluster_authorized_operations"] == OMITTED
    assert describe_cluster(broker, 1)["endpoint_type"] == 1


def test_authorized_operations_and_rack(broker_factory) -> None:
    b = broker_factory({"broker.rack": "rack-a"})
    resp = describe_cluster(b, 1, include_ops=True)
    assert resp["cluster_authorized_operations"] == CLUSTER_OPS
    assert resp["brokers"][0]["rack"] == "rack-a"


def test_controller_endpoint_type_is_mismatched_and_unknown_is_unsupported(broker) -> None:
    resp = describe_cluster(broker, 1, endpoint_type=2)
    assert resp["error_code"] == 114  # MISMATCHED_ENDPOINT_TYPE
    assert resp["error_message"] == ("The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                     "of type CONTROLLER")
    assert resp["brokers"] == []
    for bad in (0, 3, -1):
        resp = describe_cluster(broker, 1, endpoint_type=bad)
        assert resp["error_code"] == 115  # UNSUPPORTED_ENDPOINT_TYPE
        assert resp["error_message"] == f"Unsupported endpoint type {bad}"
    # The connection and the broker are unaffected.
    assert describe_cluster(broker, 1)["error_code"] == 0


def test_confluent_admin_describe_cluster(broker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert desc.cluster_id == cluster_id(broker)
    assert desc.controller.id == 1
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, broker.host, broker.port)]
    assert desc.authorized_operations  # every CLUSTER operation without an authorizer


def test_kafka_python_admin_describe_cluster(broker) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        desc = admin.describe_cluster()
    finally:
        admin.close()
    assert desc["cluster_id"] == cluster_id(broker) and desc["controller_id"] == 1
    assert [b["broker_id"] for b in desc["brokers"]] == [1]
