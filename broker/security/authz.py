"""What handlers call to authorize a request (Kafka's AuthHelper), and the broker's authorizer set-up.

A handler that authorizes names ``authz: AuthHelper`` among its Services (broker/api/registry.py);
the broker builds the one AuthHelper over its authorizer. ``AuthHelper.authorizer`` is None without
``authorizer.class.name``: every method then answers "allowed" after that one attribute test, so
Produce and Fetch pay nothing more (the hot path). With an authorizer, the principal is the
request's (``request.principal``) and the host the client's IP.

A request another broker forwarded to the controller node (``is_forwarded``: CreateTopics,
CreateAcls, ...) was authorized for its client on that broker; here it is checked as Kafka checks
an EnvelopeRequest: CLUSTER_ACTION on the cluster for the forwarding broker's principal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker.config.broker_config import STANDARD_AUTHORIZER
from odradek.broker.metadata.controller_client import is_forwarded
from odradek.broker.security.authorizer import StandardAuthorizer, parse_super_users
from odradek.protocol.acl_types import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.api.request_types import ApiRequest
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.controller.image import MetadataImage

T = TypeVar("T")

READ, WRITE, CREATE, DELETE = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE
ALTER, DESCRIBE, CLUSTER_ACTION = AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID



def build_authorizer(config: BrokerConfig) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` asks for (validated by the config: empty or Kafka's
    StandardAuthorizer), or None."""
    if config["authorizer.class.name"] != STANDARD_AUTHORIZER:
        return None
    return StandardAuthorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


def load_acls(authorizer: StandardAuthorizer, image: MetadataImage) -> None:
    from odradek.controller.acls import binding_of

    authorizer.load(binding_of(record) for record in image.acls.values())


def _who(request: ApiRequest[Any]) -> tuple[str, str]:
    return str(request.principal), request.peer.rpartition(":")[0].strip("[]")


class AuthHelper:
    """Kafka's AuthHelper: the authorization questions handlers ask, over the broker's authorizer."""

    __slots__ = ("authorizer",)

    def __init__(self, authorizer: StandardAuthorizer | None) -> None:
        self.authorizer = authorizer

    def allowed(self, request: ApiRequest[Any], op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        authorizer = self.authorizer
        if authorizer is None:
            return True
        principal, host = _who(request)
        if is_forwarded(request.client_id):
            return authorizer.authorize(principal, host, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
        return authorizer.authorize(principal, host, op, resource_type, name)

    def cluster_allowed(self, request: ApiRequest[Any], op: AclOperation) -> bool:
        return self.allowed(request, op, CLUSTER, CLUSTER_NAME)

    def allowed_by_resource_type(self, request: ApiRequest[Any], op: AclOperation, resource_type: ResourceType) -> bool:
        """KIP-679: may the principal perform ``op`` on some resource of this type?"""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        principal, host = _who(request)
        return authorizer.authorize_by_resource_type(principal, host, op, resource_type)

    def filter_allowed(self, request: ApiRequest[Any], op: AclOperation, resource_type: ResourceType,
                       items: Iterable[T], name: Callable[[T], str] = str) -> list[T]:
        """The items whose resource the principal may ``op`` (each name decided once)."""
        if self.authorizer is None:
            return list(items)
        decided: dict[str, bool] = {}
        out = []
        for item in items:
            key = name(item)
            ok = decided.get(key)
            if ok is None:
                ok = decided[key] = self.allowed(request, op, resource_type, key)
            if ok:
                out.append(item)
        return out

    def denied_indexes(self, request: ApiRequest[Any], op: AclOperation, resource_type: ResourceType,
                       names: list[str]) -> set[int]:
        """Positions in ``names`` whose resource the principal may not ``op`` (empty without an authorizer)."""
        if self.authorizer is None:
            return set()
        allowed = set(self.filter_allowed(request, op, resource_type, set(names)))
        return {i for i, name in enumerate(names) if name not in allowed}

    def cluster_authorized_operations(self, request: ApiRequest[Any], everything: int) -> int:
        """The cluster's bitfield for Metadata (v8-10) and DescribeCluster: Kafka reports 0 to a principal
        that may not DESCRIBE the cluster, whatever else it may do."""
        if self.authorizer is None:
            return everything
        if not self.cluster_allowed(request, DESCRIBE):
            return 0
        return self.authorized_operations(request, CLUSTER, CLUSTER_NAME, everything)

    def authorized_operations(self, request: ApiRequest[Any], resource_type: ResourceType, name: str,
                              everything: int) -> int:
        """KIP-430's bitfield: ``everything`` (the type's supported operations) without an authorizer."""
        authorizer = self.authorizer
        if authorizer is None:
            return everything
        principal, host = _who(request)
        return authorizer.authorized_operations(principal, host, resource_type, name)
