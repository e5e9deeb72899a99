"""StandardAuthorizer's decisions with arbitrary principals (Kafka's StandardAuthorizerData rules),
and the controller's ACL validation/filters (controller/acls.py)."""

from __future__ import annotations

from odradek.broker.security.authorizer import StandardAuthorizer, parse_super_users
from odradek.controller.acls import create_acl_records, delete_acl_records
from odradek.protocol.acl_types import AclBinding, AclBindingFilter
from odradek.protocol.acl_types import AclOperation as Op
from odradek.protocol.acl_types import AclPermissionType as Perm
from odradek.protocol.acl_types import PatternType as Pat
from odradek.protocol.acl_types import ResourceType as Res

ALLOW, DENY = Perm.ALLOW, Perm.DENY
LIT, PRE = Pat.LITERAL, Pat.PREFIXED


def acl(name: str, op: Op, perm: Perm = ALLOW, principal: str = "User:alice", pattern: Pat = LIT,
        rtype: Res = Res.TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, **kw) -> StandardAuthorizer:
    a = StandardAuthorizer(**kw)
    a.load(acls)
    return a


def test_literal_prefixed_and_wildcard_resources() -> None:
    a = authorizer(acl("orders", Op.READ), acl("logs-", Op.WRITE, pattern=PRE),
                   acl("*", Op.DESCRIBE, principal="User:bob"))
    assert a.authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "orders")
    assert not a.authorize("User:alice", "1.2.3.4", Op.READ, Res.TOPIC, "orders2")
    assert a.authorize("User:alice", "1.2.3.4", Op.WRITE, Res.TOPIC, "logs-app")
    assert not a.authorize("User:alice", "1.2.3.4", Op.WRITE, Res.TOPIC, "logs")
    assert a.authorize("User:bob", "h", Op.DESCRIBE, Res.TOPIC, "anything")
    assert not a.authorize("User:bob", "h", Op.READ, Res.TOPIC, "anything")
    assert not a.authorize("User:alice", "h", Op.READ, Res.GROUP, "orders")  # another resource type


def test_implications_apply_to_allow_only() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS))
    assert a.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")
    assert a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not a.authorize("User:alice", "h", Op.WRITE, Res.TOPIC, "t")
    # A DENY READ does not deny DESCRIBE; a DENY ALL denies everything.
    b = authorizer(acl("t", Op.ALL), acl("t", Op.READ, DENY))
    assert not b.authorize("User:alice", "h", Op.READ, Res.TOPIC, "t")
    assert b.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")
    c = authorizer(acl("t", Op.READ), acl("t", Op.ALL, DENY, principal="User:*"))
    assert not c.authorize("User:alice", "h", Op.DESCRIBE, Res.TOPIC, "t")


def test_deny_overrides_allow_across_patterns_and_hosts() -> None:
    a = authorizer(acl("*", Op.READ), acl("secret-", Op.READ, DENY, pattern=PRE),
                   acl("t", Op.WRITE, host="10.0.0.1"), acl("t", Op.WRITE, DENY, host="10.0.0.2"))
    assert a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "public")
    assert not a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "secret-x")
    assert a.authorize("User:alice", "10.0.0.1", Op.WRITE, Res.TOPIC, "t")
    assert not a.authorize("User:alice", "10.0.0.2", Op.WRITE, Res.TOPIC, "t")
    assert not a.authorize("User:alice", "10.0.0.3", Op.WRITE, Res.TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    assert parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    a = authorizer(acl("t", Op.READ, DENY, principal="User:root"), super_users={"User:root"})
    assert a.authorize("User:root", "h", Op.READ, Res.TOPIC, "t")  # super users skip even DENY
    assert not a.authorize("User:alice", "h", Op.READ, Res.TOPIC, "other")  # default: denied
    b = authorizer(acl("t", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert b.authorize("User:alice", "h", Op.WRITE, Res.TOPIC, "no-acls-here")
    # An ACL applies to "t" (for bob): alice is denied, as in Kafka.
    assert not b.authorize("User:alice", "h", Op.READ, Res.TOPIC, "t")


def test_authorized_operations_and_by_resource_type() -> None:
    a = authorizer(acl("t", Op.WRITE), acl("kafka-cluster", Op.IDEMPOTENT_WRITE, rtype=Res.CLUSTER))
    assert a.authorized_operations("User:alice", "h", Res.TOPIC, "t") == (1 << Op.WRITE) | (1 << Op.DESCRIBE)
    assert a.authorized_operations("User:alice", "h", Res.CLUSTER, "kafka-cluster") == 1 << Op.IDEMPOTENT_WRITE
    assert a.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not a.authorize_by_resource_type("User:bob", "h", Op.WRITE, Res.TOPIC)
    b = authorizer(acl("t-", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY, pattern=PRE))
    assert not b.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    c = authorizer(acl("x", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert not c.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    # Exactly the operation or ALL; super users and allow.everyone.if.no.acl.found as for a resource
    # no ACL names (Kafka asks about "hardcode" first).
    assert authorizer(acl("x", Op.ALL)).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert not authorizer(acl("x", Op.READ)).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert authorizer(super_users={"User:root"}).authorize_by_resource_type("User:root", "h", Op.WRITE, Res.TOPIC)
    d = authorizer(acl("x", Op.WRITE, DENY), allow_everyone_if_no_acl_found=True)
    assert d.authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)


def test_controller_validation_dedup_and_delete_filters() -> None:
    good = acl("t", Op.READ)
    bad = [acl("", Op.READ), acl("t", Op.ANY), acl("t", Op.READ, Perm.ANY), acl("t", Op.READ, pattern=Pat.MATCH),
           acl("t", Op.READ, principal="alice"), acl("other", Op.ALTER, rtype=Res.CLUSTER),
           acl("t", Op.READ, rtype=Res.ANY)]
    results, records = create_acl_records({}, [good, good, *bad])
    assert [r.error_code for r in results] == [0, 0] + [42] * len(bad)
    assert len(records) == 1  # one record for the duplicate pair
    existing = {r.id: r for r in records}  # type: ignore[union-attr]
    existing.update({r.id: r for r in create_acl_records(existing, [acl("t-", Op.WRITE, pattern=PRE)])[1]})  # type: ignore[union-attr]
    match = AclBindingFilter(Res.TOPIC, "t-1", Pat.MATCH, None, None, Op.ANY, Perm.ANY)
    results2, removes = delete_acl_records(existing, [match, match])  # type: ignore[arg-type]
    assert [len(r.deleted) for r in results2] == [1, 1] and len(removes) == 1  # the PREFIXED one, removed once
    unknown = AclBindingFilter(Res.UNKNOWN, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    assert delete_acl_records(existing, [unknown])[0][0].error_code == 42  # type: ignore[arg-type]
