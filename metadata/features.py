"""Feature levels: Kafka's ``metadata.version`` (MetadataVersion) and the other finalized
features a cluster runs at, and which levels this krafty supports. Pure."""

from __future__ import annotations

# metadata.version feature level -> (Kafka release name, whether the metadata changed at that
# level: a downgrade across such a level would lose metadata, as Kafka's didMetadataChange)
METADATA_VERSIONS: dict[int, tuple[str, bool]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True), 16: ("3.7-IV1", False),
    17: ("3.7-IV2", True), 18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False), 22: ("4.0-IV0", False), 23: ("4.0-IV1", True), 24: ("4.0-IV2", False),
    25: ("4.0-IV3", False),
}
MIN_METADATA_VERSION = 7  # 3.3-IV3: the oldest Kafka 4.0 runs at
LATEST_METADATA_VERSION = 25  # 4.0-IV3, Kafka 4.0's
JBOD_METADATA_VERSION = 17  # 3.7-IV2: a failed log dir takes only its replicas offline (KIP-858); below, the broker stops


def jbod_supported(features: dict[str, int]) -> bool:
    """Whether the finalized metadata.version handles log dir failures per replica (KIP-858)."""
    return features.get("metadata.version", LATEST_METADATA_VERSION) >= JBOD_METADATA_VERSION


def metadata_version_name(level: int | None) -> str:
    if level is None:
        return "unknown"
    return METADATA_VERSIONS.get(level, (f"level {level}", False))[0]


def metadata_version_level(name: str) -> int:
    """``4.0-IV3`` -> 25; a release without IV (``3.9``) is its last level; raises ValueError."""
    name = name.strip()
    for level, (n, _) in METADATA_VERSIONS.items():
        if n == name:
            return level
    matches = [level for level, (n, _) in METADATA_VERSIONS.items() if n.split("-")[0] == name]
    if matches:
        return max(matches)
    raise ValueError(f"unknown metadata.version {name!r} (known: {METADATA_VERSIONS[MIN_METADATA_VERSION][0]} to "
                     f"{METADATA_VERSIONS[LATEST_METADATA_VERSION][0]})")

# the features this krafty supports and their level ranges (ApiVersions' supported_features)
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "metadata.version": (MIN_METADATA_VERSION, LATEST_METADATA_VERSION),
    KRAFT_VERSION: (0, 1),  # 0: static quorum (controller.quorum.voters); 1: dynamic voters (KIP-853)
    # KIP-890: 1 writes flexible __transaction_state values; 2 also tells clients (ApiVersions'
    # finalized features) to use transaction version 2: an epoch bump on every EndTxn, partitions
    # added by their leaders (Produce v12), no AddPartitionsToTxn/AddOffsetsToTxn
    TRANSACTION_VERSION: (0, 2),
    # KIP-932: 1 serves share groups (ShareGroupHeartbeat, ShareFetch, ... answer UNSUPPORTED_VERSION at 0)
    SHARE_VERSION: (0, 1),
}
# Kafka's FeatureVersion.bootstrapMetadataVersion: a new cluster formatted at a metadata.version
# gets the latest level of each feature whose bootstrap metadata.version it reaches (release 4.0:
# transaction.version 2; 3.9: 0), as `kafka-storage format --release-version` does
BOOTSTRAP_METADATA_VERSION: dict[str, dict[int, int]] = {
    TRANSACTION_VERSION: {0: MIN_METADATA_VERSION, 1: 24, 2: 24},  # TV_1, TV_2: 4.0-IV2
    # share groups are on in a cluster formatted at krafty's latest release (Kafka 4.2 behaviour);
    # a cluster formatted before has share.version 0 until `krafty features upgrade --feature share.version=1`
    SHARE_VERSION: {0: MIN_METADATA_VERSION, 1: LATEST_METADATA_VERSION},
}


def default_feature_levels(metadata_level: int) -> dict[str, int]:
    """The levels a cluster formatted at ``metadata_level`` starts with, metadata.version aside."""
    return {name: max(lv for lv, mv in levels.items() if mv <= metadata_level)
            for name, levels in BOOTSTRAP_METADATA_VERSION.items()}


def level_name(feature: str, level: int) -> str:
    """How kafka-features.sh shows a level: metadata.version by its release name."""
    return metadata_version_name(level) if feature == "metadata.version" else str(level)


def metadata_changed_between(a: int, b: int) -> bool:
    """Kafka's MetadataVersion.checkIfMetadataChanged: did any level in (lower, higher] change
    the metadata format (a downgrade across it would lose information)?"""
    lo, hi = min(a, b), max(a, b)
    return any(METADATA_VERSIONS.get(level, ("", True))[1] for level in range(lo + 1, hi + 1))


def bootstrap_feature_records(metadata_level: int = LATEST_METADATA_VERSION,
                              levels: dict[str, int] | None = None) -> list:
    """The FeatureLevelRecords a new cluster starts with: ``metadata_level`` and the default level
    of every other feature for it, ``levels`` overriding them (``krafty storage format --feature``);
    a level of 0 is the feature off, not written."""
    from metadata import records as r

    chosen = default_feature_levels(metadata_level) | (levels or {})
    return [r.FeatureLevelRecord("metadata.version", metadata_level)] + [
        r.FeatureLevelRecord(name, level) for name, level in sorted(chosen.items()) if level > 0]
