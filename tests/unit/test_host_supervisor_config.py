"""Each child's settings under ``odradek --processes N`` (broker/launcher/host_supervisor.py's docstring), and
the key's validation."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import BrokerConfig, ConfigError, load_config
from odradek.broker.launcher.host_supervisor import (
    child_overrides,
    first_bootstrap,
    resolve_processes,
    shift_ports,
)


def _config(**props: str) -> BrokerConfig:
    base = {"node.id": "1", "log.dirs": "/data/a,/data/b", "listeners": "PLAINTEXT://127.0.0.1:9092"}
    return BrokerConfig.from_props({**base, **props})


def test_each_child_is_its_own_node_port_and_dirs_on_the_hosts_rack() -> None:
    config = _config()
    children = [child_overrides(config, i, 3, "etcd://127.0.0.1:4000") for i in range(3)]
    assert [c["node.id"] for c in children] == ["1", "2", "3"]
    assert [c["listeners"] for c in children] == [f"PLAINTEXT://127.0.0.1:{p}" for p in (9092, 9093, 9094)]
    assert children[2]["log.dirs"] == "/data/a/node-3,/data/b/node-3"
    assert all(c["broker.rack"] == socket.gethostname() for c in children)
    assert all(c["metadata.store"] == "etcd://127.0.0.1:4000" and c["odradek.processes"] == "1" for c in children)
    # Kafka's default offsets.topic.replication.factor (3) would wait forever for a third broker.
    two = child_overrides(config, 0, 2, "etcd://x:1")
    assert two["offsets.topic.replication.factor"] == "2" and two["transaction.state.log.replication.factor"] == "2"
    assert "offsets.topic.replication.factor" not in children[0]


def test_what_the_operator_set_is_kept_or_shifted() -> None:
    config = _config(**{"broker.rack": "zone-a", "node.id": "101", "offsets.topic.replication.factor": "5",
                        "listeners": "PLAINTEXT://:9092,INTERNAL://10.0.0.1:19092",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                        "inter.broker.listener.name": "INTERNAL",
                        "advertised.listeners": "PLAINTEXT://host.example:29092,INTERNAL://10.0.0.1:19092",
                        "metadata.log.dir": "/meta", "odradek.metrics.port": "7071"})
    child = child_overrides(config, 2, 4, "etcd://e:2379")
    assert child["node.id"] == "103"
    assert child["listeners"] == "PLAINTEXT://:9094,INTERNAL://10.0.0.1:19094"
    assert child["advertised.listeners"] == "PLAINTEXT://host.example:29094,INTERNAL://10.0.0.1:19094"
    assert child["metadata.log.dir"] == "/meta/node-103"
    assert child["odradek.metrics.port"] == "7073"
    assert "broker.rack" not in child and "offsets.topic.replication.factor" not in child
    assert first_bootstrap(child) == ("127.0.0.1", 9094)


def test_shift_ports_leaves_port_zero_alone() -> None:
    assert shift_ports("PLAINTEXT://localhost:0", 3) == "PLAINTEXT://localhost:0"
    assert shift_ports("A://[::1]:9092, B://h:9093", 1) == "A://[::1]:9093,B://h:9094"


def test_auto_is_one_process_per_usable_core() -> None:
    assert resolve_processes("auto") == len(os.sched_getaffinity(0))
    assert resolve_processes("4") == 4
    with pytest.raises(ValueError):
        resolve_processes("0")


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_processes_value_stops_start_up_naming_the_key(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="odradek.processes"):
        load_config(None, [f"odradek.processes={value}", f"log.dirs={tmp_path}"])
