"""What the five share coordinator APIs (83-87) have in common: CLUSTER_ACTION on the cluster
(Kafka's KafkaApis: only brokers send them), Kafka's ShareCoordinatorService answer to a request
with no group id, no topics or a topic without partitions (an empty response: nothing to answer
for), and one coordinator operation per partition, run together, answered in the request's order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.broker.security.authz import AuthHelper
from odradek.broker.share.share_coordinator import Outcome
from odradek.broker.share.share_state_records import StateKey

R = TypeVar("R")


def refused(auth: AuthHelper, request: ApiRequest[Any]) -> bool:
    """Kafka's ``authorizeClusterOperation(request, CLUSTER_ACTION)`` fails."""
    return not auth.cluster_allowed(request, authz.CLUSTER_ACTION)


def nothing_to_do(body: Mapping[str, Any]) -> bool:
    """ShareCoordinatorService answers an empty response (no results) to these requests."""
    return not body["group_id"] or not body["topics"] or any(not t["partitions"] for t in body["topics"])


async def each_partition(body: Mapping[str, Any], run: Callable[[StateKey, Mapping[str, Any]], Awaitable[Outcome]],
                         entry: Callable[[Mapping[str, Any], Outcome], R]) -> list[tuple[Any, list[R]]]:
    """(topic id, [entry per partition]) for each topic of the request."""
    group_id = body["group_id"]
    jobs = [(t["topic_id"], p) for t in body["topics"] for p in t["partitions"]]
    outcomes = await asyncio.gather(*(run((group_id, topic_id, p["partition"]), p) for topic_id, p in jobs))
    out: list[tuple[Any, list[R]]] = []
    i = 0
    for t in body["topics"]:
        parts: Sequence[Mapping[str, Any]] = t["partitions"]
        out.append((t["topic_id"], [entry(p, outcomes[i + n]) for n, p in enumerate(parts)]))
        i += len(parts)
    return out



def partitions_of(body: Mapping[str, Any]) -> list[tuple[Any, list[int]]]:
    """(topic id, partitions) of the request, for an answer with one error everywhere."""
    return [(t["topic_id"], [p["partition"] for p in t["partitions"]]) for t in body["topics"]]
