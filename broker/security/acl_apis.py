"""Handlers of DescribeAcls, CreateAcls, DeleteAcls, DescribeClientQuotas and
AlterClientQuotas. Reads come from this broker's metadata image; writes go to the active
controller (like CreateTopics) and are answered once committed to the metadata log."""

from __future__ import annotations

import logging

from broker.protocol.apis import ApiKey
from common.errors import ErrorCode, KafkaError
from metadata.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    to_enum,
)
from metadata.quota import ENTITY_TYPES as QUOTA_ENTITY_TYPES

LITERAL = int(PatternType.LITERAL)  # the pattern type of every ACL API's v0 (no pattern types yet)

log = logging.getLogger("krafty.apis.acl")

NO_AUTHORIZER = "No Authorizer is configured on the broker"
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def _filter(resource_type, name, pattern_type, principal, host, operation, permission) -> AclBindingFilter:
    return AclBindingFilter(to_enum(ResourceType, resource_type), name, to_enum(PatternType, pattern_type), principal,
                            host, to_enum(AclOperation, operation), to_enum(PermissionType, permission))


def _filter_error(f: AclBindingFilter) -> str | None:
    for v in (f.resource_type, f.pattern_type, f.operation, f.permission):
        if v.name == "UNKNOWN":
            return f"the filter has an unknown {type(v).__name__} code"
    return None


def _binding_dict(b: AclBinding) -> dict:
    return {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
            "pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": int(b.operation), "permission_type": int(b.permission)}


class AclApis:
    def __init__(self, apis):
        self.apis = apis  # KafkaApis: decode(), authorize(), authorizer, controller, image

    def handlers(self) -> dict:
        return {
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
        }

    def _cluster(self, ctx, op: AclOperation) -> bool:
        return self.apis.authorize(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)

    # --- ACLs ---------------------------------------------------------------------------------
    async def describe_acls(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        out = {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": []}
        authorizer = self.apis.authorizer
        if authorizer is None:
            out["error_code"], out["error_message"] = ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
            return out
        if not self._cluster(ctx, AclOperation.DESCRIBE):
            out["error_code"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return out
        f = _filter(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter if ver >= 1 else LITERAL,
                    req.principal_filter, req.host_filter, req.operation, req.permission_type)
        err = _filter_error(f)
        if err is not None:
            out["error_code"], out["error_message"] = ErrorCode.INVALID_REQUEST, err
            return out
        groups: dict[tuple, list] = {}
        for b in authorizer.acls(f):
            groups.setdefault((int(b.resource_type), b.resource_name, int(b.pattern_type)), []).append(
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)})
        out["resources"] = [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                            for (t, n, p), acls in sorted(groups.items())]
        return out

    async def create_acls(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        n = len(req.creations)
        if self.apis.authorizer is None:
            return {"throttle_time": 0, "results": [{"error_code": ErrorCode.SECURITY_DISABLED,
                                                     "error_message": NO_AUTHORIZER}] * n}
        if not self._cluster(ctx, AclOperation.ALTER):
            return {"throttle_time": 0, "results": [{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}] * n}
        bindings = [AclBinding(to_enum(ResourceType, c.resource_type), c.resource_name,
                               to_enum(PatternType, c.resource_pattern_type if ver >= 1 else LITERAL), c.principal,
                               c.host,
                               to_enum(AclOperation, c.operation), to_enum(PermissionType, c.permission_type))
                    for c in req.creations]
        try:
            results = await self.apis.controller.create_acls(bindings)
        except KafkaError as e:
            return {"throttle_time": 0, "results": [{"error_code": e.code, "error_message": e.message}] * n}
        return {"throttle_time": 0, "results": [{"error_code": code, "error_message": msg} for code, msg in results]}

    async def delete_acls(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        n = len(req.filters)

        def failed(code, msg=None):
            return {"throttle_time": 0, "filter_results": [{"error_code": code, "error_message": msg,
                                                            "matching_acls": []}] * n}
        if self.apis.authorizer is None:
            return failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        if not self._cluster(ctx, AclOperation.ALTER):
            return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        filters = [_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter if ver >= 1 else LITERAL,
                           f.principal_filter, f.host_filter, f.operation, f.permission_type) for f in req.filters]
        bad = {i: e for i, f in enumerate(filters) if (e := _filter_error(f)) is not None}
        good = [f for i, f in enumerate(filters) if i not in bad]
        try:
            results = iter(await self.apis.controller.delete_acls(good) if good else [])
        except KafkaError as e:
            return failed(e.code, e.message)
        out = []
        for i in range(n):
            if i in bad:
                out.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": bad[i], "matching_acls": []})
                continue
            code, msg, matched = next(results)
            out.append({"error_code": code, "error_message": msg,
                        "matching_acls": [{"error_code": 0, "error_message": None, **_binding_dict(b)}
                                          for b in matched]})
        return {"throttle_time": 0, "filter_results": out}

    # --- client quotas ------------------------------------------------------------------------
    async def describe_client_quotas(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)
        out = {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": []}
        if not self._cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
            out["error_code"], out["entries"] = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
            return out
        comps = {}
        for c in req.components:
            if c.entity_type not in QUOTA_ENTITY_TYPES:
                out["error_code"], out["entries"] = ErrorCode.INVALID_REQUEST, None
                out["error_message"] = f"unknown quota entity type {c.entity_type!r}"
                return out
            if c.entity_type in comps or c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
                out["error_code"], out["entries"] = ErrorCode.INVALID_REQUEST, None
                out["error_message"] = f"duplicate or invalid component for entity type {c.entity_type!r}"
                return out
            comps[c.entity_type] = (c.match_type, c.match)
        for entity, values in sorted(self.apis.image.client_quotas.items(), key=lambda kv: repr(kv[0])):
            ent = dict(entity)
            if req.strict and set(ent) != set(comps):
                continue
            ok = True
            for etype, (mtype, match) in comps.items():
                if etype not in ent:
                    ok = False
                elif mtype == MATCH_EXACT and ent[etype] != match:
                    ok = False
                elif mtype == MATCH_DEFAULT and ent[etype] is not None:
                    ok = False
            if ok:
                out["entries"].append({"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                                       "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
        return out

    async def alter_client_quotas(self, ctx, body, ver):
        req = self.apis.decode(ctx, body, ver)

        def entity_out(e):
            return [{"entity_type": x.entity_type, "entity_name": x.entity_name} for x in e.entity]
        if not self._cluster(ctx, AclOperation.ALTER_CONFIGS):
            return {"throttle_time": 0, "entries": [{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                     "entity": entity_out(e)} for e in req.entries]}
        alterations = [(tuple((x.entity_type, x.entity_name) for x in e.entity),
                        [(o.key, float(o.value), bool(o.remove)) for o in e.ops]) for e in req.entries]
        try:
            results = await self.apis.controller.alter_client_quotas(alterations, req.validate_only)
        except KafkaError as e:
            return {"throttle_time": 0, "entries": [{"error_code": e.code, "error_message": e.message,
                                                     "entity": entity_out(x)} for x in req.entries]}
        return {"throttle_time": 0, "entries": [{"error_code": code, "error_message": msg, "entity": entity_out(e)}
                                                for (code, msg), e in zip(results, req.entries, strict=True)]}
