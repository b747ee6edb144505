"""The proxy's own login kept from clients where the cluster sees it for theirs: the delegation-token APIs answered
as Kafka 4.3 answers them with its tokens disabled (``KafkaApis.handleCreateTokenRequest`` and the others,
``DelegationTokenControlManager``), and its SCRAM credentials left unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import (
    DELEGATION_TOKEN_AUTH_DISABLED,
    DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
    INVALID_PRINCIPAL_TYPE,
    UNKNOWN_SERVER_ERROR,
)
from protocol.header import response_header_length
from proxy.decision.outcome import CLOSE, FORWARD, Caller
from proxy.handlers.own_login import DelegationTokensWithoutTokens, OwnCredentialsKept
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, handled

ALICE, ANONYMOUS = Caller("alice", 0), Caller("ANONYMOUS", 0)
ALICE_MAY_CREATE_BOBS = Access(authorizer=AclAuthorizer([AclBinding(
    ResourceType.USER, "User:bob", PatternType.LITERAL, "User:alice", "*", AclOperation.CREATE_TOKENS,
    AclPermission.ALLOW)]))


def answer(api_key: int, version: int, caller: Caller = ALICE, access: Access | None = None, logins: bool = True,
           **fields: Any) -> Any:
    handler = DelegationTokensWithoutTokens(access or Access(), logins)
    response = answered(handled(handler, memoryview(encode_request(api_key, version, **fields))[4:], caller)).response
    flexible = version >= 2
    return decode_response(api_key, version, response[4 + response_header_length(response[4:], flexible):])


def create(caller: Caller = ALICE, access: Access | None = None, logins: bool = True, version: int = 3,
           owner: tuple[str | None, str | None] = (None, None), renewers: tuple[tuple[str, str], ...] = ()) -> Any:
    owned = {} if version < 3 else {"owner_principal_type": owner[0], "owner_principal_name": owner[1]}
    return answer(Api.CREATE_DELEGATION_TOKEN, version, caller, access, logins, max_lifetime_ms=-1, **owned,
                  renewers=[{"principal_type": kind, "principal_name": name} for kind, name in renewers])


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_token_is_never_made_for_the_proxys_login_tokens_being_disabled(version: int) -> None:
    created = create(version=version)
    assert (created.error_code, created.principal_type, created.principal_name) == (
        DELEGATION_TOKEN_AUTH_DISABLED, "User", "alice")
    assert (created.token_id, created.hmac, created.issue_timestamp_ms, created.max_timestamp_ms) == ("", b"", 0, 0)
    if version >= 3:
        assert (created.token_requester_principal_type, created.token_requester_principal_name) == ("User", "alice")


@pytest.mark.parametrize(("api_key", "version"), [(Api.RENEW_DELEGATION_TOKEN, 1), (Api.RENEW_DELEGATION_TOKEN, 2),
                                                  (Api.EXPIRE_DELEGATION_TOKEN, 1), (Api.EXPIRE_DELEGATION_TOKEN, 2)])
def test_no_token_is_renewed_or_expired(api_key: int, version: int) -> None:
    period = "renew_period_ms" if api_key == Api.RENEW_DELEGATION_TOKEN else "expiry_time_period_ms"
    disabled = answer(api_key, version, hmac=b"made-up", **{period: 1000})
    assert (disabled.error_code, disabled.expiry_timestamp_ms) == (DELEGATION_TOKEN_AUTH_DISABLED, 0)
    refused = answer(api_key, version, ANONYMOUS, logins=False, hmac=b"made-up", **{period: 1000})
    assert (refused.error_code, refused.expiry_timestamp_ms) == (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)


def test_no_token_is_described_not_even_the_proxy_logins() -> None:
    for owners in (None, [{"principal_type": "User", "principal_name": "quota-proxy"}]):
        described = answer(Api.DESCRIBE_DELEGATION_TOKEN, 3, owners=owners)
        assert (described.error_code, described.tokens) == (DELEGATION_TOKEN_AUTH_DISABLED, [])
    assert answer(Api.DESCRIBE_DELEGATION_TOKEN, 3, ANONYMOUS, logins=False,
                  owners=None).error_code == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_without_sasl_kafka_takes_token_requests_only_from_a_client_certificates_principal() -> None:
    refused = create(ANONYMOUS, logins=False)
    assert (refused.error_code, refused.principal_name, refused.issue_timestamp_ms) == (
        DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "ANONYMOUS", -1)
    assert create(Caller("CN=alice", 0), logins=False).error_code == DELEGATION_TOKEN_AUTH_DISABLED


def test_a_token_for_another_owner_needs_create_tokens_on_that_user_before_anything_else_is_judged() -> None:
    bob, carol = ("User", "bob"), ("User", "carol")
    refused = create(access=ALICE_MAY_CREATE_BOBS, owner=carol, renewers=(("Group", "g"),))
    assert (refused.error_code, refused.principal_name, refused.token_requester_principal_name,
            refused.expiry_timestamp_ms) == (DELEGATION_TOKEN_AUTHORIZATION_FAILED, "carol", "alice", -1)
    assert create(access=ALICE_MAY_CREATE_BOBS, owner=bob).error_code == DELEGATION_TOKEN_AUTH_DISABLED
    assert create(access=ALICE_MAY_CREATE_BOBS, owner=("User", "alice")).error_code == DELEGATION_TOKEN_AUTH_DISABLED
    assert create(access=ALICE_MAY_CREATE_BOBS, owner=("", "")).error_code == DELEGATION_TOKEN_AUTH_DISABLED
    assert create(owner=carol).error_code == DELEGATION_TOKEN_AUTH_DISABLED, "no authorizer: Kafka's allows"
    assert create(ANONYMOUS, ALICE_MAY_CREATE_BOBS, logins=False,
                  owner=carol).error_code == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "the channel is judged first"


def test_a_renewer_that_is_not_a_user_is_refused_before_tokens_are_found_disabled() -> None:
    refused = create(renewers=(("User", "bob"), ("Group", "g")))
    assert (refused.error_code, refused.max_timestamp_ms) == (INVALID_PRINCIPAL_TYPE, -1)


def test_an_owner_of_no_type_fails_the_request_as_kafkas_principal_throws() -> None:
    failed = create(owner=(None, "bob"))
    assert (failed.error_code, failed.principal_name, failed.token_requester_principal_name) == (
        UNKNOWN_SERVER_ERROR, "ANONYMOUS", "ANONYMOUS")


def test_version_0_is_not_offered() -> None:
    handler = DelegationTokensWithoutTokens(Access(), logins=True)
    frame = memoryview(encode_request(Api.RENEW_DELEGATION_TOKEN, 1, hmac=b"x", renew_period_ms=1))[4:]
    zeroed = bytearray(frame)
    zeroed[2:4] = (0).to_bytes(2, "big")
    assert handled(handler, memoryview(bytes(zeroed)), ALICE) is CLOSE


def scram_changes(*deleted: str, upserted: tuple[str, ...] = ()) -> memoryview:
    return memoryview(encode_request(Api.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[
        {"name": name, "mechanism": 1} for name in deleted], upsertions=[
        {"name": name, "mechanism": 2, "iterations": 4096, "salt": b"s", "salted_password": b"p"}
        for name in upserted]))[4:]


def test_the_proxys_own_credentials_are_never_changed_anyone_elses_go_on() -> None:
    kept = OwnCredentialsKept("quota-proxy")
    assert handled(kept, scram_changes("nobody", upserted=("bob",)), ALICE) is FORWARD
    for request in (scram_changes("nobody", upserted=("quota-proxy",)), scram_changes("quota-proxy")):
        frame = answered(handled(kept, request, ALICE)).response
        refused = decode_response(Api.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                  frame[4 + response_header_length(frame[4:], True):])
        assert {result.error_code for result in refused.results} == {31}
        assert "quota-proxy" in {result.user for result in refused.results}
        assert all("proxy's own login" in result.error_message for result in refused.results)
