"""Test targets: the same integration test runs against a real Apache Kafka and against Odradek.

- ``shared_kafka()``: one real Kafka 4.4.0 (tools/kafka_dist.KafkaServer) for the whole pytest session,
  started on first use in a temp dir and killed at interpreter exit. Tests share it, so each test uses
  its own uniquely named topics/groups (``unique()``).
- ``open_target(name, tmp_dir)``: context manager yielding a ``Target`` for "kafka" (the shared broker)
  or "odradek" (a fresh daemon from tests/support/broker_process.py, killed on exit).
- ``Target.require(*apis)``: Odradek advertises only the APIs it implements (ApiVersions). A test that
  needs an API Odradek does not advertise **fails**, naming the missing APIs. (It used to xfail, from
  when Odradek served few APIs; every API these tests need is served now, so an API dropped from
  ApiVersions turned the comparison tests into xfails with the suite green.) A test expected to
  lack an API carries its own ``@pytest.mark.xfail(strict=True, reason=...)`` saying why: it then
  fails as soon as the API is served. Against real Kafka ``require`` is a no-op.
- When Java/Maven are missing (or Maven cannot reach Central) the kafka target is skipped with that
  reason; on the dev machines and in CI both are present and it runs.

Who may call it: pytest's main thread (fixtures). Not thread-safe.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.broker_process import BrokerProcess
from tools.kafka_dist import KafkaServer, ToolchainUnavailable, ensure_jars

if TYPE_CHECKING:
    from tests.support.wire import WireClient

TARGETS = ("kafka", "odradek")

_shared: KafkaServer | None = None
_shared_error: str | None = None


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def require_toolchain() -> None:
    """Skip (with the reason) when the Java tool chain cannot be built on this machine."""
    try:
        ensure_jars()
    except ToolchainUnavailable as e:
        pytest.skip(f"Java tool chain unavailable: {e}")


def shared_kafka() -> KafkaServer:
    """The session's real Kafka broker, started on first call."""
    global _shared, _shared_error
    if _shared_error is not None:
        pytest.fail(f"real Kafka failed to start earlier in this session: {_shared_error}")
    if _shared is not None and _shared.alive():
        return _shared
    require_toolchain()
    data_dir = Path(tempfile.mkdtemp(prefix="odradek-real-kafka-"))
    server = KafkaServer(data_dir, heap="768m")
    try:
        server.start()
    except Exception as e:  # a broken start must fail every test that needs it, loudly
        _shared_error = str(e)[-3000:]
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    _shared = server

    def _stop() -> None:
        server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)

    atexit.register(_stop)
    return server


def _api_key_names() -> dict[int, str]:
    from odradek.protocol.schema_data import MESSAGES

    return {spec["api_key"]: name[: -len("Request")] for name, spec in MESSAGES.items() if spec["type"] == "request"}


@dataclass
class Target:
    name: str
    host: str
    port: int
    broker: BrokerProcess | KafkaServer
    _advertised: set[str] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_odradek(self) -> bool:
        return self.name == "odradek"

    def advertised_apis(self) -> set[str]:
        """API names from the target's ApiVersions answer (v0: every broker answers it)."""
        if self._advertised is None:
            from tests.support.wire import WireClient

            names = _api_key_names()
            with WireClient(self.host, self.port) as c:
                resp = c.request(18, 0, {})
            assert resp["error_code"] == 0, resp
            self._advertised = {names.get(k["api_key"], str(k["api_key"])) for k in resp["api_keys"]}
        return self._advertised

    def require(self, *apis: str) -> None:
        """Fail (Odradek only) naming every API the test needs that the broker does not advertise."""
        if not self.is_odradek:
            return
        missing = sorted(set(apis) - self.advertised_apis())
        if missing:
            pytest.fail(f"Odradek does not advertise {', '.join(missing)}, which this test needs")


# The APIs each client scenario needs, by Kafka's request names; tests pass these to Target.require.
PRODUCE = ("Produce", "InitProducerId", "Metadata")
FETCH = ("Fetch", "ListOffsets", "Metadata")
CLASSIC_GROUP = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                 "OffsetFetch")
CONSUMER_GROUP = ("FindCoordinator", "ConsumerGroupHeartbeat", "OffsetCommit", "OffsetFetch")


@contextmanager
def open_target(name: str, tmp_dir: Path) -> Iterator[Target]:
    if name == "kafka":
        k = shared_kafka()
        yield Target("kafka", k.host, k.port, k)
        return
    if name != "odradek":
        raise ValueError(name)
    b = BrokerProcess(Path(tmp_dir) / "odradek", overrides={"auto.create.topics.enable": "false"})
    b.start()
    try:
        yield Target("odradek", b.host, b.port, b)
    finally:
        b.kill()


# Test topics keep their records whatever their timestamps: the tests write fixed past timestamps
# (2020, 2023) so that timestamp lookups have known answers, and under the default retention.ms
# (7 days) those records are already expired. Kafka's first retention pass, 30 s after it starts
# and then every 5 minutes, deleted them under running tests ("Some data may have been lost" in
# Spark's source; checked: a 2023-stamped topic's log start jumped to its end at 30 s).
KEEP_RECORDS = {"retention.ms": "-1"}


@contextmanager
def kafka_and_odradek(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    """The comparison tests' two targets by name: the session's Kafka and a fresh Odradek (a module
    fixture's body: ``with kafka_and_odradek(tmp_path_factory) as targets: yield targets``)."""
    require_toolchain()
    with open_target("kafka", tmp_path_factory.mktemp("kafka")) as kafka, \
            open_target("odradek", tmp_path_factory.mktemp("odradek")) as odradek:
        yield {"kafka": kafka, "odradek": odradek}


def comparison_fixtures(*apis: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The fixtures of a module whose every test runs against both targets: ``targets`` (as
    ``kafka_and_odradek``, module-scoped) and ``target``, each target in turn, failing on Odradek
    unless it advertises ``apis``. In the module: ``targets, target = comparison_fixtures("Api", ...)``."""

    @pytest.fixture(scope="module", name="targets")
    def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
        with kafka_and_odradek(tmp_path_factory) as both:
            yield both

    @pytest.fixture(params=TARGETS, name="target")
    def target(request: pytest.FixtureRequest, targets: dict[str, Target]) -> Target:
        t = targets[request.param]
        t.require(*apis)
        return t

    return targets, target


@contextmanager
def fresh_kafka_and_odradek(prefix: str, kafka_overrides: dict[str, str] | None = None,
                            odradek_overrides: dict[str, str] | None = None
                            ) -> Iterator[dict[str, tuple[str, int]]]:
    """A Kafka 4.4 and an Odradek of their own, by name as (host, port), for comparison tests whose
    broker configs differ from the shared Kafka's: started with the given configs, killed and their
    directories (``<prefix>-kafka-*``, ``<prefix>-*``) removed after."""
    require_toolchain()
    kafka_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-kafka-"))
    odradek_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    kafka = KafkaServer(kafka_dir, heap="512m", overrides=kafka_overrides)
    odradek = BrokerProcess(odradek_dir, overrides=odradek_overrides)
    try:
        kafka.start()
        odradek.start()
        yield {"kafka": (kafka.host, kafka.port), "odradek": (odradek.host, odradek.port)}
    finally:
        odradek.kill()
        kafka.kill()
        shutil.rmtree(kafka_dir, ignore_errors=True)
        shutil.rmtree(odradek_dir, ignore_errors=True)


def create_topic(target: Target, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """Create a topic with librdkafka's admin client (cheap: no JVM) and wait for it to exist."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config={**KEEP_RECORDS, **(configs or {})})],
                                  operation_timeout=15)
    futures[topic].result(timeout=30)
    from tests.support.wire import WireClient

    with WireClient(target.host, target.port) as c:
        wait_until_led(c, topic, partitions)


def wait_until_led(c: WireClient, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Wait until the leader of every partition serves it (ListOffsets answers NONE), not just until
    Metadata names a leader: Kafka publishes a new topic to its metadata cache before its replica
    manager makes the partition leader, so a Produce sent in between gets NOT_LEADER_OR_FOLLOWER
    (seen in CI as a comparison test's first step answering 6 on Kafka and 120 on Odradek). ``c``:
    a client of the one broker that leads them all (the tests' single-node targets)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        r = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": i, "current_leader_epoch": -1, "timestamp": -1}
                                           for i in range(partitions)]}]})
        codes = [p["error_code"] for t in r["topics"] for p in t["partitions"]]
        if len(codes) == partitions and not any(codes):
            return
        assert time.monotonic() < deadline, f"{topic}: partitions not led after {timeout_s} s: {codes}"
        time.sleep(0.05)
