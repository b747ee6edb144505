"""Kafka's ACL decisions at the proxy (``proxy.security.acls``), case by case as Kafka 4.3's ``StandardAuthorizer``
decides them (``StandardAuthorizerData``, and ``Authorizer.authorizeByResourceType``)."""

from __future__ import annotations

import pytest

from proxy.security import acls
from proxy.security.acls import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    java_host_address,
)

ALICE = ("User:alice", "10.0.0.1")
BOB = ("User:bob", "10.0.0.2")
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
READ, WRITE, DESCRIBE, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL


def acl(name: str, operation: AclOperation, permission: AclPermission = ALLOW, principal: str = "User:alice",
        pattern_type: PatternType = LITERAL, resource_type: ResourceType = TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern_type, principal, host, operation, permission)


def test_an_acl_covers_its_literal_name_its_prefix_and_the_wildcard() -> None:
    authorizer = AclAuthorizer([acl("orders", READ), acl("pay.", READ, pattern_type=PREFIXED),
                                acl("*", WRITE)])
    assert authorizer.authorize(ALICE, READ, TOPIC, "orders")
    assert not authorizer.authorize(ALICE, READ, TOPIC, "orders2")  # a literal name is not a prefix
    assert authorizer.authorize(ALICE, READ, TOPIC, "pay.in") and authorizer.authorize(ALICE, READ, TOPIC, "pay.")
    assert not authorizer.authorize(ALICE, READ, TOPIC, "pay")
    assert authorizer.authorize(ALICE, WRITE, TOPIC, "anything")
    assert not authorizer.authorize(ALICE, WRITE, GROUP, "anything")  # another type's resources
    assert not authorizer.authorize(ALICE, READ, TOPIC, "Orders")  # names are matched as they are written


def test_a_prefixed_star_is_a_prefix_and_no_wildcard() -> None:
    authorizer = AclAuthorizer([acl("*", READ, pattern_type=PREFIXED)])
    assert authorizer.authorize(ALICE, READ, TOPIC, "*orders")
    assert not authorizer.authorize(ALICE, READ, TOPIC, "orders")


def test_an_acl_applies_to_its_principal_or_everyone_and_to_its_host_or_every_host() -> None:
    authorizer = AclAuthorizer([acl("a", READ), acl("b", READ, principal="User:*"),
                                acl("c", READ, host="10.0.0.2", principal="User:bob")])
    assert authorizer.authorize(ALICE, READ, TOPIC, "a") and not authorizer.authorize(BOB, READ, TOPIC, "a")
    assert authorizer.authorize(ALICE, READ, TOPIC, "b") and authorizer.authorize(BOB, READ, TOPIC, "b")
    assert authorizer.authorize(BOB, READ, TOPIC, "c")
    assert not authorizer.authorize(("User:bob", "10.0.0.3"), READ, TOPIC, "c")


def test_an_allow_implies_describe_and_describe_configs_and_a_deny_only_what_it_names() -> None:
    authorizer = AclAuthorizer([
        *(acl(f"t-{operation.name}", operation) for operation in (READ, WRITE, AclOperation.DELETE,
                                                                   AclOperation.ALTER, AclOperation.CREATE)),
        acl("configs", AclOperation.ALTER_CONFIGS),
        acl("denied", READ, DENY), acl("denied", DESCRIBE)])
    implied = {operation.name for operation in (READ, WRITE, AclOperation.DELETE, AclOperation.ALTER)}
    assert {name[2:] for name in ("t-READ", "t-WRITE", "t-DELETE", "t-ALTER", "t-CREATE")
            if authorizer.authorize(ALICE, DESCRIBE, TOPIC, name)} == implied  # CREATE implies nothing
    assert authorizer.authorize(ALICE, AclOperation.DESCRIBE_CONFIGS, TOPIC, "configs")
    assert not authorizer.authorize(ALICE, WRITE, TOPIC, "t-READ")
    assert authorizer.authorize(ALICE, DESCRIBE, TOPIC, "denied") and not authorizer.authorize(ALICE, READ, TOPIC,
                                                                                             "denied")


def test_all_allows_and_denies_every_operation() -> None:
    authorizer = AclAuthorizer([acl("open", ALL), acl("shut", ALL, DENY), acl("shut", READ)])
    assert all(authorizer.authorize(ALICE, operation, TOPIC, "open") for operation in acls.SUPPORTED_OPERATIONS[TOPIC])
    assert not any(authorizer.authorize(ALICE, operation, TOPIC, "shut")
                   for operation in acls.SUPPORTED_OPERATIONS[TOPIC])


def test_a_deny_wins_whichever_pattern_carries_it() -> None:
    authorizer = AclAuthorizer([acl("pay.in", READ), acl("pay.", READ, DENY, pattern_type=PREFIXED),
                                acl("orders", READ), acl("*", READ, DENY, principal="User:*")])
    assert not authorizer.authorize(ALICE, READ, TOPIC, "pay.in")
    assert not authorizer.authorize(ALICE, READ, TOPIC, "orders")


def test_no_acl_on_a_resource_answers_as_allow_everyone_if_no_acl_found_says_and_any_acl_on_it_denies() -> None:
    for everyone in (False, True):
        authorizer = AclAuthorizer([acl("bobs", READ, principal="User:bob")], allow_everyone_if_no_acl_found=everyone)
        assert authorizer.authorize(ALICE, READ, TOPIC, "free") is everyone
        assert not authorizer.authorize(ALICE, READ, TOPIC, "bobs")  # another's ACL covers it: no longer free


def test_a_super_user_is_allowed_against_a_deny() -> None:
    authorizer = AclAuthorizer([acl("*", ALL, DENY, principal="User:*")], super_users=["User:alice"])
    assert authorizer.authorize(ALICE, WRITE, TOPIC, "t") and not authorizer.authorize(BOB, WRITE, TOPIC, "t")
    assert authorizer.authorize_by_resource_type(ALICE, WRITE, TOPIC)


@pytest.mark.parametrize(("granted", "expected"), [
    ([acl("t", WRITE)], True),
    ([acl("t", WRITE), acl("t", WRITE, DENY)], False),  # a literal deny takes back the same literal allow
    ([acl("t", WRITE), acl("t", WRITE, DENY, pattern_type=PREFIXED)], False),  # a prefix deny, every name it begins
    ([acl("ta", WRITE, pattern_type=PREFIXED), acl("tab", WRITE, DENY, pattern_type=PREFIXED)], True),
    ([acl("t", WRITE, pattern_type=PREFIXED), acl("t", WRITE, DENY)], True),  # a literal deny, no prefix allow
    ([acl("t", WRITE), acl("*", WRITE, DENY)], False),
    ([acl("*", WRITE)], True),
    ([acl("t", READ)], False),  # nothing implied
    ([acl("t", ALL)], True),
    ([acl("t", WRITE, principal="User:bob")], False),
    ([acl("t", WRITE, host="10.0.0.9")], False),
])
def test_a_write_on_some_topic_is_found_as_kafka_finds_it(granted: list[AclBinding], expected: bool) -> None:
    """``authorizeByResourceType(WRITE, TOPIC)``: how Kafka lets an idempotent producer without IDEMPOTENT_WRITE."""
    assert AclAuthorizer(granted).authorize_by_resource_type(ALICE, WRITE, TOPIC) is expected


def test_by_resource_type_no_acl_at_all_answers_as_allow_everyone_if_no_acl_found_says() -> None:
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(ALICE, WRITE, TOPIC)
    assert not AclAuthorizer().authorize_by_resource_type(ALICE, WRITE, TOPIC)


def test_authorized_operations_are_the_bits_of_what_is_allowed() -> None:
    authorizer = AclAuthorizer([acl("t", READ), acl("t", AclOperation.ALTER_CONFIGS)])
    expected = {READ, DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}
    assert authorizer.authorized_operations(ALICE, TOPIC, "t") == sum(1 << operation for operation in expected)
    assert authorizer.authorized_operations(ALICE, TOPIC, "other") == 0


def test_decisions_follow_a_change_of_the_acls() -> None:
    authorizer = AclAuthorizer([acl("t", READ)])
    assert authorizer.authorize(ALICE, READ, TOPIC, "t")
    authorizer.replace([acl("t", READ, DENY)])
    assert not authorizer.authorize(ALICE, READ, TOPIC, "t")


def test_decisions_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acls, "MAX_DECISIONS", 3)
    authorizer = AclAuthorizer([acl("*", READ)])
    for index in range(10):
        assert authorizer.authorize(ALICE, READ, TOPIC, f"t{index}")
        assert len(authorizer._decided) <= 3


def test_a_decision_on_a_name_longer_than_kafka_allows_is_made_each_time_not_kept() -> None:
    """A client names what it likes, up to a frame's size: such names would fill the decisions with megabytes."""
    authorizer = AclAuthorizer([acl("t", READ, pattern_type=PatternType.PREFIXED)])
    longest = "t" * acls.LONGEST_KEPT_NAME
    assert authorizer.authorize(ALICE, READ, TOPIC, longest) and len(authorizer._decided) == 1
    for _ in range(2):
        assert authorizer.authorize(ALICE, READ, TOPIC, longest + "t") and len(authorizer._decided) == 1
    assert not authorizer.authorize(ALICE, READ, TOPIC, "u" * 32_767) and len(authorizer._decided) == 1


@pytest.mark.parametrize(("binding", "reason"), [
    (acl("other", ALL, resource_type=CLUSTER), f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"),
    (acl("", READ), "Invalid empty resource name"),
    (acl("t", READ, resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl("t", READ, pattern_type=PatternType.MATCH), "Invalid patternType MATCH"),
    (acl("t", AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", READ, AclPermission.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (acl("t", READ, principal="alice"), "Could not parse principal from `alice` (no colon is present separating "
                                        "the principal type from the principal name)"),
    (acl(CLUSTER_NAME, AclOperation.ALTER, resource_type=CLUSTER), None),
])
def test_an_acl_kafka_would_not_create_is_refused_with_its_reason(binding: AclBinding, reason: str | None) -> None:
    assert binding.invalid_reason() == reason


def test_a_filter_matches_as_kafkas_acl_binding_filter() -> None:
    literal, prefixed, wildcard = acl("pay.in", READ), acl("pay.", READ, pattern_type=PREFIXED), acl("*", ALL)
    authorizer = AclAuthorizer([literal, prefixed, wildcard, acl("g", READ, resource_type=GROUP)])

    def matched(name: str | None, pattern_type: PatternType, operation: AclOperation = AclOperation.ANY,
                resource_type: ResourceType = TOPIC) -> list[AclBinding]:
        return authorizer.matching(AclFilter(resource_type, name, pattern_type, None, None, operation,
                                             AclPermission.ANY))

    assert matched("pay.in", PatternType.MATCH) == [literal, prefixed, wildcard]
    assert matched("pay.in", PatternType.ANY) == [literal]
    assert matched("pay.", PREFIXED) == [prefixed] and matched("pay.", LITERAL) == []
    assert matched(None, PatternType.ANY) == [literal, prefixed, wildcard]
    assert matched("*", PatternType.MATCH) == [wildcard]  # a filter's "*" is no wildcard
    assert matched(None, PatternType.ANY, ALL) == [wildcard]  # ALL is matched as it is
    assert len(matched(None, PatternType.ANY, resource_type=ResourceType.ANY)) == 4
    assert matched(None, PatternType.ANY, resource_type=ResourceType.UNKNOWN) == []


@pytest.mark.parametrize(("address", "java"), [
    ("10.0.0.1", "10.0.0.1"),
    ("::1", "0:0:0:0:0:0:0:1"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1"),
    ("::ffff:10.0.0.1", "10.0.0.1"),
    ("2001:db8::ab:c", "2001:db8:0:0:0:0:ab:c"),
])
def test_a_hosts_address_is_written_as_java_writes_it(address: str, java: str) -> None:
    assert java_host_address(address) == java
