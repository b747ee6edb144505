"""Requests and answers without the topics a principal may not describe, shaped as Kafka shapes them.

The proxy keeps topics of its own (``proxy.handlers.reserved_topics``); to a client they are what a topic it may not
describe is to Kafka. Metadata (``KafkaApis.handleTopicMetadataRequest``) and DescribeTopicPartitions leave them out
of an all-topics answer, answer them TOPIC_AUTHORIZATION_FAILED when named (by name: the name and a zero topic id; by
id: the id and no name), and never create them. The APIs naming partitions of topics (Fetch, ShareFetch and
ShareAcknowledge among them) answer each partition of such a topic TOPIC_AUTHORIZATION_FAILED after the others'
results; the config APIs answer such a topic resource TOPIC_AUTHORIZATION_FAILED with "Topic authorization failed."
(``ConfigHelper``, ``ControllerApis``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import FETCH_SESSION_ID_NOT_FOUND, TOPIC_AUTHORIZATION_FAILED
from protocol.fetch import FIRST_SESSION_VERSION, FIRST_TOPIC_ID_FETCH_VERSION, NO_SESSION_EPOCH, TopicRef

_ZERO_ID = uuid.UUID(int=0)


_DESCRIBED_TOPIC_CLASSES: dict[int, Any] = {
    Api.METADATA: response_class(Api.METADATA).MetadataResponseTopic,
    Api.DESCRIBE_TOPIC_PARTITIONS: response_class(Api.DESCRIBE_TOPIC_PARTITIONS).DescribeTopicPartitionsResponseTopic,
}


class MetadataAsked(NamedTuple):
    all_topics: bool
    refused_names: tuple[str, ...]
    """Reserved topics the request names by name, answered refused after the others."""
    by_id: bool
    """Topics are named by id (v12+): a reserved one shows only in the cluster's answer."""
    forwarded_body: bytes | None
    """The request body without the refused names, or None when it goes as it came."""


def metadata_asked(body: memoryview, version: int, reserved: frozenset[str]) -> MetadataAsked:
    """What a Metadata request asks of the reserved topics, and the body that goes to the cluster instead."""
    request = decode_request(Api.METADATA, version, body)
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return MetadataAsked(True, (), False, None)
    refused = tuple(topic.name for topic in topics if topic.name in reserved)
    by_id = any(topic.name is None for topic in topics)
    if not refused:
        return MetadataAsked(False, (), by_id, None)
    request.topics = [topic for topic in topics if topic.name not in reserved]
    if version == 0 and not request.topics:  # v0 reads no topics as all: the answer keeps only the refusals
        return MetadataAsked(True, refused, by_id, encode_request(Api.METADATA, version, request))
    return MetadataAsked(False, refused, by_id, encode_request(Api.METADATA, version, request))


def metadata_answer(body: memoryview, version: int, asked: MetadataAsked, reserved: frozenset[str],
                    api_key: int = Api.METADATA) -> bytes:
    """The cluster's Metadata (or DescribeTopicPartitions) answer as the client gets it: reserved topics left out of
    an all-topics answer, one named by id answered refused with its id alone, the names refused appended (Kafka
    appends them too)."""
    answer = decode_response(api_key, version, body)
    topic_class = _DESCRIBED_TOPIC_CLASSES[api_key]
    topics = []
    for topic in answer.topics:
        if topic.name not in reserved:
            if not (asked.all_topics and asked.refused_names):  # a v0 request naming only reserved topics
                topics.append(topic)
        elif not asked.all_topics:  # named by id: Kafka does not disclose the name
            topics.append(_refused(topic_class, None, topic.topic_id))
    topics += [_refused(topic_class, name, _ZERO_ID) for name in asked.refused_names]
    answer.topics = topics
    return encode_response(api_key, version, answer)


def described_topics_asked(body: memoryview, version: int, reserved: frozenset[str]) -> MetadataAsked:
    """What a DescribeTopicPartitions request asks of the reserved topics (``DescribeTopicPartitionsRequestHandler``:
    no topics is every topic), and the body that goes to the cluster instead: None when it names only reserved
    topics (nothing left to ask: an empty list would ask for every topic)."""
    request = decode_request(Api.DESCRIBE_TOPIC_PARTITIONS, version, body)
    if not request.topics:
        return MetadataAsked(True, (), False, None)
    refused = tuple(topic.name for topic in request.topics if topic.name in reserved)
    if not refused:
        return MetadataAsked(False, (), False, None)
    request.topics = [topic for topic in request.topics if topic.name not in reserved]
    if request.cursor is not None and request.cursor.topic_name in reserved:
        request.cursor = None  # it must name a topic of the list: the rest is described from its start
    forwarded = encode_request(Api.DESCRIBE_TOPIC_PARTITIONS, version, request) if request.topics else None
    return MetadataAsked(False, refused, False, forwarded)


def described_topics_refused(version: int, asked: MetadataAsked) -> bytes:
    """The answer to a DescribeTopicPartitions naming only reserved topics: each refused."""
    topic_class = _DESCRIBED_TOPIC_CLASSES[Api.DESCRIBE_TOPIC_PARTITIONS]
    return encode_response(Api.DESCRIBE_TOPIC_PARTITIONS, version, {
        "throttle_time_ms": 0, "next_cursor": None,
        "topics": [_refused(topic_class, name, _ZERO_ID) for name in asked.refused_names]})


def _refused(topic_class: Any, name: str | None, topic_id: uuid.UUID | None) -> Any:
    return topic_class(error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
                       partitions=[])


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
CONFIG_APIS = frozenset({Api.DESCRIBE_CONFIGS, Api.ALTER_CONFIGS, Api.INCREMENTAL_ALTER_CONFIGS})
_TOPIC_RESOURCE = 2
_TOPIC_AUTHORIZATION_FAILED_MESSAGE = "Topic authorization failed."


class TopicsRefused(NamedTuple):
    refused: tuple[tuple[str, tuple[int, ...]], ...]
    """Each reserved topic the request names, with its partitions (none for a config resource)."""
    forwarded_body: bytes | None
    """The request body without them, or None when nothing of the request is left to forward."""


def topics_refused(api_key: int, version: int, body: memoryview, reserved: frozenset[str]) -> TopicsRefused | None:
    """The request's reserved topics and the body that goes to the cluster instead, or None when it names none."""
    request = decode_request(api_key, version, body)
    refused: tuple[tuple[str, tuple[int, ...]], ...]
    if api_key in CONFIG_APIS:
        refused = tuple((resource.resource_name, ()) for resource in request.resources
                        if resource.resource_type == _TOPIC_RESOURCE and resource.resource_name in reserved)
        if not refused:
            return None
        request.resources = [resource for resource in request.resources
                             if not (resource.resource_type == _TOPIC_RESOURCE and resource.resource_name in reserved)]
        kept = bool(request.resources)
    else:
        api = PARTITIONED_APIS[api_key]
        topics = getattr(request, api.topics)
        if topics is None:
            return None
        refused = tuple((getattr(topic, api.name), _partition_indexes(api, topic)) for topic in topics
                        if getattr(topic, api.name) in reserved)
        if not refused:
            return None
        setattr(request, api.topics, [topic for topic in topics if getattr(topic, api.name) not in reserved])
        kept = bool(getattr(request, api.topics))
    return TopicsRefused(refused, encode_request(api_key, version, request) if kept else None)


def _partition_indexes(api: _PartitionedApi, topic: Any) -> tuple[int, ...]:
    partitions = getattr(topic, api.request_partitions)
    return tuple(partitions if api.request_index is None else (getattr(p, api.request_index) for p in partitions))


def answer_with_refusals(api_key: int, version: int, upstream_body: memoryview | None, refused: TopicsRefused) -> bytes:
    """The cluster's answer (or, with nothing forwarded, an empty one) with the refused topics after its own."""
    cls = response_class(api_key)
    answer = cls(version=version, throttle_time_ms=0) if upstream_body is None else \
        decode_response(api_key, version, upstream_body)
    if api_key in CONFIG_APIS:
        describes = api_key == Api.DESCRIBE_CONFIGS
        field = "results" if describes else "responses"
        result_class = cls.DescribeConfigsResult if describes else cls.AlterConfigsResourceResponse
        extra: dict[str, Any] = {"configs": []} if describes else {}
        results = [result_class(error_code=TOPIC_AUTHORIZATION_FAILED, resource_type=_TOPIC_RESOURCE,
                                error_message=_TOPIC_AUTHORIZATION_FAILED_MESSAGE, resource_name=name, **extra)
                   for name, _ in refused.refused]
        setattr(answer, field, [*(getattr(answer, field) or []), *results])
        return encode_response(api_key, version, answer)
    api = PARTITIONED_APIS[api_key]
    topic_class = getattr(cls, api.answer_topic)
    partition_class = getattr(topic_class, api.answer_partition)
    message = {"error_message": _TOPIC_AUTHORIZATION_FAILED_MESSAGE} if "error_message" in partition_class.fields \
        else {}
    topics = [topic_class(**{api.name: name, api.answer_partitions: [
        partition_class(**{api.answer_index: index, "error_code": TOPIC_AUTHORIZATION_FAILED, **message})
        for index in indexes]}) for name, indexes in refused.refused]
    setattr(answer, api.answered_topics(), [*(getattr(answer, api.answered_topics()) or []), *topics])
    return encode_response(api_key, version, answer)


_Refusal = TypeVar("_Refusal")


def _split(topics: list[Any], refusal: Callable[[Any], _Refusal | None]) -> tuple[list[_Refusal], list[Any]]:
    """The request's topics as the refusals of the reserved ones and the others, kept in order."""
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
    """Each reserved topic the request names (by name, or v13+ by its 16-byte id), with its partitions."""
    forwarded_body: bytes | None
    """The request without them, outside any fetch session; None when nothing is left to ask."""


def fetch_refused(body: memoryview, version: int, reserved: Callable[[TopicRef], bool]) -> FetchRefused | None:
    """The reserved topics of a Fetch and the request that goes to the cluster instead, or None when it names none.

    The rest goes as a full fetch outside any session: the cluster then keeps no session without the topic, and
    the client, given no session, asks for it again in full and is refused again, as Kafka refuses it at every
    fetch of a topic the principal may not read."""
    request = decode_request(Api.FETCH, version, body)
    by_id = version >= FIRST_TOPIC_ID_FETCH_VERSION

    def refusal(topic: Any) -> tuple[TopicRef, tuple[int, ...]] | None:
        ref: TopicRef = (topic.topic_id or _ZERO_ID).bytes if by_id else topic.topic
        return (ref, tuple(partition.partition for partition in topic.partitions)) if reserved(ref) else None

    refused, kept = _split(request.topics, refusal)
    if not refused:
        return None
    if not kept:
        return FetchRefused(tuple(refused), None)
    request.topics = kept
    if version >= FIRST_SESSION_VERSION:
        request.session_id, request.session_epoch = 0, NO_SESSION_EPOCH
        request.forgotten_topics_data = []
    return FetchRefused(tuple(refused), encode_request(Api.FETCH, version, request))


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
    """The answer to an incremental fetch adding a reserved topic: its session is gone, so the client asks again
    in full (``FetchResponse`` with FETCH_SESSION_ID_NOT_FOUND), and that full fetch is refused the topic."""
    return encode_response(Api.FETCH, version, {"throttle_time_ms": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND,
                                                "session_id": 0, "responses": []})


SHARE_APIS = frozenset({Api.SHARE_FETCH, Api.SHARE_ACKNOWLEDGE})


class ShareRefused(NamedTuple):
    refused: tuple[tuple[bytes, tuple[int, ...], frozenset[int]], ...]
    """Each reserved topic's id, its partitions, and those of them the request acknowledged records of."""
    forwarded_body: bytes | None
    """The request without them, or None when nothing is left to ask."""


def share_refused(api_key: int, version: int, body: memoryview,
                  reserved: Callable[[bytes], bool]) -> ShareRefused | None:
    """The reserved topics a ShareFetch or ShareAcknowledge names (by id: these APIs name topics no other way), and
    the request that goes to the cluster instead; None when it names none. A share session cannot be left as a
    Fetch session can: the refusal comes with each request naming the topic."""
    request = decode_request(api_key, version, body)

    def refusal(topic: Any) -> tuple[bytes, tuple[int, ...], frozenset[int]] | None:
        topic_id = (topic.topic_id or _ZERO_ID).bytes
        return (topic_id, tuple(p.partition_index for p in topic.partitions),
                frozenset(p.partition_index for p in topic.partitions if p.acknowledgement_batches)) \
            if reserved(topic_id) else None

    refused, kept = _split(request.topics, refusal)
    if not refused:
        return None
    if not kept:
        return ShareRefused(tuple(refused), None)
    request.topics = kept
    return ShareRefused(tuple(refused), encode_request(api_key, version, request))


def share_answer_with_refusals(api_key: int, version: int, upstream_body: memoryview | None,
                               refused: ShareRefused) -> bytes:
    """The cluster's answer (or an empty one) with each refused partition after the others: TOPIC_AUTHORIZATION_FAILED,
    for its acknowledgements too, and no records."""
    cls = response_class(api_key)
    answer = cls(version=version, throttle_time_ms=0, error_code=0, error_message=None,
                 acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[]) \
        if upstream_body is None else decode_response(api_key, version, upstream_body)
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


def share_topic_ids(api_key: int, version: int, body: memoryview) -> list[bytes]:
    """The topic ids a ShareFetch or ShareAcknowledge names."""
    return [(topic.topic_id or _ZERO_ID).bytes for topic in decode_request(api_key, version, body).topics]
