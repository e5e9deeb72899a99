"""The error of a configuration Kafka would reject: the broker must not start.

Apart from broker_config.py so that what the configuration calls while it validates (the TLS
listeners' key material, broker/security/tls.py) raises it without importing broker_config back.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value or combination Kafka would reject; the broker must not start."""
