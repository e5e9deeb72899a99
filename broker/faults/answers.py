"""Error answers for the APIs whose handlers have no ``error_response`` (the dispatcher closes the
connection when one of them fails), so fault injection can answer them with a code too.

Each is the answer Kafka's ``getErrorResponse`` builds for that request (clients' request classes):

- Metadata (MetadataRequest): each requested topic, by name ("" when asked by id) and id, with the
  code, not internal, no partitions; no brokers, cluster id null, controller -1; the top-level error
  code (v13+) set too. An all-topics request gets no topic.
- ApiVersions (ApiVersionsRequest): the code and no api keys.
- DeleteRecords (DeleteRecordsRequest): every partition with the code and low watermark -1.
- OffsetForLeaderEpoch (OffsetsForLeaderEpochRequest): every partition with the code, leader epoch
  and end offset -1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

METADATA_KEY, API_VERSIONS_KEY, DELETE_RECORDS_KEY, OFFSET_FOR_LEADER_EPOCH_KEY = 3, 18, 21, 23


def _metadata(request: Any, code: int) -> dict[str, Any]:
    topics = request.body.get("topics") or []
    return {
        "throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1, "error_code": code,
        "topics": [{"error_code": code, "name": t.get("name") or "", "topic_id": t.get("topic_id"),
                    "is_internal": False, "partitions": []} for t in topics],
    }


def _api_versions(request: Any, code: int) -> dict[str, Any]:
    return {"error_code": code, "api_keys": [], "throttle_time_ms": 0}


def _delete_records(request: Any, code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "low_watermark": -1,
                                            "error_code": code} for p in t["partitions"]]}
        for t in request.body["topics"]]}


def _offset_for_leader_epoch(request: Any, code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": [
        {"topic": t["topic"], "partitions": [{"error_code": code, "partition": p["partition"], "leader_epoch": -1,
                                              "end_offset": -1} for p in t["partitions"]]}
        for t in request.body["topics"]]}


FALLBACK_ERROR_RESPONSES: dict[int, Callable[[Any, int], dict[str, Any]]] = {
    METADATA_KEY: _metadata,
    API_VERSIONS_KEY: _api_versions,
    DELETE_RECORDS_KEY: _delete_records,
    OFFSET_FOR_LEADER_EPOCH_KEY: _offset_for_leader_epoch,
}
