from __future__ import annotations

import logging

import pytest

from protocol.apis import Api
from protocol.header import read_request_header
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Forward
from proxy.handlers.authorization import (
    AUTHORIZED_APIS,
    JUDGED_BY_THEIR_HANDLERS,
    Coordinators,
    GroupFirst,
    SuperUsersOnly,
    judged_by_acls,
)
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer
from tests.support import encode_request
from tests.unit.proxy.outcomes import handled

FIND_COORDINATOR = memoryview(encode_request(Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g"]))[4:]
THROTTLED = Forward(throttle_ms=5)


class Throttling:
    def on_request(self, header: object, frame: memoryview, caller: Caller) -> Forward:
        return THROTTLED


def test_a_super_user_goes_on_to_the_apis_handler_and_anyone_else_is_closed_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    authorizer = AclAuthorizer(super_users=["User:admin"])
    header = read_request_header(FIND_COORDINATOR)
    logged: set[tuple[str, int]] = set()
    assert SuperUsersOnly(authorizer, Throttling(), logged).on_request(
        header, FIND_COORDINATOR, Caller("admin", 0)) is THROTTLED
    assert SuperUsersOnly(authorizer, None, logged).on_request(header, FIND_COORDINATOR, Caller("admin", 0)) is FORWARD
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert SuperUsersOnly(authorizer, Throttling(), logged).on_request(
                header, FIND_COORDINATOR, Caller("alice", 0, host="10.0.0.1")) is CLOSE
    assert [record.getMessage() for record in caplog.records] == [
        "closing a connection of User:alice from 10.0.0.1: the authorizer does not judge requests of api key 10 yet, "
        "so only super users may send them"]


def test_no_api_a_client_needs_before_it_can_ask_anything_is_kept_from_it() -> None:
    assert {Api.API_VERSIONS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE, Api.METADATA} <= AUTHORIZED_APIS


def test_with_the_authorizer_each_api_is_judged_as_kafka_judges_it_or_kept_for_super_users() -> None:
    authorizer = AclAuthorizer(super_users=["User:admin"])
    access = Access(authorizer=authorizer)
    topics = Throttling()
    with pytest.raises(AssertionError, match="no handler to judge them"):
        judged_by_acls({Api.OFFSET_COMMIT: topics}, access)
    judged, otherwise = judged_by_acls({**dict.fromkeys(JUDGED_BY_THEIR_HANDLERS, topics), Api.OFFSET_COMMIT: topics,
                                        Api.DESCRIBE_CONFIGS: topics}, access)
    assert set(judged) >= AUTHORIZED_APIS
    alice = Caller("alice", 0)
    assert judged[Api.PRODUCE] is topics and isinstance(judged[Api.OFFSET_COMMIT], GroupFirst)
    assert isinstance(judged[Api.FIND_COORDINATOR], Coordinators)
    versions = memoryview(encode_request(Api.API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    assert handled(judged[Api.API_VERSIONS], versions[4:], alice) is FORWARD, "Kafka authorizes no ApiVersions"
    assert handled(judged[Api.DESCRIBE_CONFIGS], FIND_COORDINATOR, alice) is CLOSE
    assert handled(judged[Api.DESCRIBE_CONFIGS], FIND_COORDINATOR, Caller("admin", 0)) is THROTTLED
    assert handled(otherwise, FIND_COORDINATOR, alice) is CLOSE
    fetch_by_id = memoryview(encode_request(Api.OFFSET_FETCH, 10, require_stable=False, groups=[]))[4:]
    assert handled(judged[Api.OFFSET_FETCH], fetch_by_id, alice) is CLOSE, "v10 names topics by id: not offered"
