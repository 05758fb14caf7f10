"""Kafka's StandardAuthorizer: decides from the ACLs in the metadata image whether a
principal connecting from a host may perform an operation on a resource.

Rules (as in Kafka): super users may do everything; otherwise the ACLs whose resource
pattern covers the resource (LITERAL equal, LITERAL '*', PREFIXED prefixes of the name) are
consulted: a DENY for the operation (or ALL) wins over any ALLOW; an ALLOW of the operation,
of ALL or of an operation implying it (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS
implies DESCRIBE_CONFIGS) allows; principal ``User:*`` and host ``*`` match anyone. With
no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides.

The index is rebuilt when a metadata delta changes ACLs: per resource type a dict of
literal names and a dict of prefixes with the set of prefix lengths in use, so a check
costs a few dict lookups; decisions are cached per (principal, host, operation, resource)
until the ACLs change."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from common.config import ConfigError
from metadata.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    parse_principal,
)

log = logging.getLogger("krafty.authorizer")

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
_CACHE_MAX = 100_000

_DENY = PermissionType.DENY
_ALL = AclOperation.ALL


class _TypeIndex:
    """The ACLs of one resource type."""

    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        self.prefix_lengths: tuple[int, ...] = ()

    def matching(self, name: str) -> list[list[AclBinding]]:
        """The ACL lists whose pattern covers ``name``."""
        out = []
        lit = self.literal
        acls = lit.get(name)
        if acls:
            out.append(acls)
        if name != WILDCARD:
            acls = lit.get(WILDCARD)
            if acls:
                out.append(acls)
        if self.prefix_lengths:
            pre = self.prefixed
            n = len(name)
            for k in self.prefix_lengths:
                if k > n:
                    break
                acls = pre.get(name[:k])
                if acls:
                    out.append(acls)
        return out


class StandardAuthorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._acls: list[AclBinding] = []
        self._cache: dict[tuple, bool] = {}

    # --- loading ---------------------------------------------------------------------------
    def load(self, acls: Iterable[AclBinding]) -> None:
        index: dict[ResourceType, _TypeIndex] = {}
        all_acls = list(acls)
        for b in all_acls:
            ti = index.get(b.resource_type)
            if ti is None:
                ti = index[b.resource_type] = _TypeIndex()
            if b.pattern_type == PatternType.LITERAL:
                ti.literal.setdefault(b.resource_name, []).append(b)
            elif b.pattern_type == PatternType.PREFIXED:
                ti.prefixed.setdefault(b.resource_name, []).append(b)
        for ti in index.values():
            # DENY first inside each list, so a deny is found before scanning the allows
            for d in (ti.literal, ti.prefixed):
                for lst in d.values():
                    lst.sort(key=lambda b: b.permission != _DENY)
            ti.prefix_lengths = tuple(sorted({len(p) for p in ti.prefixed}))
        self._index, self._acls, self._cache = index, all_acls, {}

    def on_metadata(self, delta, image) -> None:
        """Metadata publisher: reindex when the ACLs changed."""
        if delta.acls or getattr(delta, "snapshot_loaded", False) or len(image.acls) != len(self._acls):
            self.load(image.acls.values())
            log.debug("authorizer loaded %d ACLs", len(self._acls))

    def acls(self, f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._acls if f.matches(b)]

    # --- decisions -------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        key = (principal, host, op, rtype, name)
        r = self._cache.get(key)
        if r is None:
            r = self._decide(principal, host, op, rtype, name)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = r
        return r

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        ti = self._index.get(rtype)
        lists = ti.matching(name) if ti is not None else []
        allowed = False
        for acls in lists:
            for a in acls:
                if a.principal != principal and a.principal != WILDCARD_PRINCIPAL:
                    continue
                if a.host != WILDCARD and a.host != host:
                    continue
                if a.permission == _DENY:
                    if a.operation == op or a.operation == _ALL:
                        return False
                elif not allowed and a.operation_allows(op):
                    allowed = True
        if allowed:
            return True
        return not lists and self.allow_if_no_acl

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        """Whether the principal may perform ``op`` on at least one resource of the type
        (KIP-679; Kafka's Authorizer.authorizeByResourceType)."""
        if self._decide(principal, host, op, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for b in self._acls:
            if b.resource_type != rtype:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.operation != op and b.operation != _ALL:
                continue
            if b.permission == _DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.resource_name == WILDCARD:
                        return False
                    deny_literal.add(b.resource_name)
                else:
                    deny_prefixed.add(b.resource_name)
            elif b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                return True
            else:
                allow.append((b.pattern_type, b.resource_name))
        for pt, name in allow:
            if pt == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:k] in deny_prefixed for k in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The bit field of Kafka's ``*_authorized_operations`` response fields."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits


def parse_super_users(raw: str) -> list[str]:
    """``super.users``: principals separated by semicolons (User:alice;User:bob)."""
    out = []
    for item in raw.split(";"):
        item = item.strip()
        if not item:
            continue
        try:
            parse_principal(item)
        except ValueError as e:
            raise ConfigError(f"invalid value {raw!r} for configuration key 'super.users': {e}") from None
        out.append(item)
    return out


def make_authorizer(config) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` names, or None when it is empty (no authorization)."""
    cls = (config["authorizer.class.name"] or "").strip()
    if not cls:
        return None
    if cls != STANDARD_AUTHORIZER:
        raise ConfigError(f"invalid value {cls!r} for configuration key 'authorizer.class.name': "
                          f"the only authorizer is {STANDARD_AUTHORIZER}")
    return StandardAuthorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])
