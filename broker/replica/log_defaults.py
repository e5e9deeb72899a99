"""The log config a new or reconfigured log gets: the broker's log.* defaults with the controller-stored
dynamic broker configs applied (Kafka's precedence: a dynamic value also hides its synonyms in lower
layers), then the topic's own overrides; and producer.id.expiration.ms for each log's producer state.

One object for both because the log manager needs the expiration when it makes a log (its
producer-state factory) and the replica manager changes it when a dynamic broker config does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.broker.metadata.topic_config_view import (
    config_layers,
    effective_broker_config,
    effective_log_defaults,
)
from odradek.storage.errors import InvalidConfigError
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state import ProducerStateManager

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.controller.image import MetadataImage, TopicImage

log = logging.getLogger(__name__)


class LogDefaults:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.base_log_config: LogConfig = config.log_config()
        # producer.id.expiration.ms is dynamic: read when a log is made, pushed to open logs on change.
        self.producer_id_expiration_ms: int = config["producer.id.expiration.ms"]

    def producer_state(self, _topic: str, _partition: int, log_dir: Path) -> ProducerStateManager:
        """The log manager's producer-state factory."""
        return ProducerStateManager(log_dir, self.producer_id_expiration_ms)

    def apply(self, image: MetadataImage) -> bool:
        """Take the image's dynamic broker configs; True if producer.id.expiration.ms changed (the
        caller pushes it to the logs already open)."""
        layers = config_layers(self.config, image.broker_configs, self.node_id)
        self.base_log_config = effective_log_defaults(self.config, layers)
        expiration = effective_broker_config(self.config, layers)["producer.id.expiration.ms"]
        if expiration == self.producer_id_expiration_ms:
            return False
        self.producer_id_expiration_ms = expiration
        return True

    def topic_log_config(self, topic: TopicImage) -> LogConfig:
        try:
            return self.base_log_config.with_overrides(topic.configs)
        except InvalidConfigError as exc:
            # The controller validated these; a broker-default change could still clash.
            log.error("topic %s has an invalid config (%s); using broker defaults", topic.name, exc)
            return self.base_log_config
