"""The SASL configuration keys Odradek implements, and which of them hold secrets.

Kept free of imports so that broker/config/broker_config.py can ask "is this key implemented?" (it refuses every
security setting it does not know how to honour) and "is it sensitive?" (masked in logs and in
DescribeConfigs, as Kafka masks PASSWORD configs) without an import cycle.

Kafka's names:
- ``sasl.enabled.mechanisms`` and ``listener.name.<listener>.sasl.enabled.mechanisms``;
- ``sasl.mechanism.inter.broker.protocol``, ``sasl.server.max.receive.size``;
- ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (mechanism lower-case, e.g. ``plain``,
  ``scram-sha-256``): the JAAS entry of that mechanism on that listener (Kafka's PASSWORD type).
"""

from __future__ import annotations

import re

SASL_BROKER_KEYS: frozenset[str] = frozenset({
    "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol",
    "sasl.server.max.receive.size",
})

_LISTENER_MECHANISMS_RE = re.compile(r"^listener\.name\.([^.]+)\.sasl\.enabled\.mechanisms$")
_LISTENER_JAAS_RE = re.compile(r"^listener\.name\.([^.]+)\.([^.]+)\.sasl\.jaas\.config$")
# Any key whose value may be a secret: JAAS entries (passwords), and Kafka's PASSWORD-type keys.
_SENSITIVE_RE = re.compile(r"(^|\.)sasl\.jaas\.config$|password$|(^|\.)ssl\.key(store)?\.key$")


def is_implemented_sasl_key(key: str) -> bool:
    """True for the SASL keys the broker honours (they no longer stop start-up)."""
    return (key in SASL_BROKER_KEYS or _LISTENER_MECHANISMS_RE.match(key) is not None
            or _LISTENER_JAAS_RE.match(key) is not None)


def is_sensitive_key(key: str) -> bool:
    """A key whose value must never be logged or described (JAAS configs, passwords, keys)."""
    return _SENSITIVE_RE.search(key) is not None


def listener_jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def listener_mechanisms_key(listener: str) -> str:
    return f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
