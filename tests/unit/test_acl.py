"""The ACL model and the StandardAuthorizer's decisions (pure, no broker)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.authorizer import StandardAuthorizer, make_authorizer, parse_super_users
from common.config import Config, ConfigError
from controller import acls as acl_ops
from metadata import records as r
from metadata.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from metadata.delta import image_from_records
from metadata.image import EMPTY

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation


def acl(name, op, perm=ALLOW, principal="User:alice", rtype=T, pattern=LIT, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authz(*acls, supers=(), allow_if_none=False):
    a = StandardAuthorizer(supers, allow_if_none)
    a.load(acls)
    return a


def test_literal_allow_only_that_topic_and_operation():
    a = authz(acl("orders", Op.READ))
    assert a.authorize("User:alice", "1.2.3.4", Op.READ, T, "orders")
    assert not a.authorize("User:alice", "1.2.3.4", Op.WRITE, T, "orders")
    assert not a.authorize("User:alice", "1.2.3.4", Op.READ, T, "orders2")
    assert not a.authorize("User:bob", "1.2.3.4", Op.READ, T, "orders")
    assert not a.authorize("User:alice", "1.2.3.4", Op.READ, G, "orders")


def test_implied_operations_only_for_allow():
    a = authz(acl("t", Op.WRITE), acl("t", Op.ALTER_CONFIGS))
    assert a.authorize("User:alice", "h", Op.DESCRIBE, T, "t")
    assert a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, T, "t")
    assert not a.authorize("User:alice", "h", Op.READ, T, "t")
    # a DENY of READ does not deny DESCRIBE (implication is for ALLOW only)
    b = authz(acl("t", Op.ALL), acl("t", Op.READ, DENY))
    assert b.authorize("User:alice", "h", Op.DESCRIBE, T, "t")
    assert not b.authorize("User:alice", "h", Op.READ, T, "t")


def test_all_operation_and_wildcards():
    a = authz(acl("*", Op.ALL, principal="User:*"))
    assert a.authorize("User:anyone", "h", Op.DELETE, T, "whatever")
    b = authz(acl("*", Op.READ, DENY, principal="User:*"), acl("x", Op.ALL))
    assert not b.authorize("User:alice", "h", Op.READ, T, "x")
    assert b.authorize("User:alice", "h", Op.WRITE, T, "x")


def test_prefixed_patterns():
    a = authz(acl("pay", Op.READ, pattern=PRE), acl("payments-secret", Op.READ, DENY))
    assert a.authorize("User:alice", "h", Op.READ, T, "pay")
    assert a.authorize("User:alice", "h", Op.READ, T, "payments")
    assert not a.authorize("User:alice", "h", Op.READ, T, "payments-secret")
    assert not a.authorize("User:alice", "h", Op.READ, T, "pa")
    assert not a.authorize("User:alice", "h", Op.READ, T, "xpay")


def test_host_must_match():
    a = authz(acl("t", Op.READ, host="10.0.0.1"))
    assert a.authorize("User:alice", "10.0.0.1", Op.READ, T, "t")
    assert not a.authorize("User:alice", "10.0.0.2", Op.READ, T, "t")


def test_super_users_bypass_deny():
    a = authz(acl("t", Op.ALL, DENY, principal="User:admin"), supers=["User:admin"])
    assert a.authorize("User:admin", "h", Op.WRITE, T, "t")


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls():
    a = authz(acl("guarded", Op.READ, principal="User:bob"), allow_if_none=True)
    assert a.authorize("User:alice", "h", Op.WRITE, T, "open")
    assert not a.authorize("User:alice", "h", Op.READ, T, "guarded")
    assert not authz(allow_if_none=False).authorize("User:alice", "h", Op.READ, T, "open")


def test_cache_is_dropped_when_acls_change():
    a = authz()
    assert not a.authorize("User:alice", "h", Op.READ, T, "t")
    a.load([acl("t", Op.READ)])
    assert a.authorize("User:alice", "h", Op.READ, T, "t")


def test_authorize_by_resource_type():
    assert authz(acl("t", Op.WRITE)).authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    assert not authz(acl("t", Op.READ)).authorize_by_resource_type("User:alice", "h", Op.WRITE, T)
    assert not authz(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)).authorize_by_resource_type(
        "User:alice", "h", Op.WRITE, T)
    assert not authz(acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)).authorize_by_resource_type(
        "User:alice", "h", Op.WRITE, T)
    assert authz(acl("ab", Op.WRITE, pattern=PRE), acl("abc", Op.WRITE, DENY, pattern=PRE)
                 ).authorize_by_resource_type("User:alice", "h", Op.WRITE, T)


def test_authorized_operations_bits():
    bits = authz(acl("t", Op.READ)).authorized_operations("User:alice", "h", T, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_filters_any_and_match():
    lit = acl("orders", Op.READ)
    star = acl("*", Op.READ)
    pre = acl("ord", Op.READ, pattern=PRE)
    other = acl("x", Op.READ)
    everything = [lit, star, pre, other]
    f = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert [b for b in everything if f.matches(b)] == [lit, star, pre]
    f = AclBindingFilter(T, "orders", PatternType.ANY)
    assert [b for b in everything if f.matches(b)] == [lit]
    assert all(AclBindingFilter().matches(b) for b in everything)
    assert [b for b in everything if AclBindingFilter(pattern_type=PRE).matches(b)] == [pre]
    assert not AclBindingFilter(G).matches(lit)
    assert not AclBindingFilter(principal="User:bob").matches(lit)


def test_super_users_config():
    assert parse_super_users("User:a; User:b;") == ["User:a", "User:b"]
    with pytest.raises(ConfigError, match="super.users"):
        parse_super_users("alice")
    cfg = Config({"node.id": "1", "authorizer.class.name": "com.example.Other"}, warn_unknown=False)
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        make_authorizer(cfg)
    assert make_authorizer(Config({"node.id": "1"})) is None


def test_controller_create_and_delete_acls_through_records():
    ids = iter(uuid.UUID(int=i) for i in range(1, 100))
    good = acl("t", Op.READ)
    bad = [acl("", Op.READ), acl("x", Op.READ, rtype=C), acl("t", Op.ANY), acl("t", Op.READ, principal="alice"),
           acl("t", Op.READ, pattern=PatternType.MATCH)]
    recs, results = acl_ops.create_acls(EMPTY, [good, good, *bad], new_uuid=lambda: next(ids))
    assert len(recs) == 1
    assert [code for code, _ in results] == [0, 0] + [42] * len(bad)
    img = image_from_records([r.decode(r.encode(x)) for x in recs])
    assert list(img.acls.values()) == [good]
    # snapshot round trip
    assert image_from_records(img.to_records()).acls == img.acls
    recs2, _ = acl_ops.create_acls(img, [good], new_uuid=lambda: next(ids))
    assert recs2 == []
    recs3, res3 = acl_ops.delete_acls(img, [AclBindingFilter(T, "t", PatternType.MATCH), AclBindingFilter()])
    assert len(recs3) == 1 and res3[0][2] == [good] and res3[1][2] == [good]
    assert image_from_records(recs3, base=img).acls == {}


def test_client_quota_records():
    ent = (("user", "alice"),)
    recs, res = acl_ops.alter_client_quotas(EMPTY, [(ent, [("producer_byte_rate", 1024.0, False)]),
                                                     ((("user", "a"),), [("bogus", 1.0, False)]),
                                                     ((("ip", None),), [("producer_byte_rate", 1.0, False)])])
    assert [c for c, _ in res] == [0, 42, 42]
    img = image_from_records([r.decode(r.encode(x)) for x in recs])
    assert img.client_quotas == {ent: {"producer_byte_rate": 1024.0}}
    recs, _ = acl_ops.alter_client_quotas(img, [(ent, [("producer_byte_rate", 0.0, True)])])
    assert image_from_records(recs, base=img).client_quotas == {}


def test_quota_keys_the_broker_does_not_enforce_are_refused():
    for key in ("request_percentage", "controller_mutation_rate"):
        recs, [(code, msg)] = acl_ops.alter_client_quotas(EMPTY, [((("user", "a"),), [(key, 10.0, False)])])
        assert recs == [] and code == 42 and key in msg and "producer_byte_rate" in msg
    recs, [(code, _)] = acl_ops.alter_client_quotas(EMPTY, [((("ip", "1.2.3.4"),),
                                                              [("connection_creation_rate", 5.0, False)])])
    assert recs == [] and code == 42
    recs, [(code, _)] = acl_ops.alter_client_quotas(EMPTY, [((("user", "a"),), [("consumer_byte_rate", 1e6, False)])])
    assert code == 0 and len(recs) == 1


# --- properties ----------------------------------------------------------------------------------
names = st.text(alphabet="ab*", min_size=1, max_size=4)
principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
ops = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.ALTER_CONFIGS,
                       Op.DESCRIBE_CONFIGS])
bindings = st.builds(AclBinding, st.just(T), names, st.sampled_from([LIT, PRE]), principals,
                     st.sampled_from(["*", "h1", "h2"]), ops, st.sampled_from([ALLOW, DENY]))


def _reference(acls, principal, host, op, name, allow_if_none):
    """The rule written out plainly, to check the indexed implementation against."""
    matching = [b for b in acls if b.resource_matches(T, name)]
    mine = [b for b in matching if b.principal in (principal, "User:*") and b.host in ("*", host)]
    if any(b.permission == DENY and b.operation_denies(op) for b in mine):
        return False
    if any(b.permission == ALLOW and b.operation_allows(op) for b in mine):
        return True
    return not matching and allow_if_none


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12), st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["h1", "h2"]),
       ops.filter(lambda o: o != Op.ALL), names, st.booleans())
def test_authorizer_agrees_with_the_plain_rule(acls, principal, host, op, name, allow_if_none):
    a = authz(*acls, allow_if_none=allow_if_none)
    assert a.authorize(principal, host, op, T, name) == _reference(acls, principal, host, op, name, allow_if_none)


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12), ops.filter(lambda o: o != Op.ALL), names, st.booleans())
def test_deny_always_wins(acls, op, name, allow_if_none):
    deny = acl(name, op, DENY, principal="User:alice")
    a = authz(*acls, deny, acl(name, Op.ALL), acl("*", op, principal="User:*"), allow_if_none=allow_if_none)
    assert not a.authorize("User:alice", "h1", op, T, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=12), names)
def test_wildcard_literal_and_prefix_cover_every_name(acls, name):
    acls = [b for b in acls if b.principal != "User:*"]  # other principals' ACLs must not matter
    a = authz(*acls, acl("*", Op.READ, principal="User:carol"), acl(name[:1], Op.WRITE, pattern=PRE,
                                                                     principal="User:carol"))
    assert a.authorize("User:carol", "h1", Op.READ, T, name)
    assert a.authorize("User:carol", "h1", Op.WRITE, T, name)
    assert a.authorize("User:carol", "h1", Op.DESCRIBE, T, name)
    assert not a.authorize("User:carol", "h1", Op.DELETE, T, name)
