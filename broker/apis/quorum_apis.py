"""Cluster-level APIs about the cluster's own machinery: UpdateFeatures (finalized feature
levels) and DescribeQuorum (the metadata quorum as its leader sees it), forwarded to the
controllers as Kafka's brokers do, so `kafka-metadata-quorum --bootstrap-server` and
`krafty metadata-quorum --bootstrap-server` work. By composition: KafkaApis registers
``QuorumApis(self).handlers()``."""

from __future__ import annotations

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.features import SUPPORTED_FEATURES
from proto import raft_pb2 as pb_raft


class QuorumApis:
    def __init__(self, apis):
        self.apis = apis  # broker.apis.kafka_apis.KafkaApis: decode, authorize_cluster, controller

    def handlers(self) -> dict:
        return {ApiKey.UPDATE_FEATURES: self.update_features, ApiKey.DESCRIBE_QUORUM: self.describe_quorum,
                ApiKey.ADD_RAFT_VOTER: self.add_raft_voter, ApiKey.REMOVE_RAFT_VOTER: self.remove_raft_voter}

    async def add_raft_voter(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        lst = req.listeners[0] if req.listeners else None
        return await self._voter_change(ctx, req, pb_raft.AddVoterRequest(
            voter_id=req.voter_id, directory_id=_dir_id(req.voter_directory_id),
            host=lst.host if lst else "", port=lst.port if lst else 0), lst is None)

    async def remove_raft_voter(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        return await self._voter_change(ctx, req, pb_raft.RemoveVoterRequest(
            voter_id=req.voter_id, directory_id=_dir_id(req.voter_directory_id)), False)

    async def _voter_change(self, ctx, req, change, no_listener: bool) -> dict:
        """KIP-853 AddRaftVoter / RemoveRaftVoter through a broker: forwarded to the quorum's leader."""
        def answer(code, message=None):
            return {"throttle_time": 0, "error_code": code, "error_message": message}
        if not self.apis.authorize_cluster(ctx, Op.ALTER):
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        mine = self.apis.image.cluster_id
        if req.cluster_id and mine and req.cluster_id != mine:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID, f"the request is for cluster {req.cluster_id}, this is "
                          f"cluster {mine}")
        if no_listener:
            return answer(ErrorCode.INVALID_REQUEST, "the new voter has no listener")
        try:
            r = await self.apis.controller.change_voters(change)
        except KafkaError as e:
            return answer(e.code, e.message)
        return answer(r.error, r.error_message or None)

    async def describe_quorum(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if not self.apis.authorize_cluster(ctx, Op.DESCRIBE):
            return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "topics": [],
                    "nodes": []}
        topics = [(t.topic_name, [p.partition_index for p in t.partitions]) for t in req.topics]
        if topics != [(METADATA_TOPIC, [0])]:  # Kafka's answer to anything but __cluster_metadata-0
            return _partition_error(topics, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        try:
            q = await self.apis.controller.describe_quorum()
        except KafkaError as e:
            return _partition_error(topics, e.code, e.message)
        if q is None:
            return _partition_error(topics, ErrorCode.NOT_LEADER_OR_FOLLOWER, "the metadata quorum has no leader")

        def replica(r):
            return {"replica_id": r.replica_id, "replica_directory_id": None, "log_end_offset": r.log_end_offset,
                    "last_fetch_timestamp": r.last_fetch_timestamp,
                    "last_caught_up_timestamp": r.last_caught_up_timestamp}
        part = {"partition_index": 0, "error_code": 0, "error_message": None, "leader_id": q.leader_id,
                "leader_epoch": q.leader_epoch, "high_watermark": q.high_watermark,
                "current_voters": [replica(v) for v in q.voters], "observers": [replica(o) for o in q.observers]}
        listener = self.apis.config["controller.listener.names"][0]
        nodes = [{"node_id": vid, "listeners": [{"name": listener, "host": host, "port": port}]}
                 for vid, host, port in self.apis.config["controller.quorum.voters"]]
        return {"error_code": 0, "error_message": None, "nodes": nodes,
                "topics": [{"topic_name": METADATA_TOPIC, "partitions": [part]}]}

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


METADATA_TOPIC = "__cluster_metadata"


def _dir_id(u) -> str:
    """A directory id as Kafka prints Uuids (base64url, no padding), as meta.properties has it."""
    import base64

    return "" if u is None or u.int == 0 else base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _partition_error(topics, code: int, message: str | None) -> dict:
    return {"error_code": 0, "error_message": None, "nodes": [], "topics": [
        {"topic_name": name, "partitions": [
            {"partition_index": p, "error_code": code, "error_message": message, "leader_id": -1, "leader_epoch": -1,
             "high_watermark": -1, "current_voters": [], "observers": []} for p in parts]} for name, parts in topics]}


def supported_features() -> list[dict]:
    return [{"name": n, "min_version": lo, "max_version": hi} for n, (lo, hi) in sorted(SUPPORTED_FEATURES.items())]
