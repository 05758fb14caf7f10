"""UpdateFeatures on the controller (Kafka's FeatureControlManager): finalized feature levels
change through FeatureLevelRecords, with Kafka's rules and messages. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from common.errors import ErrorCode, KafkaError
from metadata import records as r
from metadata.features import (
    METADATA_VERSIONS,
    MIN_METADATA_VERSION,
    SUPPORTED_FEATURES,
    metadata_changed_between,
)
from metadata.image import MetadataImage

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def update_features(image: MetadataImage, updates: Sequence[tuple[str, int, int]], node_id: int
                    ) -> list[r.FeatureLevelRecord]:
    """``updates``: (feature, new level, upgrade type). All or nothing: the first refused
    update fails the request (INVALID_UPDATE_VERSION)."""
    records = []
    for name, level, upgrade in updates:
        records.append(_update_one(image, name, level, upgrade, node_id))
    return records


def _invalid(name: str, level: int, why: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid update version {level} for feature {name}. {why}")


def _update_one(image: MetadataImage, name: str, level: int, upgrade: int, node_id: int) -> r.FeatureLevelRecord:
    if upgrade not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    current = image.features.get(name, 0)
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    supported = SUPPORTED_FEATURES.get(name)
    if supported is None:
        raise _invalid(name, level, f"Local controller {node_id} does not support this feature.")
    if not supported[0] <= level <= supported[1]:
        raise _invalid(name, level, f"Local controller {node_id} only supports versions {supported[0]}-{supported[1]}")
    if level < current and upgrade == UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without setting the upgrade type "
                       "to either safe or unsafe downgrade.")
    if level > current and upgrade != UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == "metadata.version":
        if level not in METADATA_VERSIONS:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. Unknown "
                             "metadata.version.")
        if level < MIN_METADATA_VERSION:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. Unable to set a "
                             f"metadata.version less than {METADATA_VERSIONS[MIN_METADATA_VERSION][0]}")
        if level < current and metadata_changed_between(level, current):
            why = ("Unsafe metadata downgrade is not supported in this version." if upgrade == UNSAFE_DOWNGRADE else
                   "Refusing to perform the requested downgrade because it might delete metadata information.")
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. {why}")
    elif name == "kraft.version":
        raise _invalid(name, level, "kraft.version follows the controller quorum: it changes when the quorum "
                       "becomes dynamic (KIP-853), not through UpdateFeatures.")
    return r.FeatureLevelRecord(name, level)
