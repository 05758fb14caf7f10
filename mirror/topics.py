"""MirrorSourceConnector's housekeeping for one flow: the offset-syncs topic, remote topics
created with the source's partition count and configs, partitions added when the source grows,
new matching topics picked up every ``refresh.topics.interval.seconds``, topic configs kept in
line every ``sync.topic.configs.interval.seconds`` and topic ACLs every
``sync.topic.acls.interval.seconds``. Decisions in ``mirror.plan``; this module calls the admins."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirror.clients import Admin, MirrorError
from mirror.config import FlowConfig
from mirror.plan import config_changes, creation_config, plan_topics
from mirror.policy import SourceTopics

log = logging.getLogger("krafty.mirror")


class TopicSync:
    def __init__(self, flow: FlowConfig, source: Admin, target: Admin, on_topics):
        self.flow = flow
        self.source, self.target = source, target
        self.on_topics = on_topics  # called with {source topic: remote topic} of topics on both sides
        self.selection = SourceTopics(flow.source, flow.target, flow.policy, flow.topic_filter,
                                      flow["heartbeats.replication.enabled"])
        self.replicated: dict[str, str] = {}
        self._acls_unsupported = False

    def create_offset_syncs_topic(self) -> None:
        if not self.flow["emit.offset-syncs.enabled"]:
            return
        where = self.source if self.flow["offset-syncs.topic.location"] == "source" else self.target
        where.ensure_compacted_topic(self.flow.policy.offset_syncs_topic(self.flow.target),
                                     self.flow["offset-syncs.topic.replication.factor"],
                                     f"{self.flow.name}.offset-syncs.topic.replication.factor")

    def refresh(self) -> dict[str, str]:
        """Create what the target lacks, and hand the replicated topics to the replicator."""
        source_topics = self.source.topics()
        target_topics = self.target.topics()
        plan = plan_topics(self.selection, source_topics, target_topics)
        if plan.create:
            configs = self.source.topic_configs(plan.create) if self.flow["sync.topic.configs.enabled"] else {}
            for topic, partitions in plan.create.items():
                remote = plan.replicated[topic]
                cfg = creation_config(configs.get(topic, []), self.flow.config_exclude, self.flow["use.defaults.from"])
                if self.target.create_topic(remote, partitions, self.flow["replication.factor"], cfg,
                                            f"{self.flow.name}.replication.factor"):
                    log.info("flow %s: created remote topic %s with %d partitions", self.flow.name, remote, partitions)
                target_topics[remote] = partitions
        for remote, partitions in plan.grow.items():
            self.target.grow(remote, partitions)
            log.info("flow %s: increased %s to %d partitions", self.flow.name, remote, partitions)
            target_topics[remote] = partitions
        self.replicated = {t: r for t, r in plan.replicated.items() if r in target_topics}
        self.on_topics(dict(self.replicated))
        return self.replicated

    def sync_configs(self) -> int:
        """Brings the remote topics' configs in line; returns how many topics changed."""
        if not self.replicated:
            return 0
        src = self.source.topic_configs(self.replicated)
        tgt = self.target.topic_configs(self.replicated.values())
        changes = {}
        for topic, entries in src.items():
            remote = self.replicated[topic]
            if remote not in tgt:
                continue
            ops = config_changes(entries, tgt[remote], self.flow.config_exclude, self.flow["use.defaults.from"])
            if ops:
                changes[remote] = ops
        if changes:
            log.info("flow %s: syncing topic configs of %s", self.flow.name, ", ".join(sorted(changes)))
            self.target.alter_topic_configs(changes)
        return len(changes)

    def sync_acls(self) -> None:
        """MirrorSourceConnector.syncTopicAcls: literal topic ACLs of replicated topics, for the
        remote topic; ALLOW ALL becomes ALLOW READ, and ALLOW WRITE is not copied (only the mirror
        writes remote topics)."""
        if self._acls_unsupported or not self.replicated:
            return
        flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        try:
            bindings = self.source.client.describe_acls(flt, request_timeout=self.source.timeout).result(
                self.source.timeout)
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.SECURITY_DISABLED:
                log.info("flow %s: no authorizer on %s: topic ACLs are not synced", self.flow.name, self.flow.source)
                self._acls_unsupported = True
                return
            raise MirrorError(f"cluster {self.flow.source}: cannot describe ACLs: {err.name()}: {err.str()}") from None
        out = []
        for b in bindings:
            if b.name not in self.replicated:
                continue
            if b.permission_type == AclPermissionType.ALLOW and b.operation == AclOperation.WRITE:
                continue
            op = (AclOperation.READ if b.permission_type == AclPermissionType.ALLOW and b.operation == AclOperation.ALL
                  else b.operation)
            out.append(AclBinding(ResourceType.TOPIC, self.replicated[b.name], ResourcePatternType.LITERAL,
                                  b.principal, b.host, op, b.permission_type))
        if out:
            for fut in self.target.client.create_acls(out, request_timeout=self.target.timeout).values():
                try:
                    fut.result(self.target.timeout)
                except KafkaException as e:
                    log.warning("flow %s: could not copy an ACL to %s: %s", self.flow.name, self.flow.target,
                                e.args[0].str())
