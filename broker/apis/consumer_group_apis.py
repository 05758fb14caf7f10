"""Handlers of the consumer group protocol (KIP-848): ConsumerGroupHeartbeat (0-1) and
ConsumerGroupDescribe (0-1). The group logic is the pure ConsumerGroup (broker/group/
consumer_group.py) inside the group's shard; a heartbeat that changes the group is answered
once its records are committed to ``__consumer_offsets``."""

from __future__ import annotations

import datetime
import logging

from broker.group.consumer_group import HeartbeatError, HeartbeatRequest
from broker.group.coordinator import GroupCoordinator
from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

log = logging.getLogger("krafty.apis.group")


def _ms(v) -> int:
    return int(v.total_seconds() * 1000) if isinstance(v, datetime.timedelta) else int(v)


def _invalid(req, ver: int) -> str | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: the message, or None."""
    if not req.group_id:
        return "GroupId can't be empty."
    if req.instance_id == "":
        return "InstanceId can't be empty."
    if req.rack_id == "":
        return "RackId can't be empty."
    epoch = req.member_epoch
    if epoch > 0 or epoch == -1:
        if not req.member_id:
            return "MemberId can't be empty."
    elif epoch == 0:
        if _ms(req.rebalance_timeout) == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.topic_partitions is None or len(req.topic_partitions):
            return "TopicPartitions must be empty when (re-)joining."
        regex = req.subscribed_topic_regex if ver >= 1 else None
        if not req.subscribed_topic_names and not regex:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch == -2:
        if not req.member_id:
            return "MemberId can't be empty."
        if req.instance_id is None:
            return "InstanceId can't be null."
    else:
        return "MemberEpoch is invalid."
    return None


class ConsumerGroupApis:
    def __init__(self, apis, coordinator: GroupCoordinator):
        self.apis = apis
        self.coordinator = coordinator

    def handlers(self) -> dict:
        return {ApiKey.CONSUMER_GROUP_HEARTBEAT: self.heartbeat, ApiKey.CONSUMER_GROUP_DESCRIBE: self.describe}

    @staticmethod
    def _error(code: int, message: str | None = None) -> dict:
        return {"throttle_time": 0, "error_code": int(code), "error_message": message, "member_id": None,
                "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}

    async def heartbeat(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        if "consumer" not in self.apis.config["group.coordinator.rebalance.protocols"]:
            return self._error(ErrorCode.UNSUPPORTED_VERSION, "The consumer group protocol is not enabled "
                                                              "(group.coordinator.rebalance.protocols).")
        if not self.apis.authorize(ctx, Op.READ, RT.GROUP, req.group_id):
            return self._error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        names = set(req.subscribed_topic_names or ())
        if names and not all(self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t) for t in sorted(names)):
            # clients may not learn about topics they cannot describe (Kafka's KafkaApis)
            return self._error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        msg = _invalid(req, ver)
        if msg is not None:
            log.info("ConsumerGroupHeartbeat of member %r of group %r refused: %s", req.member_id, req.group_id, msg)
            return self._error(ErrorCode.INVALID_REQUEST, msg)
        assignor = req.server_assignor
        if assignor is not None and assignor not in self.coordinator.consumer_config.assignors:
            return self._error(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                               f"Supported assignors: {', '.join(self.coordinator.consumer_config.assignors)}.")
        c = self.coordinator
        try:
            shard = c.shard_for(req.group_id)
        except KafkaError as e:
            return self._error(e.code)
        hr = HeartbeatRequest(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=_ms(req.rebalance_timeout),
            subscribed_topic_names=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
            subscribed_topic_regex=req.subscribed_topic_regex if ver >= 1 else None, server_assignor=assignor,
            owned=None if req.topic_partitions is None else [(tp.topic_id, list(tp.partitions))
                                                              for tp in req.topic_partitions],
            client_id=ctx.header.client_id or "", client_host="/" + (ctx.client_host or ""))
        try:
            resp, w, fx = shard.consumer_heartbeat(c.now(), hr, str(c.clock.uuid4()), wall=c.wall())
        except HeartbeatError as e:
            return self._error(e.code, e.message)
        written = c.write(shard.partition, w) if w is not None else None  # (appended now: before fx's writes)
        c.run(shard, fx)  # (and new deadlines: wakes the timer loop)
        if written is not None:
            err = await written
            if err:
                return self._error(err)
        a = resp["assignment"]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": resp["member_id"],
                "member_epoch": resp["member_epoch"], "heartbeat_interval": resp["heartbeat_interval_ms"],
                "assignment": None if a is None else {"topic_partitions": [
                    {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(a.items(), key=lambda kv: kv[0].bytes)
                    if ps]}}

    def _topics_describable(self, ctx, d: dict) -> bool:
        """Clients may not see topics they cannot describe (Kafka's handleConsumerGroupDescribe)."""
        if self.apis.authorizer is None:
            return True
        topics = {tp["topic_name"] for m in d["members"] for a in (m["assignment"], m["target_assignment"])
                  for tp in a["topic_partitions"]}
        return all(self.apis.authorize(ctx, Op.DESCRIBE, RT.TOPIC, t) for t in sorted(topics))

    async def describe(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        names = {t.topic_id: name for name, t in self.apis.image.topics_by_name.items()}
        default = self.coordinator.consumer_config.assignors[0]
        out = []
        for gid in req.group_ids:
            if not self.apis.authorize(ctx, Op.DESCRIBE, RT.GROUP, gid):
                d = {"error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED), "error_message": None,
                     "group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                     "assignor_name": "", "members": []}
            else:
                try:
                    d = self.coordinator.shard_for(gid).consumer_describe(gid, names, default)
                except KafkaError as e:
                    d = {"error_code": int(e.code), "error_message": None, "group_id": gid, "group_state": "",
                         "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}
                if not self._topics_describable(ctx, d):
                    d = {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "group_id": gid,
                         "error_message": "The group has described topic(s) that the client is not authorized "
                                          "to describe.", "group_state": "", "group_epoch": -1,
                         "assignment_epoch": -1, "assignor_name": "", "members": []}
            d["authorized_operations"] = (self.apis.authorized_operations(ctx, RT.GROUP, gid)
                                          if req.include_authorized_operations and not d["error_code"]
                                          else -2147483648)
            if ver < 1:
                for m in d["members"]:
                    m.pop("member_type", None)
            out.append(d)
        return {"throttle_time": 0, "groups": out}


__all__ = ["ConsumerGroupApis"]
