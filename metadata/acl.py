"""Kafka's ACL model: resource patterns, access control entries, bindings and filters.

The codes are Kafka's wire values (org.apache.kafka.common.acl / resource), so requests
and records carry them unchanged. Pure: the controller validates and matches with it, the
broker's authorizer (broker/security/authorizer.py) indexes the image's bindings."""

from __future__ import annotations

import dataclasses
import enum


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a LITERAL resource name matching every name; also the any-host / User:* principal
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

# An ALLOW of one of these operations also allows DESCRIBE (resp. DESCRIBE_CONFIGS), as in Kafka.
IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.ALTER_CONFIGS})

# The operations that apply to each resource type (Kafka's AclEntry.supportedOperations),
# used for the authorized-operations bit fields of Metadata, DescribeCluster, DescribeGroups.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclasses.dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) on
    which resources (type, name, pattern type)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def resource_matches(self, rtype: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the concrete resource ``rtype:name``."""
        if self.resource_type != rtype:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return False

    def operation_allows(self, op: AclOperation) -> bool:
        """Whether, as an ALLOW, this binding permits ``op`` (ALL and implied operations included)."""
        a = self.operation
        return (a == op or a == AclOperation.ALL
                or (op == AclOperation.DESCRIBE and a in IMPLIES_DESCRIBE)
                or (op == AclOperation.DESCRIBE_CONFIGS and a in IMPLIES_DESCRIBE_CONFIGS))

    def operation_denies(self, op: AclOperation) -> bool:
        """Whether, as a DENY, this binding forbids ``op``: only the operation itself or ALL
        (a DENY of READ does not deny DESCRIBE), as in Kafka."""
        return self.operation == op or self.operation == AclOperation.ALL


@dataclasses.dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter of DescribeAcls / DeleteAcls. ``None`` name/principal/host match anything;
    ANY matches any code; pattern type MATCH matches the patterns that would apply to the
    named resource (literal equal, literal '*', prefixes of the name)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        if self.permission != PermissionType.ANY and self.permission != b.permission:
            return False
        pt, name = self.pattern_type, self.resource_name
        if pt == PatternType.MATCH:
            if name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name == name or b.resource_name == WILDCARD
            return b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name)
        if pt != PatternType.ANY and pt != b.pattern_type:
            return False
        return name is None or name == b.resource_name


def parse_principal(s: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name); raises ValueError like Kafka's KafkaPrincipal.fromString."""
    if not isinstance(s, str):
        raise ValueError("principal must be a string")
    ptype, sep, name = s.partition(":")
    if not sep or not ptype or not name:
        raise ValueError(f"principal {s!r} is not of the form Type:name (e.g. User:alice)")
    return ptype, name


def binding_error(b: AclBinding) -> str | None:
    """Why a binding may not be created (Kafka's AclApis/AclControlManager checks), or None."""
    if b.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return f"Invalid resourceType {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type.name}"
    if b.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {b.operation.name}"
    if b.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {b.permission.name}"
    if not b.resource_name:
        return "Invalid empty resource name specified"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    try:
        parse_principal(b.principal)
    except ValueError as e:
        return str(e)
    if b.host is None or b.host == "":
        return "host must be '*' or an address"
    return None


def to_enum(enum_cls, value: int):
    """A wire code as the enum member, UNKNOWN for codes this version does not know."""
    try:
        return enum_cls(value)
    except ValueError:
        return enum_cls.UNKNOWN
