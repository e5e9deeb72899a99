"""What ApiVersions advertises where Kafka 4.4's differs from what it serves, on real sockets.

Produce: advertised from v0, served from v3 (KAFKA-18659, Kafka's
ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION = 0). A Produce v0, v1 or v2 request is refused
by Kafka 4.4's SocketServer while it parses the header (UnsupportedVersionException, "unsupported
version"): the connection is closed without an answer and nothing is appended, whatever records
the request carries.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.handlers import produce
from tests.support.bad_batches import records, wrap
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient, create_topic

PRODUCE = 0


def _advertised(c: WireClient, version: int) -> dict[int, tuple[int, int]]:
    body = {} if version < 3 else {"client_software_name": "t", "client_software_version": "1"}
    resp = c.request(18, version, body)
    assert resp["error_code"] == 0
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}


def _message_set_v0(value: bytes) -> bytes:
    """One message of format v0 (what Produce v0-1 clients send): offset, size, then crc over magic..end."""
    body = struct.pack(">bbi", 0, 0, -1) + struct.pack(">i", len(value)) + value  # magic, attributes, null key
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _produce_body(topic: str, batch: bytes) -> dict:
    return {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def test_produce_is_advertised_from_v0_whatever_the_api_versions_version(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as c:
        for version in (0, 3):
            assert _advertised(c, version)[PRODUCE] == (0, produce.VERSIONS[1])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_close_the_connection_and_append_nothing(broker: BrokerProcess, version: int) -> None:
    topic = f"legacy-produce-v{version}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, topic, 1)
    # Both payloads: the legacy message format these versions carried, and a v2 batch (which a
    # Kafka 3.x broker took in a v2 request); Kafka 4.4 never reads past the header.
    for payload in (_message_set_v0(b"legacy"), wrap(records(3), 3)):
        with WireClient(broker.host, broker.port) as c:
            _, data = c.encode_request(PRODUCE, version, _produce_body(topic, payload))
            c.send_raw(data)
            assert c.is_closed_by_peer()
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(PRODUCE, 3, _produce_body(topic, wrap(records(2), 2)))
        partition = resp["responses"][0]["partition_responses"][0]
        assert partition["error_code"] == 0 and partition["base_offset"] == 0  # the log was empty
    assert f"Produce v{version} not supported" in broker.log_text()
