"""ACL values as Kafka's admin protocol carries them (CreateAcls 30, DescribeAcls 29, DeleteAcls 31).

Codes are Kafka's (org.apache.kafka.common.resource / common.acl), one int8 each on the wire:

- ResourceType: UNKNOWN 0, ANY 1, TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5,
  DELEGATION_TOKEN 6, USER 7.
- PatternType: UNKNOWN 0, ANY 1, MATCH 2, LITERAL 3, PREFIXED 4. A binding is LITERAL (the name,
  or ``*`` for every resource of its type) or PREFIXED (every name starting with it); ANY and MATCH
  exist only in filters.
- AclOperation: UNKNOWN 0, ANY 1, ALL 2, READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
  CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12, CREATE_TOKENS 13,
  DESCRIBE_TOKENS 14.
- AclPermissionType: UNKNOWN 0, ANY 1, DENY 2, ALLOW 3.

A code the enum does not know reads as UNKNOWN (Kafka's ``fromCode``). ``AclBinding`` is one ACL
(pattern + entry); ``AclBindingFilter.matches`` is Kafka's AclBindingFilter.matches, which
DescribeAcls and DeleteAcls use. Pure values: no I/O, safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class _Coded(IntEnum):
    @classmethod
    def from_code(cls, code: int) -> Self:
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's AclEntry.supportedOperations: what each resource type's authorized-operations field
# may report (KIP-430).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) to which
    resources (type, name, pattern type)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter; None matches any name, principal or host."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def is_unknown(self) -> bool:
        return (self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN)

    def matches(self, acl: AclBinding) -> bool:
        return self.pattern_matches(acl) and self.entry_matches(acl)

    def pattern_matches(self, acl: AclBinding) -> bool:
        # Kafka's ResourcePatternFilter.matches.
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        # MATCH: every binding that would apply to a resource of this name.
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name in (self.resource_name, WILDCARD_RESOURCE)
        if acl.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(acl.resource_name)
        return False

    def entry_matches(self, acl: AclBinding) -> bool:
        # Kafka's AccessControlEntryFilter.matches.
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation == AclOperation.ANY or self.operation == acl.operation)
                and (self.permission_type == AclPermissionType.ANY
                     or self.permission_type == acl.permission_type))
