from __future__ import annotations

import asyncio
import uuid
from typing import Any

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.header import read_request_header
from proxy.cluster.info import TopicPartitions
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Decided, Forward, Outcome
from proxy.handlers.refused_topics import DescribedTopicsWithoutRefused, MetadataWithoutRefusedTopics, OffsetDeletions
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.handlers.test_config_resources import RESERVED, answer_of
from tests.unit.proxy.handlers.test_config_resources import alices as allowed_alice
from tests.unit.proxy.outcomes import finish_of, forwarded, handled

ALICE = Caller("alice", 0)
EXISTING = {"orders": TopicPartitions(3), "new": TopicPartitions(0), "created": TopicPartitions(0)}


def alices(*acls: tuple[str, AclOperation]) -> Access:
    return Access(authorizer=AclAuthorizer([AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice",
                                                       "*", operation, AclPermission.ALLOW)
                                            for name, operation in acls]))


def metadata(*names: str) -> memoryview:
    return memoryview(encode_request(Api.METADATA, 12, topics=[{"name": name, "topic_id": None} for name in names],
                                     allow_auto_topic_creation=True, include_topic_authorized_operations=False))[4:]


def decided(decision: Decided) -> Outcome:
    return decision if isinstance(decision, Outcome) else asyncio.run(_awaited(decision))


async def _awaited(decision: Any) -> Outcome:
    return await decision  # type: ignore[no-any-return]


def handler(access: Access, auto_creation: bool, asked: list[list[str]]) -> MetadataWithoutRefusedTopics:
    async def creates() -> bool:
        return auto_creation

    async def partitions(names: list[str]) -> dict[str, TopicPartitions]:
        asked.append(names)
        return {name: EXISTING[name] for name in names}

    return MetadataWithoutRefusedTopics(access, creates, partitions)


def forwarded_names(outcome: Outcome) -> list[str] | None:
    assert isinstance(outcome, Forward)
    if outcome.replacement is None:
        return None
    frame = memoryview(outcome.replacement)[4:]
    return [topic.name for topic in decode_request(Api.METADATA, 12, frame[read_request_header(frame).length:]).topics]


def test_a_missing_topic_the_principal_may_not_create_is_refused_not_created() -> None:
    """``unauthorizedForCreateTopics``: it may describe the three, create "created" alone."""
    access = alices(("new", AclOperation.DESCRIBE), ("orders", AclOperation.DESCRIBE),
                    ("created", AclOperation.DESCRIBE), ("created", AclOperation.CREATE))
    asked: list[list[str]] = []
    outcome = decided(handled(handler(access, True, asked), metadata("new", "orders", "created"), ALICE))
    assert asked == [["new", "orders"]], "the cluster is asked which exist"
    assert forwarded_names(outcome) == ["orders", "created"], "the rest is asked, to be created where missing"
    finished = finish_of(outcome)(memoryview(answer(["orders", "created"])))
    assert [(topic.name, topic.error_code) for topic in decode_response(Api.METADATA, 12, finished or b"").topics] \
        == [("orders", 0), ("created", 0), ("new", 29)]


def test_a_missing_topic_it_may_not_create_is_kept_from_the_cluster_and_unknown_where_none_is_created() -> None:
    """Whatever a broker says of auto-creation, the cluster is not asked to create it."""
    asked: list[list[str]] = []
    access = alices(("new", AclOperation.DESCRIBE), ("orders", AclOperation.DESCRIBE))
    outcome = decided(handled(handler(access, False, asked), metadata("new", "orders"), ALICE))
    assert asked == [["new", "orders"]] and forwarded_names(outcome) == ["orders"]
    finished = finish_of(outcome)(memoryview(answer(["orders"])))
    assert [(topic.name, topic.error_code) for topic in decode_response(Api.METADATA, 12, finished or b"").topics] \
        == [("orders", 0), ("new", 3)]


def test_nothing_is_looked_up_when_the_principal_may_create_the_topics() -> None:
    asked: list[list[str]] = []
    creates = alices(("new", AclOperation.DESCRIBE), ("new", AclOperation.CREATE))
    assert forwarded_names(decided(handled(handler(creates, True, asked), metadata("new"), ALICE))) is None
    assert asked == []


def test_a_metadata_request_asked_again_is_judged_by_the_acls_of_now() -> None:
    """Clients ask the same Metadata again and again: one found allowed is allowed again by the same ACLs, for the
    same principal, and judged again once they change."""
    access = alices(("orders", AclOperation.DESCRIBE), ("orders", AclOperation.CREATE))
    judge = handler(access, False, [])
    again = metadata("orders")
    assert handled(judge, again, ALICE) is FORWARD and handled(judge, again, ALICE) is FORWARD
    assert forwarded_names(decided(handled(judge, again, ALICE._replace(user="bob")))) == [], "alice's, not bob's"
    assert access.authorizer is not None
    access.authorizer.replace([])
    assert forwarded_names(decided(handled(judge, again, ALICE))) == [], "no longer allowed"


def test_a_metadata_request_allowed_without_creation_is_judged_again_when_it_may_create() -> None:
    asked: list[list[str]] = []
    judge = handler(alices(("orders", AclOperation.DESCRIBE)), True, asked)
    without_creation = memoryview(encode_request(Api.METADATA, 12, topics=[{"name": "orders", "topic_id": None}],
                                                 allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))[4:]
    assert handled(judge, without_creation, ALICE) is FORWARD
    decided(handled(judge, metadata("orders"), ALICE))
    assert asked == [["orders"]], "the cluster asked whether it exists: alice may not create it"


def test_a_metadata_request_before_v4_asks_for_creation_and_a_missing_topic_is_kept_from_it() -> None:
    """Metadata v0-3 has no flag: the broker creates every missing topic it names."""
    asked: list[list[str]] = []
    access = alices(("new", AclOperation.DESCRIBE))
    old = memoryview(encode_request(Api.METADATA, 3, topics=[{"name": "new"}]))[4:]
    outcome = decided(handled(handler(access, True, asked), old, ALICE))
    assert asked == [["new"]] and isinstance(outcome, Forward) and outcome.replacement is not None
    frame = memoryview(outcome.replacement)[4:]
    assert decode_request(Api.METADATA, 3, frame[read_request_header(frame).length:]).topics == []


def answer(names: list[str]) -> bytes:
    return encode_response(Api.METADATA, 12, {"brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"error_code": 0, "name": name, "topic_id": None, "is_internal": False, "partitions": []} for name in names]})


def offset_delete(group: str, *topics: str) -> memoryview:
    return memoryview(encode_request(Api.OFFSET_DELETE, 0, group_id=group, topics=[
        {"name": name, "partitions": [{"partition_index": 0}, {"partition_index": 1}]} for name in topics]))[4:]


def deleted_offsets(decided: Decided, cluster_error: int = 0, *answered: str) -> Any:
    cluster = encode_response(Api.OFFSET_DELETE, 0, {"throttle_time_ms": 0, "error_code": cluster_error, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "error_code": 0}]} for name in answered]})
    answer = finish_of(decided)(memoryview(cluster))
    return None if answer is None else [(topic.name, [(p.partition_index, p.error_code) for p in topic.partitions])
                                        for topic in decode_response(Api.OFFSET_DELETE, 0, answer).topics]


def test_offsets_are_deleted_with_delete_on_the_group_and_read_on_each_topic() -> None:
    """``handleOffsetDeleteRequest``: a refused group refuses the whole request; a refused topic's partitions come
    first, unless the group's own error (the coordinator's) answers the whole request; the coordinator is asked even
    with no topic left."""
    judge = OffsetDeletions(allowed_alice((ResourceType.GROUP, "g", AclOperation.DELETE),
                                   (ResourceType.TOPIC, "mine", AclOperation.READ)))
    refused = answer_of(handled(judge, offset_delete("h", "mine"), ALICE), Api.OFFSET_DELETE, 0)
    assert (refused.error_code, refused.topics) == (30, [])
    assert handled(judge, offset_delete("g", "mine"), ALICE) is FORWARD
    decided = handled(judge, offset_delete("g", "mine", "theirs", RESERVED), ALICE)
    assert forwarded_topics(decided) == ["mine"]
    assert deleted_offsets(decided, 0, "mine") == [("theirs", [(0, 29), (1, 29)]), (RESERVED, [(0, 29), (1, 29)]),
                                                   ("mine", [(0, 0)])]
    assert deleted_offsets(decided, 69, "mine") is None, "GROUP_ID_NOT_FOUND, as the cluster answers it"
    alone = handled(judge, offset_delete("g", "theirs"), ALICE)
    assert forwarded_topics(alone) == [] and deleted_offsets(alone) == [("theirs", [(0, 29), (1, 29)])]
    unguarded = OffsetDeletions(Access(frozenset({RESERVED})))
    assert handled(unguarded, offset_delete("h", "theirs"), ALICE) is FORWARD
    assert forwarded_topics(handled(unguarded, offset_delete("h", "theirs", RESERVED), ALICE)) == ["theirs"]


def forwarded_topics(decided: Decided) -> list[str]:
    assert isinstance(decided, Forward) and decided.replacement is not None, decided
    frame = memoryview(decided.replacement)[4:]
    return [topic.name for topic in decode_request(Api.OFFSET_DELETE, 0, frame[read_request_header(frame).length:])
            .topics]


def test_a_topic_named_by_id_is_judged_in_the_answer_whatever_name_comes_with_it() -> None:
    """Kafka reads the ids alone once one is given (``handleTopicMetadataRequest``): a name the principal may describe
    beside the id of a topic it may not does not let the cluster's answer through as it is."""
    access = alices(("mine", AclOperation.DESCRIBE))
    hidden = uuid.uuid4()

    def asked(topic_id: uuid.UUID | None) -> memoryview:
        return memoryview(encode_request(Api.METADATA, 12, topics=[{"name": "mine", "topic_id": topic_id}],
                                         allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False))[4:]

    assert decided(handled(handler(access, False, []), asked(None), ALICE)) is FORWARD
    outcome = decided(handled(handler(access, False, []), asked(hidden), ALICE))
    cluster = encode_response(Api.METADATA, 12, {"brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"error_code": 0, "name": "hidden", "topic_id": hidden, "is_internal": False, "partitions": []}]})
    finished = finish_of(outcome)(memoryview(cluster))
    assert finished is not None
    assert [(topic.name, topic.topic_id, topic.error_code) for topic in decode_response(Api.METADATA, 12, finished)
            .topics] == [(None, hidden, 29)]


EVERY_TOPIC = ("d", "__consumer_offsets", "b", "c", "a", "e")
"""The cluster's topics; alice may describe a, c and e (``described_by_alice``)."""


def described_by_alice() -> Access:
    return alices(("a", AclOperation.DESCRIBE), ("c", AclOperation.READ), ("e", AclOperation.DESCRIBE))


def topics_handler(access: Access, lookups: list[int], reachable: bool = True) -> DescribedTopicsWithoutRefused:
    async def every_topic_name() -> tuple[str, ...]:
        lookups.append(1)
        if not reachable:
            raise ConnectionRefusedError("the cluster is down")
        return EVERY_TOPIC

    return DescribedTopicsWithoutRefused(access, every_topic_name)


def described(names: list[str], cursor: tuple[str, int] | None = None, limit: int = 2000) -> memoryview:
    return memoryview(encode_request(
        Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[{"name": name} for name in names], response_partition_limit=limit,
        cursor=None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}))[4:]


def forwarded_described(outcome: Outcome) -> tuple[list[str], tuple[str, int] | None]:
    """The topics and cursor of the DescribeTopicPartitions forwarded instead of the client's."""
    replacement = forwarded(outcome).replacement
    assert replacement is not None
    frame = memoryview(replacement)[4:]
    request = decode_request(Api.DESCRIBE_TOPIC_PARTITIONS, 0, frame[read_request_header(frame).length:])
    cursor = request.cursor
    return [topic.name for topic in request.topics], None if cursor is None else (cursor.topic_name,
                                                                                  cursor.partition_index)


def described_answer(topics: list[tuple[str, int]], cursor: tuple[str, int] | None) -> bytes:
    """The cluster's answer: each topic with its error and one partition (none with an error)."""
    return encode_response(Api.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "throttle_time_ms": 0, "next_cursor": None if cursor is None else {"topic_name": cursor[0],
                                                                           "partition_index": cursor[1]},
        "topics": [{"error_code": error, "name": name, "topic_id": uuid.uuid4(), "is_internal": False,
                    "partitions": [] if error else [{"error_code": 0, "partition_index": 0, "leader_id": 1,
                                                     "leader_epoch": 0, "replica_nodes": [1], "isr_nodes": [1],
                                                     "eligible_leader_replicas": None, "last_known_elr": None,
                                                     "offline_replicas": []}],
                    "topic_authorized_operations": -2147483648} for name, error in topics]})


def client_answer(outcome: Outcome, cluster: bytes | None = None) -> tuple[list[tuple[str, int, int]], Any]:
    """The topics (name, error, authorized operations) and next cursor of the answer the client gets."""
    if isinstance(outcome, Forward):
        answer = decode_response(Api.DESCRIBE_TOPIC_PARTITIONS, 0,
                                 finish_of(outcome)(memoryview(cluster or b"")) or b"")
    else:
        answer = answer_of(outcome, Api.DESCRIBE_TOPIC_PARTITIONS, 0)
    cursor = answer.next_cursor
    return ([(topic.name, topic.error_code, topic.topic_authorized_operations) for topic in answer.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


DESCRIBE_OPERATIONS, READ_OPERATIONS = 1 << 8, 1 << 3 | 1 << 8
"""The authorized-operations bits of DESCRIBE alone, and of READ (which implies DESCRIBE)."""


def test_every_topic_is_asked_of_the_cluster_as_those_the_principal_may_describe_so_its_pages_hold_only_those(
        ) -> None:
    """Kafka pages an all-topics DescribeTopicPartitions over the topics the principal may describe: its cursor
    never names another, and a topic gone since the names were read is left out."""
    lookups: list[int] = []
    outcome = decided(handled(topics_handler(described_by_alice(), lookups), described([], limit=1), ALICE))
    assert lookups == [1] and forwarded_described(outcome) == (["a", "c", "e"], None)
    assert client_answer(outcome, described_answer([("a", 0)], ("c", 0))) == (
        [("a", 0, DESCRIBE_OPERATIONS)], ("c", 0))
    outcome = decided(handled(topics_handler(described_by_alice(), lookups), described([], ("c", 0), 2), ALICE))
    assert forwarded_described(outcome) == (["c", "e"], ("c", 0))
    assert client_answer(outcome, described_answer([("c", 3), ("e", 0)], None)) == (
        [("e", 0, DESCRIBE_OPERATIONS)], None), "c was deleted after its name was read"


def test_a_cursor_naming_a_topic_the_principal_may_not_describe_starts_the_page_at_the_next_it_may() -> None:
    """Kafka's handler starts from the cursor's partition only in the cursor's topic, which it does not list."""
    outcome = decided(handled(topics_handler(described_by_alice(), []), described([], ("b", 2)), ALICE))
    assert forwarded_described(outcome) == (["c", "e"], None)
    outcome = decided(handled(topics_handler(described_by_alice(), []), described([], ("bz", 0)), ALICE))
    assert forwarded_described(outcome) == (["c", "e"], None), "a cursor naming no topic"


def test_every_topic_of_a_principal_that_may_describe_none_is_answered_none_by_the_proxy() -> None:
    outcome = decided(handled(topics_handler(described_by_alice(), []), described([], ("f", 0)), ALICE))
    assert client_answer(outcome) == ([], None)
    outcome = decided(handled(topics_handler(alices(), []), described([]), ALICE))
    assert client_answer(outcome) == ([], None)


def test_every_topic_asked_while_the_cluster_cannot_list_them_closes_the_connection() -> None:
    """Answering no topics would tell the client there are none."""
    outcome = decided(handled(topics_handler(described_by_alice(), [], reachable=False), described([]), ALICE))
    assert outcome == CLOSE


def test_named_topics_from_the_cursor_on_are_refused_after_the_others_and_the_cursor_never_names_a_refused_one(
        ) -> None:
    """``DescribeTopicPartitionsRequestHandler`` leaves out the topics before the cursor, refused or not."""
    lookups: list[int] = []
    handler = topics_handler(described_by_alice(), lookups)
    outcome = decided(handled(handler, described(["d", "a", "b", "e", "c"], ("b", 1)), ALICE))
    assert lookups == [] and forwarded_described(outcome) == (["e", "c"], None)
    assert client_answer(outcome, described_answer([("c", 0), ("e", 0)], None)) == (
        [("c", 0, READ_OPERATIONS), ("e", 0, DESCRIBE_OPERATIONS), ("d", 29, -2147483648),
         ("b", 29, -2147483648)], None)
    outcome = decided(handled(handler, described(["d", "a", "c"], ("c", 1)), ALICE))
    assert forwarded_described(outcome) == (["c"], ("c", 1))
    assert client_answer(decided(handled(handler, described(["b", "d"]), ALICE))) == (
        [("b", 29, -2147483648), ("d", 29, -2147483648)], None)


def test_a_request_kafka_refuses_whole_goes_to_the_cluster_as_it_came() -> None:
    """A cursor naming a topic the list does not, or a negative partition: INVALID_REQUEST for each topic named,
    before any is looked at."""
    handler = topics_handler(described_by_alice(), [])
    for request in (described(["a", "b"], ("c", 0)), described(["a", "b"], ("b", -1)), described([], ("a", -1))):
        assert handled(handler, request, ALICE) == FORWARD


def test_topics_are_taken_from_the_cursor_on_in_javas_order() -> None:
    """Java's ``String.compareTo`` compares UTF-16 code units: a character past U+FFFF (a surrogate pair, from
    U+D800) comes before U+FFFF, which Python's order of code points puts first."""
    outcome = decided(handled(topics_handler(alices(), []), described(["\U0001f600", "\uffff"], ("\uffff", 0)),
                              ALICE))
    assert client_answer(outcome) == ([("\uffff", 29, -2147483648)], None)


def test_the_same_request_asked_again_is_judged_again_for_whoever_asks() -> None:
    """The topics a request names are remembered by its bytes; what the principal may do with them is not."""
    access = Access(authorizer=AclAuthorizer([AclBinding(
        ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", operation, AclPermission.ALLOW)
        for operation in (AclOperation.DESCRIBE, AclOperation.CREATE)]))
    asked: list[list[str]] = []
    remembering = handler(access, True, asked)
    for _ in range(2):
        assert decided(handled(remembering, metadata("orders"), ALICE)) is FORWARD
        refused = decided(handled(remembering, metadata("orders"), Caller("bob", 0)))
        finished = finish_of(refused)(memoryview(answer([])))
        assert [(topic.name, topic.error_code)
                for topic in decode_response(Api.METADATA, 12, finished or b"").topics] == [("orders", 29)]
