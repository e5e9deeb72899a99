"""Kafka's StandardAuthorizer (``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``).

Decides whether a principal connected from a host may perform an operation on a resource, from
the ACLs the controller stores (AccessControlEntryRecord) and two static settings. The rules are
Kafka's StandardAuthorizerData:

1. A principal in ``super.users`` (``User:alice;User:bob``) may do everything.
2. An ACL applies to a resource when its pattern matches the name: LITERAL equal to the name,
   LITERAL ``*`` (every resource of that type), or PREFIXED with a prefix of the name.
3. Among the ACLs that apply, one matches the request when its principal is the request's or
   ``User:*``, its host is the client's address or ``*``, and its operation is the requested one or
   ALL. An ALLOW ACL also matches through Kafka's implications: READ, WRITE, DELETE and ALTER
   imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. A DENY ACL matches only its own
   operation (or ALL).
4. A matching DENY wins over any ALLOW. Else a matching ALLOW allows.
5. Else, if no ACL at all applies to the resource (for any principal or operation), the answer is
   ``allow.everyone.if.no.acl.found`` (default false); otherwise denied.

``authorize_by_resource_type`` is KIP-679's question ("may this principal WRITE some topic?",
InitProducerId for an idempotent producer), answered as Kafka's Authorizer default: yes if the
principal may do it on a resource named "hardcode" (super users, allow.everyone.if.no.acl.found,
an ALLOW on ``*``), else if an ALLOW for exactly that operation (or ALL) exists on some pattern no
matching DENY covers (a DENY LITERAL ``*`` covers all, a DENY LITERAL on the same name or a DENY
PREFIXED on a prefix of it covers that pattern).

The ACL index is rebuilt from the metadata image whenever a delta carries ACL records (``load``);
it is owned by the handler loop, read without locks. Hosts are compared as strings (the client's
IP address as the connection reports it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from odradek.protocol.acl_types import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_DESCRIBE_IMPLIERS = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                AclOperation.ALTER})
_DESCRIBE_CONFIGS_IMPLIERS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def parse_super_users(raw: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (Kafka splits on ';' and trims)."""
    if not raw:
        return frozenset()
    return frozenset(p.strip() for p in raw.split(";") if p.strip())


def _allow_matches(acl_op: AclOperation, op: AclOperation) -> bool:
    if acl_op == AclOperation.ALL or acl_op == op:
        return True
    if op == AclOperation.DESCRIBE:
        return acl_op in _DESCRIBE_IMPLIERS
    if op == AclOperation.DESCRIBE_CONFIGS:
        return acl_op in _DESCRIBE_CONFIGS_IMPLIERS
    return False


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type, by pattern."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    max_prefix: int = 0

    def applying_to(self, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        if (acls := self.literal.get(name)) is not None:
            found.extend(acls)
        if name != WILDCARD_RESOURCE and (acls := self.literal.get(WILDCARD_RESOURCE)) is not None:
            found.extend(acls)
        if self.prefixed:
            for end in range(1, min(len(name), self.max_prefix) + 1):
                if (acls := self.prefixed.get(name[:end])) is not None:
                    found.extend(acls)
        return found


class StandardAuthorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._acls: tuple[AclBinding, ...] = ()

    # -- the ACL set ------------------------------------------------------------------------------

    def load(self, acls: Iterable[AclBinding]) -> None:
        """Replace every ACL (from the metadata image)."""
        index: dict[ResourceType, _TypeIndex] = {}
        kept = tuple(acls)
        for acl in kept:
            by_type = index.setdefault(acl.resource_type, _TypeIndex())
            if acl.pattern_type == PatternType.PREFIXED:
                by_type.prefixed.setdefault(acl.resource_name, []).append(acl)
                by_type.max_prefix = max(by_type.max_prefix, len(acl.resource_name))
            else:
                by_type.literal.setdefault(acl.resource_name, []).append(acl)
        self._index = index
        self._acls = kept

    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls

    # -- decisions --------------------------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        by_type = self._index.get(resource_type)
        applying = by_type.applying_to(name) if by_type is not None else []
        if not applying:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for acl in applying:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD_HOST and acl.host != host:
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation == op or acl.operation == AclOperation.ALL:
                    return False
            elif not allowed and _allow_matches(acl.operation, op):
                allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bitfield: one bit per supported operation this principal may perform."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation,
                                   resource_type: ResourceType) -> bool:
        # Kafka's Authorizer.authorizeByResourceType: first the decision for a resource named
        # "hardcode" (super users; allow.everyone.if.no.acl.found; ALLOW on "*").
        if self.authorize(principal, host, op, resource_type, "hardcode"):
            return True
        by_type = self._index.get(resource_type)
        if by_type is None:
            return False
        # Then the principal's ACLs for exactly ``op`` (or ALL): no implications here.
        mine = [acl for acls in (*by_type.literal.values(), *by_type.prefixed.values()) for acl in acls
                if acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD_HOST)
                and acl.operation in (op, AclOperation.ALL)]
        denies = [acl for acl in mine if acl.permission_type == AclPermissionType.DENY]
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD_RESOURCE for d in denies):
            return False
        return any(acl.permission_type == AclPermissionType.ALLOW and not any(_covers(d, acl) for d in denies)
                   for acl in mine)


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether a DENY pattern covers every resource an ALLOW pattern names (KIP-679)."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name == WILDCARD_RESOURCE or (
            allow.pattern_type == PatternType.LITERAL and deny.resource_name == allow.resource_name)
    return allow.resource_name.startswith(deny.resource_name)
