from __future__ import annotations

import pytest

import proxy.security.access as access_module
from proxy.decision.outcome import Caller
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType

ALICE = Caller("alice", 0, host="10.0.0.1")
ADMIN = Caller("admin", 0, host="10.0.0.1")


def allow(name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", operation,
                      AclPermission.ALLOW)


def test_without_the_authorizer_only_the_proxys_own_topics_are_refused() -> None:
    access = Access(frozenset({"quotas"}))
    refused = access.topic_refusal(ALICE, AclOperation.WRITE)
    assert access.guards_topics and refused("quotas") and not refused("orders") and not refused(None)
    assert access.allows(ALICE, AclOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster")
    assert not Access().guards_topics


def test_with_the_authorizer_a_topic_is_refused_unless_the_acls_allow_the_operation() -> None:
    authorizer = AclAuthorizer([allow("orders", AclOperation.WRITE)], super_users=["User:admin"])
    access = Access(frozenset({"quotas"}), authorizer)
    writes, reads = (access.topic_refusal(ALICE, operation) for operation in (AclOperation.WRITE, AclOperation.READ))
    assert not writes("orders") and reads("orders") and writes("payments")
    assert not writes(None), "a topic id the cluster does not know is the cluster's to answer"


def test_a_super_user_is_refused_the_proxys_own_topics_all_the_same() -> None:
    access = Access(frozenset({"quotas"}), AclAuthorizer(super_users=["User:admin"]))
    refused = access.topic_refusal(ADMIN, AclOperation.WRITE)
    assert refused("quotas") and not refused("orders")
    assert access.allows(ADMIN, AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    assert not access.allows(ALICE, AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")


def test_a_refusal_is_kept_for_its_principal_host_and_operation_and_judges_by_the_acls_in_force() -> None:
    authorizer = AclAuthorizer([allow("orders", AclOperation.WRITE)])
    access = Access(frozenset(), authorizer)
    writes = access.topic_refusal(ALICE, AclOperation.WRITE)
    assert access.topic_refusal(ALICE._replace(now_ms=5), AclOperation.WRITE) is writes, "made once, kept"
    elsewhere = access.topic_refusal(ALICE._replace(host="10.0.0.2"), AclOperation.WRITE)
    assert elsewhere is not writes and access.topic_refusal(ALICE, AclOperation.READ) is not writes
    assert not writes("orders")
    authorizer.replace([allow("payments", AclOperation.WRITE)])
    assert writes("orders") and not writes("payments"), "a kept refusal asks the ACLs of now"


def test_a_refusal_kept_for_one_user_is_not_another_users() -> None:
    access = Access(frozenset(), AclAuthorizer([allow("orders", AclOperation.WRITE)]))
    assert not access.topic_refusal(ALICE, AclOperation.WRITE)("orders")
    assert access.topic_refusal(ALICE._replace(user="mallory"), AclOperation.WRITE)("orders")


def test_a_request_found_allowed_is_allowed_again_for_its_principal_host_and_api_by_the_same_acls() -> None:
    authorizer = AclAuthorizer([allow("orders", AclOperation.READ)])
    access = Access(frozenset(), authorizer)
    judged: list[tuple[str, ...]] = []

    def reads(caller: Caller, topics: tuple[str, ...]) -> bool:
        judged.append(topics)
        refused = access.topic_refusal(caller, AclOperation.READ)
        return not any(map(refused, topics))

    asked = ("orders",)
    assert access.judged_once(ALICE, 1, asked, reads) and access.judged_once(ALICE._replace(now_ms=5), 1, asked, reads)
    assert judged == [asked], "judged once"
    assert not access.judged_once(ALICE._replace(user="mallory"), 1, asked, reads)
    assert access.judged_once(ALICE._replace(host="10.0.0.2"), 1, asked, reads) and len(judged) == 3, \
        "judged again from another host"
    assert access.judged_once(ALICE, 3, asked, reads) and len(judged) == 4, "judged again for another API"
    assert not access.judged_once(ALICE, 1, ("orders", "payments"), reads)
    authorizer.replace([allow("payments", AclOperation.READ)])
    assert not access.judged_once(ALICE, 1, asked, reads), "judged again once the ACLs change"
    without = Access(frozenset({"quotas"}))
    judged.clear()

    def not_reserved(caller: Caller, topics: tuple[str, ...]) -> bool:
        judged.append(topics)
        return not any(map(without.topic_refusal(caller, AclOperation.READ), topics))

    assert without.judged_once(ALICE, 1, asked, not_reserved) and without.judged_once(ALICE, 1, asked, not_reserved)
    assert len(judged) == 2, "nothing kept without the authorizer"


def test_the_requests_found_allowed_are_kept_up_to_so_many_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_module, "_KEPT_ALLOWANCES_BYTES", 4096)
    access = Access(frozenset(), AclAuthorizer(super_users=["User:alice"]))
    judged: list[tuple[str, ...]] = []

    def allowed(caller: Caller, topics: tuple[str, ...]) -> bool:
        judged.append(topics)
        return True

    for topic in range(100):
        assert access.judged_once(ALICE, 1, (f"orders-{topic}",), allowed)
        assert 0 < access._allowances_bytes <= 4096
    authorizer = access.authorizer
    assert authorizer is not None
    kept = ("orders-99",)
    assert access.judged_once(ALICE, 1, kept, allowed) and len(judged) == 100, "still kept"
    authorizer.replace([])
    assert access.judged_once(ALICE, 1, kept, allowed) and access.judged_once(ALICE, 1, kept, allowed)
    one = access._allowances_bytes
    assert judged[-1] == kept and len(judged) == 101, "judged once more, by the ACLs of now"
    authorizer.replace([])
    assert access.judged_once(ALICE, 1, kept, allowed) and access._allowances_bytes == one, \
        "those allowed by older ACLs forgotten, not counted"
    large = ("x" * (access_module._LARGEST_KEPT_ALLOWANCE // 4),)
    kept = access._allowances_bytes
    assert access.judged_once(ALICE, 1, large, allowed) and access._allowances_bytes == kept, "too large to keep"
    assert access.judged_once(ALICE, 1, large, allowed) and judged[-2:] == [large, large]
