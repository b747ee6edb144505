"""Requests and answers without the topics a principal may not use, shaped as Kafka shapes them.

A topic is refused to a request when its principal may not do the API's operation on it: the proxy's own topics
(``proxy.handlers.refused_topics``) to every client, and, with the authorizer, the topics Kafka's ACLs do not allow
(``proxy.security.access``). Metadata (``KafkaApis.handleTopicMetadataRequest``) and DescribeTopicPartitions leave a
topic the principal may not describe out of an all-topics answer, answer it TOPIC_AUTHORIZATION_FAILED when named (by
name: the name and a zero topic id; by id: the id and no name), and never create it. The APIs naming partitions of
topics (Fetch, ShareFetch and ShareAcknowledge among them) answer each partition of such a topic
TOPIC_AUTHORIZATION_FAILED after the others' results (the config APIs' are ``protocol.config_resources``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from protocol.apis import Api, request_class, response_class
from protocol.body_reader import BodyReader
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import (
    ERROR_MESSAGES,
    FETCH_SESSION_ID_NOT_FOUND,
    SHARE_SESSION_NOT_FOUND,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    ProtocolError,
)
from protocol.fetch import FIRST_SESSION_VERSION, FIRST_TOPIC_ID_FETCH_VERSION, NO_SESSION_EPOCH, TopicRef
from protocol.header import response_header_length

_ZERO_ID = uuid.UUID(int=0)


_DESCRIBED_TOPIC_CLASSES: dict[int, Any] = {
    Api.METADATA: response_class(Api.METADATA).MetadataResponseTopic,
    Api.DESCRIBE_TOPIC_PARTITIONS: response_class(Api.DESCRIBE_TOPIC_PARTITIONS).DescribeTopicPartitionsResponseTopic,
}


NameRefusal = Callable[[str | None], bool]
"""True for a topic name the request may not use (never for None: a topic id the cluster does not know)."""


_TOPIC_OPERATIONS_FIELDS: dict[int, tuple[str, bool]] = {Api.METADATA: ("authorized_operations", True),
                            Api.DESCRIBE_TOPIC_PARTITIONS: ("topic_authorized_operations", False)}
"""Where an answer's topic gives the authorized operations, and whether kafka-python reads that field as the set of
its bits' positions (else as the 32-bit field itself)."""


def bit_positions(bits: int) -> set[int]:
    return {position for position in range(32) if bits >> position & 1}


class MetadataAsked(NamedTuple):
    all_topics: bool
    refused_names: tuple[str, ...]
    """Topics the request names by name and may not describe, answered refused after the others."""
    by_id: bool
    """Topics are named by id (v12+): a refused one shows only in the cluster's answer."""
    forwarded_body: bytes | None
    """The request body without the refused and unknown names, or None when it goes as it came."""
    creation_withheld: frozenset[str] = frozenset()
    """Topics named, and to be created if missing (Metadata v0-3 always asks, v4+ says), that the principal may not
    create (CREATE on the cluster or the topic): those missing are kept from the cluster, refused
    (``unauthorizedForCreateTopics``) when it creates topics, unknown when it does not."""
    topic_operations: bool = False
    """The request asks for each topic's authorized operations (v8+)."""
    cluster_operations: bool = False
    """The request asks for the cluster's authorized operations (v8-10)."""
    unknown_names: tuple[str, ...] = ()
    """Topics named that are missing, answered UNKNOWN_TOPIC_OR_PARTITION after the others."""
    listed: bool = False
    """An all-topics request forwarded as the names of the topics the principal may describe: the topics of the
    answer the cluster could not describe (gone since) are left out."""


_FIRST_METADATA_WITH_AUTO_CREATION_FLAG = 4
_LAST_METADATA_WITH_CLUSTER_OPERATIONS = 10


class MetadataNamed(NamedTuple):
    names: tuple[str, ...]
    may_create: bool
    """It asks the cluster to create those missing (Metadata v0-3 always does, v4+ says)."""


_INT16_LENGTH = struct.Struct(">h")
_INT32_LENGTH = struct.Struct(">i")
_FIRST_FLEXIBLE_METADATA = 9
_FIRST_METADATA_WITH_TOPIC_IDS = 10
_FIRST_METADATA_WITH_OPERATIONS = 8
_ZERO_ID_BYTES = bytes(16)


def metadata_named(body: memoryview, version: int) -> MetadataNamed | None:
    """The topics a Metadata request names, read from its bytes without decoding it, when it names topics by name
    alone and asks for no authorized operations; None for any other (all topics, an id, operations asked, or one
    that does not read as Kafka lays it out: ``metadata_asked`` reads those, and says what is wrong)."""
    reader = BodyReader(body, version >= _FIRST_FLEXIBLE_METADATA)
    try:
        count = reader.length(_INT32_LENGTH)
        if count < 0 or (version == 0 and count == 0):
            return None  # every topic
        names = []
        for _ in range(count):
            if version >= _FIRST_METADATA_WITH_TOPIC_IDS:
                if body[reader.at:reader.at + 16] != _ZERO_ID_BYTES:
                    return None
                reader.skip(16)
            length = reader.length(_INT16_LENGTH)
            if length < 0:
                return None
            start = reader.at
            reader.skip(length)
            names.append(str(body[start:reader.at], "utf-8"))
            reader.tagged_fields()
        may_create = True
        if version >= _FIRST_METADATA_WITH_AUTO_CREATION_FLAG:
            may_create = body[reader.at] != 0
            reader.skip(1)
        if version >= _FIRST_METADATA_WITH_OPERATIONS:
            flags = 2 if version <= _LAST_METADATA_WITH_CLUSTER_OPERATIONS else 1
            if any(body[reader.at:reader.at + flags]):
                return None
            reader.skip(flags)
        reader.tagged_fields()
    except (IndexError, ValueError, UnicodeDecodeError, ProtocolError):
        return None
    return MetadataNamed(tuple(names), may_create) if reader.at == len(body) else None


def metadata_asked(body: memoryview, version: int, refused: NameRefusal,
                   creation_refused: NameRefusal | None = None, unknown: frozenset[str] = frozenset()
                   ) -> MetadataAsked:
    """What a Metadata request asks of the topics it may not describe (``refused``: left out of the request, and
    refused) or create (``creation_refused``, None when it may create any), and the body that goes to the cluster
    instead, without the ``unknown`` topics too (missing ones kept from auto-creation)."""
    request = decode_request(Api.METADATA, version, body)
    topic_operations = bool(getattr(request, "include_topic_authorized_operations", False))
    cluster_operations = version <= _LAST_METADATA_WITH_CLUSTER_OPERATIONS and bool(
        getattr(request, "include_cluster_authorized_operations", False))
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return MetadataAsked(True, (), False, None, frozenset(), topic_operations, cluster_operations)
    if any(getattr(topic, "topic_id", None) not in (None, _ZERO_ID) for topic in topics):
        # Kafka then reads the ids alone, whatever names come with them (``handleTopicMetadataRequest``): the
        # topics they name are judged in the answer
        return MetadataAsked(False, (), True, None, frozenset(), topic_operations, cluster_operations)
    # each once, as Kafka's sets of names answer them
    refused_names = tuple(dict.fromkeys(topic.name for topic in topics if refused(topic.name)))
    unknown_names = tuple(dict.fromkeys(topic.name for topic in topics
                                        if topic.name in unknown and not refused(topic.name)))
    by_id = any(topic.name is None for topic in topics)
    request.topics = [topic for topic in topics if not refused(topic.name) and topic.name not in unknown]
    withheld: frozenset[str] = frozenset()
    if creation_refused is not None and (version < _FIRST_METADATA_WITH_AUTO_CREATION_FLAG or
                                         request.allow_auto_topic_creation):
        withheld = frozenset(topic.name for topic in request.topics
                             if topic.name is not None and creation_refused(topic.name))
    if not (refused_names or unknown_names):
        return MetadataAsked(False, (), by_id, None, withheld, topic_operations, cluster_operations)
    forwarded = encode_request(Api.METADATA, version, request)
    # v0 reads no topics as all: the answer keeps only the refusals
    return MetadataAsked(version == 0 and not request.topics, refused_names, by_id, forwarded, withheld,
                         topic_operations, cluster_operations, unknown_names)


class Authorized(NamedTuple):
    """What the answer says of the principal's rights, when the proxy decides them (with the authorizer)."""

    topic_operations: Callable[[str], int]
    """The bit field of a topic's operations the principal may do."""
    cluster_operations: int
    """The cluster's (0 when the principal may not describe the cluster)."""


def metadata_answer(body: memoryview, version: int, asked: MetadataAsked, refused: NameRefusal,
                    api_key: int = Api.METADATA, authorized: Authorized | None = None) -> bytes:
    """The cluster's Metadata (or DescribeTopicPartitions) answer as the client gets it: topics it may not describe
    left out of an all-topics answer, one named by id answered refused with its id alone, the names refused
    appended (Kafka appends them too); with ``authorized``, the authorized operations asked for are the principal's,
    not the proxy's."""
    answer = decode_response(api_key, version, body)
    topic_class = _DESCRIBED_TOPIC_CLASSES[api_key]
    topics = []
    for topic in answer.topics:
        if not refused(topic.name):
            if asked.all_topics and (asked.refused_names or asked.unknown_names):  # v0 naming only those
                continue
            if asked.listed and topic.error_code:
                continue
            if authorized is not None and asked.topic_operations and topic.name is not None:
                field, as_bits = _TOPIC_OPERATIONS_FIELDS[api_key]
                operations = authorized.topic_operations(topic.name)
                setattr(topic, field, bit_positions(operations) if as_bits else operations)
            topics.append(topic)
        elif not asked.all_topics:  # named by id: Kafka does not disclose the name
            topics.append(_refused(topic_class, None, topic.topic_id))
    topics += [_refused(topic_class, name, _ZERO_ID) for name in asked.refused_names]
    topics += [_refused(topic_class, name, _ZERO_ID, UNKNOWN_TOPIC_OR_PARTITION) for name in asked.unknown_names]
    answer.topics = topics
    if authorized is not None and asked.cluster_operations:
        answer.authorized_operations = bit_positions(authorized.cluster_operations)
    return encode_response(api_key, version, answer)


def described_topics_request(body: memoryview, version: int) -> Any:
    """A DescribeTopicPartitions request, decoded."""
    return decode_request(Api.DESCRIBE_TOPIC_PARTITIONS, version, body)


def refused_whole(request: Any) -> bool:
    """Kafka refuses the request whole (INVALID_REQUEST for each topic it names) before it looks at any topic: a
    cursor naming a topic the list does not, or a negative partition (``DescribeTopicPartitionsRequestHandler``)."""
    cursor = request.cursor
    return cursor is not None and (cursor.partition_index < 0 or bool(request.topics) and
                                   cursor.topic_name not in {topic.name for topic in request.topics})


def _java_order(name: str) -> bytes:
    """The order of Java's ``String.compareTo`` (UTF-16 code units), which Kafka sorts topics and reads cursors by."""
    return name.encode("utf-16-be", "surrogatepass")


def described_topics_asked(request: Any, version: int, refused: NameRefusal) -> MetadataAsked:
    """What a DescribeTopicPartitions naming topics asks of those it may not describe: Kafka answers each named from
    the cursor on refused, after the others; and the body that goes to the cluster instead: None when it names
    only refused topics (nothing left to ask: an empty list would ask for every topic)."""
    cursor = request.cursor
    start = _java_order(cursor.topic_name) if cursor is not None else b""
    from_cursor = [topic for topic in request.topics if _java_order(topic.name) >= start]
    refused_names = tuple(dict.fromkeys(topic.name for topic in from_cursor if refused(topic.name)))
    if not refused_names:
        return MetadataAsked(False, (), False, None)
    # the topics before the cursor are gone with it: the cluster would describe them without one
    request.topics = [topic for topic in from_cursor if not refused(topic.name)]
    if cursor is not None and refused(cursor.topic_name):
        request.cursor = None  # it must name a topic of the list: the rest are described from their start
    forwarded = encode_request(Api.DESCRIBE_TOPIC_PARTITIONS, version, request) if request.topics else None
    return MetadataAsked(False, refused_names, False, forwarded)


def every_described_topic_asked(request: Any, version: int, every_topic: Iterable[str],
                                refused: NameRefusal) -> MetadataAsked:
    """A DescribeTopicPartitions of every topic, asked of the cluster as the names of every topic (``every_topic``)
    the principal may describe from the cursor on: Kafka pages over those alone, so a page holds as many of their
    partitions as asked and its cursor names one of them, where the cluster asked for every topic would page over
    all (the proxy's login may describe all) and its cursor could name a topic the principal may not describe. A
    topic gone since the names were read is left out of the answer, as Kafka leaves out of an all-topics answer one
    it cannot describe. The body is None when the principal may describe none of them: nothing to ask."""
    cursor = request.cursor
    start = _java_order(cursor.topic_name) if cursor is not None else b""
    listed = sorted((name for name in every_topic if _java_order(name) >= start and not refused(name)),
                    key=_java_order)
    if not listed:
        return MetadataAsked(True, (), False, None, listed=True)
    if cursor is not None and cursor.topic_name != listed[0]:
        request.cursor = None  # a topic it may not describe, or gone: the next is described from its start
    topic_class = request_class(Api.DESCRIBE_TOPIC_PARTITIONS).TopicRequest
    request.topics = [topic_class(name=name) for name in listed]
    return MetadataAsked(True, (), False, encode_request(Api.DESCRIBE_TOPIC_PARTITIONS, version, request),
                         listed=True)


def described_topics_refused(version: int, asked: MetadataAsked) -> bytes:
    """The answer to a DescribeTopicPartitions with nothing to ask of the cluster: each topic named refused, or,
    asking for every topic, none."""
    topic_class = _DESCRIBED_TOPIC_CLASSES[Api.DESCRIBE_TOPIC_PARTITIONS]
    return encode_response(Api.DESCRIBE_TOPIC_PARTITIONS, version, {
        "throttle_time_ms": 0, "next_cursor": None,
        "topics": [_refused(topic_class, name, _ZERO_ID) for name in asked.refused_names]})


def _refused(topic_class: Any, name: str | None, topic_id: uuid.UUID | None,
             error_code: int = TOPIC_AUTHORIZATION_FAILED) -> Any:
    return topic_class(error_code=error_code, name=name, topic_id=topic_id, is_internal=False, partitions=[])


class _PartitionedApi(NamedTuple):
    """Where a request names topics and their partitions, and where its answer puts each partition's result."""

    topics: str
    name: str
    """The topic's name field, in request and answer alike."""
    request_partitions: str
    request_index: str | None
    """The index field of a request's partition; None when the partitions are bare indexes."""
    answer_topic: str
    answer_partition: str
    answer_index: str
    answer_topics: str = ""
    """The answer's topics field, when not the request's."""
    answer_partitions: str = "partitions"

    def answered_topics(self) -> str:
        return self.answer_topics or self.topics


PARTITIONED_APIS: dict[int, _PartitionedApi] = {
    Api.LIST_OFFSETS: _PartitionedApi("topics", "name", "partitions", "partition_index", "ListOffsetsTopicResponse",
                                      "ListOffsetsPartitionResponse", "partition_index"),
    Api.OFFSET_COMMIT: _PartitionedApi("topics", "name", "partitions", "partition_index", "OffsetCommitResponseTopic",
                                       "OffsetCommitResponsePartition", "partition_index"),
    Api.DELETE_RECORDS: _PartitionedApi("topics", "name", "partitions", "partition_index", "DeleteRecordsTopicResult",
                                        "DeleteRecordsPartitionResult", "partition_index"),
    Api.OFFSET_FOR_LEADER_EPOCH: _PartitionedApi("topics", "topic", "partitions", "partition",
                                                 "OffsetForLeaderTopicResult", "EpochEndOffset", "partition"),
    Api.TXN_OFFSET_COMMIT: _PartitionedApi("topics", "name", "partitions", "partition_index",
                                           "TxnOffsetCommitResponseTopic", "TxnOffsetCommitResponsePartition",
                                           "partition_index"),
    Api.OFFSET_DELETE: _PartitionedApi("topics", "name", "partitions", "partition_index", "OffsetDeleteResponseTopic",
                                       "OffsetDeleteResponsePartition", "partition_index"),
    Api.DESCRIBE_PRODUCERS: _PartitionedApi("topics", "name", "partition_indexes", None, "TopicResponse",
                                            "PartitionResponse", "partition_index"),
    # authorized on the CLUSTER by Kafka, not per topic: their partitions' leadership and placement are refused
    # here all the same (a null topic list elects every partition's preferred leader, which changes no data)
    Api.ELECT_LEADERS: _PartitionedApi("topic_partitions", "topic", "partitions", None, "ReplicaElectionResult",
                                       "PartitionResult", "partition_id", "replica_election_results",
                                       "partition_result"),
    Api.ALTER_PARTITION_REASSIGNMENTS: _PartitionedApi("topics", "name", "partitions", "partition_index",
                                                       "ReassignableTopicResponse", "ReassignablePartitionResponse",
                                                       "partition_index", "responses"),
}


class TopicsRefused(NamedTuple):
    refused: tuple[tuple[str, tuple[int, ...]], ...]
    """Each refused topic the request names, with its partitions."""
    forwarded_body: bytes | None
    """The request body without them, or None when nothing of the request is left to forward."""


def topics_refused(api_key: int, version: int, body: memoryview, refused: NameRefusal) -> TopicsRefused | None:
    """The request's refused topics and the body that goes to the cluster instead, or None when it names none."""
    request = decode_request(api_key, version, body)
    api = PARTITIONED_APIS[api_key]
    topics = getattr(request, api.topics)
    if topics is None:
        return None
    refusals = tuple((getattr(topic, api.name), _partition_indexes(api, topic)) for topic in topics
                     if refused(getattr(topic, api.name)))
    if not refusals:
        return None
    setattr(request, api.topics, [topic for topic in topics if not refused(getattr(topic, api.name))])
    kept = bool(getattr(request, api.topics))
    return TopicsRefused(refusals, encode_request(api_key, version, request) if kept else None)


def _partition_indexes(api: _PartitionedApi, topic: Any) -> tuple[int, ...]:
    partitions = getattr(topic, api.request_partitions)
    return tuple(partitions if api.request_index is None else (getattr(p, api.request_index) for p in partitions))


def answer_with_refusals(api_key: int, version: int, upstream_body: memoryview | None, refused: TopicsRefused,
                         error_code: int = TOPIC_AUTHORIZATION_FAILED) -> bytes:
    """The cluster's answer (or, with nothing forwarded, an empty one) with the refused topics after its own, each
    partition answered ``error_code`` (a partitioned API's: GROUP_AUTHORIZATION_FAILED when its group is refused)."""
    cls = response_class(api_key)
    answer = cls(version=version, throttle_time_ms=0) if upstream_body is None else \
        decode_response(api_key, version, upstream_body)
    api = PARTITIONED_APIS[api_key]
    topic_class = getattr(cls, api.answer_topic)
    partition_class = getattr(topic_class, api.answer_partition)
    partition_fields: dict[str, Any] = {"error_message": ERROR_MESSAGES[error_code]} \
        if "error_message" in partition_class.fields and error_code == TOPIC_AUTHORIZATION_FAILED else {}
    if "low_watermark" in partition_class.fields:  # DeleteRecords': unknown (``INVALID_LOW_WATERMARK``)
        partition_fields["low_watermark"] = -1
    topics = [topic_class(**{api.name: name, api.answer_partitions: [
        partition_class(**{api.answer_index: index, "error_code": error_code, **partition_fields})
        for index in indexes]}) for name, indexes in refused.refused]
    setattr(answer, api.answered_topics(), [*(getattr(answer, api.answered_topics()) or []), *topics])
    return encode_response(api_key, version, answer)


def offset_deletions_refused(version: int, body: memoryview, refused: NameRefusal) -> TopicsRefused | None:
    """An OffsetDelete's refused topics, and the request without them: asked of the cluster even with none left, for
    the group's own error (``handleOffsetDeleteRequest`` asks the coordinator whatever is left)."""
    refusals = topics_refused(Api.OFFSET_DELETE, version, body, refused)
    if refusals is None or refusals.forwarded_body is not None:
        return refusals
    request = decode_request(Api.OFFSET_DELETE, version, body)
    request.topics = []
    return TopicsRefused(refusals.refused, encode_request(Api.OFFSET_DELETE, version, request))


def offset_deletions_answer(version: int, upstream_body: memoryview, refused: TopicsRefused) -> bytes | None:
    """The cluster's answer with each refused topic's partitions first, TOPIC_AUTHORIZATION_FAILED, a topic named
    twice answered once; None (the cluster's as it is) when it refused the whole request
    (``OffsetDeleteResponse.Builder``: ``getOrCreateTopic``, ``merge``)."""
    answer = decode_response(Api.OFFSET_DELETE, version, upstream_body)
    if answer.error_code:
        return None
    topic_class = response_class(Api.OFFSET_DELETE).OffsetDeleteResponseTopic
    partition_class = topic_class.OffsetDeleteResponsePartition
    partitions: dict[str, list[int]] = {}
    for name, indexes in refused.refused:
        partitions.setdefault(name, []).extend(indexes)
    answer.topics = [*(topic_class(name=name, partitions=[
        partition_class(partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED) for index in indexes])
        for name, indexes in partitions.items()), *answer.topics]
    return encode_response(Api.OFFSET_DELETE, version, answer)


_Refusal = TypeVar("_Refusal")


def _split(topics: list[Any], refusal: Callable[[Any], _Refusal | None]) -> tuple[list[_Refusal], list[Any]]:
    """The request's topics as the refusals of the refused ones and the others, kept in order."""
    refused: list[_Refusal] = []
    kept = []
    for topic in topics:
        refused_topic = refusal(topic)
        if refused_topic is None:
            kept.append(topic)
        else:
            refused.append(refused_topic)
    return refused, kept


class FetchRefused(NamedTuple):
    refused: tuple[tuple[TopicRef, tuple[int, ...]], ...]
    """Each refused topic the request names (by name, or v13+ by its 16-byte id), with its partitions."""
    forwarded_body: bytes | None
    """The request without them, outside any fetch session; None when nothing is left to ask."""


NOTHING_REFUSED = FetchRefused((), None)
"""A Fetch naming no topic (an incremental one), all of it refused: answered with no partitions."""


def fetch_refused(body: memoryview, version: int, refused: Callable[[TopicRef], bool]) -> FetchRefused | None:
    """The refused topics of a Fetch and the request that goes to the cluster instead, or None when it names none.

    The rest goes as a full fetch outside any session: the cluster then keeps no session without the topic, and
    the client, given no session, asks for it again in full and is refused again, as Kafka refuses it at every
    fetch of a topic the principal may not read."""
    request = decode_request(Api.FETCH, version, body)
    by_id = version >= FIRST_TOPIC_ID_FETCH_VERSION

    def refusal(topic: Any) -> tuple[TopicRef, tuple[int, ...]] | None:
        ref: TopicRef = (topic.topic_id or _ZERO_ID).bytes if by_id else topic.topic
        return (ref, tuple(partition.partition for partition in topic.partitions)) if refused(ref) else None

    refusals, kept = _split(request.topics, refusal)
    if not refusals:
        return None
    if not kept:
        return FetchRefused(tuple(refusals), None)
    request.topics = kept
    if version >= FIRST_SESSION_VERSION:
        request.session_id, request.session_epoch = 0, NO_SESSION_EPOCH
        request.forgotten_topics_data = []
    return FetchRefused(tuple(refusals), encode_request(Api.FETCH, version, request))


def fetch_answer_with_refusals(version: int, upstream_body: memoryview | None, refused: FetchRefused) -> bytes:
    """The cluster's Fetch answer (or, with nothing forwarded, an empty one) with each refused partition after
    its own: TOPIC_AUTHORIZATION_FAILED, no records, its offsets unknown (``FetchResponse.partitionResponse``)."""
    cls = response_class(Api.FETCH)
    answer = cls(version=version, throttle_time_ms=0, error_code=0, session_id=0, responses=[]) \
        if upstream_body is None else decode_response(Api.FETCH, version, upstream_body)
    topic_class = cls.FetchableTopicResponse
    for ref, partitions in refused.refused:
        named: dict[str, Any] = {"topic_id": uuid.UUID(bytes=ref)} if isinstance(ref, bytes) else {"topic": ref}
        answer.responses.append(topic_class(**named, partitions=[topic_class.PartitionData(
            partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED, high_watermark=-1, last_stable_offset=-1,
            log_start_offset=-1, records=b"") for index in partitions]))
    return encode_response(Api.FETCH, version, answer)


def fetch_session_not_found(version: int) -> bytes:
    """The answer to an incremental fetch adding a refused topic (with the authorizer, to any incremental fetch): its
    session is gone, so the client asks again in full (``FetchResponse`` with FETCH_SESSION_ID_NOT_FOUND), and that
    full fetch is judged whole."""
    return encode_response(Api.FETCH, version, {"throttle_time_ms": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND,
                                                "session_id": 0, "responses": []})


SHARE_APIS = frozenset({Api.SHARE_FETCH, Api.SHARE_ACKNOWLEDGE})


class ShareRefused(NamedTuple):
    refused: tuple[tuple[bytes, tuple[int, ...], frozenset[int]], ...]
    """Each refused topic's id, its partitions, and those of them the request acknowledged records of."""
    forwarded_body: bytes | None
    """The request without them, or None when nothing is left to ask."""


def share_refused(api_key: int, version: int, body: memoryview,
                  refused: Callable[[bytes], bool]) -> ShareRefused | None:
    """The refused topics a ShareFetch or ShareAcknowledge names (by id: these APIs name topics no other way), and
    the request that goes to the cluster instead; None when it names none. A share session cannot be left as a
    Fetch session can: a refused topic never enters one, and one the ACLs stop allowing is the handler's to find
    (``proxy.handlers.refused_topics.ShareSessions``)."""
    request = decode_request(api_key, version, body)

    def refusal(topic: Any) -> tuple[bytes, tuple[int, ...], frozenset[int]] | None:
        topic_id = (topic.topic_id or _ZERO_ID).bytes
        return (topic_id, tuple(p.partition_index for p in topic.partitions),
                frozenset(p.partition_index for p in topic.partitions if p.acknowledgement_batches)) \
            if refused(topic_id) else None

    refusals, kept = _split(request.topics, refusal)
    if not refusals:
        return None
    if not kept:
        return ShareRefused(tuple(refusals), None)
    request.topics = kept
    return ShareRefused(tuple(refusals), encode_request(api_key, version, request))


def share_answer_with_refusals(api_key: int, version: int, upstream_body: memoryview | None,
                               refused: ShareRefused) -> bytes:
    """The cluster's answer (or an empty one) with each refused partition after the others: TOPIC_AUTHORIZATION_FAILED,
    for its acknowledgements too, and no records."""
    cls = response_class(api_key)
    answer = cls(version=version, throttle_time_ms=0, error_code=0, error_message=None,
                 acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[]) \
        if upstream_body is None else decode_response(api_key, version, upstream_body)
    if answer.error_code:  # an error of the whole request stands alone, as Kafka sends it
        return bytes(upstream_body or b"")
    topic_class = cls.ShareFetchableTopicResponse if api_key == Api.SHARE_FETCH else cls.ShareAcknowledgeTopicResponse
    partition_class = topic_class.PartitionData
    no_leader = partition_class.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    for topic_id, partitions, acknowledged in refused.refused:
        if api_key == Api.SHARE_FETCH:
            results = [partition_class(partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED,
                                       acknowledge_error_code=TOPIC_AUTHORIZATION_FAILED if index in acknowledged
                                       else 0, current_leader=no_leader, records=b"", acquired_records=[])
                       for index in partitions]
        else:
            results = [partition_class(partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED,
                                       current_leader=no_leader) for index in partitions]
        answer.responses.append(topic_class(topic_id=uuid.UUID(bytes=topic_id), partitions=results))
    return encode_response(api_key, version, answer)


SharePartitions = dict[bytes, frozenset[int]]
"""Partitions of a share session, by topic id."""


class ShareSessionAsked(NamedTuple):
    """What a ShareFetch asks of its share session (``SharePartitionManager.newContext``)."""

    session: tuple[str, str] | None
    """Its group and member (Kafka's share session key); None when Kafka refuses the request before it looks at its
    session (no group)."""
    epoch: int
    """0 opens a new session, -1 closes it, any other continues it."""
    named: SharePartitions
    forgotten: SharePartitions


def share_session_asked(version: int, body: memoryview) -> ShareSessionAsked:
    request = decode_request(Api.SHARE_FETCH, version, body)

    def partitions(topics: list[Any], indexes: Callable[[Any], list[int]]) -> SharePartitions:
        by_topic: dict[bytes, frozenset[int]] = {}
        for topic in topics:
            topic_id = (topic.topic_id or _ZERO_ID).bytes
            by_topic[topic_id] = by_topic.get(topic_id, frozenset()) | frozenset(indexes(topic))
        return by_topic

    session = None if request.group_id is None else (request.group_id, request.member_id or "")
    return ShareSessionAsked(session, request.share_session_epoch,
                             partitions(request.topics, lambda topic: [p.partition_index for p in topic.partitions]),
                             partitions(request.forgotten_topics_data, lambda topic: topic.partitions))


_SHARE_FETCH_ERROR = struct.Struct(">h")


def share_fetch_error(start: memoryview) -> int:
    """The error of a whole ShareFetch answer, from its start (its header included, always flexible): after its
    throttle."""
    at = response_header_length(start, True) + 4
    if len(start) < at + _SHARE_FETCH_ERROR.size:
        raise ProtocolError("share fetch response ends before its error code", api_key=Api.SHARE_FETCH,
                            offset=len(start))
    return int(_SHARE_FETCH_ERROR.unpack_from(start, at)[0])


def share_session_not_found(version: int) -> bytes:
    """The answer to a ShareFetch continuing a share session that holds a topic now refused (or one the proxy does not
    know): SHARE_SESSION_NOT_FOUND, so the client opens a new session naming all it reads, which is judged whole."""
    return encode_response(Api.SHARE_FETCH, version, {"throttle_time_ms": 0, "error_code": SHARE_SESSION_NOT_FOUND,
                                                      "error_message": None, "acquisition_lock_timeout_ms": 0,
                                                      "responses": [], "node_endpoints": []})


def share_topic_ids(api_key: int, version: int, body: memoryview) -> list[bytes]:
    """The topic ids a ShareFetch or ShareAcknowledge names."""
    return [(topic.topic_id or _ZERO_ID).bytes for topic in decode_request(api_key, version, body).topics]
