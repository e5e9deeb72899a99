"""UpdateFeatures' rules (Kafka 4.4's FeatureControlManager.updateFeatures and QuorumController's
answer): which feature level changes the controller accepts, and the FeatureLevelRecords it writes.

For each feature of the request, in order (Kafka's ``updateFeature``), the first failed check is the
error, ``Invalid update version <level> for feature <name>. <reason>``:

1. the upgrade type is UPGRADE, SAFE_DOWNGRADE or UNSAFE_DOWNGRADE, else "The controller does not
   support the given upgrade type.";
2. the level is not negative ("A feature version cannot be less than 0.");
3. this node's release supports the level ("Local controller <id> does not support this feature." /
   "... only supports versions <range>"), and so does every registered broker, fenced or not
   ("Broker <id> ..."; a registration that lists no range for the feature supports level 0 only).
   Odradek adds one case: while the store is below metadata format FEATURE_LEVELS (a 0.1.0 broker
   may be registered, which cannot read a FeatureLevelRecord) no level can be written;
4. a lower level than the finalized one needs SAFE_DOWNGRADE or UNSAFE_DOWNGRADE ("Can't downgrade
   the version of this feature without setting the upgrade type to either safe or unsafe
   downgrade."), and a higher one UPGRADE ("Can't downgrade to a newer version."). A level equal to
   the finalized one passes with any type and is written again, as in Kafka;
5. kraft.version writes no record (Kafka keeps it in the KRaft log, not in a FeatureLevelRecord; here
   only level 0 gets this far); any other name must be one Kafka knows ("Feature <name> not found.").
   Kafka's last check, the levels a level depends on, has nothing to check here: no level this
   release supports depends on another (4.4's only production dependency is
   eligible.leader.replicas.version 1 on metadata.version 23, and ELR is not supported).

Kafka's metadata.version path (downgrades refused when a skipped version changed the metadata) is
never reached: the only supported level is the finalized one (odradek.controller.features).

The request succeeds or fails as a whole: with any error, nothing is written and the answer is
"The update failed for all features since the following feature had an error: <error>" for all of
them; a dry run (validate_only) checks everything and writes nothing. Kafka visits the features in
its HashMap's order, so when several are invalid it may name another one first; here it is the
first in request order. A feature named twice counts once, with its last level and type (Kafka's
map keeps the last).

Pure functions over an image; the controller calls them under its write lock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from odradek.controller import features, metadata_format
from odradek.controller.image import MetadataImage
from odradek.controller.records import FeatureLevelRecord, MetadataRecord
from odradek.controller.requests import FeatureUpdate, FeatureUpgradeType, UpdateFeaturesResult
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


class _Invalid(Exception):
    pass


def _range_text(low: int, high: int) -> str:
    # Kafka's VersionRange.toString.
    return str(low) if low == high else f"{low}-{high}"


def _reason_not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {_range_text(low, high)}"


def _broker_range(registered: Sequence[tuple[str, int, int]], name: str) -> tuple[int, int]:
    for feature, low, high in registered:
        if feature == name:
            return low, high
    return 0, 0


def _check_supported(image: MetadataImage, node_id: int, name: str, level: int) -> None:
    if image.metadata_format < metadata_format.FEATURE_LEVELS:
        raise _Invalid(f"The metadata is at {metadata_format.FEATURE} level {image.metadata_format}, which "
                       f"holds no feature levels, until every registered broker runs a release that reads "
                       f"level {metadata_format.FEATURE_LEVELS}.")
    reason = _reason_not_supported(level, f"Local controller {node_id}", features.supported_range(name))
    for broker_id in sorted(image.brokers):
        if reason is not None:
            break
        reason = _reason_not_supported(level, f"Broker {broker_id}",
                                       _broker_range(image.brokers[broker_id].features, name))
    if reason is not None:
        raise _Invalid(reason)


def _check_update(image: MetadataImage, node_id: int, update: FeatureUpdate) -> MetadataRecord | None:
    """The record ``update`` writes (None: none), or ``_Invalid`` with Kafka's reason."""
    name, level, kind = update.feature, update.max_version_level, update.upgrade_type
    if kind not in tuple(FeatureUpgradeType):
        raise _Invalid("The controller does not support the given upgrade type.")
    current = 0 if name == features.KRAFT_VERSION else features.level(image.features, name)
    if level < 0:
        raise _Invalid("A feature version cannot be less than 0.")
    _check_supported(image, node_id, name, level)
    if level < current and kind == FeatureUpgradeType.UPGRADE:
        raise _Invalid("Can't downgrade the version of this feature without setting the upgrade type to either "
                       "safe or unsafe downgrade.")
    if level > current and kind != FeatureUpgradeType.UPGRADE:
        raise _Invalid("Can't downgrade to a newer version.")
    if name == features.KRAFT_VERSION:
        return None
    if name not in features.KAFKA_FEATURES:
        raise _Invalid(f"Feature {name} not found.")
    return FeatureLevelRecord(name, level)


def update_features(image: MetadataImage, node_id: int,
                    updates: Sequence[FeatureUpdate]) -> tuple[UpdateFeaturesResult, list[MetadataRecord]]:
    """Kafka's answer to ``updates`` and the records to write when it is a success (write them as one
    batch unless it is a dry run). ``node_id`` names this controller in the messages."""
    last: dict[str, FeatureUpdate] = {}
    for update in updates:
        last[update.feature] = update
    records: list[MetadataRecord] = []
    for update in last.values():
        try:
            record = _check_update(image, node_id, update)
        except _Invalid as exc:
            message = f"Invalid update version {update.max_version_level} for feature {update.feature}. {exc}"
            log.warning(message)
            return UpdateFeaturesResult(ErrorCode.INVALID_UPDATE_VERSION, FAILED_PREFIX + message), []
        if record is not None:
            records.append(record)
    return UpdateFeaturesResult(), records
