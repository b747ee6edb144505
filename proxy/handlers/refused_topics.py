"""Topics a request's principal may not use, kept from it as Kafka keeps them: the proxy's own topics from every
client, and with the authorizer the topics Kafka's ACLs do not allow (``proxy.security.access``).

The proxy keeps topics on the cluster (the fleet's usage and quotas topics, the producer-ID blocks topic) and writes
them with its own login, which the cluster lets do anything with them whoever the client is: a client that wrote the
quotas topic would set any principal's quota on the whole fleet. So no client request reaches them, super users'
neither: Produce refuses them (``proxy.handlers.produce``), CreateTopics, DeleteTopics and CreatePartitions too
(``proxy.handlers.topic_mutations``), Fetch (``proxy.handlers.fetch``), Metadata does not show them, and the APIs
naming topics' partitions, ShareFetch, ShareAcknowledge and the share groups' offset APIs refuse them (here), and
the config APIs (``proxy.handlers.config_resources``). With the authorizer, Metadata, DescribeTopicPartitions, the
APIs Kafka authorizes by one operation on each topic alone (``TOPIC_OPERATIONS``), OffsetDelete, ShareFetch (its
share sessions' topics too), ShareAcknowledge and the share groups' offset APIs (their groups too) refuse the topics
the ACLs do not allow as well.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Any

from protocol.apis import Api
from protocol.authorization_answers import group_id
from protocol.codecs import encode_response, max_version
from protocol.errors import GROUP_AUTHORIZATION_FAILED
from protocol.header import RequestHeader
from protocol.refused_topics import (
    Authorized,
    MetadataAsked,
    MetadataNamed,
    NameRefusal,
    ShareSessionAsked,
    answer_with_refusals,
    described_topics_asked,
    described_topics_refused,
    described_topics_request,
    every_described_topic_asked,
    metadata_answer,
    metadata_asked,
    metadata_named,
    offset_deletions_answer,
    offset_deletions_refused,
    refused_whole,
    share_answer_with_refusals,
    share_fetch_error,
    share_refused,
    share_session_asked,
    share_session_not_found,
    share_topic_ids,
    topics_refused,
)
from protocol.share_group_offsets import share_offsets_answer, share_offsets_refused
from proxy.cluster.info import TopicPartitions
from proxy.cluster.rewrites import RewriteMemo
from proxy.cluster.topic_names import TopicNames
from proxy.cluster.upstream import UPSTREAM_ERRORS
from proxy.decision.interception import RequestHandler
from proxy.decision.outcome import (
    CLOSE,
    FORWARD,
    Caller,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    answered_in_part,
    finished_whole,
    local_answer,
    observing_answer,
    replacement_request,
)
from proxy.decision.outcome import frame as frame_of
from proxy.handlers.read_once import ReadOnce
from proxy.security.access import Access, requester_of
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

_REMEMBERED_ANSWER_BYTES = 1 << 20
"""All-topics answers left without the refused topics, remembered by the bytes the cluster sent (clients ask for
them again and again, and a large cluster's answer costs milliseconds to decode)."""
_REMEMBERED_REQUESTS_BYTES = 4 << 20
_REMEMBERED_REQUEST_BYTES = 1024
"""The Metadata requests whose topics are remembered (``MetadataWithoutRefusedTopics._named``): of at most
``_REMEMBERED_REQUEST_BYTES`` each, ``_REMEMBERED_REQUESTS_BYTES`` in all with what was read of them."""

TOPIC_OPERATIONS: dict[int, AclOperation] = {
    Api.LIST_OFFSETS: AclOperation.DESCRIBE,
    Api.OFFSET_FOR_LEADER_EPOCH: AclOperation.DESCRIBE,
    Api.DELETE_RECORDS: AclOperation.DELETE,
    Api.DESCRIBE_PRODUCERS: AclOperation.READ,
    Api.OFFSET_COMMIT: AclOperation.READ,
    Api.TXN_OFFSET_COMMIT: AclOperation.READ,
}
"""The operation Kafka authorizes on each topic of the APIs naming topics' partitions (``KafkaApis``), judged here
with the authorizer: for OffsetCommit once its group is, for TxnOffsetCommit once its transactional id and group are
(``proxy.handlers.authorization.GroupFirst``). The APIs
missing need an operation on the cluster instead (ElectLeaders, AlterPartitionReassignments: judged before, by
``proxy.handlers.authorization.ClusterAdministration``), and are refused the proxy's own topics alone here."""


def refused_by_name_or_id(refused_name: NameRefusal, topic_names: TopicNames
                          ) -> Callable[[str | None, bytes | None], bool]:
    """Whether a topic given by name, or by id (``topic_names`` names it), is refused. An id the proxy could not name
    is refused too, unless the cluster said it has no such topic (it answers UNKNOWN_TOPIC_ID itself, as Kafka does
    before authorizing): a lookup that failed must not let a topic through unjudged."""

    def refused(name: str | None, topic_id: bytes | None) -> bool:
        if topic_id is None:
            return refused_name(name)
        named = topic_names.name(topic_id)
        return refused_name(named) if named is not None else not topic_names.missing(topic_id)

    return refused


class MetadataWithoutRefusedTopics:
    """Metadata as Kafka answers the principal: the topics it may not describe left out or refused; with the
    authorizer, the authorized operations it asks for its own, and a missing topic it may not create refused, not
    created (``unauthorizedForCreateTopics``)."""

    def __init__(self, access: Access, auto_creation: Callable[[], Awaitable[bool]],
                 partitions: Callable[[list[str]], Awaitable[Mapping[str, TopicPartitions]]]) -> None:
        """``auto_creation``: whether the cluster creates the topics a Metadata request names
        (``auto.create.topics.enable``); ``partitions``: the cluster's partition counts of topics (0: missing)."""
        self._access = access
        self._auto_creation = auto_creation
        self._partitions = partitions
        self._all_topics_answers = RewriteMemo(_REMEMBERED_ANSWER_BYTES)
        self._named = ReadOnce(lambda frame, header: metadata_named(frame[header.length:], header.api_version),
                               _REMEMBERED_REQUESTS_BYTES, _REMEMBERED_REQUEST_BYTES)
        """The topics a Metadata request names: clients ask the same again and again."""

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        access = self._access
        named = self._named(frame, header)
        if named is not None and access.judged_once(caller, Api.METADATA, named, self._may_describe_and_create):
            return FORWARD  # names only topics the principal may describe, and create if missing: Kafka's answer
        refused = access.topic_refusal(caller, AclOperation.DESCRIBE)
        creation_refused = self._creation_refusal(caller)
        asked = metadata_asked(frame[header.length:], version, refused, creation_refused)
        names_only_described = not (asked.all_topics or asked.refused_names or asked.by_id)
        authorizer = access.authorizer
        if authorizer is None:
            if names_only_described:
                return FORWARD  # names only topics of the clients'
            return self._forwarded(frame, header, asked, refused, None, ())
        if names_only_described and not (asked.creation_withheld or asked.topic_operations
                                         or asked.cluster_operations):
            return FORWARD  # asks nothing that is the principal's own: the cluster's answer is Kafka's
        requester = requester_of(caller)
        authorized = Authorized(
            lambda name: authorizer.authorized_operations(requester, ResourceType.TOPIC, name),
            authorizer.authorized_operations(requester, ResourceType.CLUSTER, CLUSTER_NAME)
            if access.allows(caller, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
        memo_key = (requester, authorizer.generation)
        if asked.creation_withheld:  # a copy: the connection's buffer moves on
            return self._once_creations_judged(memoryview(bytes(frame)), header, asked, refused, authorized, memo_key)
        return self._forwarded(frame, header, asked, refused, authorized, memo_key)

    def _may_describe_and_create(self, caller: Caller, named: MetadataNamed) -> bool:
        """The caller may describe each topic named, and create those missing when the request may create them."""
        if any(map(self._access.topic_refusal(caller, AclOperation.DESCRIBE), named.names)):
            return False
        creation_refused = self._creation_refusal(caller) if named.may_create else None
        return creation_refused is None or not any(map(creation_refused, named.names))

    def _creation_refusal(self, caller: Caller) -> NameRefusal | None:
        """The topics the caller may not create; None when it may create any (CREATE on the cluster)."""
        access = self._access
        if access.allows(caller, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return access.topic_refusal(caller, AclOperation.CREATE)

    async def _once_creations_judged(self, frame: memoryview, header: RequestHeader, asked: MetadataAsked,
                                     refused: NameRefusal, authorized: Authorized, memo_key: Hashable) -> Outcome:
        """The request without the missing topics the principal may not create: refused when the cluster would
        create them (``unauthorizedForCreateTopics``), unknown when it would not. Kept from the cluster either way,
        whatever it says of its auto-creation."""
        withheld = asked.creation_withheld
        try:
            found = await self._partitions(sorted(withheld))
            missing = frozenset(name for name in withheld if not found[name].partitions)
        except UPSTREAM_ERRORS as error:  # refused, as if missing: the client asks again
            log.warning("could not tell whether %s exist, so they are refused: %s", ", ".join(sorted(withheld)),
                        error or type(error).__name__)
            missing = withheld
        if not missing:
            return self._forwarded(frame, header, asked, refused, authorized, memo_key)
        body, version = frame[header.length:], header.api_version
        if not await self._auto_creation():
            return self._forwarded(frame, header, metadata_asked(body, version, refused, unknown=missing), refused,
                                   authorized, memo_key)

        def refused_or_missing(name: str | None) -> bool:
            return refused(name) or name in missing

        asked = metadata_asked(body, version, refused_or_missing)
        return self._forwarded(frame, header, asked, refused_or_missing, authorized, memo_key)

    def _forwarded(self, frame: memoryview, header: RequestHeader, asked: MetadataAsked, refused: NameRefusal,
                   authorized: Authorized | None, memo_key: Hashable) -> Forward:
        """``memo_key``: whose answer it is, when it depends on who asks (its principal, and the ACLs' version)."""
        version = header.api_version

        def finish(body: memoryview) -> bytes:
            # the same answer for every such client: remembered
            if asked.all_topics and not (asked.refused_names or asked.unknown_names):
                return self._all_topics_answers.rewritten(
                    ((Api.METADATA, memo_key), version, bytes(body)),
                    lambda: metadata_answer(body, version, asked, refused, authorized=authorized)) or bytes(body)
            return metadata_answer(body, version, asked, refused, authorized=authorized)

        replacement = None if asked.forwarded_body is None else replacement_request(frame, header,
                                                                                     asked.forwarded_body)
        return Forward(replacement=replacement, on_response=OnResponse(finish=finish))


class DescribedTopicsWithoutRefused:
    """DescribeTopicPartitions (Kafka's Java AdminClient describes topics with it) as Kafka answers the principal:
    the topics it may not describe left out of an all-topics answer, and out of its pages' cursors; refused when
    named; with the authorizer, each topic's authorized operations its own (``DescribeTopicPartitionsRequestHandler``
    always gives them)."""

    def __init__(self, access: Access, every_topic_name: Callable[[], Awaitable[Iterable[str]]]) -> None:
        """``every_topic_name``: the names of every topic the cluster has (raises ``UPSTREAM_ERRORS`` when it
        cannot be asked)."""
        self._access = access
        self._every_topic_name = every_topic_name

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        request = described_topics_request(frame[header.length:], version)
        if refused_whole(request):
            return FORWARD  # the cluster answers it as Kafka does, before looking at any topic
        refused = self._access.topic_refusal(caller, AclOperation.DESCRIBE)
        if not request.topics:  # a copy: the connection's buffer moves on
            return self._every_topic_described(memoryview(bytes(frame)), header, request, refused, caller)
        asked = described_topics_asked(request, version, refused)
        if self._access.authorizer is None and not asked.refused_names:
            return FORWARD
        return self._forwarded(frame, header, asked, refused, caller)

    async def _every_topic_described(self, frame: memoryview, header: RequestHeader, request: Any,
                                     refused: NameRefusal, caller: Caller) -> Outcome:
        try:
            every_topic = await self._every_topic_name()
        except UPSTREAM_ERRORS as error:  # answering no topics would tell the client there are none
            log.warning("cannot list the topics a DescribeTopicPartitions of every topic asks for, so its connection "
                        "is closed: %s", error or type(error).__name__)
            return CLOSE
        asked = every_described_topic_asked(request, header.api_version, every_topic, refused)
        return self._forwarded(frame, header, asked, refused, caller)

    def _forwarded(self, frame: memoryview, header: RequestHeader, asked: MetadataAsked, refused: NameRefusal,
                   caller: Caller) -> Outcome:
        version, forwarded_body = header.api_version, asked.forwarded_body
        if forwarded_body is None and (asked.refused_names or asked.listed):  # nothing left to ask of the cluster
            return local_answer(header, described_topics_refused(version, asked))
        authorized = None
        authorizer = self._access.authorizer
        if authorizer is not None:
            requester = requester_of(caller)
            authorized = Authorized(lambda name: authorizer.authorized_operations(requester, ResourceType.TOPIC, name),
                                    0)
            asked = asked._replace(topic_operations=True)
        replacement = None if forwarded_body is None else replacement_request(frame, header, forwarded_body)
        return Forward(replacement=replacement,
                       on_response=OnResponse(finish=lambda body: metadata_answer(
                           body, version, asked, refused, Api.DESCRIBE_TOPIC_PARTITIONS, authorized)))


def reserved_names_search(reserved_topics: frozenset[str]) -> Callable[[memoryview], bool]:
    """Whether a request may name one of the proxy's own topics: its bytes searched for their names before any decode
    (for the small requests that name topics rarely, and never the proxy's but by mistake or in an attack)."""
    encoded = [name.encode() for name in reserved_topics]

    def may_name(frame: memoryview) -> bool:
        request = bytes(frame)
        return any(name in request for name in encoded)

    return may_name


class TopicsWithoutRefused:
    """The APIs naming topics' partitions: a refused topic refused, the rest forwarded."""

    def __init__(self, access: Access) -> None:
        self._access = access
        self._may_name_reserved = reserved_names_search(access.reserved_topics)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        refused = self._refusal(api_key, caller)
        if refused is None:
            if not self._may_name_reserved(frame):
                return FORWARD
            refused = self._access.reserved_topics.__contains__
        refusals = topics_refused(api_key, version, frame[header.length:], refused)
        if refusals is None:
            return FORWARD
        return answered_in_part(frame, header, refusals.forwarded_body,
                                lambda body: answer_with_refusals(api_key, version, body, refusals))

    def _refusal(self, api_key: int, caller: Caller) -> NameRefusal | None:
        """With the authorizer, the topics of an API of ``TOPIC_OPERATIONS`` the caller may not use; None: only the
        proxy's own are refused."""
        operation = TOPIC_OPERATIONS.get(api_key)
        access = self._access
        if operation is None or access.authorizer is None:
            return None
        if api_key == Api.OFFSET_FOR_LEADER_EPOCH and access.allows(caller, AclOperation.CLUSTER_ACTION,
                                                                    ResourceType.CLUSTER, CLUSTER_NAME):
            return None  # a broker's (``handleOffsetForLeaderEpochRequest``): every topic
        return access.topic_refusal(caller, operation)


class OffsetDeletions:
    """OffsetDelete: DELETE on the group, else refused whole with GROUP_AUTHORIZATION_FAILED; then READ on each topic,
    a refused one's partitions answered TOPIC_AUTHORIZATION_FAILED before the others' results, unless the group's own
    error answers the whole request (``handleOffsetDeleteRequest``). Without the authorizer the proxy's own topics
    alone are refused."""

    def __init__(self, access: Access) -> None:
        self._access = access
        self._may_name_reserved = reserved_names_search(access.reserved_topics)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        if version > max_version(Api.OFFSET_DELETE):  # not offered: a client that negotiated never sends it
            return CLOSE
        access = self._access
        body = frame[header.length:]
        if access.authorizer is None:
            if not self._may_name_reserved(frame):
                return FORWARD
        elif not access.allows(caller, AclOperation.DELETE, ResourceType.GROUP, group_id(Api.OFFSET_DELETE, version,
                                                                                         body)):
            return local_answer(header, encode_response(Api.OFFSET_DELETE, version, {
                "throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}))
        refused = offset_deletions_refused(version, body, access.topic_refusal(caller, AclOperation.READ))
        if refused is None:
            return FORWARD
        assert refused.forwarded_body is not None, "asked even with no topic left"
        return Forward(replacement=replacement_request(frame, header, refused.forwarded_body), on_response=OnResponse(
            finish=lambda answer: offset_deletions_answer(version, answer, refused)))


_SHARE_OFFSET_OPERATIONS: dict[int, tuple[AclOperation, AclOperation]] = {
    Api.DESCRIBE_SHARE_GROUP_OFFSETS: (AclOperation.DESCRIBE, AclOperation.DESCRIBE),
    Api.ALTER_SHARE_GROUP_OFFSETS: (AclOperation.READ, AclOperation.READ),
    Api.DELETE_SHARE_GROUP_OFFSETS: (AclOperation.DELETE, AclOperation.READ),
}
"""The operation each share-group offset API needs on its groups, and on their topics (``KafkaApis``)."""


class ShareGroupOffsets:
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: the groups and topics the
    principal may not use refused (``protocol.share_group_offsets``); so these, rare admin requests, are each read."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        access = self._access
        group_operation, topic_operation = _SHARE_OFFSET_OPERATIONS[api_key]
        refused = share_offsets_refused(
            api_key, version, frame[header.length:],
            lambda group: not access.allows(caller, group_operation, ResourceType.GROUP, group),
            access.topic_refusal(caller, topic_operation))
        if refused is None:
            return FORWARD
        return answered_in_part(frame, header, refused.forwarded_body,
                                lambda body: share_offsets_answer(api_key, version, body, refused))


_REMEMBERED_SHARE_SESSION_TOPICS = 200_000
"""Topics of share sessions the proxy remembers, at most, the least recently used sessions forgotten first: a
forgotten session's next ShareFetch is answered SHARE_SESSION_NOT_FOUND, and its client opens a new one."""

SessionKey = tuple[str, str, str]
"""A share session's broker (each broker keeps its own sessions), group and member: Kafka's session key, per broker."""


class ShareSessions:
    """With the authorizer: the topics of each share session the proxy let ShareFetches open and add to. A ShareFetch
    continuing a session names only what it adds, and the cluster goes on serving the rest of the session with the
    proxy's login; Kafka authorizes a session's partitions at every fetch, so the proxy judges the session's topics
    again at every fetch, and ends a session holding one now refused, or one it does not know.

    What the proxy remembers of a session holds at least what the cluster's holds: a topic is added as the ShareFetch
    naming it goes to the cluster, and topics are dropped only when the cluster has answered, without an error, a
    ShareFetch opening a new session (the topics it did not name, named before it) or closing it. A topic the client
    forgets stays remembered until then (a session holding one the ACLs no longer allow is ended once more)."""

    def __init__(self, limit: int = _REMEMBERED_SHARE_SESSION_TOPICS) -> None:
        self._sessions: OrderedDict[SessionKey, dict[bytes, int]] = OrderedDict()
        """Each session's topics, each with the number of the last ShareFetch naming it."""
        self._limit = limit
        self._topics = 0
        self._sent = 0

    def topic_ids(self, key: SessionKey, asked: ShareSessionAsked | None) -> list[bytes]:
        """The topics of the session a ShareFetch continues (``asked``: None for a request whose session is not
        followed)."""
        if asked is None or asked.epoch in (0, -1):
            return []
        return list(self._sessions.get(key, ()))

    def may_continue(self, key: SessionKey, asked: ShareSessionAsked | None, refused: Callable[[bytes], bool]) -> bool:
        """Whether the session a ShareFetch continues is known and holds no topic ``refused``."""
        if asked is None or asked.epoch in (0, -1):
            return True
        topics = self._sessions.get(key)
        if topics is None or any(refused(topic_id) for topic_id in topics):
            return False
        self._sessions.move_to_end(key)
        return True

    def forwarding(self, key: SessionKey, asked: ShareSessionAsked | None,
                   named: Iterable[bytes]) -> Callable[[memoryview], None] | None:
        """A ShareFetch goes to the cluster naming the topics ``named`` (those the proxy let through and could name):
        they are the session's from now on; what becomes of the rest is read from the cluster's answer (given its
        start, header included), which the result is to be shown (None: nothing to read)."""
        if asked is None:
            return None
        self._sent += 1
        sent = self._sent
        topics = self._sessions.setdefault(key, {})
        for topic_id in named:
            self._topics += topic_id not in topics
            topics[topic_id] = sent
        self._sessions.move_to_end(key)
        while self._topics > self._limit and len(self._sessions) > 1:
            self._topics -= len(self._sessions.popitem(last=False)[1])
        if asked.epoch not in (0, -1):
            return None

        def answered(start: memoryview) -> None:
            if share_fetch_error(start) != 0 or key not in self._sessions:
                return
            if asked.epoch == -1:
                self._topics -= len(self._sessions.pop(key))
                return
            session = self._sessions[key]
            left = {topic_id: number for topic_id, number in session.items() if number >= sent}
            self._topics -= len(session) - len(left)
            self._sessions[key] = left

        return answered


class ShareTopicsWithoutRefused:
    """ShareFetch and ShareAcknowledge: the partitions of a topic the principal may not read refused, the rest handed
    to ``inner`` (the consume quota's handler, for ShareFetch) and forwarded; a topic given by an id the proxy could not
    name is refused too (``refused_by_name_or_id``). With the authorizer, ShareFetch's share sessions are followed
    (``ShareSessions``); without it, the topics refused (the proxy's own) are always refused, and no session can gain
    one."""

    def __init__(self, access: Access, topic_names: TopicNames, inner: RequestHandler | None = None) -> None:
        self._access = access
        self._topic_names = topic_names
        self._inner = inner
        self._sessions = ShareSessions()

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        body = frame[header.length:]
        asked = share_session_asked(version, body) \
            if self._access.authorizer is not None and api_key == Api.SHARE_FETCH else None
        if asked is not None and asked.session is None:
            asked = None  # without a group: Kafka refuses it before it looks at any session, and so does the cluster
        key = _session_key(caller, asked)
        named = list(asked.named) if asked is not None else share_topic_ids(api_key, version, body)  # read once
        unnamed = self._topic_names.unknown([*named, *self._sessions.topic_ids(key, asked)])
        if unnamed:
            # a copy: the connection's buffer moves on
            return self._once_named(header, bytes(frame), caller, unnamed, asked)
        return self._decide(header, frame, caller, asked)

    async def _once_named(self, header: RequestHeader, frame: bytes, caller: Caller, unnamed: set[bytes],
                          asked: ShareSessionAsked | None) -> Outcome:
        await self._topic_names.look_up(unnamed)
        decided = self._decide(header, memoryview(frame), caller.later(), asked)
        return decided if isinstance(decided, Outcome) else await decided

    def _decide(self, header: RequestHeader, frame: memoryview, caller: Caller,
                asked: ShareSessionAsked | None) -> Decided:
        api_key, version = header.api_key, header.api_version
        by_name_or_id = refused_by_name_or_id(self._access.topic_refusal(caller, AclOperation.READ), self._topic_names)

        def refused_id(topic_id: bytes) -> bool:
            return by_name_or_id(None, topic_id)

        key = _session_key(caller, asked)
        if not self._sessions.may_continue(key, asked, refused_id):
            return local_answer(header, share_session_not_found(version))
        refused = share_refused(api_key, version, frame[header.length:], refused_id)
        if refused is not None and refused.forwarded_body is None:
            return local_answer(header, share_answer_with_refusals(api_key, version, None, refused))
        answered = self._sessions.forwarding(key, asked, () if asked is None else (
            topic_id for topic_id in asked.named if not refused_id(topic_id) and self._topic_names.name(topic_id)))
        if refused is None or refused.forwarded_body is None:
            decided = FORWARD if self._inner is None else self._inner.on_request(header, frame, caller)
            return decided if answered is None else observing_answer(decided, answered)
        kept = bytes(frame[:header.length]) + refused.forwarded_body
        # the header is kept as it was: only the body is rewritten
        decided = FORWARD if self._inner is None else self._inner.on_request(header, memoryview(kept), caller)
        assert isinstance(decided, Forward), "the consume quota forwards, and decides at once"
        finished = finished_whole(decided, frame_of(kept),
                                  lambda body: share_answer_with_refusals(api_key, version, body, refused))
        return finished if answered is None else observing_answer(finished, answered)


def _session_key(caller: Caller, asked: ShareSessionAsked | None) -> SessionKey:
    group, member = ("", "") if asked is None or asked.session is None else asked.session
    return caller.broker, group, member
