"""The per-group loop that ConsumerGroupDescribe and ShareGroupDescribe share (Kafka's KafkaApis
handles both the same way): DESCRIBE on each group or GROUP_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE
without a coordinator, else the coordinator's entry, with the group's authorized operations when asked
for and the group was found. Only the entry differs: the describing function and the error entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker.security import authz
from odradek.protocol.acl_operations import GROUP_OPERATIONS
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.api.request_types import ApiRequest
    from odradek.broker.security.authz import AuthHelper

# The described-group entries of the two responses (constrained, so the entry's keys stay checked).
Entry = TypeVar("Entry", "ConsumerGroupDescribeResponseDescribedGroup", "ShareGroupDescribeResponseDescribedGroup")

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        ConsumerGroupDescribeResponseDescribedGroup,
        ShareGroupDescribeResponseDescribedGroup,
    )


def describe_groups(auth: AuthHelper, request: ApiRequest[Any], group_ids: Iterable[str],
                    include_authorized_operations: bool, describe: Callable[[str], Entry] | None,
                    error_entry: Callable[[str, int], Entry]) -> list[Entry]:
    """One entry per group id, in request order; ``describe`` is None without a coordinator."""
    groups: list[Entry] = []
    for group_id in group_ids:
        if not auth.allowed(request, authz.DESCRIBE, authz.GROUP, group_id):
            groups.append(error_entry(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if describe is None:
            groups.append(error_entry(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        entry = describe(group_id)
        if include_authorized_operations and entry["error_code"] == ErrorCode.NONE:
            entry["authorized_operations"] = auth.authorized_operations(request, authz.GROUP, group_id,
                                                                        GROUP_OPERATIONS)
        groups.append(entry)
    return groups
