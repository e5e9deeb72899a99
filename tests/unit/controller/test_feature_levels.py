"""Kafka's feature levels in the metadata log (odradek.controller.features, odradek.controller.feature_updates): what a
new store is formatted at, what a store from before feature levels reports and gets, and UpdateFeatures'
rules on a real controller over a real local store.

Expected values are Kafka 4.4's: its new-cluster levels (FeatureCommand version-mapping of 4.4-IV2:
metadata.version 33, group.version 1, transaction.version 2, share.version 2 (1: Odradek supports 0-1),
streams.version 1, each within what Odradek supports) and the
answers a real Kafka 4.4 broker gave to the same UpdateFeatures requests (the messages below were
read off one; tests/integration/test_feature_flags.py sends them to both).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from odradek.controller import features, metadata_format
from odradek.controller.log_store import LocalMetadataLogStore
from odradek.controller.records import FeatureLevelRecord, LeaderChangeRecord, RegisterBrokerRecord
from odradek.controller.requests import FeatureUpdate
from odradek.protocol.errors import ErrorCode
from tests.unit.controller.conftest import make_controller

MV, GV, TV, SV = "metadata.version", "group.version", "transaction.version", "streams.version"
SHV = "share.version"
UPGRADE, SAFE, UNSAFE = 1, 2, 3
FAILED = "The update failed for all features since the following feature had an error: "


def kafka_levels(features_map: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in features_map.items() if k != metadata_format.FEATURE}


async def test_a_new_store_is_formatted_at_kafka_44_levels_odradek_supports(tmp_path: Path) -> None:
    c = make_controller(tmp_path)
    await c.start(host="localhost", port=9092)
    try:
        assert kafka_levels(c.image.features) == {MV: 33, GV: 1, TV: 2, SV: 1, SHV: 1}
        first = (await c._log_store.read(0)).batches[0].records
        levels = [r for r in first if isinstance(r, FeatureLevelRecord) and r.name != metadata_format.FEATURE]
        assert levels[0] == FeatureLevelRecord(MV, 33)  # metadata.version first, as Kafka's bootstrap
        assert set(levels) == {FeatureLevelRecord(MV, 33), FeatureLevelRecord(GV, 1), FeatureLevelRecord(TV, 2),
                               FeatureLevelRecord(SV, 1), FeatureLevelRecord(SHV, 1)}
    finally:
        await c.stop()


async def test_a_store_from_before_feature_levels_keeps_its_behaviour_then_gets_its_levels(tmp_path: Path) -> None:
    # What 0.1.0 left: registrations, no FeatureLevelRecord (metadata format level 1).
    store = LocalMetadataLogStore(tmp_path)
    await store.open()
    await store.append([LeaderChangeRecord(1, 0)], 0)
    for n in (1, 2):
        await store.append([RegisterBrokerRecord(n, n, uuid.uuid4(), f"h{n}", 9090 + n)], 0)
    await store.close()
    c = make_controller(tmp_path)
    await c.start()
    try:
        assert c.image.features == {}
        # It served KIP-848 and wrote TransactionLogValue v0: group.version 1, transaction.version 0.
        assert features.finalized(c.image.features) == {MV: 33, GV: 1}
        assert features.consumer_group_protocol(c.image.features)
        assert features.transaction_log_value_version(c.image.features) == 0
        await c.register_broker(1, "h1", 9091)
        await c.register_broker(2, "h2", 9092, features=())  # still 0.1.0
        # A 0.1.0 broker cannot read a FeatureLevelRecord: no level is written, not even a 0.
        for update in (FeatureUpdate(TV, 1), FeatureUpdate(GV, 0, SAFE)):
            result = await c.update_features([update])
            assert result.error_code == ErrorCode.INVALID_UPDATE_VERSION
            assert result.error_message.startswith(
                f"{FAILED}Invalid update version {update.max_version_level} for feature {update.feature}. "
                f"The metadata is at {metadata_format.FEATURE} level 1")
        assert c.image.features == {}
        offset = c.image.offset
        await c.register_broker(2, "h2", 9092)  # upgraded: the format rises, with the levels it behaved at
        raised = (await c._log_store.read(0)).batches[-1].records
        assert set(raised) == {FeatureLevelRecord(metadata_format.FEATURE, 2), FeatureLevelRecord(MV, 33),
                               FeatureLevelRecord(GV, 1)}
        assert c.image.offset > offset
        assert kafka_levels(c.image.features) == {MV: 33, GV: 1}
        # transaction.version stays 0 until an operator raises it, as after a Kafka software upgrade.
        assert (await c.update_features([FeatureUpdate(TV, 1)])).error_code == ErrorCode.NONE
        assert kafka_levels(c.image.features) == {MV: 33, GV: 1, TV: 1}
    finally:
        await c.stop()


async def test_a_store_at_the_format_without_kafka_levels_gets_them_at_start(tmp_path: Path) -> None:
    # A build that had the metadata format but not Kafka's levels left this.
    store = LocalMetadataLogStore(tmp_path)
    await store.open()
    await store.append([LeaderChangeRecord(1, 0), FeatureLevelRecord(metadata_format.FEATURE, 2)], 0)
    await store.close()
    c = make_controller(tmp_path)
    await c.start()
    try:
        assert kafka_levels(c.image.features) == {MV: 33, GV: 1}
    finally:
        await c.stop()


async def _refused(c, updates: list[FeatureUpdate], message: str) -> None:
    before, offset = dict(c.image.features), c.image.offset
    result = await c.update_features(updates)
    assert (result.error_code, result.error_message) == (ErrorCode.INVALID_UPDATE_VERSION, FAILED + message)
    assert c.image.features == before and c.image.offset == offset  # nothing written


async def test_update_features_refuses_as_kafka_and_writes_nothing(controller) -> None:
    await _refused(controller, [FeatureUpdate(GV, 0)],
                   "Invalid update version 0 for feature group.version. Can't downgrade the version of this "
                   "feature without setting the upgrade type to either safe or unsafe downgrade.")
    await _refused(controller, [FeatureUpdate(GV, 2, SAFE)],
                   "Invalid update version 2 for feature group.version. Local controller 1 only supports "
                   "versions 0-1")
    await _refused(controller, [FeatureUpdate("foo.bar", 1)],
                   "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature.")
    await _refused(controller, [FeatureUpdate("foo.bar", 0, SAFE)],
                   "Invalid update version 0 for feature foo.bar. Feature foo.bar not found.")
    await _refused(controller, [FeatureUpdate(GV, -1, SAFE)],
                   "Invalid update version -1 for feature group.version. A feature version cannot be less than 0.")
    for kind in (0, 4):
        await _refused(controller, [FeatureUpdate(GV, 1, kind)],
                       "Invalid update version 1 for feature group.version. The controller does not support "
                       "the given upgrade type.")
    # Features Kafka has and Odradek does not serve: refused as Kafka refuses a feature it lacks.
    for name in ("eligible.leader.replicas.version", "kraft.version", metadata_format.FEATURE):
        await _refused(controller, [FeatureUpdate(name, 1)],
                       f"Invalid update version 1 for feature {name}. Local controller 1 does not support "
                       "this feature.")
    # share.version 2 (KIP-1191's dead-letter queues) is Kafka 4.4's; Odradek serves 0-1.
    await _refused(controller, [FeatureUpdate(SHV, 2)],
                   "Invalid update version 2 for feature share.version. Local controller 1 only supports versions 0-1")
    # One bad feature fails them all.
    await _refused(controller, [FeatureUpdate(TV, 0, SAFE), FeatureUpdate("foo.bar", 1)],
                   "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature.")


async def test_metadata_version_is_the_one_level_odradek_implements(controller) -> None:
    assert (await controller.update_features([FeatureUpdate(MV, 33)])).error_code == ErrorCode.NONE
    for level, kind in ((32, SAFE), (32, UNSAFE), (7, SAFE), (34, UPGRADE)):
        # Kafka 4.4 refuses these too (INVALID_UPDATE_VERSION; a downgrade from 33 "might delete
        # metadata information", 34 is not production): only its message differs.
        await _refused(controller, [FeatureUpdate(MV, level, kind)],
                       f"Invalid update version {level} for feature metadata.version. Local controller 1 only "
                       "supports versions 33")


async def test_downgrade_and_upgrade_back(controller, new_controller, tmp_path: Path) -> None:
    # A dry run checks and writes nothing.
    offset = controller.image.offset
    assert (await controller.update_features([FeatureUpdate(GV, 0, SAFE)], validate_only=True)).error_code == 0
    assert controller.image.offset == offset and controller.image.features[GV] == 1
    result = await controller.update_features([FeatureUpdate(GV, 0, SAFE), FeatureUpdate(TV, 0, UNSAFE)])
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    assert GV not in controller.image.features and TV not in controller.image.features  # level 0 drops it
    assert not features.consumer_group_protocol(controller.image.features)
    assert features.transaction_log_value_version(controller.image.features) == 0
    await _refused(controller, [FeatureUpdate(GV, 1, SAFE)],
                   "Invalid update version 1 for feature group.version. Can't downgrade to a newer version.")
    # The same level with a downgrade type passes (Kafka's rule), and kraft.version 0 writes nothing.
    assert (await controller.update_features([FeatureUpdate(GV, 0, SAFE)])).error_code == 0
    offset = controller.image.offset
    assert (await controller.update_features([FeatureUpdate("kraft.version", 0, SAFE)])).error_code == 0
    assert controller.image.offset == offset
    # Named twice: the last level counts, as Kafka's map keeps the last.
    assert (await controller.update_features([FeatureUpdate(GV, 0, SAFE), FeatureUpdate(GV, 1)])).error_code == 0
    assert controller.image.features[GV] == 1
    await controller.stop()
    again = new_controller(tmp_path)
    await again.start()
    try:
        assert kafka_levels(again.image.features) == {MV: 33, GV: 1, SV: 1, SHV: 1}  # from the log
    finally:
        await again.stop()


async def test_every_registered_broker_must_support_the_level(controller) -> None:
    # Broker 2 registered ranges of its own (another release: no transaction.version 1).
    await controller.register_broker(2, "h2", 9093, features=metadata_format.SUPPORTED + (
        (MV, 33, 33), (GV, 0, 1), (TV, 0, 0)))
    await controller.update_features([FeatureUpdate(TV, 0, SAFE)])
    await _refused(controller, [FeatureUpdate(TV, 1)],
                   "Invalid update version 1 for feature transaction.version. Broker 2 does not support this feature.")
    await controller.register_broker(2, "h2", 9093, features=metadata_format.SUPPORTED + ((GV, 1, 1),))
    await _refused(controller, [FeatureUpdate(GV, 0, SAFE)],
                   "Invalid update version 0 for feature group.version. Broker 2 only supports versions 1")
