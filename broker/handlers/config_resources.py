"""What DescribeConfigs, AlterConfigs and IncrementalAlterConfigs share: Kafka's config resource
types (ConfigResource.Type ids), the per-resource error they raise, and Java's rules for a broker
resource name. Not a handler (no API_KEY): the registry lists handler modules explicitly."""

from __future__ import annotations

from protocol.errors import ErrorCode

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
KNOWN_TYPES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER", CLIENT_METRICS: "CLIENT_METRICS",
               GROUP: "GROUP"}


class ResourceError(Exception):
    """One resource of a config request failed: answered in that resource's entry, not the request's."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_broker_id(name: str, message_prefix: str) -> int:
    """Java's Integer.parseInt rules (optional sign, ASCII digits, int range); else INVALID_REQUEST."""
    text = name[1:] if name[:1] in "+-" else name
    if text.isascii() and text.isdigit():
        value = int(name)
        if -(2**31) <= value < 2**31:
            return value
    raise ResourceError(ErrorCode.INVALID_REQUEST, message_prefix + name)
