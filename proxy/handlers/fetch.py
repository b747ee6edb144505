"""Fetch requests under the consumer byte-rate quotas (KIP-13, ``consumer_byte_rate``) of principals and topics,
as Kafka meters them.

Kafka caps a consumer's ``max_bytes`` to what the quota window allows, records the size of the response
it would send and, when that throttles, takes the bytes back and answers with no records at all, the
throttle time and (in an incremental fetch session) the session id; the connection is muted for the
throttle and the consumer fetches the same records again (``KafkaApis.handleFetchRequest``,
``FetchContext.getThrottledResponse``). The proxy learns the size when the cluster's response arrives:
over the quota, it sends the client Kafka's empty answer and drops the records (read, never copied).

One thing the proxy cannot undo: the cluster sent those records in the consumer's fetch session. A
throttled incremental fetch leaves the session at the consumer's offsets (the records come again), but
the cluster has already told it the partitions' high watermarks, so they reach the consumer with its next
records; a throttled full fetch opened a session the consumer never learns of, which the cluster's
session cache evicts (``FetchSessionCache``).

Topic quotas need the bytes of each topic, which lie all through the response: when one exists, a Fetch
response is read whole before it is sent (never cut through), its partitions' record sizes summed per topic
without the records being decoded, and ``max_bytes`` capped by the smallest window of the topic quotas of the
request's topics as by the principal's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from protocol.apis import Api
from protocol.fetch import (
    FIRST_TOPIC_ID_FETCH_VERSION,
    TopicRef,
    capped_fetch_request,
    fetch_asked,
    fetch_response_size,
    fetch_response_start,
    fetch_response_topic_bytes,
    fetch_session_epoch,
    sessionless_fetch_request,
    throttled_fetch_response_body,
)
from protocol.header import RequestHeader, response_header_length
from protocol.refused_topics import (
    NOTHING_REFUSED,
    fetch_answer_with_refusals,
    fetch_refused,
    fetch_session_not_found,
)
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import (
    FORWARD,
    Caller,
    ChargedResponse,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    finished_whole,
    forwarding_instead,
    frame,
    local_answer,
)
from proxy.handlers.read_once import ReadOnce
from proxy.handlers.refused_topics import refused_by_name_or_id
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from proxy.state.quota_service import QuotaService
from quotas.config import QuotaType
from quotas.decisions import UNLIMITED, Requester

_REMEMBERED_FETCH_BYTES = 4 << 20
_REMEMBERED_BODY_BYTES = 2048
"""The fetches whose topics are remembered (``FetchHandler._asked``): of at most ``_REMEMBERED_BODY_BYTES`` each,
``_REMEMBERED_FETCH_BYTES`` in all with what was read of them."""


class FetchHandler:
    def __init__(self, quotas: QuotaService, usage: UsageLog, topic_names: TopicNames,
                 access: Access | None = None) -> None:
        """``access``: the topics a client may not read (the proxy's own; with the authorizer, those its ACLs do not
        allow), whose partitions it is refused (TOPIC_AUTHORIZATION_FAILED, as Kafka refuses them), the rest of its
        fetch served."""
        self._quotas = quotas
        self._topic_names = topic_names
        self._access = access = access or Access()
        self._reserved_names = [name.encode() for name in access.reserved_topics]
        self._consumed = ConsumedBytes(quotas, usage, topic_names)
        self._asked = ReadOnce(fetch_asked, _REMEMBERED_FETCH_BYTES, _REMEMBERED_BODY_BYTES)
        """What a fetch asks: walking it is most of what judging its topics costs."""

    def on_request(self, header: RequestHeader, request: memoryview, caller: Caller) -> Decided:
        if self._access.authorizer is None:
            return self._judge(header, request, caller)
        version = header.api_version
        asked = self._asked(request, header)
        if asked.replica_id >= 0 and not self._access.allows(
                caller, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            # a follower's fetch without CLUSTER_ACTION: every partition refused (``handleFetchRequest``)
            every_topic = fetch_refused(request[header.length:], version, lambda topic: True)
            return local_answer(header, fetch_answer_with_refusals(version, None, every_topic or NOTHING_REFUSED))
        # with ACLs, no fetch session: the cluster would go on serving a session's partitions that later fetches do
        # not name, whatever the ACLs say by then (Kafka authorizes each of them at every fetch); so every fetch
        # names all it reads, and all of it is authorized
        if asked.outside_any_session:
            return self._judged_with_the_authorizer(header, request, caller, asked.topics)
        if asked.session_epoch > 0:
            return local_answer(header, fetch_session_not_found(version))
        outside = sessionless_fetch_request(request, header)
        # the same topics: only the session's fields differ
        return forwarding_instead(self._judged_with_the_authorizer(header, memoryview(outside), caller, asked.topics),
                                  frame(outside))

    def _judged_with_the_authorizer(self, header: RequestHeader, request: memoryview, caller: Caller,
                                    topics: tuple[TopicRef, ...]) -> Decided:
        """``_judge`` with the authorizer, straight to the quotas when the principal may read every topic, each named
        or of an id the proxy has named (a consumer's fetch, as a rule): no lookup, no refusal to merge."""
        if self._quotas.config.configures_topics(QuotaType.CONSUMER_BYTE_RATE):
            return self._judge(header, request, caller, topics)
        if not self._access.judged_once(caller, Api.FETCH, topics, self._may_read_every_topic):
            return self._judge(header, request, caller, topics)
        return self._decide(request, header, caller, None, incremental=False)  # outside any session, as all here

    def _may_read_every_topic(self, caller: Caller, topics: tuple[TopicRef, ...]) -> bool:
        """Each named, or of an id the proxy has named (an id names one topic for ever), and readable by the caller."""
        refused = self._access.topic_refusal(caller, AclOperation.READ)
        for topic in topics:
            name = topic if isinstance(topic, str) else self._topic_names.name(topic)
            if name is None or refused(name):
                return False
        return True

    def _judge(self, header: RequestHeader, request: memoryview, caller: Caller,
               topics: Sequence[TopicRef] | None = None) -> Decided:
        """``topics``: the request's, when they have been read already."""
        guarded = self._may_name_refused_topics(request, header)
        if not (guarded or self._quotas.config.configures_topics(QuotaType.CONSUMER_BYTE_RATE)):
            return self._decide(request, header, caller, None, fetch_session_epoch(request, header) > 0)
        if topics is None:
            topics = self._asked(request, header).topics
        unnamed = self._topic_names.unknown(topic for topic in topics if isinstance(topic, bytes))
        if unnamed:
            return self._decide_once_named(request, header, caller, topics, unnamed, guarded)
        return self._decide_named(request, header, caller, topics, guarded)

    def _may_name_refused_topics(self, request: memoryview, header: RequestHeader) -> bool:
        """Without ACLs, the proxy's own topics' names are looked for in the request's bytes (a few hundred); ids
        (v13+) only the cluster can name."""
        if not self._access.guards_topics:
            return False
        if self._access.authorizer is not None or header.api_version >= FIRST_TOPIC_ID_FETCH_VERSION:
            return True
        searched = bytes(request)
        return any(name in searched for name in self._reserved_names)

    async def _decide_once_named(self, request: memoryview, header: RequestHeader, caller: Caller,
                                 topics: Sequence[TopicRef], unnamed: set[bytes], guarded: bool) -> Outcome:
        await self._topic_names.look_up(unnamed)
        return self._decide_named(request, header, caller.later(), topics, guarded)

    def _decide_named(self, request: memoryview, header: RequestHeader, caller: Caller, topics: Sequence[TopicRef],
                      guarded: bool) -> Outcome:
        limited_topics = topics if self._quotas.config.configures_topics(QuotaType.CONSUMER_BYTE_RATE) else None
        incremental = fetch_session_epoch(request, header) > 0
        by_name_or_id = refused_by_name_or_id(self._access.topic_refusal(caller, AclOperation.READ), self._topic_names)

        def refused(topic: TopicRef) -> bool:
            return by_name_or_id(topic, None) if isinstance(topic, str) else by_name_or_id(None, topic)

        if not (guarded and any(refused(topic) for topic in topics)):
            return self._decide(request, header, caller, limited_topics, incremental)
        version = header.api_version
        if incremental:
            return local_answer(header, fetch_session_not_found(version))
        refusals = fetch_refused(request[header.length:], version, refused)
        assert refusals is not None, "a refused topic is named"
        if refusals.forwarded_body is None:
            return local_answer(header, fetch_answer_with_refusals(version, None, refusals))
        kept = bytes(request[:header.length]) + refusals.forwarded_body
        outcome = self._decide(memoryview(kept), header, caller, None if limited_topics is None else [
            topic for topic in topics if not refused(topic)], incremental=False)
        return finished_whole(outcome, frame(kept), lambda body: fetch_answer_with_refusals(version, body, refusals))

    def _decide(self, request: memoryview, header: RequestHeader, caller: Caller,
                topics: Sequence[TopicRef] | None, incremental: bool) -> Forward:
        """``topics``: the request's, when a topic quota exists (its response is charged per topic too, unless it
        is a full fetch of topics without one; an incremental fetch's response may hold any of its session's);
        ``incremental``: the request is one of a fetch session (its epoch above 0)."""
        client_id = header.client_id or ""
        user = caller.user
        window = self._quotas.fetch.fetch_window(user, client_id)
        if topics is not None:
            topic_window = self._quotas.fetch_topics.fetch_topics_window(user, self._consumed.names(topics))
            if topic_window is not None:
                window = topic_window.narrowed(window)
            elif not incremental:
                topics = None  # a full fetch names every topic it reads: none of them has a topic quota
        if window is None and topics is None:
            return FORWARD
        # a replica_id >= 0 is not believed: followers never come through a client listener, and
        # trusting the field would let any consumer fetch uncharged
        cap = None if window is None else window.cap_bytes
        capped = None if cap is None else capped_fetch_request(request, header, int(min(cap, 2**31 - 1)))
        flexible, version = header.flexible, header.api_version

        def charge(response_start: memoryview, response_bytes: int) -> ChargedResponse:
            size = fetch_response_size(response_start, response_bytes, flexible)
            body = response_start[response_header_length(response_start, flexible):]
            # per topic only when read whole (``OnResponse.read_whole``)
            admitted, throttle_ms = self._consumed.charge(
                caller, client_id, size, None if topics is None else lambda: fetch_response_topic_bytes(body, version))
            if admitted:
                return ChargedResponse(throttle_ms)
            upstream = fetch_response_start(body, version)
            # a full fetch's session is not opened, as Kafka opens none for a throttled one; a throttle of the
            # cluster's own is kept, as the proxy keeps it in any response
            return ChargedResponse(throttle_ms, throttled_fetch_response_body(
                version, max(throttle_ms, upstream.throttle_ms), upstream.session_id if incremental else 0))

        return Forward(replacement=None if capped is None else frame(capped),
                       on_response=OnResponse(charge=charge, read_whole=topics is not None))


class ConsumedBytes:
    """What a consumer's answer costs, Fetch's or ShareFetch's alike: Kafka records both to one
    ``consumer_byte_rate`` (``quotas.fetch``), and takes the bytes back when the answer throttles."""

    def __init__(self, quotas: QuotaService, usage: UsageLog, topic_names: TopicNames) -> None:
        self._quotas = quotas
        self._usage = usage
        self._topic_names = topic_names
        self._late_charges: set[asyncio.Task[None]] = set()

    def names(self, topics: Iterable[TopicRef]) -> list[str]:
        named = (topic if isinstance(topic, str) else self._topic_names.name(topic) for topic in topics)
        return [name for name in named if name is not None]

    def charge(self, caller: Caller, client_id: str, size: int,
               topic_bytes: Callable[[], dict[TopicRef, int]] | None) -> tuple[bool, int]:
        """Record an answer of ``size`` bytes to the request's ``caller`` as it arrives (and, with ``topic_bytes``,
        each topic's records to its topic quota): whether it is admitted (else every byte is taken back and the
        client gets no records), and the throttle."""
        manager = self._quotas.fetch
        user = caller.user
        requester = Requester(user, client_id, caller.broker)
        now = caller.later().now_ms
        decision = manager.record_unless_throttled(requester, size, now)
        topic_decision = UNLIMITED
        if topic_bytes is not None and decision.admitted:
            sizes = self._named_bytes(topic_bytes(), caller)
            topic_decision = self._quotas.fetch_topics.record_unless_throttled(requester, sizes, now)
            if topic_decision.admitted:
                self._usage.topic_bytes(user, sizes, fetched=True)
            else:
                manager.take_back_recorded(requester, size, now)
                decision = decision._replace(admitted=False)
        throttle_ms = max(decision.throttle_ms, topic_decision.throttle_ms)
        self._usage.fetch(user, client_id, size if decision.admitted else 0, throttle_ms)
        self._usage.observed(user, client_id, max(decision.observed_ms, topic_decision.observed_ms))
        return decision.admitted, throttle_ms

    def _named_bytes(self, topic_bytes: dict[TopicRef, int], caller: Caller) -> dict[str, int]:
        """``topic_bytes`` by topic name. A topic named by an id the proxy cannot name yet (a fetch session's
        topic whose name was forgotten) is charged once the cluster has named it, not dropped."""
        named: dict[str, int] = {}
        unnamed: dict[bytes, int] = {}
        for topic, size in topic_bytes.items():
            name = topic if isinstance(topic, str) else self._topic_names.name(topic)
            if name is not None:
                named[name] = named.get(name, 0) + size
            elif isinstance(topic, bytes):
                unnamed[topic] = size
        if unnamed:
            task = asyncio.get_running_loop().create_task(self._charge_once_named(unnamed, caller))
            self._late_charges.add(task)
            task.add_done_callback(self._late_charges.discard)
        return named

    async def _charge_once_named(self, unnamed: dict[bytes, int], caller: Caller) -> None:
        await self._topic_names.look_up(unnamed)
        named = {name: size for topic_id, size in unnamed.items()
                 if (name := self._topic_names.name(topic_id)) is not None}
        # the next fetches feel it
        self._quotas.fetch_topics.record(Requester(caller.user, broker=caller.broker), named, caller.later().now_ms)
        self._usage.topic_bytes(caller.user, named, fetched=True)
