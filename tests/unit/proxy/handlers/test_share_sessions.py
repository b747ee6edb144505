"""With the authorizer, a share session's topics judged at every ShareFetch, as Kafka judges them
(``handleShareFetchRequest`` authorizes the session's partitions, not only those a request names): a session holding a
topic the ACLs no longer allow, or one the proxy does not know, is ended with SHARE_SESSION_NOT_FOUND, and the client
opens a new one, judged whole. What the proxy remembers of a session holds at least what the cluster's holds."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any

from protocol.apis import Api, is_flexible_response
from protocol.codecs import decode_response, encode_response
from protocol.errors import INVALID_REQUEST, SHARE_SESSION_NOT_FOUND
from protocol.header import encode_response_header, response_header_length
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import Caller, Forward
from proxy.handlers.refused_topics import ShareSessions, ShareTopicsWithoutRefused
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, handled

ORDERS, CLICKS, UNNAMED = uuid.UUID(int=7), uuid.UUID(int=8), uuid.UUID(int=9)


def reads(*topics: str) -> list[AclBinding]:
    return [AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", AclOperation.READ,
                       AclPermission.ALLOW) for topic in topics for principal in ("User:alice", "User:bob")]


def judge(authorizer: AclAuthorizer, sessions: ShareSessions | None = None) -> ShareTopicsWithoutRefused:
    async def unreachable(topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        raise OSError("the cluster cannot be asked")

    names = TopicNames(unreachable)
    names.learn(ORDERS.bytes, "orders")
    names.learn(CLICKS.bytes, "clicks")
    handler = ShareTopicsWithoutRefused(Access(authorizer=authorizer), names)
    if sessions is not None:
        handler._sessions = sessions
    return handler


def share_fetch(epoch: int, *topics: uuid.UUID, member: str = "m", forgotten: Iterable[uuid.UUID] = (),
                acknowledged: bool = False) -> memoryview:
    batches = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}] if acknowledged else []
    return memoryview(encode_request(
        Api.SHARE_FETCH, 1, group_id="g", member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=0,
        max_bytes=1 << 20, max_records=100, batch_size=100,
        topics=[{"topic_id": topic, "partitions": [{"partition_index": 0, "acknowledgement_batches": batches}]}
                for topic in topics],
        forgotten_topics_data=[{"topic_id": topic, "partitions": [0]} for topic in forgotten]))[4:]


def cluster_answer(error_code: int) -> memoryview:
    return memoryview(encode_response_header(1, True) + encode_response(Api.SHARE_FETCH, 1, {
        "throttle_time_ms": 0, "error_code": error_code, "error_message": None, "acquisition_lock_timeout_ms": 0,
        "responses": [], "node_endpoints": []}))


def sent(handler: ShareTopicsWithoutRefused, request: memoryview, user: str = "alice",
         broker: str = "b1:9092") -> object:
    """The decision on a ShareFetch (the cluster's answer, if it is forwarded, is given apart: ``answer``)."""
    outcome = handled(handler, request, Caller(user, 0, broker=broker, clock=lambda: 0))
    return asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome  # type: ignore[arg-type]


def answer(decided: object, error_code: int = 0) -> None:
    """The cluster answers a forwarded ShareFetch."""
    assert isinstance(decided, Forward), decided
    charge = decided.on_response.charge if decided.on_response is not None else None
    if charge is not None:
        frame = cluster_answer(error_code)
        charge(frame, len(frame))


def exchanged(handler: ShareTopicsWithoutRefused, request: memoryview, error_code: int = 0,
              broker: str = "b1:9092") -> Forward:
    decided = sent(handler, request, broker=broker)
    answer(decided, error_code)
    assert isinstance(decided, Forward)
    return decided


def answer_of(decided: object) -> Any:
    frame = answered(decided).response[4:]  # type: ignore[arg-type]
    return decode_response(Api.SHARE_FETCH, 1, frame[response_header_length(
        frame, flexible=is_flexible_response(Api.SHARE_FETCH, 1)):])


def ended(decided: object) -> bool:
    ending = answer_of(decided)
    return (ending.error_code, ending.responses) == (SHARE_SESSION_NOT_FOUND, [])


def test_a_session_holding_a_topic_no_longer_allowed_is_ended_and_the_new_one_refuses_it() -> None:
    authorizer = AclAuthorizer(reads("orders", "clicks"))
    handler = judge(authorizer)
    assert exchanged(handler, share_fetch(0, ORDERS, CLICKS)).replacement is None
    exchanged(handler, share_fetch(1))  # the session goes on, its topics allowed
    authorizer.replace(reads("orders"))
    assert ended(sent(handler, share_fetch(2)))
    assert ended(sent(handler, share_fetch(2, member="m"), user="bob")), "not bob's to go on with either"
    assert ended(sent(handler, share_fetch(2))), "bob's try changed nothing of alice's session"
    reopened = exchanged(handler, share_fetch(0, ORDERS, CLICKS))
    assert reopened.replacement is not None, "clicks refused, orders asked"
    exchanged(handler, share_fetch(1))  # the new session holds orders alone


def test_what_is_remembered_changes_only_once_the_cluster_has_answered_without_an_error() -> None:
    """An opening with acknowledgements, which Kafka refuses (INVALID_REQUEST) keeping the session it had, leaves it
    remembered; a topic forgotten stays remembered until a new session is opened; a closed session is not
    continued."""
    authorizer = AclAuthorizer(reads("orders", "clicks"))
    handler = judge(authorizer)
    exchanged(handler, share_fetch(0, ORDERS, CLICKS))
    exchanged(handler, share_fetch(0, ORDERS, acknowledged=True), error_code=INVALID_REQUEST)
    exchanged(handler, share_fetch(1, forgotten=[CLICKS]))
    authorizer.replace(reads("orders"))
    assert ended(sent(handler, share_fetch(2)))
    exchanged(handler, share_fetch(0, ORDERS))
    exchanged(handler, share_fetch(1))
    exchanged(handler, share_fetch(-1))
    assert ended(sent(handler, share_fetch(1))), "closed"
    assert ended(sent(handler, share_fetch(4, member="other"))), "never opened"


def test_each_broker_keeps_its_own_sessions() -> None:
    """A share consumer has a session with each broker leading what it reads, under one group and member."""
    authorizer = AclAuthorizer(reads("orders", "clicks"))
    handler = judge(authorizer)
    exchanged(handler, share_fetch(0, ORDERS, CLICKS), broker="b1:9092")
    exchanged(handler, share_fetch(0, ORDERS), broker="b2:9092")
    authorizer.replace(reads("orders"))
    assert ended(sent(handler, share_fetch(1), broker="b1:9092")), "broker 1's session holds clicks"
    exchanged(handler, share_fetch(1), broker="b2:9092")


def test_a_topic_added_before_an_opening_is_answered_outlives_it() -> None:
    authorizer = AclAuthorizer(reads("orders", "clicks"))
    handler = judge(authorizer)
    opening = sent(handler, share_fetch(0, ORDERS))
    addition = sent(handler, share_fetch(1, CLICKS))  # pipelined: sent before the opening is answered
    answer(opening)
    answer(addition)
    authorizer.replace(reads("orders"))
    assert ended(sent(handler, share_fetch(2)))


def test_a_session_forgotten_for_room_is_not_continued() -> None:
    handler = judge(AclAuthorizer(reads("orders")), ShareSessions(limit=1))
    exchanged(handler, share_fetch(0, ORDERS, member="first"))
    exchanged(handler, share_fetch(0, ORDERS, member="second"))
    assert ended(sent(handler, share_fetch(1, member="first")))
    exchanged(handler, share_fetch(1, member="second"))


def test_a_topic_id_the_proxy_could_not_name_is_refused() -> None:
    refused = answer_of(sent(judge(AclAuthorizer(reads("orders"))), share_fetch(0, UNNAMED)))
    assert [(topic.topic_id, [p.error_code for p in topic.partitions]) for topic in refused.responses] == [
        (UNNAMED, [29])]
