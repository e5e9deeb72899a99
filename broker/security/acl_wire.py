"""ACL bindings and filters ⇄ the dicts of CreateAcls (30), DescribeAcls (29) and DeleteAcls (31).

Field names are the codec's (snake_case of Kafka's JSON): a creation carries ``resource_type``,
``resource_name``, ``resource_pattern_type``, ``principal``, ``host``, ``operation``,
``permission_type``; a filter the same with ``resource_name_filter``, ``pattern_type_filter``,
``principal_filter``, ``host_filter`` (DeleteAcls) or ``resource_name_filter``,
``pattern_type_filter``, ``principal_filter``, ``host_filter`` (DescribeAcls has the same names).
Used by the three handlers and by the forwarding controller client, which re-sends a broker's
CreateAcls/DeleteAcls to the controller node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from odradek.protocol.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        AclCreation,
        AclDescription,
        DeleteAclsFilter,
        DeleteAclsMatchingAcl,
        DescribeAclsRequest,
        DescribeAclsResource,
    )

CREATION_CODES = ("resource_type", "resource_pattern_type", "operation", "permission_type")
FILTER_CODES = ("resource_type_filter", "pattern_type_filter", "operation", "permission_type")


def has_unknown_code(item: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    """Kafka's request validation (CreateAclsRequest.validate, DescribeAclsRequest /
    DeleteAclsRequest.normalizeAndValidate) refuses a wire code equal to UNKNOWN (0) while parsing, so
    the connection is closed. Any other code the enums do not know reads as UNKNOWN afterwards and is
    the controller's to refuse (INVALID_REQUEST) or matches nothing."""
    return any(item[key] == 0 for key in keys)


def binding_from_creation(c: AclCreation) -> AclBinding:
    return AclBinding(ResourceType.from_code(c["resource_type"]), c["resource_name"] or "",
                      PatternType.from_code(c["resource_pattern_type"]), c["principal"] or "", c["host"] or "",
                      AclOperation.from_code(c["operation"]), AclPermissionType.from_code(c["permission_type"]))


def creation_of(acl: AclBinding) -> AclCreation:
    return {"resource_type": int(acl.resource_type), "resource_name": acl.resource_name,
            "resource_pattern_type": int(acl.pattern_type), "principal": acl.principal, "host": acl.host,
            "operation": int(acl.operation), "permission_type": int(acl.permission_type)}


def filter_from_wire(f: DeleteAclsFilter | DescribeAclsRequest) -> AclBindingFilter:
    """DeleteAcls filter or DescribeAcls request body (the same field names)."""
    return AclBindingFilter(
        ResourceType.from_code(f["resource_type_filter"]), f["resource_name_filter"],
        PatternType.from_code(f["pattern_type_filter"]), f["principal_filter"], f["host_filter"],
        AclOperation.from_code(f["operation"]), AclPermissionType.from_code(f["permission_type"]))


def filter_to_wire(f: AclBindingFilter) -> DeleteAclsFilter:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.resource_name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission_type)}


def matching_acl_of(acl: AclBinding) -> DeleteAclsMatchingAcl:
    """One DeleteAclsMatchingAcl (error 0)."""
    return {"error_code": 0, "error_message": None, "resource_type": int(acl.resource_type),
            "resource_name": acl.resource_name, "pattern_type": int(acl.pattern_type), "principal": acl.principal,
            "host": acl.host, "operation": int(acl.operation), "permission_type": int(acl.permission_type)}


def binding_from_matching_acl(m: DeleteAclsMatchingAcl) -> AclBinding:
    return AclBinding(ResourceType.from_code(m["resource_type"]), m["resource_name"],
                      PatternType.from_code(m["pattern_type"]), m["principal"], m["host"],
                      AclOperation.from_code(m["operation"]), AclPermissionType.from_code(m["permission_type"]))


def describe_resources(acls: Iterable[AclBinding]) -> list[DescribeAclsResource]:
    """DescribeAclsResource entries: the ACLs grouped by resource pattern, in a stable order."""
    grouped: dict[tuple[int, str, int], list[AclDescription]] = {}
    for acl in sorted(acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal,
                                           a.host, a.operation, a.permission_type)):
        grouped.setdefault((int(acl.resource_type), acl.resource_name, int(acl.pattern_type)), []).append(
            {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
             "permission_type": int(acl.permission_type)})
    return [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": entries}
            for (rt, name, pt), entries in grouped.items()]
