"""The controller's ACL operations (Kafka's AclControlManager): CreateAcls and DeleteAcls as records.

An ACL lives in the metadata log as an AccessControlEntryRecord under a random id; deleting it
writes a RemoveAccessControlEntryRecord with that id. Both reach every broker through the image,
where the broker's authorizer (broker/security/authorizer.py) reads them.

Rules (Kafka's AclControlManager.validateNewAcl and AclApis):
- a new ACL needs a LITERAL or PREFIXED pattern, a concrete resource type, an operation other than
  ANY/UNKNOWN, ALLOW or DENY, a non-empty resource name (``kafka-cluster`` for CLUSTER) and a
  principal of the form Type:Name; otherwise that creation fails with INVALID_REQUEST;
- an ACL equal to an existing one (or to an earlier one of the same request) is not written again;
- a delete filter with an UNKNOWN element fails with INVALID_REQUEST; otherwise it removes every
  ACL it matches (AclBindingFilter.matches) and reports them; two filters matching one ACL both
  report it, and it is removed once.

Pure functions over the image: the Controller calls them under its write lock and commits the
records.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from odradek.controller.records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
)
from odradek.protocol.acl_types import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from odradek.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    error_code: int = 0
    error_message: str | None = None
    deleted: tuple[AclBinding, ...] = ()


def binding_of(record: AccessControlEntryRecord) -> AclBinding:
    return AclBinding(
        ResourceType.from_code(record.resource_type),
        record.resource_name,
        PatternType.from_code(record.pattern_type),
        record.principal,
        record.host,
        AclOperation.from_code(record.operation),
        AclPermissionType.from_code(record.permission_type),
    )


def validate_new_acl(acl: AclBinding) -> str | None:
    """Why Kafka refuses to store ``acl`` (INVALID_REQUEST), or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission_type.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                "principal type from the principal name)")
    return None


def create_acl_records(
    existing: Mapping[uuid.UUID, AccessControlEntryRecord], acls: Sequence[AclBinding]
) -> tuple[list[AclCreateResult], list[MetadataRecord]]:
    known = {binding_of(r) for r in existing.values()}
    results: list[AclCreateResult] = []
    records: list[MetadataRecord] = []
    for acl in acls:
        why = validate_new_acl(acl)
        if why is not None:
            results.append(AclCreateResult(ErrorCode.INVALID_REQUEST, why))
            continue
        results.append(AclCreateResult())
        if acl in known:
            continue
        known.add(acl)
        records.append(AccessControlEntryRecord(
            id=uuid.uuid4(), resource_type=int(acl.resource_type), resource_name=acl.resource_name,
            pattern_type=int(acl.pattern_type), principal=acl.principal, host=acl.host,
            operation=int(acl.operation), permission_type=int(acl.permission_type)))
    return results, records


def delete_acl_records(
    existing: Mapping[uuid.UUID, AccessControlEntryRecord], filters: Sequence[AclBindingFilter]
) -> tuple[list[AclDeleteResult], list[MetadataRecord]]:
    results: list[AclDeleteResult] = []
    removed: set[uuid.UUID] = set()
    records: list[MetadataRecord] = []
    for f in filters:
        if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
            results.append(AclDeleteResult(ErrorCode.INVALID_REQUEST, "Unknown patternFilter."))
            continue
        if f.operation == AclOperation.UNKNOWN or f.permission_type == AclPermissionType.UNKNOWN:
            results.append(AclDeleteResult(ErrorCode.INVALID_REQUEST, "Unknown entryFilter."))
            continue
        deleted: list[AclBinding] = []
        for acl_id, record in existing.items():
            binding = binding_of(record)
            if f.matches(binding):
                deleted.append(binding)
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(id=acl_id))
        results.append(AclDeleteResult(deleted=tuple(deleted)))
    return results, records
