"""What the transaction APIs' handlers share: the coordinator lookup and KIP-588's error mapping."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.request_types import ApiRequest
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.txn.coordinator import TransactionCoordinator


def txn_coordinator_of(request: ApiRequest) -> TransactionCoordinator | None:
    """The broker's transaction coordinator, or None before it started (COORDINATOR_NOT_AVAILABLE)."""
    coordinator = request.broker.txn_coordinator
    return coordinator if coordinator is not None and coordinator.active else None


def fenced_error(code: ErrorCode, request: ApiRequest, first_version: int) -> ErrorCode:
    """KIP-588: PRODUCER_FENCED only from the version that may return it; INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and request.api_version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
