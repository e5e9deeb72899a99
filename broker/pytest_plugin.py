"""pytest fixtures for projects that test against Odradek; installing odradek registers them
(the ``pytest11`` entry point ``odradek`` in pyproject.toml; ``-p no:odradek`` turns them off).

- ``odradek_broker`` (session): one real broker (broker.testing.RunningBroker, a subprocess with its
  data in a temp dir) shared by the session: ``.bootstrap``, ``.host``, ``.port``, ``.data_dir``,
  ``.create_topic()``, ``.stop()``. Its server.properties overrides come from the
  ``odradek_broker_overrides`` fixture: override that (session scope) in a conftest.py.
- ``odradek_topic`` (function): a new topic, unique per test, created on ``odradek_broker``.
- ``odradek_private_broker`` (function): a broker of the test's own, for tests that restart it or
  need other settings: ``@pytest.mark.odradek_broker(overrides={"key": "value"})``.
- ``odradek_cluster``: skips; Odradek has no replication yet, so a multi-broker cluster comes with
  the cluster issue.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.testing import RunningBroker, unique_topic_name


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek_broker(overrides=None): server.properties overrides for odradek_private_broker"
    )


def _serve(tmp_path_factory: pytest.TempPathFactory, overrides: dict[str, str]) -> Iterator[RunningBroker]:
    """A broker in a fresh temp dir for as long as the fixture lives."""
    b = RunningBroker(tmp_path_factory.mktemp("odradek"), overrides=overrides)
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
    yield from _serve(tmp_path_factory, overrides)


@pytest.fixture
def odradek_topic(request: pytest.FixtureRequest, odradek_broker: RunningBroker) -> str:
    """A topic created for this test alone (one partition), named after the test."""
    return odradek_broker.create_topic(unique_topic_name(request.node.name))


@pytest.fixture(scope="session")
def odradek_cluster() -> None:
    pytest.skip("odradek_cluster: Odradek has no replication yet, so a multi-broker cluster is not "
                "available; it comes with the cluster issue. Use odradek_broker (one broker).")
