"""docker/compose.yaml exercised without Docker: its services' own commands, environment and healthchecks,
each in a network namespace named after the service (tests/support/netns.py), checked from the root
namespace with the raw wire client."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from odradek.broker.launcher.cluster_launcher import cluster_mode_available
from tests.support.etcd import etcd_binary_or_skip
from tests.support.netns import COMPOSE_FILE, ComposeNetns, load_compose, skip_reason, start_order
from tests.support.wire import WireClient

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

BROKERS = ("broker1", "broker2", "broker3")


def test_the_compose_file_describes_etcd_and_three_brokers() -> None:
    services = load_compose(COMPOSE_FILE)
    assert start_order(services)[0] == "etcd" and set(services) == {"etcd", *BROKERS}
    for n, name in enumerate(BROKERS, 1):
        svc = services[name]
        env = svc.environment
        assert env["KAFKA_NODE_ID"] == str(n)
        assert f"PLAINTEXT://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert env["KAFKA_METADATA_STORE"] == "etcd://etcd:2379"
        assert svc.depends_on == {"etcd": "service_healthy"}
        assert svc.command == ["odradek", "/etc/odradek/server.properties"]  # the Dockerfile's
        assert list(svc.volumes) == ["/var/lib/odradek/data"] and svc.volumes["/var/lib/odradek/data"] == f"{name}-data"
    assert len({tuple(s.volumes.values()) for s in services.values()}) == 4  # a volume each


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeNetns]:
    """One run of the compose file for the module (the tests heal what they cut)."""
    etcd_binary_or_skip()
    net = ComposeNetns(tmp_path_factory.mktemp("compose"))
    try:
        net.up(timeout=60)
        for name in BROKERS:
            net.wait_healthy(name, 60)
        yield net
    finally:
        net.down()
        leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        assert not {"etcd", *BROKERS} & set(leftovers), leftovers
        assert not any(p.alive() for p in net.processes.values())


def _metadata(host: str, port: int = 9092) -> dict:
    with WireClient(host, port) as c:
        return c.request(3, 12, {"topics": None})


def test_compose_services_run_in_their_namespaces_and_answer(compose: ComposeNetns) -> None:
    # Each namespace resolves every service name by the /etc/netns hosts file.
    resolved = compose.exec("broker1", ["python", "-c", "import socket; print(socket.gethostbyname('etcd'))"])
    assert resolved.stdout.strip() == compose.address("etcd"), resolved.stderr
    for name in BROKERS:
        meta = _metadata(compose.address(name))
        mine = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
        n = int(name[-1])
        assert mine[n] == (name, 9092), mine  # advertised by its service name on the PLAINTEXT listener
    # The data went to the service's volume (a directory here), not to the image's default place.
    assert any((compose.work_dir / "volumes" / "broker1-data").iterdir())
    assert any((compose.work_dir / "volumes" / "etcd-data").iterdir())


def test_the_external_listener_advertises_the_published_host_ports(compose: ComposeNetns) -> None:
    # Metadata answers with the endpoints of the listener the request came in on (Kafka's rule).
    for n, name in enumerate(BROKERS, 1):
        external = {b["node_id"]: (b["host"], b["port"]) for b in _metadata(compose.address(name), 19092)["brokers"]}
        assert external[n] == ("localhost", 9091 + n)
        # That difference from the bound port 19092 is deliberate (KAFKA_ODRADEK_PORT_MAPPED_LISTENERS):
        # said once at INFO, not warned about at every start.
        log = compose.processes[name].log_text()
        assert "deliberate port mapping" in log and "but listener EXTERNAL binds port 19092" not in log, log[-3000:]


def test_isolate_cuts_a_service_off_and_heal_restores_it(compose: ComposeNetns) -> None:
    ping = ["python", "-c", "import socket; socket.create_connection(('etcd', 2379), 1).close()"]
    assert compose.exec("broker2", ping).returncode == 0
    compose.isolate("broker2", ["etcd"])
    assert compose.exec("broker2", ping).returncode != 0
    assert compose.exec("broker1", ping).returncode == 0  # only broker2 is cut off
    assert _metadata(compose.address("broker2"))  # the root namespace still reaches it
    compose.heal("broker2")
    assert compose.exec("broker2", ping).returncode == 0

    compose.isolate("broker3")  # link down: nobody reaches it
    with pytest.raises(OSError):
        WireClient(compose.address("broker3"), 9092, timeout=1).close()
    compose.heal("broker3")
    deadline = time.monotonic() + 10
    while True:
        try:
            assert _metadata(compose.address("broker3"))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.skipif(not cluster_mode_available(), reason="cluster mode (metadata.store) is not in this tree yet")
def test_compose_brokers_form_one_cluster_and_replicate_a_topic(compose: ComposeNetns) -> None:
    expected = {n: (name, 9092) for n, name in enumerate(BROKERS, 1)}
    deadline = time.monotonic() + 30
    while True:
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in _metadata(compose.address("broker1"))["brokers"]}
        if brokers == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert brokers == expected, compose.logs()
    with WireClient(compose.address("broker1"), 9092) as c:
        controller = c.request(60, 0, {})["controller_id"]  # DescribeCluster
    assert controller in expected, compose.logs()
    # To the controller (a non-controller answers NOT_CONTROLLER until forwarding is wired in).
    with WireClient(compose.address(f"broker{controller}"), 9092) as c:
        created = c.request(19, 7, {"topics": [{"name": "replicated", "num_partitions": 3, "replication_factor": 3}],
                                    "timeout_ms": 15000})
    assert created["topics"][0]["error_code"] == 0, (created, compose.logs())
    deadline = time.monotonic() + 30
    while True:
        meta = _metadata(compose.address("broker2"))
        topic = next((t for t in meta["topics"] if t["name"] == "replicated"), None)
        ready = topic is not None and len(topic["partitions"]) == 3 and all(
            p["leader_id"] in expected and sorted(p["replica_nodes"]) == [1, 2, 3] for p in topic["partitions"])
        if ready or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ready, (topic, compose.logs())


def _describe_cluster(host: str) -> dict:
    with WireClient(host, 9092) as c:
        return c.request(60, 0, {})


def test_a_controller_cut_off_from_etcd_cannot_write_and_is_replaced(compose: ComposeNetns) -> None:
    """The controller's namespace loses its route to etcd (the others keep theirs): within the lease TTL
    (10 s, the compose default) another broker is controller; a write sent to the cut-off node is not
    committed anywhere; healed, it follows the new controller and is a live broker again."""
    old = _describe_cluster(compose.address("broker1"))["controller_id"]
    assert old in (1, 2, 3), compose.logs()
    others = [name for name in BROKERS if name != f"broker{old}"]
    compose.isolate(f"broker{old}", ["etcd"])
    try:
        t0 = time.monotonic()
        new = old
        while time.monotonic() - t0 < 10 + 15:
            new = _describe_cluster(compose.address(others[0]))["controller_id"]
            if new not in (-1, old):
                break
            time.sleep(0.2)
        assert new not in (-1, old), compose.logs()
        # The deposed controller cannot commit: its write fails, and no other broker ever sees it.
        with WireClient(compose.address(f"broker{old}"), 9092, timeout=60) as c:
            reply = c.request(19, 7, {"topics": [{"name": "written-while-cut-off", "num_partitions": 1,
                                                  "replication_factor": 1}], "timeout_ms": 5000})
        assert reply["topics"][0]["error_code"] != 0, reply
        assert "written-while-cut-off" not in {t["name"] for t in _metadata(compose.address(others[0]))["topics"]}
        assert "stops acting as controller" in compose.processes[f"broker{old}"].log_text()
    finally:
        compose.heal(f"broker{old}")
    deadline = time.monotonic() + 30
    while _describe_cluster(compose.address(f"broker{old}"))["controller_id"] != new or \
            old not in {b["broker_id"] for b in _describe_cluster(compose.address(others[0]))["brokers"]}:
        assert time.monotonic() < deadline, compose.logs()
        time.sleep(0.2)
