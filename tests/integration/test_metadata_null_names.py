"""Metadata v10/v11 with a null topic name or a topic id: Kafka 3.9's KafkaApis refuses the request
with INVALID_REQUEST for every requested topic (names null → ""), because the v10/v11 response
cannot carry a null name. Sent over raw sockets; the answer must decode with Kafka's own schema."""

from __future__ import annotations

import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient, create_topic

ZERO = uuid.UUID(int=0)


@pytest.mark.parametrize("version", [10, 11])
def test_null_topic_name_before_v12_is_invalid_request(broker, version: int) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "kept", 2)
        some_id = uuid.uuid4()
        resp = c.request(3, version, {"topics": [{"name": "kept", "topic_id": ZERO},
                                                 {"name": None, "topic_id": some_id}],
                                      "allow_auto_topic_creation": False})
        # Every requested topic carries INVALID_REQUEST; the null name becomes "" (the response's
        # name is not nullable before v12), and the request's topic id is echoed.
        assert [(t["name"], t["error_code"], t["topic_id"], t["partitions"]) for t in resp["topics"]] == [
            ("kept", ErrorCode.INVALID_REQUEST, ZERO, []),
            ("", ErrorCode.INVALID_REQUEST, some_id, []),
        ]
        assert resp["brokers"] == []
        # The connection and the topic are unharmed.
        ok = c.request(3, version, {"topics": [{"name": "kept", "topic_id": ZERO}],
                                    "allow_auto_topic_creation": False})
        assert ok["topics"][0]["error_code"] == 0 and len(ok["topics"][0]["partitions"]) == 2


@pytest.mark.parametrize("version", [10, 11])
def test_topic_id_before_v12_is_invalid_request(broker, version: int) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "by-id", 1)
        resp = c.request(3, version, {"topics": [{"name": "by-id", "topic_id": topic_id}],
                                      "allow_auto_topic_creation": False})
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("by-id", ErrorCode.INVALID_REQUEST)]


def test_v12_by_id_still_works(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "v12", 1)
        resp = c.request(3, 12, {"topics": [{"name": None, "topic_id": topic_id}],
                                 "allow_auto_topic_creation": False})
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("v12", 0)]
