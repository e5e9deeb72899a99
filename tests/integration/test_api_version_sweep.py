"""Every version Odradek advertises, sent: for each API both Kafka 4.4 and Odradek advertise, a minimal request
of each version Odradek serves (every field at its default: empty names and lists, null ids; Produce with
acks=-1 and no topics, DescribeAcls with ANY filters) goes to the session's real Kafka 4.4 and to Odradek,
and both must answer alike: an answer, decodable by the version's schema, with the same top-level error code
where the response has one (or neither answers within 5 s).

Clients send the highest version both sides know, so most older versions are sent by no client test; this
sweep makes sure each one Odradek advertises is decoded and answered as Kafka answers it, and is what credits
them in the suite's API coverage (tests/support/api_coverage.py). Degenerate inputs, not scenarios: the
scenarios are in the comparison tests (test_kafka_4_4_versions.py, the *_wire.py and *_ab.py files).

A difference found and not fixed yet is a strict xfail on that API, saying what differs, so it fails once
fixed (until the entry goes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.real_kafka import shared_kafka
from tests.support.wire import WireClient
from tools import api_conformance

BODIES: dict[int, dict[str, Any]] = {
    0: {"acks": -1, "timeout_ms": 1000, "topic_data": []},  # acks=0 (the default) is never answered
    29: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1},  # ANY
}

# api key -> why Odradek answers the minimal request otherwise than Kafka 4.4 (found by this sweep).
DIFFERENCES = {
    24: "AddPartitionsToTxn v4-5 (the broker-to-broker batch form) with no transactions: Kafka 4.4 never "
        "answers, Odradek answers CLUSTER_AUTHORIZATION_FAILED (31)",
}


def _swept() -> list[int]:
    kafka = api_conformance.load_kafka_fixture()
    return sorted(key for key in api_conformance.advertised_versions() if key in kafka)


def _answer(host: str, port: int, api_key: int, version: int) -> object:
    try:
        with WireClient(host, port, timeout=5) as c:
            response = c.request(api_key, version, BODIES.get(api_key, {}))
    except TimeoutError:
        return "no answer"
    except ConnectionError:
        return "connection closed"
    return response.get("error_code", "answered")


def _ready(host: str, port: int) -> None:
    """Until the group and transaction coordinators are loaded: a broker just started answers
    COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS for a while, which would be compared."""
    deadline = time.monotonic() + 60
    with WireClient(host, port, timeout=10) as c:
        while True:
            found = c.request(10, 4, {"key_type": 0, "coordinator_keys": [""]})["coordinators"]
            txn = c.request(10, 4, {"key_type": 1, "coordinator_keys": ["sweep"]})["coordinators"]
            pid = c.request(22, 5, {"transactional_id": None, "transaction_timeout_ms": 60000})
            if not found[0]["error_code"] and not txn[0]["error_code"] and not pid["error_code"]:
                return
            assert time.monotonic() < deadline, (found, txn, pid)
            time.sleep(0.2)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory) -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    kafka = shared_kafka()
    odradek = BrokerProcess(tmp_path_factory.mktemp("odradek")).start()
    try:
        for broker in (kafka, odradek):
            _ready(broker.host, broker.port)
        yield (kafka.host, kafka.port), (odradek.host, odradek.port)
    finally:
        odradek.kill()


def _params() -> list[Any]:
    names = api_conformance.api_names()
    return [pytest.param(key, id=f"{key}-{names.get(key, key)}",
                         marks=[pytest.mark.xfail(strict=True, reason=DIFFERENCES[key])] if key in DIFFERENCES else [])
            for key in _swept()]


@pytest.mark.parametrize("api_key", _params())
def test_every_advertised_version_is_answered_as_kafka_4_4_answers_it(brokers, api_key: int) -> None:
    kafka, odradek = brokers
    spec = api_conformance.odradek_handlers()[api_key]
    versions = [v for v in api_conformance.advertised_versions()[api_key] if v >= spec.min_version]
    answers = {v: (_answer(*kafka, api_key, v), _answer(*odradek, api_key, v)) for v in versions}
    differ = {v: pair for v, pair in answers.items() if pair[0] != pair[1]}
    assert not differ, f"{spec.name}: (Kafka 4.4, Odradek) by version: {differ}"
