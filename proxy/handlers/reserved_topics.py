"""The proxy's own topics, kept from clients: Metadata as Kafka answers a principal that may not describe them.

The proxy keeps topics on the cluster (the fleet's usage and quotas topics, the producer-ID blocks topic) and writes
them with its own login, which the cluster lets do anything with them whoever the client is: a client that wrote the
quotas topic would set any principal's quota on the whole fleet. So no client request reaches them: Produce refuses
them (``proxy.handlers.produce``), CreateTopics, DeleteTopics and CreatePartitions too
(``proxy.handlers.topic_mutations``), Fetch (``proxy.handlers.fetch``), Metadata does not show them, and the APIs
naming topics' partitions, the config APIs, ShareFetch, ShareAcknowledge and the share groups' offset APIs refuse
them (here).
"""

from __future__ import annotations

from protocol.apis import Api
from protocol.header import RequestHeader
from protocol.reserved_topics import (
    answer_with_refusals,
    described_topics_asked,
    described_topics_refused,
    metadata_answer,
    metadata_asked,
    share_answer_with_refusals,
    share_refused,
    share_topic_ids,
    topics_refused,
)
from protocol.share_group_offsets import share_offsets_answer, share_offsets_refused
from proxy.cluster.rewrites import RewriteMemo
from proxy.cluster.topic_names import TopicNames
from proxy.decision.interception import RequestHandler
from proxy.decision.outcome import (
    FORWARD,
    Caller,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    finished_whole,
    local_answer,
    replacement_request,
)
from proxy.decision.outcome import frame as frame_of

_REMEMBERED_ANSWER_BYTES = 1 << 20
"""All-topics answers left without the reserved topics, remembered by the bytes the cluster sent (clients ask
for them again and again, and a large cluster's answer costs milliseconds to decode)."""


class MetadataWithoutReservedTopics:
    def __init__(self, reserved_topics: frozenset[str]) -> None:
        self._reserved = reserved_topics
        self._all_topics_answers = RewriteMemo(_REMEMBERED_ANSWER_BYTES)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        asked = metadata_asked(frame[header.length:], version, self._reserved)
        if not (asked.all_topics or asked.refused_names or asked.by_id):
            return FORWARD  # names only topics of the clients'

        def finish(body: memoryview) -> bytes:
            if asked.all_topics and not asked.refused_names:  # the same answer for every client: remembered
                return self._all_topics_answers.rewritten(
                    (Api.METADATA, version, bytes(body)),
                    lambda: metadata_answer(body, version, asked, self._reserved)) or bytes(body)
            return metadata_answer(body, version, asked, self._reserved)

        replacement = None if asked.forwarded_body is None else replacement_request(frame, header,
                                                                                     asked.forwarded_body)
        return Forward(replacement=replacement, on_response=OnResponse(finish=finish))



class DescribedTopicsWithoutReserved:
    """DescribeTopicPartitions (Kafka's Java AdminClient describes topics with it) as Kafka answers a principal
    that may not describe the reserved topics: left out of an all-topics answer, refused when named."""

    def __init__(self, reserved_topics: frozenset[str]) -> None:
        self._reserved = reserved_topics

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        asked = described_topics_asked(frame[header.length:], version, self._reserved)
        if not (asked.all_topics or asked.refused_names):
            return FORWARD
        if asked.refused_names and asked.forwarded_body is None:
            return local_answer(header, described_topics_refused(version, asked))
        replacement = None if asked.forwarded_body is None else replacement_request(frame, header,
                                                                                     asked.forwarded_body)
        return Forward(replacement=replacement, on_response=OnResponse(finish=lambda body: metadata_answer(
            body, version, asked, self._reserved, Api.DESCRIBE_TOPIC_PARTITIONS)))


class TopicsWithoutReserved:
    """The APIs naming topics' partitions, and the config APIs: a reserved topic refused, the rest forwarded."""

    def __init__(self, reserved_topics: frozenset[str]) -> None:
        self._reserved = reserved_topics
        self._encoded = [name.encode() for name in reserved_topics]

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        request = bytes(frame)  # these requests are small: searched before any decode
        if not any(name in request for name in self._encoded):
            return FORWARD
        api_key, version = header.api_key, header.api_version
        refused = topics_refused(api_key, version, frame[header.length:], self._reserved)
        if refused is None:
            return FORWARD
        if refused.forwarded_body is None:
            return local_answer(header, answer_with_refusals(api_key, version, None, refused))
        return Forward(replacement=replacement_request(frame, header, refused.forwarded_body), on_response=OnResponse(
            finish=lambda body: answer_with_refusals(api_key, version, body, refused)))


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


class ShareTopicsWithoutReserved:
    """ShareFetch and ShareAcknowledge: a reserved topic's partitions refused, the rest handed to ``inner`` (the
    consume quota's handler, for ShareFetch) and forwarded."""

    def __init__(self, reserved_topics: frozenset[str], topic_names: TopicNames,
                 inner: RequestHandler | None = None) -> None:
        self._reserved = reserved_topics
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
        refused = share_refused(api_key, version, frame[header.length:],
                                lambda topic_id: self._topic_names.name(topic_id) in self._reserved)
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
