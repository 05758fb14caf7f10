"""UpdateFeatures on the controller: Kafka's FeatureControlManager rules and messages."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode, KafkaError
from controller.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE, update_features
from metadata import records as r
from metadata.delta import image_from_records
from metadata.features import metadata_changed_between, metadata_version_level, metadata_version_name


def image(level: int):
    return image_from_records([r.FeatureLevelRecord("metadata.version", level)])


def refused(img, *update) -> str:
    with pytest.raises(KafkaError) as ei:
        update_features(img, [update], node_id=1)
    assert ei.value.code == ErrorCode.INVALID_UPDATE_VERSION
    return ei.value.message


def test_upgrade_and_safe_downgrade_write_feature_level_records():
    assert update_features(image(21), [("metadata.version", 25, UPGRADE)], 1) == [
        r.FeatureLevelRecord("metadata.version", 25)]
    # 3.9-IV0 (21) -> 3.8-IV0 (20): no metadata change in between, a safe downgrade
    assert update_features(image(21), [("metadata.version", 20, SAFE_DOWNGRADE)], 1) == [
        r.FeatureLevelRecord("metadata.version", 20)]


@pytest.mark.parametrize("current, update, words", [
    (21, ("metadata.version", 20, UPGRADE), "without setting the upgrade type to either safe or unsafe downgrade"),
    (21, ("metadata.version", 25, SAFE_DOWNGRADE), "Can't downgrade to a newer version."),
    (25, ("metadata.version", 21, SAFE_DOWNGRADE), "might delete metadata information"),
    (25, ("metadata.version", 21, UNSAFE_DOWNGRADE), "Unsafe metadata downgrade is not supported"),
    (21, ("metadata.version", 26, UPGRADE), "only supports versions 7-25"),
    (21, ("metadata.version", 0, SAFE_DOWNGRADE), "only supports versions 7-25"),
    (21, ("group.version", 1, UPGRADE), "Local controller 1 does not support this feature."),
    (21, ("metadata.version", -1, UPGRADE), "cannot be less than 0"),
    (21, ("metadata.version", 25, 9), "does not support the given upgrade type"),
    (21, ("kraft.version", 1, UPGRADE), "follows the controller quorum"),
])
def test_refusals(current, update, words):
    assert words in refused(image(current), *update)


def test_all_or_nothing():
    with pytest.raises(KafkaError):
        update_features(image(21), [("metadata.version", 25, UPGRADE), ("group.version", 1, UPGRADE)], 1)


def test_metadata_version_names():
    assert metadata_version_name(25) == "4.0-IV3" and metadata_version_level("4.0") == 25
    assert metadata_version_level("3.9-IV0") == 21 and metadata_version_level("3.3") == 7
    assert metadata_changed_between(25, 22) and not metadata_changed_between(21, 20)
    with pytest.raises(ValueError):
        metadata_version_level("5.0")
