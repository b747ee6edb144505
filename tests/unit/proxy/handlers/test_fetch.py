from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Iterable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.errors import FETCH_SESSION_ID_NOT_FOUND, TOPIC_AUTHORIZATION_FAILED
from protocol.header import encode_response_header, read_request_header, response_header_length
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import FORWARD, Caller, Forward, Outcome
from proxy.handlers.fetch import _REMEMBERED_BODY_BYTES, _REMEMBERED_FETCH_BYTES, FetchHandler
from proxy.handlers.read_once import BYTES_PER_BODY_BYTE
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from proxy.state.quota_service import QuotaService, now_ms
from quotas.config import QuotaKey
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, charge_of, finish_of, forwarded, handled, on_response


def caller(user: str) -> Caller:
    """The request's sender, with the quota clock the handler reads again when the response is charged."""
    return Caller(user, now_ms(), clock=now_ms)


MIB = 1 << 20


def handler(tmp_path: Path) -> tuple[FetchHandler, UsageLog]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1048576\n')
    usage = UsageLog(tmp_path / "usage")
    return FetchHandler(QuotaService(quota_file, CollectorRegistry()), usage, TopicNames(unreachable)), usage


async def unreachable(topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
    raise ConnectionRefusedError("no cluster in a unit test")


def fetch(client_id: str, version: int = 11, replica_id: int = -1, max_bytes: int = 50 * MIB,
          session_id: int = 0, session_epoch: int = -1) -> memoryview:
    frame = encode_request(Api.FETCH, version, client_id=client_id, replica_id=replica_id, max_wait_ms=500,
                           min_bytes=20 * MIB, max_bytes=max_bytes, isolation_level=1, session_id=session_id,
                           session_epoch=session_epoch, topics=[])
    return memoryview(frame)[4:]


def upstream_response(session_id: int = 0, throttle_ms: int = 0) -> memoryview:
    """The start of a v11 response from the cluster: its header and its fixed fields."""
    body = encode_response(Api.FETCH, 11, {"throttle_time_ms": throttle_ms, "error_code": 0, "session_id": session_id,
                                           "responses": []})
    return memoryview(encode_response_header(1, False) + body)


def logged(tmp_path: Path, usage: UsageLog) -> dict[str, int]:
    usage.start()
    usage.stop(1_790_000_000)
    [line] = (tmp_path / "usage").glob("usage-*.jsonl")
    return json.loads(line.read_text())  # type: ignore[no-any-return]


def test_a_metered_consumer_gets_kafkas_cap_and_pays_for_each_response(tmp_path: Path) -> None:
    fetch_handler, usage = handler(tmp_path)
    outcome = handled(fetch_handler, fetch("metered"), caller("ANONYMOUS"))
    capped = memoryview(forwarded(outcome).replacement or b"")[4:]
    header = read_request_header(capped)
    request = decode_request(Api.FETCH, 11, capped[header.length:])
    assert (request.max_bytes, request.min_bytes) == (10 * MIB, 10 * MIB)  # 1 MiB/s x (11 - 1) x 1 s
    response = encode_response_header(1, False) + bytes(8 * MIB)
    assert charge_of(outcome)(memoryview(response), len(response)) == (0, None)
    assert logged(tmp_path, usage)["fetch_bytes"] == 4 + 8 * MIB  # Kafka charges 4 + body


def test_a_fetch_over_the_quota_is_answered_empty_and_its_bytes_taken_back(tmp_path: Path) -> None:
    """Kafka's answer to a fetch it throttles: no partitions, the throttle, no error and no session opened
    (a full fetch); the bytes un-recorded, so a later small fetch finds the rate as before."""
    fetch_handler, usage = handler(tmp_path)
    charge = charge_of(handled(fetch_handler, fetch("metered", session_epoch=0), caller("ANONYMOUS")))
    throttle_ms, answer = charge(upstream_response(session_id=77), 4 + 12 * MIB)  # 12 MiB in the 10 s window
    assert throttle_ms > 0 and answer is not None
    empty = decode_response(Api.FETCH, 11, answer)
    assert (empty.throttle_time_ms, empty.error_code, empty.session_id, empty.responses) == (throttle_ms, 0, 0, [])
    assert charge(upstream_response(), 4 + MIB) == (0, None)  # 1 MiB, not 13, in the window
    line = logged(tmp_path, usage)
    assert (line["fetch_bytes"], line["throttle_ms"]) == (4 + MIB, throttle_ms)  # the empty answer: no bytes


def test_a_throttled_incremental_fetch_keeps_its_session(tmp_path: Path) -> None:
    """An incremental fetch (epoch above 0) is answered in its session, as Kafka's ``IncrementalFetchContext``
    answers it: the consumer's next fetch goes on in it, and the cluster sends the records again."""
    fetch_handler, _ = handler(tmp_path)
    charge = charge_of(handled(fetch_handler, fetch("metered", session_id=77, session_epoch=3), caller("ANONYMOUS")))
    throttle_ms, answer = charge(upstream_response(session_id=77), 4 + 12 * MIB)
    assert answer is not None and decode_response(Api.FETCH, 11, answer).session_id == 77
    # a throttle of the cluster's own, longer than the proxy's, is what the consumer is told
    _, answer = charge(upstream_response(session_id=77, throttle_ms=throttle_ms + 5000), 4 + 12 * MIB)
    assert answer is not None and decode_response(Api.FETCH, 11, answer).throttle_time_ms == throttle_ms + 5000


def test_consumers_without_a_quota_pass_untouched_and_a_claimed_follower_is_charged(tmp_path: Path) -> None:
    fetch_handler, _ = handler(tmp_path)
    assert handled(fetch_handler, fetch("free"), caller("ANONYMOUS")) is FORWARD
    claimed_follower = handled(fetch_handler, fetch("metered", replica_id=3), caller("ANONYMOUS"))
    assert charge_of(claimed_follower) and forwarded(claimed_follower).replacement is not None
    within = handled(fetch_handler, fetch("metered", max_bytes=MIB), caller("ANONYMOUS"))
    assert forwarded(within).replacement is None and charge_of(within)


ORDERS_ID = uuid.UUID(int=7)


def topic_handler(tmp_path: Path, known: dict[uuid.UUID, str]) -> tuple[FetchHandler, QuotaService]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\ntopic = "orders"\nconsumer_byte_rate = 1000000\n'
                          '[[quota]]\nuser = "alice"\nconsumer_byte_rate = 100000000\n')
    quotas = QuotaService(quota_file, CollectorRegistry())

    async def topics_by_id(topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        return {topic_id: (known[topic_id], 1) for topic_id in topic_ids if topic_id in known}

    return FetchHandler(quotas, UsageLog(tmp_path / "usage"), TopicNames(topics_by_id)), quotas


def topic_fetch(version: int, *topics: str | uuid.UUID, session_epoch: int = -1) -> memoryview:
    requested = [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": MIB}]}
                 if isinstance(topic, str) else
                 {"topic_id": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": MIB}]}
                 for topic in topics]
    frame = encode_request(Api.FETCH, version, client_id="app", replica_id=-1, max_wait_ms=500, min_bytes=1,
                           max_bytes=50 * MIB, isolation_level=1, session_id=1 if session_epoch > 0 else 0,
                           session_epoch=session_epoch, topics=requested)
    return memoryview(frame)[4:]


def topic_response(version: int, records: dict[str | uuid.UUID, int]) -> memoryview:
    responses = [{("topic" if isinstance(topic, str) else "topic_id"): topic, "partitions": [
        {"partition_index": 0, "high_watermark": 1, "records": bytes(size)}]} for topic, size in records.items()]
    body = encode_response(Api.FETCH, version, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                                "responses": responses})
    return memoryview(encode_response_header(1, version >= 12) + body)


def test_a_topic_quota_reads_the_whole_response_and_empties_it_when_the_topic_is_over(tmp_path: Path) -> None:
    fetch_handler, quotas = topic_handler(tmp_path, {})
    outcome = handled(fetch_handler, topic_fetch(11, "orders", "clicks"), caller("alice"))
    assert on_response(outcome).read_whole
    capped = memoryview(forwarded(outcome).replacement or b"")[4:]
    header = read_request_header(capped)
    assert decode_request(Api.FETCH, 11, capped[header.length:]).max_bytes == 10_000_000  # the topic's window
    charge = charge_of(outcome)
    within = topic_response(11, {"orders": 9_000_000, "clicks": 5_000_000})
    assert charge(within, len(within)) == (0, None)
    over = topic_response(11, {"orders": 2_000_000})
    throttle_ms, answer = charge(over, len(over))
    # (11 MB / 10 s - 1 MB/s) / 1 MB/s x 10 s: Kafka's throttle (charged at the proxy's time: the window may
    # have grown by the milliseconds the test took); the answer has no records
    assert 900 < throttle_ms <= 1000 and answer is not None
    assert decode_response(Api.FETCH, 11, answer).responses == []
    # the bytes of the emptied answer are taken back from alice's own quota too, as from the topic's
    assert quotas.fetch.rate_of(QuotaKey("alice", ""), now_ms()) == pytest.approx(len(within) / 10, rel=0.05)
    # a full fetch of topics without a topic quota is neither read whole nor capped by a topic's window (alice's
    # own quota still charges it)
    free = handled(fetch_handler, topic_fetch(11, "clicks"), caller("alice"))
    assert not on_response(free).read_whole and charge_of(free)
    assert handled(fetch_handler, topic_fetch(11, "clicks"), caller("bob")) is FORWARD
    # an incremental one may get any topic of its session: it is read whole
    incremental = handled(fetch_handler, topic_fetch(11, "clicks", session_epoch=4), caller("bob"))
    assert on_response(incremental).read_whole


def test_topics_named_by_id_are_named_by_the_cluster_before_the_fetch_goes_on(tmp_path: Path) -> None:
    fetch_handler, _ = topic_handler(tmp_path, {ORDERS_ID: "orders"})
    pending = handled(fetch_handler, topic_fetch(13, ORDERS_ID), caller("bob"))
    assert not isinstance(pending, Outcome)
    outcome = asyncio.run(pending)  # type: ignore[arg-type]
    assert forwarded(outcome).replacement is not None
    over = topic_response(13, {ORDERS_ID: 11_000_000})
    throttle_ms, answer = charge_of(outcome)(over, len(over))
    assert 900 < throttle_ms <= 1000 and answer is not None
    # known now: the next fetch is decided at once
    assert isinstance(handled(fetch_handler, topic_fetch(13, ORDERS_ID), caller("bob")), Outcome)


def test_an_observed_quota_charges_the_fetch_and_leaves_its_max_bytes_alone(tmp_path: Path) -> None:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"quota.mode" = "observe"\n'
                          '[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1048576\n')
    fetch_handler = FetchHandler(QuotaService(quota_file, CollectorRegistry()), UsageLog(tmp_path / "usage"),
                                 TopicNames(unreachable))
    outcome = handled(fetch_handler, fetch("metered"), caller("ANONYMOUS"))
    assert forwarded(outcome).replacement is None and charge_of(outcome)
    response = encode_response_header(1, False) + bytes(12 * MIB)
    assert charge_of(outcome)(memoryview(response), len(response)) == (0, None)  # over, and let through


def acl_handler(tmp_path: Path) -> FetchHandler:
    """Fetch under the authorizer: alice may read "orders" alone; no quota."""
    reads = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                       AclPermission.ALLOW)
    return FetchHandler(QuotaService(None, CollectorRegistry()), UsageLog(tmp_path / "usage"),
                        TopicNames(unreachable), Access(authorizer=AclAuthorizer([reads], super_users=["User:admin"])))


def test_with_the_authorizer_no_fetch_session_is_opened_or_kept(tmp_path: Path) -> None:
    """A session's partitions are fetched without being named: each fetch goes outside any session, naming all it
    reads, and one in a session the proxy let none open is told its session is gone."""
    fetch_handler = acl_handler(tmp_path)
    request = forwarded(handled(fetch_handler, topic_fetch(12, "orders", session_epoch=0), caller("alice")))
    sent = decode_request(Api.FETCH, 12, memoryview(request.replacement or b"")[4:][read_request_header(
        memoryview(request.replacement or b"")[4:]).length:])
    assert (sent.session_id, sent.session_epoch) == (0, -1) and [topic.topic for topic in sent.topics] == ["orders"]
    outside = topic_fetch(12, "orders")
    assert forwarded(handled(fetch_handler, outside, caller("alice"))).replacement is None, "outside one already"
    answer = answered(handled(fetch_handler, topic_fetch(12, "orders", session_epoch=3), caller("alice")))
    body = memoryview(answer.response)[4:]
    assert decode_response(Api.FETCH, 12, body[response_header_length(body, True):]).error_code == \
        FETCH_SESSION_ID_NOT_FOUND


def test_with_the_authorizer_a_topic_the_principal_may_not_read_is_refused_and_the_rest_served(
        tmp_path: Path) -> None:
    fetch_handler = acl_handler(tmp_path)
    decided = forwarded(handled(fetch_handler, topic_fetch(12, "orders", "payments"), caller("alice")))
    sent = memoryview(decided.replacement or b"")[4:]
    assert [topic.topic for topic in decode_request(Api.FETCH, 12, sent[read_request_header(sent).length:]).topics] \
        == ["orders"]
    response = topic_response(12, {"orders": 10})
    finished = decode_response(Api.FETCH, 12, memoryview(
        finish_of(decided)(response[response_header_length(response, True):]) or b""))
    assert [(topic.topic, [partition.error_code for partition in topic.partitions])
            for topic in finished.responses] == [("orders", [0]), ("payments", [TOPIC_AUTHORIZATION_FAILED])]
    refused = answered(handled(fetch_handler, topic_fetch(12, "payments"), caller("bob")))
    assert refused.response, "nothing of it reaches the cluster"


@pytest.mark.parametrize("version", [12, 15])
def test_with_the_authorizer_a_followers_fetch_needs_cluster_action(tmp_path: Path, version: int) -> None:
    """Kafka refuses every partition of a follower's fetch without CLUSTER_ACTION (``handleFetchRequest``): through
    the proxy the cluster would take it as the proxy's own."""
    follower = {"replica_id": 1} if version < 15 else {"replica_state": {"replica_id": 1, "replica_epoch": 1}}
    frame = encode_request(Api.FETCH, version, client_id="broker-1", max_wait_ms=0, min_bytes=1, max_bytes=MIB,
                           isolation_level=0, session_id=0, session_epoch=-1, **follower, topics=[
                               {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                   "partition_max_bytes": MIB}]}])
    request = memoryview(frame)[4:]
    refused = answered(handled(acl_handler(tmp_path), request, caller("alice")))
    body = memoryview(refused.response)[4:]
    answer = decode_response(Api.FETCH, version, body[response_header_length(body, True):])
    assert [partition.error_code for topic in answer.responses for partition in topic.partitions] == [
        TOPIC_AUTHORIZATION_FAILED]
    if version < 13:  # named (an id would be looked up first)
        assert forwarded(handled(acl_handler(tmp_path), request, caller("admin")))


def test_with_the_authorizer_topics_by_id_are_judged_by_the_names_the_proxy_knows(tmp_path: Path) -> None:
    """A v13+ fetch names its topics by id: one named already is judged at once (allowed, forwarded as it came;
    refused, kept from the cluster); one the proxy cannot name yet is looked up first."""
    orders, payments, unknown = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    looked_up: list[set[uuid.UUID]] = []

    async def topics_by_id(topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        looked_up.append(set(topic_ids))
        return {unknown: ("payments", 1)}

    names = TopicNames(topics_by_id)
    names.learn(orders.bytes, "orders")
    names.learn(payments.bytes, "payments")
    reads = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                       AclPermission.ALLOW)
    fetch_handler = FetchHandler(QuotaService(None, CollectorRegistry()), UsageLog(tmp_path / "usage"), names,
                                 Access(authorizer=AclAuthorizer([reads])))
    decided = handled(fetch_handler, topic_fetch(13, orders), caller("alice"))
    assert forwarded(decided).replacement is None and looked_up == []
    refused = answered(handled(fetch_handler, topic_fetch(13, payments), caller("alice")))
    assert refused.response and looked_up == []
    later = handled(fetch_handler, topic_fetch(13, orders, unknown), caller("alice"))
    assert isinstance(later, Awaitable), "looked up first"
    outcome = asyncio.run(later)  # type: ignore[arg-type]
    assert looked_up == [{unknown}] and isinstance(outcome, Forward) and outcome.replacement is not None


def test_with_the_authorizer_a_fetch_sent_again_is_judged_by_the_acls_of_now(tmp_path: Path) -> None:
    """An idle consumer sends the same fetch again and again: what it asks is read once, but whether it may is
    asked each time."""
    fetch_handler = acl_handler(tmp_path)
    again = topic_fetch(12, "orders")
    assert forwarded(handled(fetch_handler, again, caller("alice"))).replacement is None
    assert answered(handled(fetch_handler, again, caller("bob"))).response, "alice's, not bob's"
    assert forwarded(handled(fetch_handler, again, caller("alice"))).replacement is None
    assert fetch_handler._access.authorizer is not None
    fetch_handler._access.authorizer.replace([])
    assert answered(handled(fetch_handler, again, caller("alice"))).response, "no longer allowed"


def test_the_fetches_read_once_are_bounded(tmp_path: Path) -> None:
    """Bodies of ``_REMEMBERED_BODY_BYTES`` at most, ``_REMEMBERED_FETCH_BYTES`` in all, whatever clients send."""
    fetch_handler = acl_handler(tmp_path)
    many = [f"orders-{topic:03}" for topic in range(39)]
    assert len(topic_fetch(12, "orders-1000", *many)) < _REMEMBERED_BODY_BYTES
    for distinct in range(_REMEMBERED_FETCH_BYTES // (BYTES_PER_BODY_BYTE * 1800) + 10):  # more than fit
        handled(fetch_handler, topic_fetch(12, f"orders-{distinct:04}", *many), caller("alice"))
        assert 0 < fetch_handler._asked.kept_bytes <= _REMEMBERED_FETCH_BYTES
    remembered = fetch_handler._asked.kept_bytes
    large = topic_fetch(12, *(f"orders-{topic:03}" for topic in range(100)))
    assert len(large) > _REMEMBERED_BODY_BYTES
    handled(fetch_handler, large, caller("alice"))
    assert fetch_handler._asked.kept_bytes == remembered, "read, not remembered"
