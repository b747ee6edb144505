"""Kafka's answers to requests its authorizer refuses, for the APIs refused whole or key by key, shaped as the
broker shapes them (each request class's ``getErrorResponse``; ``KafkaApis.getCoordinator``).

A group's membership requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) are refused whole; FindCoordinator
refuses each key it may not describe (v4+ asks for several: the others are asked of the cluster, and the answers
merged in the request's order), or whole before v4; OffsetFetch each group it may not describe, and of the others
each topic (v8+ asks for several groups).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import (
    ERROR_MESSAGES,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ProtocolError,
)
from protocol.refused_topics import NameRefusal, bit_positions

GROUP_MEMBERSHIP_APIS = frozenset({Api.JOIN_GROUP, Api.SYNC_GROUP, Api.HEARTBEAT, Api.LEAVE_GROUP})
_FIRST_JOIN_GROUP_WITH_NULL_PROTOCOL = 7
_FIRST_SYNC_GROUP_WITH_PROTOCOL = 5
_FIRST_BATCHED_FIND_COORDINATOR = 4
_NO_NODE = {"node_id": -1, "host": "", "port": -1}
"""``Node.noNode()``."""
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE = 0, 1, 2
FIRST_SHARE_FIND_COORDINATOR = 6
"""Before it a share key is INVALID_REQUEST, answered before any authorization (``getCoordinator``)."""
_FIRST_DESCRIBE_GROUPS_WITH_OPERATIONS = 3


def group_id(api_key: int, version: int, body: memoryview) -> str:
    """The group a membership request (or an OffsetDelete) is for."""
    return str(decode_request(api_key, version, body).group_id)


def judged_by_the_cluster_first(api_key: int, version: int, body: memoryview) -> bool:
    """A SyncGroup without the protocol type and name that v5+ needs: Kafka answers INCONSISTENT_GROUP_PROTOCOL
    before it authorizes (``handleSyncGroupRequest``), and so does the cluster."""
    if api_key != Api.SYNC_GROUP or version < _FIRST_SYNC_GROUP_WITH_PROTOCOL:
        return False
    request = decode_request(api_key, version, body)
    return request.protocol_type is None or request.protocol_name is None


def membership_refused(api_key: int, version: int, error_code: int) -> bytes:
    """A membership request's answer with ``error_code`` and nothing else (``getErrorResponse``)."""
    fields: dict[str, Any] = {"throttle_time_ms": 0, "error_code": error_code}
    if api_key == Api.JOIN_GROUP:
        fields.update(generation_id=-1, leader="", member_id="", members=[],
                      protocol_name=None if version >= _FIRST_JOIN_GROUP_WITH_NULL_PROTOCOL else "")
    elif api_key == Api.SYNC_GROUP:
        fields.update(assignment=b"", protocol_type=None, protocol_name=None)
    elif api_key == Api.LEAVE_GROUP:
        fields.update(members=[])
    return encode_response(api_key, version, fields)


def coordinators_asked(version: int, body: memoryview) -> tuple[int, tuple[str, ...]]:
    """A FindCoordinator's key type and keys."""
    request = decode_request(Api.FIND_COORDINATOR, version, body)
    keys = request.coordinator_keys if version >= _FIRST_BATCHED_FIND_COORDINATOR else [request.key]
    return request.key_type, tuple(keys)


def coordinators_without(version: int, body: memoryview, refused: frozenset[str]) -> bytes | None:
    """The request without the ``refused`` keys (v4+), or None when none is left to ask."""
    request = decode_request(Api.FIND_COORDINATOR, version, body)
    kept = [key for key in request.coordinator_keys if key not in refused]
    if not kept:
        return None
    request.coordinator_keys = kept
    return encode_request(Api.FIND_COORDINATOR, version, request)


def coordinators_answer(version: int, keys: tuple[str, ...], refused: dict[str, int],
                        upstream_body: memoryview | None, whole: bool = False) -> bytes:
    """Each key's coordinator in the request's order: the cluster's (``upstream_body``), or the error of a refused
    one with no node; ``whole``: every key refused at once, each with its error's message (``prepareErrorResponse``:
    a share key's request without CLUSTER_ACTION). Before v4, one key refused: its error, its message, no node."""
    if version < _FIRST_BATCHED_FIND_COORDINATOR:
        [error_code] = refused.values()
        return encode_response(Api.FIND_COORDINATOR, version, {
            "throttle_time_ms": 0, "error_code": error_code, "error_message": ERROR_MESSAGES[error_code],
            **_NO_NODE})
    cls = response_class(Api.FIND_COORDINATOR)
    answer = cls(version=version, throttle_time_ms=0, coordinators=[]) if upstream_body is None else \
        decode_response(Api.FIND_COORDINATOR, version, upstream_body)
    answered = {coordinator.key: coordinator for coordinator in answer.coordinators}
    answer.coordinators = [answered[key] if key not in refused else cls.Coordinator(
        key=key, error_code=refused[key], error_message=ERROR_MESSAGES[refused[key]] if whole else "", **_NO_NODE)
        for key in keys]
    return encode_response(Api.FIND_COORDINATOR, version, answer)


_FIRST_BATCHED_OFFSET_FETCH = 8
_FIRST_OFFSET_FETCH_WITH_TOP_LEVEL_ERROR = 2


class OffsetsAsked(NamedTuple):
    """What an OffsetFetch asks of groups and topics its principal may not describe (``handleOffsetFetchRequest``)."""

    groups: tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...] | None], ...]
    """Each group asked, in order, with its topics and their partitions (None: all its topics)."""
    refused_groups: frozenset[str]
    refused_topics: dict[int, tuple[tuple[str, tuple[int, ...]], ...]]
    """By the group's place in ``groups``, the topics named that are refused, with their partitions."""
    forwarded_body: bytes | None
    """The request without the refused groups and topics; None when no group is left to ask."""


def offsets_asked(version: int, body: memoryview, group_refused: NameRefusal,
                  topic_refused: NameRefusal) -> OffsetsAsked:
    """The groups an OffsetFetch names that the principal may not describe, and the topics named of the others it
    may not describe, and the request that goes to the cluster instead (every group kept, and the topics kept of
    it: none left is asked as none, not as all)."""
    request = decode_request(Api.OFFSET_FETCH, version, body)
    batched = version >= _FIRST_BATCHED_OFFSET_FETCH
    asked = request.groups if batched else [request]
    groups = []
    refused_topics: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] = {}
    for place, group in enumerate(asked):
        topics = None if group.topics is None else tuple(
            (topic.name, tuple(topic.partition_indexes)) for topic in group.topics)
        groups.append((group.group_id, topics))
        refused = tuple(topic for topic in topics or () if topic_refused(topic[0]))
        if refused and not group_refused(group.group_id):
            refused_topics[place] = refused
            group.topics = [topic for topic in group.topics if not topic_refused(topic.name)]
    refused_groups = frozenset(group_id for group_id, _ in groups if group_refused(group_id))
    if batched:
        request.groups = [group for group in request.groups if group.group_id not in refused_groups]
        kept = bool(request.groups)
    else:
        kept = not refused_groups
    forwarded = encode_request(Api.OFFSET_FETCH, version, request) if kept else None
    return OffsetsAsked(tuple(groups), refused_groups, refused_topics, forwarded)


def offsets_answer(version: int, asked: OffsetsAsked, upstream_body: memoryview | None,
                   topic_refused: NameRefusal) -> bytes:
    """Each group's offsets in the request's order: a refused group's error (``OffsetFetchResponse.groupError``), the
    cluster's answer for the others without the topics the principal may not describe when it asked for all, with
    the named ones refused after the cluster's (each partition TOPIC_AUTHORIZATION_FAILED, no offset)."""
    cls = response_class(Api.OFFSET_FETCH)
    upstream = None if upstream_body is None else decode_response(Api.OFFSET_FETCH, version, upstream_body)
    if version < _FIRST_BATCHED_OFFSET_FETCH:
        [(group_id, topics)] = asked.groups
        if group_id in asked.refused_groups:
            answer = cls(version=version, throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, topics=[])
            if version < _FIRST_OFFSET_FETCH_WITH_TOP_LEVEL_ERROR:
                answer.error_code, answer.topics = 0, _offset_errors(cls.OffsetFetchResponseTopic, topics or (),
                                                                     GROUP_AUTHORIZATION_FAILED)
            return encode_response(Api.OFFSET_FETCH, version, answer)
        assert upstream is not None, "the group was asked"
        _answered_without_refused(upstream, cls.OffsetFetchResponseTopic, topics, asked.refused_topics.get(0, ()),
                                  topic_refused)
        return encode_response(Api.OFFSET_FETCH, version, upstream)
    group_class = cls.OffsetFetchResponseGroup
    answered = iter(() if upstream is None else upstream.groups)  # the groups asked of the cluster, in order
    groups = []
    for place, (group_id, topics) in enumerate(asked.groups):
        if group_id in asked.refused_groups:
            groups.append(group_class(group_id=group_id, error_code=GROUP_AUTHORIZATION_FAILED, topics=[]))
            continue
        group = next(answered)
        _answered_without_refused(group, group_class.OffsetFetchResponseTopics, topics,
                                  asked.refused_topics.get(place, ()), topic_refused)
        groups.append(group)
    answer = upstream or cls(version=version, throttle_time_ms=0)
    answer.groups = groups
    return encode_response(Api.OFFSET_FETCH, version, answer)


def _answered_without_refused(group: Any, topic_class: Any, topics: tuple[tuple[str, tuple[int, ...]], ...] | None,
                              refused: tuple[tuple[str, tuple[int, ...]], ...], topic_refused: NameRefusal) -> None:
    """``group``'s answer (a group's, or a v2-7 answer's) as Kafka gives it: when it is no error, its topics left
    without those the principal may not describe (all were asked: ``fetchAllOffsetsForGroup``), or with the refused
    ones named after the others (``fetchOffsetsForGroup``)."""
    if group.error_code:
        return
    if topics is None:
        group.topics = [topic for topic in group.topics if not topic_refused(topic.name)]
    else:
        group.topics = [*group.topics, *_offset_errors(topic_class, refused, TOPIC_AUTHORIZATION_FAILED)]


def _offset_errors(topic_class: Any, topics: Iterable[tuple[str, tuple[int, ...]]], error_code: int) -> list[Any]:
    partition_class = next(field.data_class for field in topic_class.fields.values() if field.is_struct_array())
    return [topic_class(name=name, partitions=[partition_class(
        partition_index=index, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=error_code)
        for index in partitions]) for name, partitions in topics]


class ProducerIdAsked(NamedTuple):
    transactional_id: str | None
    two_phase_commit: bool
    """The transactions' ``enable2Pc`` (v6), which needs TWO_PHASE_COMMIT on the transactional id too."""


def producer_id_asked(version: int, body: memoryview) -> ProducerIdAsked:
    request = decode_request(Api.INIT_PRODUCER_ID, version, body)
    return ProducerIdAsked(request.transactional_id, bool(getattr(request, "enable2_pc", False)))


def producer_id_refused(version: int, error_code: int) -> bytes:
    """InitProducerId refused (``InitProducerIdRequest.getErrorResponse``): no producer id, no epoch."""
    return encode_response(Api.INIT_PRODUCER_ID, version, {"throttle_time_ms": 0, "error_code": error_code,
                                                           "producer_id": -1, "producer_epoch": -1})


TRANSACTION_APIS = frozenset({Api.ADD_PARTITIONS_TO_TXN, Api.ADD_OFFSETS_TO_TXN, Api.END_TXN})
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's ``Topic.isInternal``: AddPartitionsToTxn never lets a client add one, whatever its ACLs."""


class TransactionAsked(NamedTuple):
    """What a transaction request needs authorized: its transactional id, AddOffsetsToTxn's group, and
    AddPartitionsToTxn's partitions."""

    transactional_id: str
    group_id: str | None
    partitions: tuple[tuple[str, tuple[int, ...]], ...]


def transaction_asked(api_key: int, version: int, body: memoryview) -> TransactionAsked:
    request = decode_request(api_key, version, body)
    if api_key == Api.ADD_PARTITIONS_TO_TXN:
        return TransactionAsked(request.v3_and_below_transactional_id, None, tuple(
            (topic.name, tuple(topic.partitions)) for topic in request.v3_and_below_topics))
    return TransactionAsked(request.transactional_id, getattr(request, "group_id", None), ())


def transaction_refused(api_key: int, version: int, asked: TransactionAsked, error_code: int,
                        topic_errors: dict[str, int] | None = None) -> bytes:
    """The answer of a transaction request refused with ``error_code``: whole (EndTxn with no producer id or epoch,
    AddOffsetsToTxn), or on every partition of AddPartitionsToTxn, a topic of ``topic_errors`` with its own error
    (``errorResponseForTransaction``, ``resultForTransaction``)."""
    if api_key != Api.ADD_PARTITIONS_TO_TXN:
        fields: dict[str, Any] = {"throttle_time_ms": 0, "error_code": error_code}
        if api_key == Api.END_TXN:
            fields.update(producer_id=-1, producer_epoch=-1)
        return encode_response(api_key, version, fields)
    errors = topic_errors or {}
    return encode_response(api_key, version, {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": [
            {"partition_index": partition, "partition_error_code": errors.get(name, error_code)}
            for partition in partitions]} for name, partitions in asked.partitions]})


class TransactionsDescribed(NamedTuple):
    """A DescribeTransactions' transactional ids, in the request's order, each with whether it was refused (decided
    once, when the request came: the ACLs may change before the cluster answers), and the request for the others."""

    asked: tuple[tuple[str, bool], ...]
    forwarded_body: bytes | None
    """None when every id is refused."""


def transactions_described(version: int, body: memoryview, refused: NameRefusal) -> TransactionsDescribed:
    request = decode_request(Api.DESCRIBE_TRANSACTIONS, version, body)
    asked = tuple((transactional_id, refused(transactional_id)) for transactional_id in request.transactional_ids)
    request.transactional_ids = [transactional_id for transactional_id, denied in asked if not denied]
    return TransactionsDescribed(asked, encode_request(Api.DESCRIBE_TRANSACTIONS, version, request)
                                 if request.transactional_ids else None)


def transactions_described_answer(version: int, described: TransactionsDescribed, upstream_body: memoryview | None,
                                  topic_refused: NameRefusal) -> bytes:
    """Each transactional id asked, in the request's order: one refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    and nothing else, the others as the cluster describes them (it answers each id asked of it, in order); every one
    without the topics ``topic_refused`` (``handleDescribeTransactionsRequest``)."""
    cls = response_class(Api.DESCRIBE_TRANSACTIONS)
    answer = cls(version=version, throttle_time_ms=0, transaction_states=[]) if upstream_body is None else \
        decode_response(Api.DESCRIBE_TRANSACTIONS, version, upstream_body)
    described_by_the_cluster = iter(answer.transaction_states)
    states = []
    for transactional_id, denied in described.asked:
        if denied:
            states.append(cls.TransactionState(
                error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=transactional_id,
                transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                producer_epoch=0, topics=[]))
            continue
        state = next(described_by_the_cluster, None)
        if state is None:
            raise ProtocolError("the cluster described fewer transactions than it was asked",
                                api_key=Api.DESCRIBE_TRANSACTIONS, api_version=version)
        state.topics = [topic for topic in state.topics if not topic_refused(topic.topic)]
        states.append(state)
    answer.transaction_states = states
    return encode_response(Api.DESCRIBE_TRANSACTIONS, version, answer)


def transactions_listed(version: int, upstream_body: memoryview, refused: NameRefusal) -> bytes | None:
    """A ListTransactions answer without the transactions whose ids ``refused`` (``handleListTransactionsRequest``);
    None when it lists none of them."""
    answer = decode_response(Api.LIST_TRANSACTIONS, version, upstream_body)
    kept = [state for state in answer.transaction_states if not refused(state.transactional_id)]
    if len(kept) == len(answer.transaction_states):
        return None
    answer.transaction_states = kept
    return encode_response(Api.LIST_TRANSACTIONS, version, answer)


def group_and_transaction(api_key: int, version: int, body: memoryview) -> tuple[str, str | None]:
    """An OffsetCommit's group, or a TxnOffsetCommit's group and transactional id."""
    request = decode_request(api_key, version, body)
    return request.group_id, getattr(request, "transactional_id", None)


def groups_listed(version: int, upstream_body: memoryview, refused: NameRefusal) -> bytes:
    """A ListGroups answer without the groups ``refused`` (``handleListGroupsRequest``)."""
    answer = decode_response(Api.LIST_GROUPS, version, upstream_body)
    answer.groups = [group for group in answer.groups if not refused(group.group_id)]
    return encode_response(Api.LIST_GROUPS, version, answer)


class GroupsDescribed(NamedTuple):
    """A DescribeGroups' groups the principal may not describe, and the request for the others."""

    refused: tuple[str, ...]
    forwarded_body: bytes | None
    """None when no group is left to ask."""
    with_operations: bool
    """Authorized operations asked for (v3+)."""


def groups_described(api_key: int, version: int, body: memoryview, refused: NameRefusal) -> GroupsDescribed:
    """A DescribeGroups', a ConsumerGroupDescribe's or a ShareGroupDescribe's."""
    request = decode_request(api_key, version, body)
    field = "groups" if api_key == Api.DESCRIBE_GROUPS else "group_ids"
    refusals = tuple(group for group in getattr(request, field) if refused(group))
    kept = [group for group in getattr(request, field) if group not in refusals]
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    if not kept:
        return GroupsDescribed(refusals, None, with_operations)
    setattr(request, field, kept)
    return GroupsDescribed(refusals, encode_request(api_key, version, request), with_operations)


def groups_described_answer(version: int, described: GroupsDescribed, upstream_body: memoryview | None,
                            operations: Callable[[str], int]) -> bytes:
    """The refused groups first, with GROUP_AUTHORIZATION_FAILED and nothing else (``groupError``), then the
    cluster's, their authorized operations the principal's (``operations``: by group) where asked for
    (``handleDescribeGroupsRequest``)."""
    cls = response_class(Api.DESCRIBE_GROUPS)
    answer = cls(version=version, throttle_time_ms=0, groups=[]) if upstream_body is None else \
        decode_response(Api.DESCRIBE_GROUPS, version, upstream_body)
    if described.with_operations and version >= _FIRST_DESCRIBE_GROUPS_WITH_OPERATIONS:
        for group in answer.groups:
            if group.error_code == 0:
                group.authorized_operations = bit_positions(operations(group.group_id))
    answer.groups = [cls.DescribedGroup(
        error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=group, group_state="", protocol_type="",
        protocol_data="", members=[], authorized_operations=None)  # None: AUTHORIZED_OPERATIONS_OMITTED
        for group in described.refused] + \
        list(answer.groups)
    return encode_response(Api.DESCRIBE_GROUPS, version, answer)


def cluster_described(version: int, upstream_body: memoryview, operations: int) -> bytes:
    """A DescribeCluster answer with the principal's authorized operations on the cluster (``operations``: its bit
    field, 0 without DESCRIBE on it; ``computeDescribeClusterResponse``); a refusal of the cluster's as it is."""
    answer = decode_response(Api.DESCRIBE_CLUSTER, version, upstream_body)
    if answer.error_code:
        return bytes(upstream_body)
    answer.authorized_operations = bit_positions(operations)
    return encode_response(Api.DESCRIBE_CLUSTER, version, answer)


def cluster_operations_asked(version: int, body: memoryview) -> bool:
    return bool(decode_request(Api.DESCRIBE_CLUSTER, version, body).include_cluster_authorized_operations)


def groups_deleted(version: int, body: memoryview, refused: NameRefusal) -> tuple[tuple[str, ...], bytes | None]:
    """A DeleteGroups' groups (each once) the principal may not delete, and the request for the others (None when
    none is left)."""
    request = decode_request(Api.DELETE_GROUPS, version, body)
    groups = list(dict.fromkeys(request.groups_names))
    refusals = tuple(group for group in groups if refused(group))
    kept = [group for group in groups if group not in refusals]
    if not kept:
        return refusals, None
    request.groups_names = kept
    return refusals, encode_request(Api.DELETE_GROUPS, version, request)


def groups_deleted_answer(version: int, refusals: tuple[str, ...], upstream_body: memoryview | None) -> bytes:
    """The cluster's results, then each refused group's GROUP_AUTHORIZATION_FAILED (``handleDeleteGroupsRequest``)."""
    cls = response_class(Api.DELETE_GROUPS)
    answer = cls(version=version, throttle_time_ms=0, results=[]) if upstream_body is None else \
        decode_response(Api.DELETE_GROUPS, version, upstream_body)
    answer.results = [*answer.results, *(cls.DeletableGroupResult(group_id=group, error_code=GROUP_AUTHORIZATION_FAILED)
                                         for group in refusals)]
    return encode_response(Api.DELETE_GROUPS, version, answer)


CONSUMER_GROUP_APIS = frozenset({Api.CONSUMER_GROUP_HEARTBEAT, Api.CONSUMER_GROUP_DESCRIBE})
SHARE_GROUP_APIS = frozenset({Api.SHARE_GROUP_HEARTBEAT, Api.SHARE_GROUP_DESCRIBE})
HEARTBEAT_APIS = frozenset({Api.CONSUMER_GROUP_HEARTBEAT, Api.SHARE_GROUP_HEARTBEAT})
"""KIP-848's and KIP-932's heartbeats, which Kafka authorizes alike (the share group's has no regular expression)."""
_UNDESCRIBED_TOPICS = "The group has described topic(s) that the client is not authorized to describe."
_OPERATIONS_OMITTED = -2147483648


_LONGEST_MEMBER_ID = 36


def _valid_member_id(member_id: str | None) -> bool:
    """Kafka answers a share group's request with another member id INVALID_REQUEST before it looks at its topics
    (``KafkaApis.isMemberIdValid``)."""
    return member_id is not None and 0 < len(member_id.encode("utf-16-le")) // 2 <= _LONGEST_MEMBER_ID  # Java's length


class HeartbeatAsked(NamedTuple):
    group_id: str
    answered_before_topics: bool
    """A share group's heartbeat whose member id Kafka refuses before it judges the topics (the cluster does too)."""
    topic_names: tuple[str, ...]
    """The topics a heartbeat subscribes to by name (none when its subscription is unchanged)."""
    regex: str | None
    """The regular expression a ConsumerGroupHeartbeat subscribes to (v1+), when it names one."""


def heartbeat_asked(api_key: int, version: int, body: memoryview) -> HeartbeatAsked:
    """A ConsumerGroupHeartbeat's or a ShareGroupHeartbeat's."""
    request = decode_request(api_key, version, body)
    return HeartbeatAsked(request.group_id,
                          api_key == Api.SHARE_GROUP_HEARTBEAT and not _valid_member_id(request.member_id),
                          tuple(request.subscribed_topic_names or ()),
                          getattr(request, "subscribed_topic_regex", None) or None)


def heartbeat_refused(api_key: int, version: int, error_code: int) -> bytes:
    """A ConsumerGroupHeartbeat's or ShareGroupHeartbeat's answer with ``error_code`` and nothing else
    (``getErrorResponse``)."""
    return encode_response(api_key, version, {
        "throttle_time_ms": 0, "error_code": error_code, "error_message": None, "member_id": None, "member_epoch": 0,
        "heartbeat_interval_ms": 0, "assignment": None})


class ShareRequestAsked(NamedTuple):
    group_id: str | None
    """None: Kafka refuses the request before it authorizes anything, and so does the cluster."""
    answered_before_topics: bool
    """Its member id is one Kafka refuses before it judges the topics (the cluster does too)."""


def share_request_asked(api_key: int, version: int, body: memoryview) -> ShareRequestAsked:
    """A ShareFetch's or ShareAcknowledge's group and member."""
    request = decode_request(api_key, version, body)
    return ShareRequestAsked(request.group_id, not _valid_member_id(request.member_id))


def share_request_refused(api_key: int, version: int, error_code: int) -> bytes:
    """A ShareFetch's or ShareAcknowledge's answer with ``error_code`` and nothing else (``getErrorResponse``)."""
    return encode_response(api_key, version, {"throttle_time_ms": 0, "error_code": error_code, "error_message": None,
                                              "acquisition_lock_timeout_ms": 0, "responses": [],
                                              "node_endpoints": []})


def assigned_groups_described_answer(api_key: int, version: int, described: GroupsDescribed,
                                     upstream_body: memoryview | None, operations: Callable[[str], int],
                                     topic_refused: NameRefusal) -> bytes:
    """A ConsumerGroupDescribe's or ShareGroupDescribe's answer: the refused groups first, with
    GROUP_AUTHORIZATION_FAILED, then the cluster's, their authorized operations the principal's where asked for; then a
    group whose members are assigned (a consumer group's: or are to be) a topic the principal may not describe answered
    TOPIC_AUTHORIZATION_FAILED with no members (``handleConsumerGroupDescribe``, ``handleShareGroupDescribe``)."""
    cls = response_class(api_key)
    group_class = cls.DescribedGroup

    def group_answer(group_id: str, error_code: int, error_message: str | None) -> Any:
        return group_class(error_code=error_code, error_message=error_message, group_id=group_id, group_state="",
                           group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                           authorized_operations=_OPERATIONS_OMITTED)

    answer = cls(version=version, throttle_time_ms=0, groups=[]) if upstream_body is None else \
        decode_response(api_key, version, upstream_body)
    if described.with_operations:
        for group in answer.groups:
            if group.error_code == 0:
                group.authorized_operations = operations(group.group_id)
    assignments = ("assignment", "target_assignment") if api_key == Api.CONSUMER_GROUP_DESCRIBE else ("assignment",)

    def undescribed(group: Any) -> bool:
        return any(topic.topic_name is None or topic_refused(topic.topic_name) for member in group.members
                   for assignment in assignments for topic in getattr(member, assignment).topic_partitions)

    answer.groups = [group_answer(group_id, GROUP_AUTHORIZATION_FAILED, None) for group_id in described.refused] + [
        group_answer(group.group_id, TOPIC_AUTHORIZATION_FAILED, _UNDESCRIBED_TOPICS) if undescribed(group) else group
        for group in answer.groups]
    return encode_response(api_key, version, answer)
