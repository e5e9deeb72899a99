"""Client quotas with real clients (broker/quota): byte-rate throttling of a confluent-kafka
producer and consumer, the throttle time in librdkafka's statistics, KIP-219's muted channel, and
AlterClientQuotas / DescribeClientQuotas on the wire with Kafka's validation errors.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_kafka_metrics import metrics_port
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

INVALID_REQUEST = 42


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[BrokerProcess]:
    # Kafka's rate counts a client as quiet over the (quota.window.num - 1) windows before its
    # first sample, and each time its oldest sample expires it may burst that much again: with the
    # default 11 samples that is 10 s of quota per 11 s, a sawtooth no 30-s measurement can place
    # within 10 %. Two samples keep Kafka's rule with a 1-s burst allowance.
    b = BrokerProcess(tmp_path_factory.mktemp("quotas"), overrides={"quota.window.num": "2",
                                                                           "odradek.metrics.port": "0",
                                                                           "odradek.metrics.host": "127.0.0.1"})
    b.start()
    yield b
    b.kill()


def alter(b: BrokerProcess, entity: list[tuple[str, str | None]], ops: list[tuple[str, float | None]],
          validate_only: bool = False, version: int = 1) -> dict:
    with WireClient(b.host, b.port) as c:
        body = {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                             "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                                     for k, v in ops]}],
                "validate_only": validate_only}
        (entry,) = c.request(49, version, body)["entries"]
        return entry


def describe(b: BrokerProcess, components: list[tuple[str, int, str | None]], strict: bool = False,
             version: int = 1) -> dict:
    with WireClient(b.host, b.port) as c:
        return c.request(48, version, {"components": [{"entity_type": t, "match_type": m, "match": n}
                                                      for t, m, n in components], "strict": strict})


def quotas_of(b: BrokerProcess, entity: list[tuple[str, str | None]]) -> dict[str, float]:
    response = describe(b, [(t, 0 if n is not None else 1, n) for t, n in entity], strict=True)
    assert response["error_code"] == 0
    if not response["entries"]:
        return {}
    (entry,) = response["entries"]
    return {v["key"]: v["value"] for v in entry["values"]}


def log_bytes(b: BrokerProcess, topic: str) -> int:
    return sum(f.stat().st_size for f in Path(b.data_dir, "logs", f"{topic}-0").glob("*.log"))


def test_producer_is_throttled_to_its_quota(shared: BrokerProcess) -> None:
    """A producer that could send many MB/s is held within 10 % of producer_byte_rate over 30 s,
    and the broker's throttle time reaches librdkafka's statistics."""
    quota = 200_000
    assert alter(shared, [("client-id", "quota-producer")], [("producer_byte_rate", quota)])["error_code"] == 0
    topic = "quota-produce"
    throttles: list[int] = []

    def stats(raw: str) -> None:
        for broker in json.loads(raw)["brokers"].values():
            if broker.get("nodeid", -1) >= 0:
                throttles.append(broker["throttle"]["max"])

    # Small batches: a request is the unit the broker throttles after, so it must be small
    # against 30 s of quota for the measurement to mean anything.
    producer = ck.Producer({"bootstrap.servers": shared.bootstrap, "client.id": "quota-producer",
                            "linger.ms": 5, "batch.size": 16384, "compression.type": "none", "statistics.interval.ms": 1000,
                            "stats_cb": stats, "acks": 1})
    value = b"x" * 1000
    start_bytes, start = log_bytes(shared, topic), time.monotonic()
    deadline = start + 30
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    sent = log_bytes(shared, topic) - start_bytes
    elapsed = time.monotonic() - start
    producer.purge()
    producer.flush(10)
    rate = sent / elapsed
    assert 0.9 * quota <= rate <= 1.1 * quota, f"{rate:.0f} B/s against a quota of {quota} B/s"
    assert max(throttles, default=0) > 0, "librdkafka never saw a throttle time"
    assert "client quotas enabled" in shared.log_text()
    # Kafka's quota metrics, as the JMX exporter names them (user tag empty: a client-id quota).
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(shared)}/metrics", timeout=10).read().decode()
    labels = 'clientId="quota-producer",resource="Produce",user=""'
    for name in ("byte_rate", "throttle_time"):
        found = re.search(rf"kafka_server_quota_{name}\{{{labels}\}} (\S+)", text)
        assert found is not None and float(found.group(1)) > 0, name


def fill(b: BrokerProcess, topic: str, count: int, size: int = 1000) -> None:
    # Batches far below a quota window's allowance: a fetch returns at least one whole batch, and
    # one larger than the window allows would be throttled every time (as in Kafka).
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "client.id": "unlimited-filler", "linger.ms": 5,
                            "batch.size": 16384})
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, b"y" * size)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def consume_for(b: BrokerProcess, topic: str, client_id: str, seconds: float, group: str) -> tuple[int, int]:
    """(record bytes consumed, largest throttle time librdkafka reported) within ``seconds``."""
    throttles: list[int] = []

    def stats(raw: str) -> None:
        for broker in json.loads(raw)["brokers"].values():
            if broker.get("nodeid", -1) >= 0:
                throttles.append(broker["throttle"]["max"])

    consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "group.id": group,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "statistics.interval.ms": 500, "stats_cb": stats})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got += len(msg.value())
    finally:
        consumer.close()
    return got, max(throttles, default=0)


def test_consumer_over_its_byte_rate_is_throttled(shared: BrokerProcess) -> None:
    topic = "quota-consume"
    fill(shared, topic, 3000)  # 3 MB
    quota = 100_000
    assert alter(shared, [("client-id", "quota-consumer")], [("consumer_byte_rate", quota)])["error_code"] == 0
    got, throttle = consume_for(shared, topic, "quota-consumer", 6, "g-quota")
    # One sample of allowance (quota.window.num=2) plus 6 s of quota, with a request's slack.
    assert 0 < got <= quota * (1 + 6) * 1.2, got
    assert throttle > 0, "librdkafka never saw a throttle time"
    # Another client id has no quota and reads everything at once.
    free, free_throttle = consume_for(shared, topic, "free-consumer", 4, "g-free")
    assert free == 3000 * 1000 and free_throttle == 0


def produce_request(topic: str, value_size: int) -> dict:
    from tests.support.bad_batches import record, wrap

    batch = wrap([record(0, b"k", b"z" * value_size)], 1)
    return {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def test_throttled_connection_is_muted_for_the_throttle_time(shared: BrokerProcess) -> None:
    """KIP-219 on the wire: the over-quota Produce is answered at once with throttle_time_ms, and
    the next request on that connection is not read before the throttle time has passed."""
    from tests.support.wire import create_topic

    topic = "quota-mute"
    with WireClient(shared.host, shared.port) as c:
        create_topic(c, topic, 1)
    assert alter(shared, [("client-id", "mute-test")], [("producer_byte_rate", 10_000)])["error_code"] == 0
    with WireClient(shared.host, shared.port, client_id="mute-test") as c:
        started = time.monotonic()
        response = c.request(0, 9, produce_request(topic, 60_000))  # 6 s of quota in one request
        answered = time.monotonic() - started
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
        throttle_ms = response["throttle_time_ms"]
        # (60 KB over a 1-s minimum window = 60 KB/s against 10 KB/s: (60 - 10) / 10 * 1 s = 5 s)
        assert 4000 <= throttle_ms <= 6000, throttle_ms
        assert answered < 1.0, "the response itself must not be delayed (KIP-219)"
        sent = time.monotonic()
        c.request(18, 0, {})  # ApiVersions on the muted connection
        waited = time.monotonic() - sent
        assert waited >= throttle_ms / 1000 - answered - 0.3, (waited, throttle_ms)
    with WireClient(shared.host, shared.port, client_id="other") as c:  # other clients are not muted
        started = time.monotonic()
        c.request(18, 0, {})
        assert time.monotonic() - started < 1.0


def test_alter_and_describe_on_the_wire(shared: BrokerProcess) -> None:
    user_client = [("user", "alice"), ("client-id", "app")]
    assert alter(shared, user_client, [("producer_byte_rate", 1024), ("request_percentage", 12.5)],
                 validate_only=True)["error_code"] == 0
    assert quotas_of(shared, user_client) == {}, "validate_only must not write"
    assert alter(shared, user_client, [("producer_byte_rate", 1024), ("request_percentage", 12.5)])["error_code"] == 0
    assert quotas_of(shared, user_client) == {"producer_byte_rate": 1024.0, "request_percentage": 12.5}
    assert alter(shared, [("user", None)], [("consumer_byte_rate", 2048)], version=0)["error_code"] == 0
    assert quotas_of(shared, [("user", None)]) == {"consumer_byte_rate": 2048.0}
    # any user (specified), non-strict: both entities with a user component
    response = describe(shared, [("user", 2, None)])
    users = {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]) for entry in response["entries"]}
    assert (("client-id", "app"), ("user", "alice")) in users and (("user", None),) in users
    strict = describe(shared, [("user", 2, None)], strict=True)
    assert all(len(entry["entity"]) == 1 for entry in strict["entries"])
    # remove one key, then the other: the entity disappears
    assert alter(shared, user_client, [("producer_byte_rate", None)])["error_code"] == 0
    assert quotas_of(shared, user_client) == {"request_percentage": 12.5}
    assert alter(shared, user_client, [("request_percentage", None)])["error_code"] == 0
    assert quotas_of(shared, user_client) == {}
    assert alter(shared, [("user", None)], [("consumer_byte_rate", None)])["error_code"] == 0


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ([], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ([("user", "u"), ("user", "v")], [("producer_byte_rate", 1.0)],
     "Invalid empty client quota entity, duplicate entity entry user"),
    ([("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ([("ip", "1.2.3.4"), ("user", "u")], [("connection_creation_rate", 1.0)], "Invalid empty client quota entity"),
    ([("ip", "no such host.invalid")], [("connection_creation_rate", 1.0)],
     "no such host.invalid is not a valid IP or resolvable host."),
    ([("client-id", "c")], [("connection_creation_rate", 5.0)], "Invalid configuration key connection_creation_rate"),
    ([("ip", "1.2.3.4")], [("producer_byte_rate", 5.0)], "Invalid configuration key producer_byte_rate"),
    ([("client-id", "c")], [("no_such_key", 5.0)], "Invalid configuration key no_such_key"),
    ([("client-id", "c")], [("producer_byte_rate", 1.5)], "Configuration producer_byte_rate must be a Long value"),
    ([("client-id", "c")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
     "Duplicate quota key producer_byte_rate"),
])
def test_alter_refuses_what_kafka_refuses(shared: BrokerProcess, entity, ops, message) -> None:
    before = describe(shared, [])["entries"]
    entry = alter(shared, entity, ops)
    assert entry["error_code"] == INVALID_REQUEST
    assert message in entry["error_message"]
    assert describe(shared, [])["entries"] == before, "a refused alteration changed something"


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", 2, None)], 42, "Invalid empty entity type."),
    ([("user", 2, None), ("user", 0, "u")], 42, "Entity type user cannot appear more than once in the filter."),
    ([("group", 2, None)], 35, "Unsupported entity type group"),
    ([("user", 0, None)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", 1, "u")], 42, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", 2, "u")], 42, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], 35, "Unknown match type 7"),
    ([("ip", 2, None), ("client-id", 2, None)], 42, "IP filter component should not be used with user or clientId"),
])
def test_describe_refuses_bad_filters(shared: BrokerProcess, components, code, message) -> None:
    response = describe(shared, components)
    assert response["error_code"] == code and message in response["error_message"]
    assert response["entries"] is None


def test_request_percentage_throttles_any_api(shared: BrokerProcess) -> None:
    """request_percentage counts handler time: a tiny quota throttles even Metadata, bounded by
    one quota window (ClientRequestQuotaManager)."""
    assert alter(shared, [("client-id", "busy-admin")], [("request_percentage", 0.001)])["error_code"] == 0
    throttles = []
    with WireClient(shared.host, shared.port, client_id="busy-admin") as c:
        for _ in range(3):
            response = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
            throttles.append(response["throttle_time_ms"])
    assert max(throttles) > 0 and max(throttles) <= 1000, throttles
    assert alter(shared, [("client-id", "busy-admin")], [("request_percentage", None)])["error_code"] == 0


def test_user_quota_applies_to_the_connections_principal(shared: BrokerProcess) -> None:
    """On PLAINTEXT the principal is User:ANONYMOUS: a quota for user ANONYMOUS (and a client id
    the user+client level names) applies, with the user+client level winning over the user one."""
    from tests.support.wire import create_topic

    topic = "quota-user"
    with WireClient(shared.host, shared.port) as c:
        create_topic(c, topic, 1)
    assert alter(shared, [("user", "ANONYMOUS")], [("producer_byte_rate", 1_000_000_000)])["error_code"] == 0
    assert alter(shared, [("user", "ANONYMOUS"), ("client-id", "slow-user-client")],
                 [("producer_byte_rate", 5_000)])["error_code"] == 0
    try:
        with WireClient(shared.host, shared.port, client_id="slow-user-client") as c:
            assert c.request(0, 9, produce_request(topic, 20_000))["throttle_time_ms"] > 0
        with WireClient(shared.host, shared.port, client_id="fast-user-client") as c:  # the user level: huge
            assert c.request(0, 9, produce_request(topic, 20_000))["throttle_time_ms"] == 0
    finally:
        alter(shared, [("user", "ANONYMOUS"), ("client-id", "slow-user-client")], [("producer_byte_rate", None)])
        alter(shared, [("user", "ANONYMOUS")], [("producer_byte_rate", None)])
