"""Topics a request's principal may not use, kept from it as Kafka keeps them: the proxy's own topics from every
client, and with the authorizer the topics Kafka's ACLs do not allow (``proxy.security.access``).

The proxy keeps topics on the cluster (the fleet's usage and quotas topics, the producer-ID blocks topic) and writes
them with its own login, which the cluster lets do anything with them whoever the client is: a client that wrote the
quotas topic would set any principal's quota on the whole fleet. So no client request reaches them, super users'
neither: Produce refuses them (``proxy.handlers.produce``), CreateTopics, DeleteTopics and CreatePartitions too
(``proxy.handlers.topic_mutations``), Fetch (``proxy.handlers.fetch``), Metadata does not show them, and the APIs
naming topics' partitions, ShareFetch, ShareAcknowledge and the share groups' offset APIs refuse them (here), and
the config APIs (``proxy.handlers.config_resources``). With the authorizer, Metadata, DescribeTopicPartitions and
the APIs Kafka authorizes by one operation on each topic alone (``TOPIC_OPERATIONS``) refuse the topics the ACLs do
not allow as well.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping

from protocol.apis import Api
from protocol.authorization_answers import group_id
from protocol.codecs import encode_response, max_version
from protocol.errors import GROUP_AUTHORIZATION_FAILED
from protocol.header import RequestHeader
from protocol.refused_topics import (
    Authorized,
    MetadataAsked,
    NameRefusal,
    answer_with_refusals,
    described_topics_asked,
    described_topics_refused,
    metadata_answer,
    metadata_asked,
    offset_deletions_answer,
    offset_deletions_refused,
    share_answer_with_refusals,
    share_refused,
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
    replacement_request,
)
from proxy.decision.outcome import frame as frame_of
from proxy.security.access import Access, requester_of
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

_REMEMBERED_ANSWER_BYTES = 1 << 20
"""All-topics answers left without the refused topics, remembered by the bytes the cluster sent (clients ask for
them again and again, and a large cluster's answer costs milliseconds to decode)."""

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
missing need more (a transactional id, the cluster); with the authorizer only super users' requests of them come
this far (``proxy.handlers.authorization``), and they are refused the proxy's own topics alone."""


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

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        access = self._access
        refused = access.topic_refusal(caller, AclOperation.DESCRIBE)
        creation_refused = None if access.allows(caller, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) \
            else access.topic_refusal(caller, AclOperation.CREATE)
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
    the topics it may not describe left out of an all-topics answer, refused when named; with the authorizer, each
    topic's authorized operations its own (``DescribeTopicPartitionsRequestHandler`` always gives them)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        refused = self._access.topic_refusal(caller, AclOperation.DESCRIBE)
        authorizer = self._access.authorizer
        asked = described_topics_asked(frame[header.length:], version, refused)
        if authorizer is None and not (asked.all_topics or asked.refused_names):
            return FORWARD
        if asked.refused_names and asked.forwarded_body is None:
            return local_answer(header, described_topics_refused(version, asked))
        authorized = None
        if authorizer is not None:
            requester = requester_of(caller)
            authorized = Authorized(lambda name: authorizer.authorized_operations(requester, ResourceType.TOPIC, name),
                                    0)
            asked = asked._replace(topic_operations=True)
        replacement = None if asked.forwarded_body is None else replacement_request(frame, header,
                                                                                     asked.forwarded_body)
        return Forward(replacement=replacement, on_response=OnResponse(finish=lambda body: metadata_answer(
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


class ShareGroupOffsetsWithoutReserved:
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: a reserved topic refused, and
    left out of a group's answer for all its topics (so these, rare admin requests, are each read)."""

    def __init__(self, reserved_topics: frozenset[str]) -> None:
        self._reserved = reserved_topics

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        refused = share_offsets_refused(api_key, version, frame[header.length:], self._reserved)
        if refused is None:
            return FORWARD
        return Forward(replacement=replacement_request(frame, header, refused.forwarded_body), on_response=OnResponse(
            finish=lambda body: share_offsets_answer(api_key, version, body, refused)))


class ShareTopicsWithoutRefused:
    """ShareFetch and ShareAcknowledge: the partitions of a topic the principal may not read refused, the rest handed
    to ``inner`` (the consume quota's handler, for ShareFetch) and forwarded."""

    def __init__(self, access: Access, topic_names: TopicNames, inner: RequestHandler | None = None) -> None:
        self._access = access
        self._topic_names = topic_names
        self._inner = inner

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        unnamed = self._topic_names.unknown(share_topic_ids(header.api_key, header.api_version,
                                                            frame[header.length:]))
        if unnamed:
            return self._once_named(header, bytes(frame), caller, unnamed)  # a copy: the connection's buffer moves on
        return self._decide(header, frame, caller)

    async def _once_named(self, header: RequestHeader, frame: bytes, caller: Caller, unnamed: set[bytes]) -> Outcome:
        await self._topic_names.look_up(unnamed)
        decided = self._decide(header, memoryview(frame), caller.later())
        return decided if isinstance(decided, Outcome) else await decided

    def _decide(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        refused_name = self._access.topic_refusal(caller, AclOperation.READ)
        refused = share_refused(api_key, version, frame[header.length:],
                                lambda topic_id: refused_name(self._topic_names.name(topic_id)))
        if refused is None:
            return FORWARD if self._inner is None else self._inner.on_request(header, frame, caller)
        if refused.forwarded_body is None:
            return local_answer(header, share_answer_with_refusals(api_key, version, None, refused))
        kept = bytes(frame[:header.length]) + refused.forwarded_body
        # the header is kept as it was: only the body is rewritten
        decided = FORWARD if self._inner is None else self._inner.on_request(header, memoryview(kept), caller)
        assert isinstance(decided, Forward), "the consume quota forwards, and decides at once"
        return finished_whole(decided, frame_of(kept),
                              lambda body: share_answer_with_refusals(api_key, version, body, refused))
