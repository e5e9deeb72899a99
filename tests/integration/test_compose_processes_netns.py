"""docker/compose.processes.yaml exercised without Docker (tests/support/netns.py, as compose.yaml): one
service whose container runs ``odradek --processes 3`` (KAFKA_ODRADEK_PROCESSES, issue 31 item 1) with its
own command, environment, volume and healthcheck in a network namespace; checked with the raw wire client
from the root namespace and with a real client (confluent-kafka) inside the service's namespace, where
the advertised name ``odradek`` resolves as it would on the compose network."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netns import REPO, ComposeNetns, load_compose, skip_reason
from tests.support.wire import WireClient

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

COMPOSE_PROCESSES = REPO / "docker" / "compose.processes.yaml"
PREFIX = "oproc-"


def test_the_file_describes_one_container_of_three_broker_processes() -> None:
    (name, svc), = load_compose(COMPOSE_PROCESSES).items()
    assert name == "odradek" and svc.hostname == "odradek" and svc.depends_on == {}  # no etcd: the supervisor's store
    assert svc.environment["KAFKA_ODRADEK_PROCESSES"] == "3"
    assert svc.command == ["odradek", "/etc/odradek/server.properties"]  # the Dockerfile's, as compose.yaml's brokers
    assert list(svc.volumes) == ["/var/lib/odradek/data"]


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeNetns]:
    net = ComposeNetns(tmp_path_factory.mktemp("compose-processes"), COMPOSE_PROCESSES, prefix=PREFIX)
    try:
        net.up(timeout=90)
        net.wait_healthy("odradek", 90)  # its healthcheck: all three ports answer
        yield net
    finally:
        net.down()
        leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        assert f"{PREFIX}odradek" not in leftovers, leftovers
        assert not any(p.alive() for p in net.processes.values())


def _brokers(host: str, port: int) -> dict[int, tuple[str, int, str | None]]:
    with WireClient(host, port) as c:
        meta = c.request(3, 12, {"topics": None})  # Metadata: the endpoints of the listener asked
    return {b["node_id"]: (b["host"], b["port"], b["rack"]) for b in meta["brokers"]}


def test_one_container_serves_three_brokers_on_both_listeners(compose: ComposeNetns) -> None:
    address = compose.address("odradek")
    # The healthcheck sees the three ports answer; the later brokers' registrations reach broker 1's
    # metadata a moment after (the fresh-clone run at 646dce2 asked in between and saw broker 1 only).
    deadline = time.monotonic() + 30
    while len(plaintext := _brokers(address, 9092)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {n: hp[:2] for n, hp in plaintext.items()} == {1: ("odradek", 9092), 2: ("odradek", 9093),
                                                          3: ("odradek", 9094)}, compose.logs()
    # broker.rack: the container's host name (under Docker "odradek"; here the namespace shares the machine's).
    hostname = compose.exec("odradek", ["python", "-c", "import socket; print(socket.gethostname())"]).stdout.strip()
    assert {rack for _, _, rack in plaintext.values()} == {hostname}
    for port in (19092, 19093, 19094):  # EXTERNAL, as published on the host: localhost:9092-9094
        assert {n: hp[:2] for n, hp in _brokers(address, port).items()} == {
            1: ("localhost", 9092), 2: ("localhost", 9093), 3: ("localhost", 9094)}
    data = compose.work_dir / "volumes" / "odradek-data"  # the service's volume
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["metadata-store", "node-1", "node-2", "node-3"]


CLIENT = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = "odradek:9092"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("spread", num_partitions=3)])["spread"].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = admin.list_topics("spread", timeout=5).topics["spread"].partitions.values()
        if all(len(p.isrs) == 3 for p in parts) and len(parts) == 3:
            break
        time.sleep(0.2)
    leaders = sorted(p.leader for p in parts)
    replicas = sorted(sorted(p.replicas) for p in parts)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(150):
        producer.produce("spread", key=b"%d" % (i % 15), value=b"%d" % i)
    left = producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["spread"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 150 and time.monotonic() < deadline:
        for m in consumer.consume(50, timeout=0.5):
            if m.error() is None:
                got.append(int(m.value()))
    consumer.close()
    offsets = admin.list_topics("__consumer_offsets", timeout=5).topics["__consumer_offsets"].partitions.values()
    print(json.dumps({"leaders": leaders, "replicas": replicas, "unflushed": left, "got": sorted(got),
                      "offsets_replicas": sorted({len(p.replicas) for p in offsets})}))
""")


def test_a_client_in_the_network_produces_and_consumes_across_the_three_processes(compose: ComposeNetns) -> None:
    result = compose.exec("odradek", ["python", "-c", CLIENT], timeout=150)
    assert result.returncode == 0, (result.stderr[-3000:], compose.logs()[-3000:])
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["leaders"] == [1, 2, 3]  # one partition led by each process
    assert report["replicas"] == [[1, 2, 3]] * 3  # KAFKA_DEFAULT_REPLICATION_FACTOR 3 over the processes
    assert report["unflushed"] == 0
    assert report["offsets_replicas"] == [3]  # the group's offsets too (the image's properties file says 1)
    assert report["got"] == list(range(150)), compose.logs()[-3000:]


def test_the_compose_file_names_this_file() -> None:
    # compose.yaml is what `docker compose up` runs; it points to the one-container variant.
    assert "compose.processes.yaml" in Path(REPO / "docker" / "compose.yaml").read_text()
