from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from allocator.durable import WriteErrors
from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNKNOWN_SERVER_ERROR
from protocol.header import response_header_length
from proxy.decision.outcome import CLOSE, Caller, Decided
from proxy.handlers.acls import MAX_ACLS_PER_OPERATION, AclRequests
from proxy.security.access import Access
from proxy.security.acl_service import AclService, read_changes
from proxy.security.acls import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, handled

ADMIN, ALICE = Caller("admin", 0), Caller("alice", 0)
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
READ, WRITE, ALTER = AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY


def acl(name: str, operation: AclOperation = READ, principal: str = "User:alice", pattern: PatternType = LITERAL,
        resource_type: ResourceType = TOPIC, permission: AclPermission = ALLOW) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def creation(binding: AclBinding) -> dict[str, Any]:
    return {"resource_type": binding.resource_type, "resource_name": binding.name,
            "resource_pattern_type": binding.pattern_type, "principal": binding.principal, "host": binding.host,
            "operation": binding.operation, "permission_type": binding.permission}


def acl_filter(resource_type: int = ResourceType.ANY, name: str | None = None, pattern: int = PatternType.ANY,
               principal: str | None = None, operation: int = AclOperation.ANY,
               permission: int = AclPermission.ANY) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": None, "operation": operation, "permission_type": permission}


class Proxy:
    """An ``AclRequests`` over an ``AclService`` of ``file_acls`` (in an ACL file) and a state directory."""

    def __init__(self, tmp_path: Path, file_acls: str = "") -> None:
        acl_file = tmp_path / "acls.toml"
        acl_file.write_text(file_acls)
        self.state_dir = tmp_path / "state"
        self.service = AclService(acl_file, self.state_dir, WriteErrors(), super_users=["User:admin"])
        self.requests = AclRequests(self.service, Access(authorizer=self.service.authorizer))

    def ask(self, api_key: int, caller: Caller = ADMIN, version: int = 3, **fields: Any) -> Any:
        decided: Decided = handled(self.requests, memoryview(encode_request(api_key, version, **fields))[4:], caller)
        if isinstance(decided, Awaitable):
            decided = asyncio.run(_awaited(decided))
        if decided is CLOSE:
            return CLOSE
        frame = answered(decided).response[4:]
        return decode_response(api_key, version, frame[response_header_length(frame, flexible=version >= 2):])

    def create(self, *bindings: AclBinding, caller: Caller = ADMIN) -> list[tuple[int, str | None]]:
        answer = self.ask(Api.CREATE_ACLS, caller, creations=[creation(binding) for binding in bindings])
        return [(result.error_code, result.error_message) for result in answer.results]

    def described(self, caller: Caller = ADMIN, **filtered: Any) -> Any:
        return self.ask(Api.DESCRIBE_ACLS, caller, **acl_filter(**filtered))

    def deleted(self, *filters: dict[str, Any], caller: Caller = ADMIN) -> list[Any]:
        answer = self.ask(Api.DELETE_ACLS, caller, filters=list(filters))
        return [(result.error_code, result.error_message,
                 [(m.resource_name, m.principal, m.operation) for m in result.matching_acls])
                for result in answer.filter_results]


async def _awaited(decided: Awaitable[Any]) -> Any:
    return await decided


FILE_ACL = ('[[acl]]\nprincipal = "User:alice"\nresource-type = "topic"\nresource-name = "orders"\n'
            'operations = ["read"]\n')


def test_acls_created_are_in_force_described_by_pattern_and_kept_in_the_state_directory(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path, FILE_ACL)
    prefixed = acl("pay.", WRITE, pattern=PREFIXED)
    assert proxy.create(prefixed, prefixed, acl("orders")) == [(0, None)] * 3  # twice, or existing: created once
    requester = ("User:alice", "10.0.0.1")
    assert proxy.service.authorizer.authorize(requester, WRITE, TOPIC, "pay.in")
    described = proxy.described()
    assert described.error_code == 0
    assert [(r.resource_name, r.pattern_type, [(a.principal, a.operation) for a in r.acls])
            for r in described.resources] == [("orders", LITERAL, [("User:alice", READ)]),
                                              ("pay.", PREFIXED, [("User:alice", WRITE)])]
    assert read_changes(proxy.state_dir / "acls.json") == {prefixed: True, acl("orders"): True}
    again = Proxy(tmp_path, FILE_ACL)  # a restart: the file's and the API's
    assert set(again.service.authorizer.acls) == {acl("orders"), prefixed}


def test_a_filter_matches_as_kafkas_and_each_deletion_is_listed_under_each_filter_that_matched_it(
        tmp_path: Path) -> None:
    proxy = Proxy(tmp_path, FILE_ACL)
    proxy.create(acl("pay.", WRITE, pattern=PREFIXED), acl("*", READ, principal="User:bob"),
                 acl("g", READ, resource_type=GROUP))
    matched = proxy.described(name="pay.in", pattern=PatternType.MATCH)
    assert sorted(r.resource_name for r in matched.resources) == ["*", "pay."]
    assert proxy.described(name="pay.in", pattern=PatternType.ANY).resources == []
    assert [r.resource_name for r in proxy.described(resource_type=GROUP).resources] == ["g"]
    assert proxy.described(resource_type=99).resources == [], "a code Kafka does not know matches nothing"
    assert proxy.deleted(acl_filter(TOPIC, "pay.in", PatternType.MATCH, principal="User:alice"),
                         acl_filter(TOPIC, operation=WRITE), acl_filter(TOPIC, "nothing", LITERAL)) == [
        (0, None, [("pay.", "User:alice", WRITE)]),
        (0, None, [("pay.", "User:alice", WRITE)]),
        (0, None, [])]
    assert proxy.deleted(acl_filter(TOPIC, "orders", LITERAL)) == [(0, None, [("orders", "User:alice", READ)])]
    assert acl("orders") not in proxy.service.authorizer.acls, "a file's ACL deleted through the API"
    assert acl("orders") not in Proxy(tmp_path, FILE_ACL).service.authorizer.acls, "and so it stays"
    assert proxy.create(acl("orders")) == [(0, None)]
    assert acl("orders") in proxy.service.authorizer.acls
    assert read_changes(proxy.state_dir / "acls.json")[acl("orders")] is True


def test_unknown_codes_are_refused_as_kafka_refuses_them(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path)
    assert proxy.deleted(acl_filter(resource_type=99), acl_filter(operation=99)) == [
        (INVALID_REQUEST, "Unknown patternFilter.", []), (INVALID_REQUEST, "Unknown entryFilter.", [])]
    unknown_operation = {**creation(acl("t")), "operation": 99}
    assert proxy.ask(Api.CREATE_ACLS, creations=[unknown_operation]).results[0].error_message == \
        "Invalid operation UNKNOWN"
    assert proxy.create(acl("t", principal="alice"), acl(""), acl("x", resource_type=CLUSTER)) == [
        (INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present separating the principal "
                          "type from the principal name)"),
        (INVALID_REQUEST, "Invalid empty resource name"),
        (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster")]
    assert proxy.create(acl("t"), acl("u", pattern=PatternType.MATCH)) == [(UNKNOWN_SERVER_ERROR, None)] * 2
    assert proxy.service.authorizer.acls == (), "a request failed whole creates nothing"
    # an UNKNOWN code itself is refused by Kafka's parser: the connection is closed
    assert proxy.ask(Api.CREATE_ACLS, creations=[{**creation(acl("t")), "resource_type": 0}]) is CLOSE
    assert proxy.ask(Api.DESCRIBE_ACLS, **acl_filter(operation=0)) is CLOSE
    assert proxy.ask(Api.DELETE_ACLS, filters=[acl_filter(permission=0)]) is CLOSE
    assert proxy.ask(Api.DESCRIBE_ACLS, version=0, **acl_filter(pattern=LITERAL)) is CLOSE, "v0 is not served"


def test_only_a_principal_allowed_alter_or_describe_on_the_cluster_manages_acls(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path)
    assert proxy.create(acl("t"), caller=ALICE) == [(CLUSTER_AUTHORIZATION_FAILED,
                                                     "User:alice needs ALTER permission on the cluster.")]
    described = proxy.described(caller=ALICE)
    assert (described.error_code, described.resources) == (CLUSTER_AUTHORIZATION_FAILED, [])
    assert proxy.deleted(acl_filter(), caller=ALICE)[0][0] == CLUSTER_AUTHORIZATION_FAILED
    proxy.create(acl("kafka-cluster", AclOperation.DESCRIBE, resource_type=CLUSTER))
    assert proxy.described(caller=ALICE).error_code == 0
    assert proxy.create(acl("t"), caller=ALICE)[0][0] == CLUSTER_AUTHORIZATION_FAILED
    proxy.create(acl("kafka-cluster", ALTER, resource_type=CLUSTER))
    assert proxy.create(acl("t"), caller=ALICE) == [(0, None)]


def test_a_change_whose_save_fails_changes_nothing(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path, FILE_ACL)
    proxy.state_dir.mkdir()
    (proxy.state_dir / "acls.json").mkdir()  # cannot be replaced by a file
    [(code, message)] = proxy.create(acl("t"))
    assert code == UNKNOWN_SERVER_ERROR and message is not None and message.startswith("not applied:")
    [(code, _, matched)] = proxy.deleted(acl_filter())
    assert code == UNKNOWN_SERVER_ERROR and matched == []
    assert proxy.service.authorizer.acls == (acl("orders"),)


def test_more_deletions_than_kafka_takes_in_one_operation_fail_every_filter(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path)
    proxy.create(*(acl(f"t{i}") for i in range(MAX_ACLS_PER_OPERATION)))
    proxy.create(acl("one more"))
    [(code, message, matched)] = proxy.deleted(acl_filter())
    assert (code, matched) == (INVALID_REQUEST, []) and message is not None and "10000" in message
    assert len(proxy.service.authorizer.acls) == MAX_ACLS_PER_OPERATION + 1


@pytest.mark.parametrize("saved", ['{"acls": [{"principal": "User:a"}]}', "not json", '{"acls": {}}',
                                   '{"acls": [{"in-force": "yes"}]}'])
def test_saved_changes_that_cannot_be_read_stop_the_start_with_the_entry_named(tmp_path: Path, saved: str) -> None:
    from proxy.security.acl_file import AclFileError

    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "acls.json").write_text(saved)
    with pytest.raises(AclFileError, match="acls.json"):
        Proxy(tmp_path)


def test_more_new_acls_than_kafka_takes_in_one_operation_fail_the_creation_whole(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path)
    results = proxy.create(*(acl(f"t{i}") for i in range(MAX_ACLS_PER_OPERATION + 1)))
    assert {code for code, _ in results} == {UNKNOWN_SERVER_ERROR} and proxy.service.authorizer.acls == ()
    assert proxy.create(*(acl(f"t{i}") for i in range(MAX_ACLS_PER_OPERATION))) == [(0, None)] * MAX_ACLS_PER_OPERATION
