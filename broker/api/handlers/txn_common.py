"""What the transaction APIs' handlers share: the coordinator lookup and KIP-588's error mapping."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.txn.coordinator import TransactionCoordinator


def txn_coordinator_of(coordinator: TransactionCoordinator) -> TransactionCoordinator | None:
    """The broker's transaction coordinator, or None before it started (COORDINATOR_NOT_AVAILABLE)."""
    return coordinator if coordinator.active else None


# The client id of a transaction coordinator's inter-broker requests (broker/txn/markers.py).
_BROKER_CLIENT = re.compile(r"broker-\d+-txn-marker-sender")


def from_broker(request: ApiRequest[Any]) -> bool:
    """Is this an inter-broker transaction request (WriteTxnMarkers, AddPartitionsToTxn v4+)? Kafka
    requires the ClusterAction permission for them; until authorization exists (issue 15) the
    stand-in is the client id every Odradek broker's coordinator uses."""
    return _BROKER_CLIENT.fullmatch(request.client_id or "") is not None


def fenced_error(code: ErrorCode, request: ApiRequest[Any], first_version: int) -> ErrorCode:
    """KIP-588: PRODUCER_FENCED only from the version that may return it; INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and request.api_version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
