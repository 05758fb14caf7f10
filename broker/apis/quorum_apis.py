"""Cluster-level APIs about the cluster's own machinery: UpdateFeatures (finalized feature
levels, forwarded to the controller as Kafka's brokers do). By composition: KafkaApis
registers ``QuorumApis(self).handlers()``."""

from __future__ import annotations

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.features import SUPPORTED_FEATURES


class QuorumApis:
    def __init__(self, apis):
        self.apis = apis  # broker.apis.kafka_apis.KafkaApis: decode, authorize_cluster, controller

    def handlers(self) -> dict:
        return {ApiKey.UPDATE_FEATURES: self.update_features}

    async def update_features(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        names = [u.feature for u in req.feature_updates]
        error, message = ErrorCode.NONE, None
        if not self.apis.authorize_cluster(ctx, Op.ALTER):
            error, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        elif len(set(names)) != len(names):
            error, message = ErrorCode.INVALID_REQUEST, "The request contains multiple updates of the same feature."
        else:
            updates = []
            for u in req.feature_updates:
                if ver == 0:  # v0: allow_downgrade; a level below 1 deletes the feature
                    upgrade = 2 if u.allow_downgrade else 1
                else:
                    upgrade = int(u.upgrade_type)
                updates.append((u.feature, max(int(u.max_version_level), 0), upgrade))
            try:
                await self.apis.controller.update_features(updates, bool(getattr(req, "validate_only", False)))
            except KafkaError as e:
                error, message = e.code, e.message
        out = {"throttle_time": 0, "error_code": error, "error_message": message}
        if ver <= 1:  # per-feature results (gone in v2), each with the request's outcome as Kafka gives them
            out["results"] = [] if error != ErrorCode.NONE else [
                {"feature": n, "error_code": 0, "error_message": None} for n in names]
        return out


def supported_features() -> list[dict]:
    return [{"name": n, "min_version": lo, "max_version": hi} for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())]
