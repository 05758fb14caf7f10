"""Handlers of the topic and config admin APIs: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs."""

from __future__ import annotations

from typing import Any

from broker.apis.broker_config_apis import BROKER, BROKER_LOGGER, broker_key_synonyms
from broker.apis.broker_config_apis import config_str as _config_str
from broker.apis.broker_config_apis import config_type as _config_type
from broker.apis.group_config_apis import GROUP
from common.config import KEYS, TOPIC_KEYS
from common.dynamic_config import SOURCE_DEFAULT, SOURCE_TOPIC
from common.errors import ErrorCode, KafkaError
from common.topic_names import INTERNAL_TOPICS, RESERVED_TOPICS
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT
from metadata.controller_api import (
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    TOO_MANY_PARTITIONS,
    TOO_MANY_RECORDS,
    NewTopic,
    too_many_partitions,
)


class AdminApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py)."""

    # --- admin -------------------------------------------------------------------------------------
    async def create_topics(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        too_large = _too_large_create_topics(req.topics, self.config["num.partitions"])
        if too_large:  # refused whole before any work, as the controller would (metadata/controller_api.py)
            return {"throttle_time": 0, "topics": [{"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION,
                                                    "error_message": too_large} for t in req.topics]}
        new = []
        out = []
        # CREATE on the cluster allows every topic; otherwise CREATE on each topic is needed
        cluster_create = self.authorize_cluster(ctx, Op.CREATE)
        for t in req.topics:
            if t.name in RESERVED_TOPICS:  # Kafka's answer for __cluster_metadata, for every internal topic
                out.append({"name": t.name, "error_code": ErrorCode.INVALID_REQUEST,
                            "error_message": f"Creation of internal topic {t.name} is prohibited."})
                continue
            if not cluster_create and not self.authorize(ctx, Op.CREATE, RT.TOPIC, t.name):
                out.append({"name": t.name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Authorization failed."})
                continue
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            new.append(NewTopic(t.name, t.num_partitions, t.replication_factor, assignments,
                                {c.name: c.value for c in t.configs}))
        try:
            results = await self.controller.create_topics(new, req.validate_only if ver >= 1 else False) if new else []
        except KafkaError as e:
            return {"throttle_time": 0, "topics": out + [
                {"name": t.name, "error_code": e.code, "error_message": e.message} for t in new]}
        for res in results:
            entry: dict[str, Any] = {"name": res.name, "error_code": res.error, "error_message": res.message,
                                     "topic_id": res.topic_id, "num_partitions": res.num_partitions,
                                     "replication_factor": res.replication_factor}
            if res.error == ErrorCode.NONE and not self.authorize(ctx, Op.DESCRIBE_CONFIGS, RT.TOPIC, res.name):
                entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif res.error == ErrorCode.NONE:
                cfg = self._effective_topic_config(res.configs)
                entry["configs"] = [{"name": k, "value": v, "read_only": False,
                                     "config_source": 1 if k in res.configs else 5, "is_sensitive": False}
                                    for k, v in cfg]
            out.append(entry)
        return {"throttle_time": 0, "topics": out}

    async def delete_topics(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        if ver >= 6:
            names = [t.name for t in req.topics]
            ids = [t.topic_id if t.name is None else None for t in req.topics]
        else:
            names = list(req.topic_names)
            ids = [None] * len(names)
        if len(names) > MAX_RECORDS_PER_USER_OP:  # one record per topic: more cannot be one operation
            return {"throttle_time": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": ErrorCode.POLICY_VIOLATION, "error_message": TOO_MANY_RECORDS}
                for n, i in zip(names, ids, strict=True)]}
        if not self.config["delete.topic.enable"]:
            return {"throttle_time": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": ErrorCode.TOPIC_DELETION_DISABLED} for n, i in zip(names, ids,
                                                                                                          strict=True)]}
        denied = []
        if self.authorizer is not None:
            image = self.image
            keep_names, keep_ids = [], []
            for n, i in zip(names, ids, strict=True):
                name = n
                if n is None and i is not None:
                    t = image.topics_by_id.get(i)
                    name = t.name if t else None
                    if name is not None and not self.authorize(ctx, Op.DESCRIBE, RT.TOPIC, name):
                        denied.append({"name": None, "topic_id": i, "error_code": ErrorCode.UNKNOWN_TOPIC_ID})
                        continue
                if name is not None and not self.authorize(ctx, Op.DELETE, RT.TOPIC, name):
                    denied.append({"name": n, "topic_id": i, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                    continue
                keep_names.append(n)
                keep_ids.append(i)
            names, ids = keep_names, keep_ids
        keep_names, keep_ids = [], []
        for n, i in zip(names, ids, strict=True):
            t = self.image.topics_by_name.get(n) if n is not None else self.image.topics_by_id.get(i)
            if t is not None and t.name in INTERNAL_TOPICS:  # as Kafka's DeleteRecords on an internal topic
                denied.append({"name": t.name, "topic_id": i, "error_code": ErrorCode.INVALID_TOPIC_EXCEPTION,
                               "error_message": f"Cannot delete internal topic {t.name}"})
                continue
            keep_names.append(n)
            keep_ids.append(i)
        names, ids = keep_names, keep_ids
        try:
            recs_results = await self.controller.delete_topics(names, ids) if names else []
        except KafkaError as e:
            return {"throttle_time": 0, "responses": denied + [{"name": n, "topic_id": i, "error_code": e.code}
                                                               for n, i in zip(names, ids, strict=True)]}
        return {"throttle_time": 0, "responses": denied + [
            {"name": n, "topic_id": i, "error_code": code, "error_message": msg} for n, i, code, msg in recs_results]}

    async def create_partitions(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        image = self.image
        added = sum(max(0, t.count - len(image.topics_by_name[t.name].partitions)) for t in req.topics
                    if t.name in image.topics_by_name)
        too_large = (TOO_MANY_PARTITIONS if added > MAX_PARTITIONS_PER_BATCH else  # as Kafka (KAFKA-19673)
                     TOO_MANY_RECORDS if len(req.topics) > MAX_RECORDS_PER_USER_OP else None)
        if too_large:  # the request as a whole
            return {"throttle_time": 0, "results": [
                {"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION, "error_message": too_large}
                for t in req.topics]}
        results = []
        for t in req.topics:
            res = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(res)
            try:
                if not self.authorize(ctx, Op.ALTER, RT.TOPIC, t.name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if t.name in INTERNAL_TOPICS:  # e.g. __consumer_offsets: a group's partition is hash % count
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot change the number of partitions of internal topic {t.name}")
                assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                await self.controller.create_partitions(t.name, t.count, assignments, req.validate_only)
            except KafkaError as e:
                res["error_code"], res["error_message"] = e.code, e.message
        return {"throttle_time": 0, "results": results}

    def _effective_topic_config(self, overrides: dict[str, str]) -> list[tuple[str, str | None]]:
        out = []
        for k in sorted(TOPIC_KEYS):
            if k in overrides:
                out.append((k, overrides[k]))
            else:
                out.append((k, _config_str(self._topic_defaults.get(k))))
        return out

    async def describe_configs(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        synonyms = req.include_synonyms if ver >= 1 else False
        image = self.image
        results = []
        seen: set[tuple[int, str]] = set()
        for res in req.resources:
            entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                                     "resource_name": res.resource_name, "configs": []}
            results.append(entry)
            # Kafka's clients never repeat a resource (a map of them); a request that names the
            # broker 100,000 times in 1 MB would have the node build ~300 entries for each, a
            # response of gigabytes: the repeats are refused, without configs
            if (res.resource_type, res.resource_name) in seen:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
                entry["error_message"] = "Duplicate resource in the request"
                continue
            seen.add((res.resource_type, res.resource_name))
            wanted = set(res.configuration_keys) if res.configuration_keys else None
            if res.resource_type == 2 and not self.authorize(ctx, Op.DESCRIBE_CONFIGS, RT.TOPIC, res.resource_name):
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if res.resource_type in (BROKER, BROKER_LOGGER) and not self.authorize_cluster(ctx, Op.DESCRIBE_CONFIGS):
                entry["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                continue
            if res.resource_type == GROUP and not self.authorize(ctx, Op.DESCRIBE_CONFIGS, RT.GROUP, res.resource_name):
                entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            try:
                if res.resource_type == 2:
                    if res.resource_name not in image.topics_by_name:
                        entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        entry["error_message"] = f"Topic {res.resource_name} does not exist"
                        continue
                    entry["configs"] = self._describe_topic_configs(image.topic_config(res.resource_name), wanted,
                                                                    synonyms)
                elif res.resource_type == BROKER:
                    entry["configs"] = self.describe_broker_configs(res.resource_name, wanted, synonyms)
                elif res.resource_type == BROKER_LOGGER:
                    entry["configs"] = self.describe_broker_loggers(res.resource_name, wanted)
                elif res.resource_type == GROUP:
                    entry["configs"] = self.describe_group_configs(res.resource_name, wanted, synonyms)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}")
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
        if ver == 0:  # v0 has is_default where later versions have config_source
            for entry in results:
                for c in entry["configs"]:
                    c["is_default"] = c["config_source"] == SOURCE_DEFAULT
        return {"throttle_time": 0, "results": results}

    def _describe_topic_configs(self, overrides: dict[str, str], wanted: set[str] | None, synonyms: bool) -> list:
        """Kafka's createTopicConfigEntry: the topic's override, else the broker key that
        defaults it (dynamic for this broker, dynamic cluster default, static, built-in)."""
        out = []
        for k, v in self._effective_topic_config(overrides):
            if wanted is not None and k not in wanted:
                continue
            broker_key = _BROKER_KEY_OF.get(k)
            syn = [(k, v, SOURCE_TOPIC)] if k in overrides else []
            if broker_key:
                syn += broker_key_synonyms(self.config, broker_key)
            out.append({"name": k, "value": v, "read_only": False, "config_source": syn[0][2] if syn else SOURCE_DEFAULT,
                        "is_sensitive": False, "config_type": _config_type(TOPIC_KEYS[k]),
                        "synonyms": [{"name": n, "value": x, "source": s} for n, x, s in syn] if synonyms else []})
        return out

    async def incremental_alter_configs(self, ctx, body, ver):
        req = self.decode(ctx, body, ver)
        return await self._alter_configs(req, lambda res: [(c.name, c.config_operation, c.value) for c in res.configs],
                                         ctx)

    async def alter_configs(self, ctx, body, ver):
        """The legacy, non-incremental AlterConfigs replaces a resource's whole set of configs."""
        req = self.decode(ctx, body, ver)
        image = self.image

        def ops(res):
            new = {c.name: c.value for c in res.configs}
            if res.resource_type in (BROKER, GROUP):  # these paths add the deletions themselves
                return [(k, 0, v) for k, v in new.items()]
            return [(k, 1, None) for k in image.topic_config(res.resource_name) if k not in new] + [
                (k, 0, v) for k, v in new.items()]
        return await self._alter_configs(req, ops, ctx, legacy=True)

    async def _alter_configs(self, req, ops_of, ctx=None, *, legacy: bool = False) -> dict:
        out = []
        too_many = len(req.resources) > MAX_RECORDS_PER_USER_OP  # one record per config at least
        seen: dict[tuple[int, str], int] = {}
        for res in req.resources:
            seen[(res.resource_type, res.resource_name)] = seen.get((res.resource_type, res.resource_name), 0) + 1
        for res in req.resources:
            entry = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
                     "resource_name": res.resource_name}
            out.append(entry)
            try:
                if too_many or len(res.configs) > MAX_RECORDS_PER_USER_OP:
                    raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
                if res.resource_type in (BROKER, BROKER_LOGGER, GROUP) and seen[(res.resource_type, res.resource_name)] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
                if ctx is not None and res.resource_type == 2 and not self.authorize(
                        ctx, Op.ALTER_CONFIGS, RT.TOPIC, res.resource_name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if ctx is not None and res.resource_type in (BROKER, BROKER_LOGGER) and not self.authorize_cluster(
                        ctx, Op.ALTER_CONFIGS):
                    raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                if ctx is not None and res.resource_type == GROUP and not self.authorize(
                        ctx, Op.ALTER_CONFIGS, RT.GROUP, res.resource_name):
                    raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                if res.resource_type == BROKER:
                    await self.alter_broker_configs(res.resource_name, ops_of(res), req.validate_only, legacy=legacy)
                elif res.resource_type == BROKER_LOGGER and not legacy:
                    self.alter_broker_loggers(res.resource_name, ops_of(res), req.validate_only)
                elif res.resource_type == GROUP:
                    await self.alter_group_configs(res.resource_name, ops_of(res), req.validate_only, legacy=legacy)
                elif res.resource_type == 2:
                    await self.controller.alter_topic_configs(res.resource_name, ops_of(res), req.validate_only)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {res.resource_type}")
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
        return {"throttle_time": 0, "responses": out}


def _too_large_create_topics(topics, default_partitions: int) -> str | None:
    """Kafka's message if a CreateTopics cannot be one controller operation: more than
    MAX_PARTITIONS_PER_BATCH partitions in all (Kafka's check), or more topics than records."""
    if too_many_partitions(topics, default_partitions):
        return TOO_MANY_PARTITIONS
    return TOO_MANY_RECORDS if len(topics) > MAX_RECORDS_PER_USER_OP else None


_BROKER_KEY_OF = {k.topic_key: k.name for k in KEYS.values() if k.topic_key}  # topic key -> its broker key
