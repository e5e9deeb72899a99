"""Metadata answers reuse each topic's encoded entry while the metadata image is unchanged
(broker/metadata/topic_metadata_cache.py). These tests check the answers stay exact across versions and
that every image change (new partitions, deletion, re-creation, a new topic) shows at once."""

from __future__ import annotations

from tests.support.wire import WireClient, create_topic

OMITTED = -(2**31)
TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _metadata(c: WireClient, version: int, names: list[str] | None, include_ops: bool = False) -> dict:
    if names is None:
        topics = [] if version == 0 else None  # v0: an empty list means every topic
    else:
        topics = [{"name": n} for n in names]
    body = {"topics": topics, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": include_ops}
    return c.request(3, version, body)


def _partition_counts(resp: dict) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in resp["topics"] if t["error_code"] == 0}


def test_every_version_answers_the_same_twice_and_exactly(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "cached-a", 3)
        create_topic(c, "cached-b", 1)
        for version in range(13):
            first = _metadata(c, version, None)
            again = _metadata(c, version, None)  # served from the cache
            assert again == first
            assert _partition_counts(first) == {"cached-a": 3, "cached-b": 1}
            named = _metadata(c, version, ["cached-b", "cached-a"])
            assert [t["name"] for t in named["topics"]] == ["cached-b", "cached-a"]
            by_name = {t["name"]: t for t in first["topics"]}
            assert named["topics"] == [by_name["cached-b"], by_name["cached-a"]]
            part = by_name["cached-a"]["partitions"][2]
            assert (part["partition_index"], part["leader_id"], part["replica_nodes"]) == (2, 1, [1])


def test_topic_operations_follow_the_request_not_the_cache(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "ops", 1)
        for include in (False, True, False, True):
            [topic] = _metadata(c, 12, ["ops"], include_ops=include)["topics"]
            assert topic["topic_authorized_operations"] == (TOPIC_OPS if include else OMITTED)


def test_image_changes_show_in_the_next_answer(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "grows", 2)
        assert _partition_counts(_metadata(c, 12, None))["grows"] == 2
        resp = c.request(37, 3, {"topics": [{"name": "grows", "count": 5, "assignments": None}],
                                 "timeout_ms": 10000, "validate_only": False})
        assert resp["results"][0]["error_code"] == 0, resp
        assert _partition_counts(_metadata(c, 12, None))["grows"] == 5
        assert _partition_counts(_metadata(c, 12, ["grows"]))["grows"] == 5

        old_id = _metadata(c, 12, ["grows"])["topics"][0]["topic_id"]
        resp = c.request(20, 6, {"topics": [{"name": "grows", "topic_id": None}], "timeout_ms": 10000})
        assert resp["responses"][0]["error_code"] == 0, resp
        assert "grows" not in _partition_counts(_metadata(c, 12, None))
        assert _metadata(c, 12, ["grows"])["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION

        create_topic(c, "grows", 1)
        [topic] = _metadata(c, 12, ["grows"])["topics"]
        assert topic["error_code"] == 0 and len(topic["partitions"]) == 1 and topic["topic_id"] != old_id
        create_topic(c, "newcomer", 4)
        assert _partition_counts(_metadata(c, 12, None)) == {"grows": 1, "newcomer": 4}
