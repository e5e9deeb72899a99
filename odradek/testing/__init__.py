"""Test tooling for projects that test against Odradek: a real broker (single_broker), a real
cluster (cluster), fault injection from tests (faults), and the pytest fixtures (pytest_plugin).
It is not part of the broker's runtime packages."""
