"""What DescribeConfigs, AlterConfigs and IncrementalAlterConfigs share: Kafka's config resource
types (ConfigResource.Type ids), the per-resource error they raise, Java's rules for a broker
resource name, and the ACL each resource type needs. Not a handler (no API_KEY): the registry lists
handler modules explicitly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper

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


# The default messages of Kafka's Errors, which the controller's ApiError(error) carries for a refused
# AlterConfigs / IncrementalAlterConfigs resource (DescribeConfigs answers no message).
DEFAULT_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


def config_access_error(auth: AuthHelper, request: ApiRequest[Any], rtype: int, name: str,
                        op: AclOperation) -> ErrorCode | None:
    """Kafka's config APIs with an authorizer: BROKER, BROKER_LOGGER and CLIENT_METRICS resources need
    ``op`` (DESCRIBE_CONFIGS / ALTER_CONFIGS) on the cluster (else CLUSTER_AUTHORIZATION_FAILED),
    TOPIC on the topic (TOPIC_AUTHORIZATION_FAILED), GROUP on the group (GROUP_AUTHORIZATION_FAILED)."""
    if auth.authorizer is None:
        return None
    if rtype == TOPIC:
        return None if auth.allowed(request, op, authz.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype == GROUP:
        return None if auth.allowed(request, op, authz.GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None if auth.cluster_allowed(request, op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
