"""The pytest plugin Odradek ships (odradek/testing/pytest_plugin.py) and odradek.testing.single_broker.running_broker, used
the way another project would: real brokers, real clients, and an installed copy of the package
whose pytest11 entry point alone makes the fixtures appear."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import wait_until
from odradek.broker.launcher.etcd_binary import find_etcd_binary
from odradek.testing.single_broker import running_broker

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 20.0) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(n, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    return got


def test_confluent_kafka_produces_and_consumes_on_the_session_broker(odradek_broker, odradek_topic) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    # The topic exists before anything is produced to it (created by the fixture, not auto-created).
    listed = AdminClient({"bootstrap.servers": odradek_broker.bootstrap}).list_topics(timeout=10).topics
    assert odradek_topic in listed and len(listed[odradek_topic].partitions) == 1
    assert odradek_topic.startswith("test_confluent_kafka_produces")
    p = Producer({"bootstrap.servers": odradek_broker.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(odradek_topic, value=b"v%d" % i)
    assert p.flush(10) == 0
    assert _consume(odradek_broker.bootstrap, odradek_topic, 100) == [b"v%d" % i for i in range(100)]


def test_kafka_python_on_the_same_broker_gets_a_fresh_topic(odradek_broker, odradek_topic) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=odradek_broker.bootstrap, acks="all")
    for i in range(10):
        producer.send(odradek_topic, value=b"k%d" % i).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=odradek_broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(odradek_topic, 0)])
    # A fresh topic: only this test's records, from offset 0.
    assert [(m.offset, m.value) for m in consumer] == [(i, b"k%d" % i) for i in range(10)]
    consumer.close()


@pytest.mark.odradek_broker(overrides={"num.partitions": "3"})
def test_private_broker_takes_overrides_from_the_marker(odradek_private_broker, odradek_broker) -> None:
    from kafka import KafkaProducer

    assert odradek_private_broker.port != odradek_broker.port
    producer = KafkaProducer(bootstrap_servers=odradek_private_broker.bootstrap)
    producer.send("auto-created", value=b"x").get(timeout=10)  # auto-created with num.partitions
    assert producer.partitions_for("auto-created") == {0, 1, 2}
    producer.close()


def test_running_broker_context_manager_starts_fast_and_stops_cleanly() -> None:
    t0 = time.monotonic()
    with running_broker() as b:
        started = time.monotonic() - t0
        topic = b.create_topic(partitions=2)
        with pytest.raises(RuntimeError, match="already exists"):
            b.create_topic(topic)
        data_dir = b.data_dir
    assert b.proc.returncode == 0  # graceful SIGTERM shutdown
    assert not data_dir.exists()  # its temp dir is removed
    # "Well under a second" on an idle machine (measured ~0.4 s); generous bound for a loaded CI box.
    assert started < 5.0, started


def test_host_cluster_is_one_processes_deployment_that_clients_use_across_its_brokers(odradek_host_cluster) -> None:
    # Issue 31 item 1: the fixture is `odradek --processes 3` - one supervisor, three brokers, no etcd.
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = odradek_host_cluster
    assert cluster.proc.poll() is None and sorted(cluster.child_pids()) == [1, 2, 3] == cluster.node_ids
    first = cluster.bootstrap.split(",")[0]  # one port is enough: Metadata names the others
    admin = AdminClient({"bootstrap.servers": first})
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    admin.create_topics([NewTopic("spread", num_partitions=6)])["spread"].result(30)
    assert wait_until(lambda: {p.leader for p in admin.list_topics("spread", timeout=5).topics["spread"]
                               .partitions.values()} == {1, 2, 3}, 30), cluster.logs()[-3000:]

    producer = Producer({"bootstrap.servers": first, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce("spread", key=b"%d" % (i % 30), value=b"%d" % i)
    assert producer.flush(30) == 0
    # A group consumer: its coordinator, the offsets topic and the partition leaders on different processes.
    consumer = Consumer({"bootstrap.servers": first, "group.id": "readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["spread"])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 300 and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(int(m.value()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == list(range(300)), cluster.logs()[-3000:]
    old_pid = cluster.kill(2)  # SIGKILL: the supervisor starts broker 2 again
    assert cluster.wait_serving_again(2), cluster.logs()[-3000:]
    assert cluster.child_pids()[2] != old_pid
    assert cluster.stop() == 0  # every broker's controlled shutdown
    assert "every broker process stopped (exit codes {1: 0, 2: 0, 3: 0})" in cluster.logs()


@pytest.mark.odradek_host_cluster(processes=2, overrides={"num.partitions": "4"})
def test_host_cluster_takes_its_size_and_overrides_from_the_marker(odradek_host_cluster) -> None:
    from kafka import KafkaProducer

    assert len(odradek_host_cluster.bootstrap.split(",")) == 2 and sorted(odradek_host_cluster.child_pids()) == [1, 2]
    producer = KafkaProducer(bootstrap_servers=odradek_host_cluster.bootstrap)
    producer.send("auto-created", value=b"x").get(timeout=20)  # auto-created with num.partitions
    assert producer.partitions_for("auto-created") == {0, 1, 2, 3}
    producer.close()


# What another project would write: no conftest, no import of odradek, only the fixtures' names.
EXTERNAL_TEST = '''
import socket

def test_uses_the_fixtures(pytestconfig, odradek_broker, odradek_topic):
    import odradek.broker
    assert odradek.broker.__file__.startswith({target!r}), odradek.broker.__file__
    assert pytestconfig.pluginmanager.has_plugin("odradek")
    socket.create_connection((odradek_broker.host, odradek_broker.port), timeout=5).close()
    assert odradek_broker.bootstrap == f"{{odradek_broker.host}}:{{odradek_broker.port}}"
    assert odradek_topic.startswith("test_uses_the_fixtures-")

def test_cluster(odradek_cluster):
    servers = odradek_cluster.bootstrap.split(",")
    assert len(servers) == 3 and odradek_cluster.node_ids == [1, 2, 3]
    for server in servers:
        host, port = server.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()
'''


def test_installed_package_registers_the_fixtures_through_its_pytest11_entry_point(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Install this checkout (no deps: the venv has them) into a directory of its own, as pip would
    # for a user, so the entry point comes from the built metadata, not from tests/conftest.py.
    target = tmp_path_factory.mktemp("site")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                              "--target", str(target), str(REPO)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    (entry_points,) = target.glob("odradek-*.dist-info/entry_points.txt")
    assert "[pytest11]\nodradek = odradek.testing.pytest_plugin" in entry_points.read_text()
    # One package, odradek: nothing named broker, protocol, storage or controller lands next to a
    # user's own packages (the checkout's top-level folders install as odradek.broker, ...).
    installed = {p.name for p in target.iterdir()} - {"bin", "__pycache__"}
    assert {n for n in installed if not n.startswith("odradek-")} == {"odradek"}, installed
    assert {p.name for p in (target / "odradek").iterdir() if p.is_dir()} >= {
        "broker", "protocol", "storage", "controller", "testing"}

    pytester.makepyfile(test_external=EXTERNAL_TEST.format(target=str(target)))
    monkeypatch.setenv("PYTHONPATH", str(target))
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    if find_etcd_binary()[0] is None:  # odradek_cluster says why it cannot run, and skips
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*odradek_cluster needs etcd*"])
    else:
        result.assert_outcomes(passed=2)

    # Without the entry point's plugin the same file has no such fixtures: the registration is what
    # provides them.
    blocked = pytester.runpytest_subprocess("-p", "no:odradek", "-p", "no:cacheprovider")
    blocked.assert_outcomes(errors=2)
    blocked.stdout.fnmatch_lines(["*fixture 'odradek_broker' not found*"])


def test_a_broker_that_cannot_start_raises_with_its_log_and_leaves_no_temp_dir(tmp_path, monkeypatch) -> None:
    from odradek.testing.single_broker import BrokerStartError

    # A temp dir of this test's own: other test processes make and remove odradek-* dirs in the
    # shared one (the fuzz harness, real Kafka, clusters) while this runs.
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    made: list[Path] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs) -> str:
        made.append(Path(mkdtemp(*args, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    with pytest.raises(BrokerStartError, match=r"exited with 1(.|\n)*num.partitions"):
        with running_broker(overrides={"num.partitions": "zero"}):
            pass
    assert [p.parent for p in made] == [temp]  # running_broker made its data dir there ...
    assert list(temp.iterdir()) == []  # ... and removed it
