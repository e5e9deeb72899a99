"""Kafka 4.4's kafka-configs on group configs (`--entity-type groups`), against Kafka 4.4 and Odradek (the
A/B harness): the same commands give the same output and exit codes.

--alter --add-config (two keys at once), --describe of one group (its configs with their synonyms),
--describe --all (every key with its default or override), --describe of every group with configs
(compared for this test's groups only: the shared Kafka holds other tests' groups), a refused value
and an unknown key (exit 1, Kafka's InvalidConfigurationException messages, nothing changed), and
--delete-config.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.java_tools import run_tool
from tests.support.real_kafka import TARGETS, Target, kafka_and_odradek, require_toolchain, unique

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    require_toolchain()
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def sections(text: str, groups: set[str]) -> list[str]:
    """The lines of `--describe` for the named groups only (each section: a header, then its configs)."""
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("Dynamic configs for group "):
            keep = line.removeprefix("Dynamic configs for group ").removesuffix(" are:") in groups
        if keep:
            out.append(line)
    return out


def errors(text: str) -> list[str]:
    """The tool's error lines without the stack trace and the command line (the bootstrap differs)."""
    return [line for line in text.splitlines() if "Exception:" in line and not line.startswith("\tat ")]


def test_kafka_configs_alters_and_describes_group_configs_as_on_kafka(targets) -> None:
    group, other = unique("kg"), unique("kg")

    def scenario(target: Target) -> list:
        def tool(*args: str) -> tuple[int, str]:
            p = run_tool("kafka-configs", ["--bootstrap-server", target.bootstrap, "--entity-type", "groups", *args],
                         check=False)
            return p.returncode, p.stdout

        out: list = []
        out.append(tool("--entity-name", group, "--alter", "--add-config",
                        "share.record.lock.duration.ms=20000,share.delivery.count.limit=3"))
        out.append(tool("--entity-name", other, "--alter", "--add-config", "share.auto.offset.reset=earliest"))
        out.append(tool("--entity-name", group, "--describe"))
        out.append(tool("--entity-name", group, "--describe", "--all"))
        code, text = tool("--describe")
        out.append((code, sections(text, {group, other})))
        for bad in ("share.record.lock.duration.ms=1", "share.record.lock.duration.ms=99999", "nope=1"):
            p = run_tool("kafka-configs", ["--bootstrap-server", target.bootstrap, "--entity-type", "groups",
                                           "--entity-name", group, "--alter", "--add-config", bad], check=False)
            out.append((p.returncode, errors(p.stderr + p.stdout)))
        out.append(tool("--entity-name", group, "--describe"))  # unchanged by the refusals
        out.append(tool("--entity-name", group, "--alter", "--delete-config", "share.delivery.count.limit"))
        out.append(tool("--entity-name", group, "--describe"))
        return out

    results = {name: scenario(targets[name]) for name in TARGETS}
    for step, (ours, kafkas) in enumerate(zip(results["odradek"], results["kafka"], strict=True)):
        assert (step, ours) == (step, kafkas)
    describe_all = results["kafka"][3][1]
    assert "share.record.lock.duration.ms=20000" in describe_all and "streams.num.standby.replicas=0" in describe_all
    assert results["kafka"][5][0] == 1 and "Value must be at least 1000" in results["kafka"][5][1][0]
