"""Feature flags on the wire, against a real Apache Kafka 4.4 and against Odradek (issue 28, item 2).

- ApiVersions v3/v4: supported features (v3 leaves out those whose minimum is 0), finalized levels
  and their epoch (the metadata offset: it moves with a level change).
- UpdateFeatures (57) v0-2: the same requests get the same answers from both - Kafka's codes and
  messages for a downgrade without a downgrade type, a level out of range, an unknown feature (level 1
  and 0), a negative level, an unknown upgrade type, v0's ignored allow_downgrade, one bad feature
  among good ones (nothing changes), dry runs, a feature named twice, an empty request - and per
  version the shape of a success (v0-1 list each feature with "NONE", v2 nothing).
- What switches on the levels, on both: group.version 0 turns KIP-848 off (ConsumerGroupHeartbeat and
  ConsumerGroupDescribe answer UNSUPPORTED_VERSION) and 1 back on; transaction.version picks the
  TransactionLogValue version in __transaction_state (0 at level 0, 1 from level 1).

The real Kafka is the session's shared one, formatted at 4.4's defaults; a test that changes its
levels puts them back. Where the two must differ (Odradek supports fewer levels) the test says why.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.txn.records import key_bytes
from odradek.protocol.records import iter_batches
from tests.support.real_kafka import TARGETS, Target, open_target, require_toolchain, unique
from tests.support.wire import WireClient

API_VERSIONS, UPDATE_FEATURES, FETCH, METADATA, FIND_COORDINATOR, INIT_PID = 18, 57, 1, 3, 10, 22
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
UPGRADE, SAFE, UNSAFE = 1, 2, 3
NONE, UNSUPPORTED_VERSION, INVALID_UPDATE_VERSION, GROUP_ID_NOT_FOUND = 0, 35, 95, 69
FAILED = "The update failed for all features since the following feature had an error: "
# Kafka 4.4's new-cluster levels, Odradek's too since it serves transactions v2 (KIP-890 part 2).
NEW_CLUSTER = {"kafka": {"transaction.version": 2}, "odradek": {"transaction.version": 2}}


@pytest.fixture(params=TARGETS)
def target(request, tmp_path: Path) -> Iterator[Target]:
    if request.param == "kafka":
        require_toolchain()
    with open_target(request.param, tmp_path) as t:
        t.require("UpdateFeatures")
        yield t


def api_versions(c: WireClient, version: int = 4) -> dict:
    r = c.request(API_VERSIONS, version, {"client_software_name": "feature-test", "client_software_version": "1"})
    assert r["error_code"] == NONE, r
    return r


def finalized(c: WireClient) -> dict[str, int]:
    return {f["name"]: f["max_version_level"] for f in api_versions(c)["finalized_features"]}


def update(c: WireClient, updates: list[tuple[str, int, int]], version: int = 1, dry_run: bool = False) -> dict:
    return c.request(UPDATE_FEATURES, version, {
        "timeout_ms": 10000, "validate_only": dry_run,
        "feature_updates": [{"feature": f, "max_version_level": level, "upgrade_type": kind,
                             "allow_downgrade": kind != UPGRADE} for f, level, kind in updates]})


def set_level(c: WireClient, feature: str, level: int) -> None:
    """Finalize ``level`` (downgrade or upgrade) and wait until this broker's ApiVersions shows it."""
    current = finalized(c).get(feature, 0)
    r = update(c, [(feature, level, SAFE if level < current else UPGRADE)])
    assert r["error_code"] == NONE, r
    deadline = time.monotonic() + 10
    while finalized(c).get(feature, 0) != level:
        assert time.monotonic() < deadline, finalized(c)
        time.sleep(0.05)


def test_api_versions_lists_supported_and_finalized_features(target: Target) -> None:
    with WireClient(target.host, target.port) as c:
        v4 = api_versions(c, 4)
        supported = {f["name"]: (f["min_version"], f["max_version"]) for f in v4["supported_features"]}
        levels = finalized(c)
        # Both: metadata.version 33 (4.4-IV2), KIP-848 on, a transaction.version, every finalized level
        # within the supported range; ApiVersions v3 lists only the features whose minimum is not 0.
        assert levels["metadata.version"] == 33 and levels["group.version"] == 1
        assert levels["transaction.version"] == NEW_CLUSTER[target.name]["transaction.version"]
        assert all(supported[name][0] <= level <= supported[name][1] for name, level in levels.items())
        v3 = {f["name"] for f in api_versions(c, 3)["supported_features"]}
        assert v3 == {name for name, (low, _) in supported.items() if low != 0}
        assert api_versions(c, 3)["finalized_features"] == v4["finalized_features"]
        if target.is_odradek:
            # Only what Odradek implements (controller/features.py); Kafka also lists kraft.version
            # and eligible.leader.replicas.version, share.version 0-2 (2: KIP-1191's dead-letter
            # queues), and 7-33 for metadata.version.
            assert supported == {"metadata.version": (33, 33), "group.version": (0, 1),
                                 "transaction.version": (0, 2), "streams.version": (0, 1), "share.version": (0, 1)}
            assert levels == {"metadata.version": 33, "group.version": 1, "transaction.version": 2,
                              "streams.version": 1, "share.version": 1}
        # The epoch is the metadata offset (Kafka's image offset): a level change moves it forward.
        before = v4["finalized_features_epoch"]
        assert before >= 0
        try:
            set_level(c, "group.version", 0)
            assert api_versions(c)["finalized_features_epoch"] > before
            assert "group.version" not in finalized(c)  # level 0 is not listed
        finally:
            set_level(c, "group.version", 1)


# (name, request version, updates, dry run, Kafka's answer: code, message after FAILED or None)
SAME_ANSWERS = [
    ("downgrade without a downgrade type", 1, [("group.version", 0, UPGRADE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
     "setting the upgrade type to either safe or unsafe downgrade."),
    ("v0 ignores allow_downgrade", 0, [("group.version", 0, SAFE)], False, INVALID_UPDATE_VERSION,
     "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
     "setting the upgrade type to either safe or unsafe downgrade."),
    ("a level above the range", 1, [("group.version", 2, SAFE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"),
    ("an unknown feature", 1, [("foo.bar", 1, UPGRADE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature."),
    ("an unknown feature at 0", 1, [("foo.bar", 0, SAFE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 0 for feature foo.bar. Feature foo.bar not found."),
    ("Odradek's metadata format", 1, [("odradek.metadata.format", 2, UPGRADE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 2 for feature odradek.metadata.format. Local controller 1 does not support this "
     "feature."),
    ("a test feature", 1, [("test.feature.version", 1, UPGRADE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature test.feature.version. Local controller 1 does not support this "
     "feature."),
    ("a negative level", 1, [("group.version", -1, SAFE)], True, INVALID_UPDATE_VERSION,
     "Invalid update version -1 for feature group.version. A feature version cannot be less than 0."),
    ("upgrade type 0", 1, [("group.version", 1, 0)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature group.version. The controller does not support the given upgrade "
     "type."),
    ("upgrade type 4", 1, [("group.version", 1, 4)], True, INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature group.version. The controller does not support the given upgrade "
     "type."),
    ("one bad feature fails all, v2", 2, [("group.version", 0, SAFE), ("foo.bar", 1, UPGRADE)], False,
     INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature."),
    ("one bad feature fails all, v0", 0, [("group.version", 1, UPGRADE), ("foo.bar", 1, UPGRADE)], False,
     INVALID_UPDATE_VERSION,
     "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature."),
    ("a dry run of a downgrade", 1, [("group.version", 0, SAFE)], True, NONE, None),
    ("an unsafe dry run", 1, [("group.version", 0, UNSAFE)], True, NONE, None),
    ("the same level with a downgrade type", 1, [("group.version", 1, SAFE)], True, NONE, None),
    ("metadata.version at its level", 1, [("metadata.version", 33, UPGRADE)], True, NONE, None),
    ("a feature named twice", 1, [("group.version", 1, UPGRADE), ("group.version", 0, SAFE)], True, NONE, None),
    ("kraft.version 0", 1, [("kraft.version", 0, SAFE)], True, NONE, None),
    ("a success, v2", 2, [("group.version", 1, UPGRADE)], True, NONE, None),
    ("nothing", 1, [], False, NONE, None),
]


@pytest.mark.parametrize("case", SAME_ANSWERS, ids=[c[0] for c in SAME_ANSWERS])
def test_update_features_answers_as_kafka(target: Target, case: tuple) -> None:
    _, version, updates, dry_run, code, message = case
    with WireClient(target.host, target.port) as c:
        before = api_versions(c)["finalized_features"]
        r = update(c, updates, version, dry_run)
        assert (r["error_code"], r["error_message"]) == (code, None if message is None else FAILED + message), r
        # Kafka 4.x: per-feature results on success below v2, one per requested name, "NONE" each.
        expected = [{"feature": f, "error_code": 0, "error_message": "NONE"} for f, _, _ in updates]
        assert r["results"] == (expected if code == NONE and version <= 1 else [])
        assert api_versions(c)["finalized_features"] == before  # refused or a dry run: nothing changed


def test_where_odradek_answers_otherwise(tmp_path: Path) -> None:
    """The levels Odradek does not support are refused, with Kafka's error code (the real Kafka
    accepts these: it supports them)."""
    with open_target("odradek", tmp_path) as target, WireClient(target.host, target.port) as c:
        for feature, level, kind, reason in [
            ("metadata.version", 32, SAFE, "Local controller 1 only supports versions 33"),
            ("share.version", 2, UPGRADE, "Local controller 1 only supports versions 0-1"),
            ("eligible.leader.replicas.version", 1, UPGRADE, "Local controller 1 does not support this feature."),
            ("kraft.version", 1, UPGRADE, "Local controller 1 does not support this feature."),
        ]:
            r = update(c, [(feature, level, kind)])
            assert (r["error_code"], r["error_message"]) == (
                INVALID_UPDATE_VERSION, f"{FAILED}Invalid update version {level} for feature {feature}. {reason}")


def consumer_heartbeat(c: WireClient, group: str) -> dict:
    return c.request(CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [unique("no-such-topic")], "server_assignor": None,
        "topic_partitions": []})


def test_group_version_0_turns_the_consumer_protocol_off(target: Target) -> None:
    group = unique("g-848")
    with WireClient(target.host, target.port) as c:
        try:
            set_level(c, "group.version", 0)
            r = consumer_heartbeat(c, group)
            assert (r["error_code"], r["member_id"], r["member_epoch"]) == (UNSUPPORTED_VERSION, None, 0), r
            d = c.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False})
            assert [(g["group_id"], g["error_code"]) for g in d["groups"]] == [(group, UNSUPPORTED_VERSION)], d
            assert 68 in {k["api_key"] for k in api_versions(c)["api_keys"]}  # still advertised, as in Kafka
        finally:
            set_level(c, "group.version", 1)
        find_coordinator(c, group, 0)
        deadline = time.monotonic() + 30
        while (r := consumer_heartbeat(c, group))["error_code"] != NONE:  # the coordinator may be loading
            assert r["error_code"] != UNSUPPORTED_VERSION and time.monotonic() < deadline, r
            time.sleep(0.1)
        assert r["member_epoch"] >= 1


def test_share_version_0_turns_share_groups_off(target: Target) -> None:
    """share.version 0: ShareGroupHeartbeat and ShareGroupDescribe answer UNSUPPORTED_VERSION and stay
    advertised (Kafka's KafkaApis: isShareGroupProtocolEnabled); back at the cluster's level they serve."""
    group = unique("g-share")
    with WireClient(target.host, target.port) as c:
        level = finalized(c).get("share.version", 0)
        assert level >= 1  # both brokers format a new cluster with share groups on
        try:
            set_level(c, "share.version", 0)
            r = c.request(76, 1, {"group_id": group, "member_id": unique("m"), "member_epoch": 0, "rack_id": None,
                                  "subscribed_topic_names": ["t"]})
            assert (r["error_code"], r["member_id"], r["member_epoch"]) == (UNSUPPORTED_VERSION, None, 0), r
            d = c.request(77, 1, {"group_ids": [group], "include_authorized_operations": False})
            assert [(g["group_id"], g["error_code"]) for g in d["groups"]] == [(group, UNSUPPORTED_VERSION)], d
            assert {76, 77, 78, 79} <= {k["api_key"] for k in api_versions(c)["api_keys"]}
        finally:
            set_level(c, "share.version", level)
        find_coordinator(c, group, 0)
        deadline = time.monotonic() + 30
        while (d := c.request(77, 1, {"group_ids": [group], "include_authorized_operations": False}))["groups"][0][
                "error_code"] != GROUP_ID_NOT_FOUND:  # the coordinator may be loading
            assert time.monotonic() < deadline, d
            time.sleep(0.1)


def transaction_value_versions(c: WireClient, txn_id: str) -> list[int]:
    """The TransactionLogValue version of every record ``txn_id`` has in __transaction_state."""
    topic = c.request(METADATA, 12, {"topics": [{"name": "__transaction_state", "topic_id": None}],
                                     "allow_auto_topic_creation": False})["topics"][0]
    partition = partition_for(txn_id, len(topic["partitions"]))
    r = c.request(FETCH, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "topics": [{"topic": "__transaction_state", "partitions": [{
                                  "partition": partition, "fetch_offset": 0, "current_leader_epoch": -1,
                                  "log_start_offset": -1, "partition_max_bytes": 1 << 24}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
    data = r["responses"][0]["partitions"][0]["records"] or b""
    return [int.from_bytes(rec.value[:2], "big") for b in iter_batches(bytes(data)) for rec in b.records
            if rec.key == key_bytes(txn_id)]


def find_coordinator(c: WireClient, key: str, key_type: int) -> None:
    """Until the coordinator is known (the first FindCoordinator creates Kafka's internal topic)."""
    deadline = time.monotonic() + 30
    while c.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})["error_code"] != NONE:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def init_producer(c: WireClient, txn_id: str) -> None:
    find_coordinator(c, txn_id, 1)
    deadline = time.monotonic() + 30
    while (r := c.request(INIT_PID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60000,
                                         "producer_id": -1, "producer_epoch": -1}))["error_code"] != NONE:
        assert time.monotonic() < deadline, r
        time.sleep(0.1)


def test_transaction_version_picks_the_transaction_log_value_version(target: Target) -> None:
    original = NEW_CLUSTER[target.name]["transaction.version"]
    with WireClient(target.host, target.port) as c:
        try:
            seen = {}
            for level in (1, 0):
                set_level(c, "transaction.version", level)
                txn_id = unique(f"tx-tv{level}")
                init_producer(c, txn_id)  # one Empty state record
                seen[level] = transaction_value_versions(c, txn_id)
            assert seen == {1: [1], 0: [0]}  # Kafka's TransactionVersion.transactionLogValueVersion
        finally:
            set_level(c, "transaction.version", original)
