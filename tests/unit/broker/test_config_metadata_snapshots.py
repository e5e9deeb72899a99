"""The metadata snapshot settings: Kafka's keys, defaults and bounds (KRaftConfigs), and they take effect."""

from __future__ import annotations

import pytest

from odradek.broker.config.broker_config import BrokerConfig, ConfigError, keys_without_effect

BYTES = "metadata.log.max.record.bytes.between.snapshots"
INTERVAL = "metadata.log.max.snapshot.interval.ms"


def test_defaults_are_kafkas() -> None:
    cfg = BrokerConfig.from_props({"node.id": "1"})
    assert cfg[BYTES] == 20 * 1024 * 1024  # KRaftConfigs.METADATA_SNAPSHOT_MAX_NEW_RECORD_BYTES
    assert cfg[INTERVAL] == 3_600_000  # KRaftConfigs.METADATA_SNAPSHOT_MAX_INTERVAL_MS_DEFAULT


def test_values_and_bounds() -> None:
    cfg = BrokerConfig.from_props({"node.id": "1", BYTES: "4096", INTERVAL: "0"})
    assert (cfg[BYTES], cfg[INTERVAL]) == (4096, 0)
    assert BYTES not in dict(keys_without_effect(cfg)) and INTERVAL not in dict(keys_without_effect(cfg))
    with pytest.raises(ConfigError, match=BYTES):
        BrokerConfig.from_props({"node.id": "1", BYTES: "0"})  # atLeast(1)
    with pytest.raises(ConfigError, match=INTERVAL):
        BrokerConfig.from_props({"node.id": "1", INTERVAL: "-1"})  # atLeast(0)
