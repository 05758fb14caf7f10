"""ACL and client-quota writes (Kafka's AclControlManager and ClientQuotaControlManager):
pure ``image -> (records, results)`` functions the quorum controller runs."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from common.errors import ErrorCode
from metadata import records as r
from metadata.acl import AclBinding, AclBindingFilter, binding_error
from metadata.image import MetadataImage
from metadata.quota import ENFORCED as QUOTA_ENFORCED
from metadata.quota import ENTITY_TYPES as QUOTA_ENTITY_TYPES
from metadata.quota import KEYS as QUOTA_KEYS
from metadata.quota import Entity

# (error code, message) per creation, in request order
CreateResult = tuple[ErrorCode, str | None]
# (error code, message, the bindings removed) per filter
DeleteResult = tuple[ErrorCode, str | None, list[AclBinding]]

MAX_ACLS = 100_000  # per cluster, to keep the authorizer's index and the image bounded


def _record(acl_id: uuid.UUID, b: AclBinding) -> r.AccessControlEntryRecord:
    return r.AccessControlEntryRecord(acl_id, int(b.resource_type), b.resource_name, int(b.pattern_type),
                                      b.principal, b.host, int(b.operation), int(b.permission))


def create_acls(image: MetadataImage, bindings: Sequence[AclBinding],
                new_uuid: Callable[[], uuid.UUID]) -> tuple[list[Any], list[CreateResult]]:
    """One record per new binding; a binding that already exists succeeds without a record."""
    existing = set(image.acls.values())
    records: list[Any] = []
    results: list[CreateResult] = []
    for b in bindings:
        err = binding_error(b)
        if err is not None:
            results.append((ErrorCode.INVALID_REQUEST, err))
            continue
        if b in existing:
            results.append((ErrorCode.NONE, None))
            continue
        if len(existing) >= MAX_ACLS:
            results.append((ErrorCode.POLICY_VIOLATION, f"the cluster already holds {MAX_ACLS} ACLs"))
            continue
        existing.add(b)
        records.append(_record(new_uuid(), b))
        results.append((ErrorCode.NONE, None))
    return records, results


def delete_acls(image: MetadataImage, filters: Sequence[AclBindingFilter]
                ) -> tuple[list[Any], list[DeleteResult]]:
    """Removes every binding a filter matches; a binding matched by several filters is
    removed once and reported under each (as Kafka does)."""
    removed: set[uuid.UUID] = set()
    records: list[Any] = []
    results: list[DeleteResult] = []
    for f in filters:
        matched = []
        for acl_id, b in image.acls.items():
            if f.matches(b):
                matched.append(b)
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(r.RemoveAccessControlEntryRecord(acl_id))
        results.append((ErrorCode.NONE, None, matched))
    return records, results


# --- client quotas ---------------------------------------------------------------------------
def quota_entity_error(entity: Entity) -> str | None:
    types = [t for t, _ in entity]
    if not entity:
        return "the quota entity is empty"
    if any(t not in QUOTA_ENTITY_TYPES for t in types):
        bad = next(t for t in types if t not in QUOTA_ENTITY_TYPES)
        return f"unknown quota entity type {bad!r} (expected user, client-id or ip)"
    if len(set(types)) != len(types):
        return "duplicate quota entity type"
    if "ip" in types and len(types) > 1:
        return "an ip quota entity cannot be combined with user or client-id"
    return None


def alter_client_quotas(image: MetadataImage, alterations: Sequence[tuple[Entity, Sequence[tuple[str, float, bool]]]]
                        ) -> tuple[list[Any], list[CreateResult]]:
    """alterations: (entity, [(key, value, remove)]); one result per alteration."""
    records: list[Any] = []
    results: list[CreateResult] = []
    for entity, ops in alterations:
        entity = tuple(sorted(entity, key=lambda e: (e[0], e[1] or "")))
        err = quota_entity_error(entity)
        if err is not None:
            results.append((ErrorCode.INVALID_REQUEST, err))
            continue
        types = {t for t, _ in entity}
        recs = []
        for key, value, remove in ops:
            allowed = QUOTA_KEYS.get(key)
            if allowed is None:
                err = f"unknown quota key {key!r}"
            elif key not in QUOTA_ENFORCED and not remove:
                err = (f"quota key {key!r} is not enforced by krafty (supported: "
                       f"{', '.join(sorted(QUOTA_ENFORCED))})")
            elif not types <= set(allowed):
                err = f"quota key {key!r} does not apply to entity types {sorted(types)}"
            elif not remove and (not math.isfinite(value) or value <= 0):
                err = f"invalid value {value} for quota key {key!r}: must be a positive number"
            if err is not None:
                break
            recs.append(r.ClientQuotaRecord(entity, key, 0.0 if remove else float(value), remove))
        if err is not None:
            results.append((ErrorCode.INVALID_REQUEST, err))
            continue
        records += recs
        results.append((ErrorCode.NONE, None))
    return records, results
