"""ACL bindings and filters to and from the controller RPC messages (proto/controller.proto)."""

from __future__ import annotations

from metadata.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    to_enum,
)


def acl_to_pb(b: AclBinding, m) -> None:
    m.resource_type, m.resource_name, m.pattern_type = int(b.resource_type), b.resource_name, int(b.pattern_type)
    m.principal, m.host, m.operation, m.permission_type = b.principal, b.host, int(b.operation), int(b.permission)


def binding_from_pb(m) -> AclBinding:
    return AclBinding(to_enum(ResourceType, m.resource_type), m.resource_name, to_enum(PatternType, m.pattern_type),
                      m.principal, m.host, to_enum(AclOperation, m.operation),
                      to_enum(PermissionType, m.permission_type))


def filter_to_pb(f: AclBindingFilter, m) -> None:
    m.resource_type, m.pattern_type = int(f.resource_type), int(f.pattern_type)
    m.operation, m.permission_type = int(f.operation), int(f.permission)
    if f.resource_name is not None:
        m.resource_name = f.resource_name
    if f.principal is not None:
        m.principal = f.principal
    if f.host is not None:
        m.host = f.host


def filter_from_pb(m) -> AclBindingFilter:
    return AclBindingFilter(
        to_enum(ResourceType, m.resource_type), m.resource_name if m.HasField("resource_name") else None,
        to_enum(PatternType, m.pattern_type), m.principal if m.HasField("principal") else None,
        m.host if m.HasField("host") else None, to_enum(AclOperation, m.operation),
        to_enum(PermissionType, m.permission_type))
