"""The mutation handler's decisions, with the cluster's answers supplied by a stand-in ClusterInfo."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.header import read_request_header, response_header_length
from proxy.cluster.info import TopicPartitions
from proxy.decision.outcome import FORWARD, Caller, Outcome, Respond
from proxy.handlers.refused_topics import MetadataWithoutRefusedTopics
from proxy.handlers.topic_mutations import AutoCreationUnderTenantCaps, TopicMutationHandler
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from proxy.state.quota_service import QuotaService, now_ms
from quotas.config import QuotaKey
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, charge_of, finish_of, forwarded, handled

THROTTLED = 89
INVALID_REQUEST = 42
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_TOPIC_EXCEPTION = 17
REQUEST_TIMED_OUT = 7
TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3


class StubCluster:
    """What the cluster would say: partition counts, ids and num.partitions (as ClusterInfo answers)."""

    def __init__(self, partitions: dict[str, int], num_partitions: int = 1, ids: dict[str, uuid.UUID] | None = None,
                 unreachable: bool = False) -> None:
        self._partitions = partitions
        self._num_partitions = num_partitions
        self._ids = ids or {}
        self._unreachable = unreachable
        self.asked: list[list[str]] = []
        self.told_accepted: list[tuple[str, uuid.UUID | None, int]] = []
        self.told_deleted: list[str] = []

    def topic_id(self, name: str) -> uuid.UUID:
        return self._ids.get(name) or uuid.uuid5(uuid.NAMESPACE_DNS, name)

    async def partitions(self, topics: list[str]) -> dict[str, TopicPartitions]:
        if self._unreachable:
            raise ConnectionRefusedError("the cluster is down")
        self.asked.append(topics)
        return {topic: TopicPartitions(self._partitions[topic], self.topic_id(topic)) if topic in self._partitions
                else TopicPartitions(0) for topic in topics}

    async def every_topic(self) -> dict[str, TopicPartitions]:
        return {name: TopicPartitions(count, self.topic_id(name)) for name, count in self._partitions.items()}

    async def topics_by_id(self, topic_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        names = {topic_id: name for name, topic_id in self._ids.items()}
        return {topic_id: (names[topic_id], self._partitions[names[topic_id]]) for topic_id in topic_ids
                if topic_id in names}

    async def default_partitions(self) -> int:
        return self._num_partitions

    def learn_default_partitions(self, partitions: int) -> None:
        self._num_partitions = partitions

    def accepted(self, name: str, topic_id: uuid.UUID | None, count: int) -> None:
        self.told_accepted.append((name, topic_id, count))

    def deleted(self, name: str) -> None:
        self.told_deleted.append(name)


class Mutations:
    """The handler for client id "limited" (``rate`` mutations/s, burst 11 x rate) and its bucket."""

    def __init__(self, tmp_path: Path, cluster: StubCluster, rate: float = 2, tenants: str = "") -> None:
        """``tenants``: ``[[tenant]]`` tables of the quota file."""
        quota_file = tmp_path / "quotas.toml"
        quota_file.write_text(f'[[quota]]\nclient-id = "limited"\ncontroller_mutation_rate = {rate}\n{tenants}')
        self.quotas = QuotaService(quota_file, CollectorRegistry())
        self.now_ms = now_ms()
        """Quota time as the handler reads it: it stands still unless a test moves it."""
        self.usage = UsageLog(tmp_path / "usage")
        self.handler = TopicMutationHandler(self.quotas, cluster, self.usage)  # type: ignore[arg-type]
        self.rate = rate

    def tokens(self) -> float:
        state = self.quotas.mutations.entities.get(QuotaKey("", "limited"))
        burst = 11 * self.rate
        if state is None:
            return burst
        return state.bucket.measure(self.rate, self.quotas.config.settings.mutation_window, self.now_ms)

    def decide(self, api_key: int, version: int, client_id: str = "limited", **fields: object) -> Outcome:
        frame = encode_request(api_key, version, client_id=client_id, **fields)
        caller = Caller("ANONYMOUS", self.now_ms, clock=lambda: self.now_ms)
        decided = handled(self.handler, memoryview(frame)[4:], caller)
        if isinstance(decided, Awaitable):
            decided = asyncio.run(_wait(decided))
        assert isinstance(decided, Outcome)
        return decided


async def _wait(decided: Awaitable[Outcome]) -> Outcome:
    return await decided


def new_topic(name: str, partitions: int = 1, replication_factor: int = 1, assignments: int = 0) -> dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication_factor, "configs": [],
            "assignments": [{"partition_index": i, "broker_ids": [1]} for i in range(assignments)]}


def create_topics(mutations: Mutations, *topics: dict[str, Any], version: int = 7, validate_only: bool = False,
                  client_id: str = "limited") -> Outcome:
    return mutations.decide(Api.CREATE_TOPICS, version, client_id, topics=list(topics), timeout_ms=1000,
                            validate_only=validate_only)


def forwarded_body(outcome: Outcome) -> Any:
    replacement = forwarded(outcome).replacement
    assert replacement is not None
    frame = memoryview(replacement)[4:]
    header = read_request_header(frame)
    return decode_request(header.api_key, header.api_version, frame[header.length:])


def local_body(outcome: Outcome, api_key: int, version: int) -> Any:
    frame = answered(outcome).response[4:]
    return decode_response(api_key, version, frame[response_header_length(frame, flexible=True):])


def finished(outcome: Outcome, api_key: int, version: int, **upstream: object) -> Any:
    answer = finish_of(outcome)(memoryview(encode_response(api_key, version, upstream)))
    return decode_response(api_key, version, answer)


def created(name: str, error_code: int = 0, partitions: int = 1) -> dict[str, Any]:
    return {"name": name, "topic_id": None, "error_code": error_code, "error_message": None,
            "num_partitions": partitions, "replication_factor": 1, "configs": []}


def test_create_partitions_charges_new_minus_existing_and_cuts_refused_topics(tmp_path: Path) -> None:
    cluster = StubCluster({"a": 4, "b": 10, "c": 1})
    mutations = Mutations(tmp_path, cluster)
    topics = [{"name": "a", "count": 24, "assignments": None},  # 20: 22 -> 2
              {"name": "b", "count": 15, "assignments": None},  # 5: 2 -> -3
              {"name": "c", "count": 2, "assignments": None}]   # refused: the bucket is below zero
    outcome = mutations.decide(Api.CREATE_PARTITIONS, 3, topics=topics, timeout_ms=1000, validate_only=False)
    assert cluster.asked == [["a", "b", "c"]]
    assert [t.name for t in forwarded_body(outcome).topics] == ["a", "b"]
    # the throttle is Kafka's as it answers: what the request spent at the cluster is served already
    assert outcome.throttle_ms == 0
    mutations.now_ms += 400
    assert charge_of(outcome)(memoryview(b""), 0).throttle_ms == 1100
    mutations.now_ms += 2000
    assert charge_of(outcome)(memoryview(b""), 0).throttle_ms == 0
    merged = finished(outcome, Api.CREATE_PARTITIONS, 3, throttle_time_ms=0, results=[
        {"name": "b", "error_code": 0, "error_message": None}, {"name": "a", "error_code": 0, "error_message": None}])
    assert [(r.name, r.error_code) for r in merged.results] == [("a", 0), ("b", 0), ("c", THROTTLED)]
    assert merged.throttle_time_ms == 0  # the connection raises it to what is left of 1500 ms when it answers


def test_the_counts_the_cluster_accepted_are_told_to_the_cluster_view(tmp_path: Path) -> None:
    """Its metadata may not show them yet when the next increase is charged (``ClusterInfo.accepted``)."""
    cluster = StubCluster({"a": 4, "b": 10})
    outcome = Mutations(tmp_path, cluster, rate=100).decide(
        Api.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False, topics=[
            {"name": "a", "count": 8, "assignments": None}, {"name": "b", "count": 12, "assignments": None}])
    finished(outcome, Api.CREATE_PARTITIONS, 3, throttle_time_ms=0, results=[
        {"name": "a", "error_code": 0, "error_message": None},
        {"name": "b", "error_code": INVALID_PARTITIONS, "error_message": "refused"}])
    assert cluster.told_accepted == [("a", cluster.topic_id("a"), 8)]


def test_create_topics_with_the_cluster_default_partition_count(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}, num_partitions=12), rate=1)  # burst 11
    outcome = create_topics(mutations, new_topic("x", -1, -1), new_topic("y", -1, -1))
    # x: 11 - 12 = -1, so y is refused
    assert [t.name for t in forwarded_body(outcome).topics] == ["x"]


def test_the_partitions_the_cluster_really_created_for_minus_one_are_charged(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}, num_partitions=1), rate=1)  # burst 11; 1 assumed
    outcome = create_topics(mutations, new_topic("x", -1, -1))
    assert mutations.tokens() == pytest.approx(10, abs=0.1)
    finished(outcome, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[created("x", partitions=12)])
    assert mutations.tokens() == pytest.approx(-1, abs=0.1)  # the cluster made 12: 11 more charged
    second = create_topics(mutations, new_topic("y", -1, -1))
    assert isinstance(second, Respond) and 900 <= second.throttle_ms <= 1000


def test_manual_assignments_count_as_partitions_and_all_refused_is_answered_locally(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}), rate=1)
    first = create_topics(mutations, new_topic("big", -1, -1, assignments=30))
    # strict (Kafka's StrictControllerMutationQuota): admitted whatever its size, no throttle until a refusal
    assert forwarded(first).replacement is None and first.throttle_ms == 0  # 11 - 30 = -19
    second = create_topics(mutations, new_topic("small"))
    assert isinstance(second, Respond)
    answer = local_body(second, Api.CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [("small", THROTTLED)]
    assert 18_900 <= answer.throttle_time_ms <= 19_000


def test_unlimited_clients_are_neither_decoded_nor_charged(tmp_path: Path) -> None:
    cluster = StubCluster({"a": 100})
    mutations = Mutations(tmp_path, cluster)
    outcome = mutations.decide(Api.DELETE_TOPICS, 6, client_id="free", timeout_ms=1000,
                               topics=[{"name": "a", "topic_id": None}])
    assert outcome == FORWARD
    assert cluster.asked == []


def test_validate_only_is_charged_as_kraft_does(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({"a": 2}))
    mutations.decide(Api.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=True,
                     topics=[{"name": "a", "count": 12, "assignments": None}])
    create_topics(mutations, new_topic("b", 5), validate_only=True)
    assert mutations.tokens() == pytest.approx(22 - 10 - 5, abs=0.1)


@pytest.mark.parametrize(("topic", "error_code", "message"), [
    pytest.param(new_topic("t", -2147483648), INVALID_PARTITIONS, "non-positive", id="partitions far below -1"),
    pytest.param(new_topic("t", 0), INVALID_PARTITIONS, "non-positive", id="zero partitions"),
    pytest.param(new_topic("t", 3, -2), INVALID_REPLICATION_FACTOR, "larger than 0", id="replication below -1"),
    pytest.param(new_topic("t", 3, 0), INVALID_REPLICATION_FACTOR, "larger than 0", id="zero replication"),
    pytest.param(new_topic("t", 3, -1, assignments=2), INVALID_REQUEST, "numPartitions", id="assignments and count"),
    pytest.param(new_topic("t", -1, 1, assignments=2), INVALID_REQUEST, "replication", id="assignments and factor"),
    pytest.param(dict(new_topic("t", -1, -1), assignments=[{"partition_index": 0, "broker_ids": [1]},
                                                         {"partition_index": 0, "broker_ids": [1]}]),
                 INVALID_REPLICA_ASSIGNMENT, "multiple", id="assignment given twice"),
    pytest.param(dict(new_topic("t", -1, -1), assignments=[{"partition_index": 1, "broker_ids": [1]}]),
                 INVALID_REPLICA_ASSIGNMENT, "consecutive", id="assignments with a gap"),
    pytest.param(new_topic("bad/name"), INVALID_TOPIC_EXCEPTION, "characters", id="illegal character"),
    pytest.param(new_topic(".."), INVALID_TOPIC_EXCEPTION, "'..' is not allowed", id="dot dot"),
    pytest.param(new_topic("x" * 250), INVALID_TOPIC_EXCEPTION, "longer than", id="name too long"),
    pytest.param(new_topic("__cluster_metadata"), INVALID_REQUEST, "prohibited", id="metadata topic"),
])
def test_invalid_topics_get_kafkas_error_and_cost_nothing(tmp_path: Path, topic: dict[str, Any], error_code: int,
                                                          message: str) -> None:
    """The bypass of the issue: a negative count charged -2147483648 turned a debt into a full bucket."""
    mutations = Mutations(tmp_path, StubCluster({}), rate=2)
    create_topics(mutations, new_topic("debt", 40))  # 22 - 40 = -18 tokens
    before = mutations.tokens()
    outcome = create_topics(mutations, topic, new_topic("next"))
    answer = local_body(outcome, Api.CREATE_TOPICS, 7)
    assert [t.error_code for t in answer.topics] == [error_code, THROTTLED]  # the debt still stands
    assert message in answer.topics[0].error_message
    assert mutations.tokens() == pytest.approx(before, abs=0.1)


def test_every_copy_of_a_name_given_twice_is_refused_and_nothing_is_dropped(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}))
    outcome = create_topics(mutations, new_topic("twice", 5), new_topic("once", 2), new_topic("twice", 7))
    assert [t.name for t in forwarded_body(outcome).topics] == ["once"]
    assert mutations.tokens() == pytest.approx(20, abs=0.1)  # only "once" is charged
    merged = finished(outcome, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[created("once")])
    assert [(t.name, t.error_code, t.error_message) for t in merged.topics] == [
        ("twice", INVALID_REQUEST, "Duplicate topic name."), ("once", 0, None),
        ("twice", INVALID_REQUEST, "Duplicate topic name.")]


def test_existing_and_unknown_topics_are_forwarded_uncharged_even_in_debt(tmp_path: Path) -> None:
    """Streams' and Connect's "create if missing" at start-up costs nothing; the cluster's error is theirs."""
    cluster = StubCluster({"exists": 8})
    mutations = Mutations(tmp_path, cluster)
    create_topics(mutations, new_topic("debt", 40))  # -18 tokens
    before = mutations.tokens()
    for outcome in (create_topics(mutations, new_topic("exists", 3)),
                    mutations.decide(Api.DELETE_TOPICS, 6, timeout_ms=1000,
                                     topics=[{"name": "gone", "topic_id": None}]),
                    mutations.decide(Api.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False,
                                     topics=[{"name": "gone", "count": 4, "assignments": None}])):
        assert forwarded(outcome).replacement is None and outcome.throttle_ms == 0
    assert mutations.tokens() == pytest.approx(before, abs=0.1)


def test_what_the_cluster_refuses_is_given_back_and_what_it_created_unexpectedly_is_charged(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({"raced": 2}))
    outcome = create_topics(mutations, new_topic("new", 5), new_topic("raced", 3), new_topic("policy", 4))
    assert mutations.tokens() == pytest.approx(22 - 5 - 4, abs=0.1)  # "raced" existed when asked
    finished(outcome, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[
        created("new"), created("raced"), created("policy", error_code=44)])
    # "policy" was refused by the cluster (given back), "raced" had been deleted and was created (charged)
    assert mutations.tokens() == pytest.approx(22 - 5 - 3, abs=0.1)


def test_create_partitions_that_are_no_increase_or_badly_assigned_cost_nothing(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({"a": 4, "b": 4, "c": 4}))
    outcome = mutations.decide(Api.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False, topics=[
        {"name": "a", "count": 4, "assignments": None},
        {"name": "b", "count": -2147483648, "assignments": None},
        {"name": "c", "count": 6, "assignments": [{"broker_ids": [1]}]},
        {"name": "a", "count": 9, "assignments": None}])
    answer = local_body(outcome, Api.CREATE_PARTITIONS, 3)
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("a", INVALID_REQUEST), ("b", INVALID_PARTITIONS), ("c", INVALID_REPLICA_ASSIGNMENT), ("a", INVALID_REQUEST)]
    assert answer.results[1].error_message == "The topic b currently has 4 partition(s); -2147483648 would not be " \
                                              "an increase."
    assert mutations.tokens() == pytest.approx(22, abs=0.1)


def test_delete_topics_named_by_id_are_charged_and_answered_with_their_id(tmp_path: Path) -> None:
    ids = {name: uuid.uuid4() for name in ("a", "b", "c")}
    mutations = Mutations(tmp_path, StubCluster({"a": 10, "b": 15, "c": 3}, ids=ids))
    by_id = [{"name": None, "topic_id": ids[name]} for name in ("a", "b", "c")]
    outcome = mutations.decide(Api.DELETE_TOPICS, 6, timeout_ms=1000, topics=by_id)
    # a: 22 -> 12, b: 12 -> -3, c refused; the others are still forwarded
    assert [t.topic_id for t in forwarded_body(outcome).topics] == [ids["a"], ids["b"]]
    merged = finished(outcome, Api.DELETE_TOPICS, 6, throttle_time_ms=0, responses=[
        {"name": None, "topic_id": ids["b"], "error_code": 0, "error_message": None},
        {"name": None, "topic_id": ids["a"], "error_code": 0, "error_message": None}])
    assert [(r.name, r.topic_id, r.error_code) for r in merged.responses] == [
        (None, ids["a"], 0), (None, ids["b"], 0), ("c", ids["c"], THROTTLED)]


def test_delete_topics_entries_kafka_refuses_before_the_quota(tmp_path: Path) -> None:
    ids = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    mutations = Mutations(tmp_path, StubCluster({"a": 10, "b": 5}, ids=ids))
    outcome = mutations.decide(Api.DELETE_TOPICS, 6, timeout_ms=1000, topics=[
        {"name": "a", "topic_id": ids["a"]},   # both
        {"name": None, "topic_id": None},       # neither
        {"name": None, "topic_id": ids["b"]},   # the same id twice
        {"name": None, "topic_id": ids["b"]}])
    answer = local_body(outcome, Api.DELETE_TOPICS, 6)
    assert [(r.topic_id, r.error_code) for r in answer.responses] == [
        (ids["a"], INVALID_REQUEST), (None, INVALID_REQUEST), (ids["b"], INVALID_REQUEST), (ids["b"], INVALID_REQUEST)]
    assert answer.responses[2].error_message == "Duplicate topic id."
    assert mutations.tokens() == pytest.approx(22, abs=0.1)


def test_a_failed_partition_count_lookup_answers_retriable_and_charges_nothing(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}, unreachable=True))
    outcome = create_topics(mutations, new_topic("a", 3), new_topic("b", 3))
    answer = local_body(outcome, Api.CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [("a", REQUEST_TIMED_OUT), ("b", REQUEST_TIMED_OUT)]
    assert mutations.tokens() == pytest.approx(22, abs=0.1)


def test_topics_the_cluster_created_or_deleted_are_told_to_the_cluster_view(tmp_path: Path) -> None:
    """A topic deleted at once after its creation must be charged its partitions though the broker's metadata
    may not show it yet (``ClusterInfo.accepted``); a deleted one no longer counts; validate_only changes nothing."""
    cluster = StubCluster({}, num_partitions=3)
    mutations = Mutations(tmp_path, cluster, rate=100)
    outcome = create_topics(mutations, new_topic("a", 4), new_topic("b", -1, -1), new_topic("c", 2))
    finished(outcome, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[
        created("a", partitions=4), created("b", partitions=3), created("c", error_code=TOPIC_ALREADY_EXISTS)])
    assert cluster.told_accepted == [("a", None, 4), ("b", None, 3)]
    checked = create_topics(mutations, new_topic("d", 4), validate_only=True)
    finished(checked, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[created("d", partitions=4)])
    before_v5 = create_topics(mutations, new_topic("e", 5), version=4)
    finished(before_v5, Api.CREATE_TOPICS, 4, throttle_time_ms=0, topics=[
        {"name": "e", "error_code": 0, "error_message": None}])
    assert cluster.told_accepted[2:] == [("e", None, 5)]  # the count asked: the answer does not say
    ids = {"a": uuid.uuid4()}
    cluster = StubCluster({"a": 4}, ids=ids)
    deleted = Mutations(tmp_path, cluster, rate=100).decide(Api.DELETE_TOPICS, 6, timeout_ms=1000,
                                                            topics=[{"name": None, "topic_id": ids["a"]}])
    finished(deleted, Api.DELETE_TOPICS, 6, throttle_time_ms=0, responses=[
        {"name": None, "topic_id": ids["a"], "error_code": 0, "error_message": None}])
    assert cluster.told_deleted == ["a"]


# ---- a tenant's caps ---------------------------------------------------------------------------------------------

POLICY_VIOLATION = 44
PAYMENTS = '[[tenant]]\nname = "payments"\nusers = ["pay"]\ntopic-prefix = "p."\nmax_partitions = 10\n'


def policy_violations(outcome: Outcome, api_key: int = Api.CREATE_TOPICS, version: int = 7) -> dict[str, str]:
    """The entries the proxy answered POLICY_VIOLATION, with their messages."""
    if isinstance(outcome, Respond):
        body = local_body(outcome, api_key, version)
    else:
        body = finished(outcome, api_key, version, throttle_time_ms=0, **({"topics": []} if api_key == Api.CREATE_TOPICS
                                                                            else {"results": []}))
    results = body.topics if api_key == Api.CREATE_TOPICS else body.results
    return {r.name: r.error_message for r in results if r.error_code == POLICY_VIOLATION}


def test_creations_in_flight_count_for_the_requests_behind_them_until_answered(tmp_path: Path) -> None:
    cluster = StubCluster({"p.old": 2})
    mutations = Mutations(tmp_path, cluster, rate=100, tenants=PAYMENTS)
    first = create_topics(mutations, new_topic("p.a", 5), client_id="other")
    second = create_topics(mutations, new_topic("p.b", 4), client_id="other")  # pipelined: 2 + 5 + 4 > 10
    assert forwarded(first).replacement is None
    assert policy_violations(second) == {
        "p.b": "Tenant payments owns 7 partition(s) under 'p.'; 4 more would be over its cap of 10."}
    assert mutations.quotas.holdings.counted == {"payments": (2, 7)}  # what the metrics show beside the cap
    finished(first, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[created("p.a", error_code=TOPIC_ALREADY_EXISTS)])
    assert forwarded(create_topics(mutations, new_topic("p.b", 4), client_id="other")).replacement is None


def test_an_increase_of_a_topic_still_being_created_counts_what_it_asks(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}), rate=100, tenants=PAYMENTS)
    create_topics(mutations, new_topic("p.a", 4), client_id="other")

    def grow(count: int) -> Outcome:
        return mutations.decide(Api.CREATE_PARTITIONS, 3, client_id="other", timeout_ms=1000, validate_only=False,
                                topics=[{"name": "p.a", "count": count, "assignments": None}])

    assert forwarded(grow(10)).replacement is None  # the topic counted once, at 10
    assert policy_violations(grow(11), Api.CREATE_PARTITIONS, 3) == {
        "p.a": "Tenant payments owns 10 partition(s) under 'p.'; 1 more would be over its cap of 10."}


def test_a_timed_out_creation_holds_until_its_minute_is_up_and_validate_only_holds_nothing(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}), rate=100, tenants=PAYMENTS)
    assert forwarded(create_topics(mutations, new_topic("p.v", 10), validate_only=True)).replacement is None
    timed_out = create_topics(mutations, new_topic("p.a", 10), client_id="other")
    finished(timed_out, Api.CREATE_TOPICS, 7, throttle_time_ms=0, topics=[created("p.a", error_code=REQUEST_TIMED_OUT)])
    assert list(policy_violations(create_topics(mutations, new_topic("p.b", 1), client_id="other"))) == ["p.b"]
    mutations.now_ms += 60_000
    assert forwarded(create_topics(mutations, new_topic("p.b", 1), client_id="other")).replacement is None


def test_a_topic_the_proxy_saw_created_that_the_metadata_no_longer_shows_counts_as_new(tmp_path: Path) -> None:
    """Deleted around this proxy (through another, or directly) since: its creation again is judged by the cap, not
    left to the cluster as a topic that exists."""
    class SeenCreated(StubCluster):
        async def partitions(self, topics: list[str]) -> dict[str, TopicPartitions]:
            return {topic: TopicPartitions(1, self.topic_id(topic)) for topic in topics}

        async def every_topic(self) -> dict[str, TopicPartitions]:
            return {"p.gone": TopicPartitions(1, self.topic_id("p.gone"), shown=False)}

    mutations = Mutations(tmp_path, SeenCreated({}), rate=100, tenants=PAYMENTS)
    assert list(policy_violations(create_topics(mutations, new_topic("p.gone", 20), client_id="other"))) == ["p.gone"]


def test_requests_no_quota_applies_to_are_judged_by_the_cap_and_not_logged(tmp_path: Path) -> None:
    mutations = Mutations(tmp_path, StubCluster({}), rate=100, tenants=PAYMENTS)
    mutations.usage.start()
    assert list(policy_violations(create_topics(mutations, new_topic("p.a", 11), client_id="unlimited"))) == ["p.a"]
    create_topics(mutations, new_topic("p.b", 2), client_id="unlimited")
    assert forwarded(create_topics(mutations, new_topic("elsewhere", 11), client_id="unlimited")) is FORWARD
    create_topics(mutations, new_topic("p.c", 2))  # the quota of client "limited" applies: logged
    mutations.usage.stop(1)
    logged = [json.loads(line) for file in (tmp_path / "usage").iterdir() for line in file.read_text().splitlines()]
    assert [(line["client_id"], line["mutations"]) for line in logged] == [("limited", 2)]


async def never_asked(*topics: object) -> Any:
    raise AssertionError("only the authorizer asks the cluster whether it creates topics, and which exist")


@pytest.mark.parametrize("then_reserved", [False, True])
def test_metadata_asks_the_cluster_to_create_no_topic_a_cap_governs(tmp_path: Path, then_reserved: bool) -> None:
    quotas = Mutations(tmp_path, StubCluster({}), tenants=PAYMENTS).quotas
    own_topics = MetadataWithoutRefusedTopics(Access(frozenset({"own"})), never_asked, never_asked)
    handler = AutoCreationUnderTenantCaps(quotas, own_topics if then_reserved else None)
    caller = Caller("pay", 0)

    def decide(*names: str, auto: bool = True) -> Any:
        frame = encode_request(Api.METADATA, 12, topics=[{"name": name, "topic_id": None} for name in names],
                               allow_auto_topic_creation=auto, include_topic_authorized_operations=False)
        return handled(handler, memoryview(frame)[4:], caller)

    asked = forwarded_body(decide("p.new", "own", "elsewhere"))
    assert not asked.allow_auto_topic_creation
    assert [topic.name for topic in asked.topics] == (["p.new", "elsewhere"] if then_reserved else
                                                      ["p.new", "own", "elsewhere"])
    for ungoverned in (decide("elsewhere"), decide("p.new", auto=False)):
        assert forwarded(ungoverned).replacement is None


def test_a_deletion_of_a_capped_tenants_topic_is_seen_whoever_deletes_it(tmp_path: Path) -> None:
    """What the proxy saw created counts until the metadata shows it: a deletion it saw ends that at once."""
    cluster = StubCluster({"p.a": 3, "elsewhere": 3})
    mutations = Mutations(tmp_path, cluster, rate=100, tenants=PAYMENTS)
    deleted = mutations.decide(Api.DELETE_TOPICS, 6, client_id="unlimited", timeout_ms=1000,
                               topics=[{"name": "p.a", "topic_id": None}])
    finished(deleted, Api.DELETE_TOPICS, 6, throttle_time_ms=0, responses=[
        {"name": "p.a", "topic_id": cluster.topic_id("p.a"), "error_code": 0, "error_message": None}])
    assert cluster.told_deleted == ["p.a"]
    assert mutations.decide(Api.DELETE_TOPICS, 6, client_id="unlimited", timeout_ms=1000,
                            topics=[{"name": "elsewhere", "topic_id": None}]) is FORWARD


def test_a_topic_that_exists_asked_for_again_holds_nothing(tmp_path: Path) -> None:
    """The cluster answers it TOPIC_ALREADY_EXISTS: what it asks for must not count for the requests behind it."""
    mutations = Mutations(tmp_path, StubCluster({"p.old": 1}), rate=100, tenants=PAYMENTS)
    assert forwarded(create_topics(mutations, new_topic("p.old", 100), client_id="other")).replacement is None
    assert forwarded(create_topics(mutations, new_topic("p.new", 9), client_id="other")).replacement is None


def alices_acls(*acls: tuple[ResourceType, str, PatternType, AclOperation]) -> Access:
    return Access(authorizer=AclAuthorizer([
        AclBinding(kind, name, pattern, "User:alice", "*", operation, AclPermission.ALLOW)
        for kind, name, pattern, operation in acls]))


def judged(handler: TopicMutationHandler, api_key: int, version: int, **fields: object) -> Outcome:
    frame = encode_request(api_key, version, client_id="app", **fields)
    decided = handled(handler, memoryview(frame)[4:], Caller("alice", now_ms(), clock=now_ms))
    if isinstance(decided, Awaitable):
        decided = asyncio.run(_wait(decided))
    assert isinstance(decided, Outcome)
    return decided


def test_with_the_authorizer_a_topic_may_be_created_where_the_acls_allow_and_its_configs_shown_if_described(
        tmp_path: Path) -> None:
    """``ControllerApis.createTopics``: CREATE on the topic (or the cluster); the configs of a topic created
    without DESCRIBE_CONFIGS on it are left out (``ReplicationControlManager.createTopic``)."""
    access = alices_acls((ResourceType.TOPIC, "a.", PatternType.PREFIXED, AclOperation.CREATE),
                         (ResourceType.TOPIC, "a.seen", PatternType.LITERAL, AclOperation.DESCRIBE_CONFIGS))
    handler = TopicMutationHandler(Mutations(tmp_path, StubCluster({})).quotas, StubCluster({}),  # type: ignore[arg-type]
                                   UsageLog(tmp_path / "usage"), access)
    outcome = judged(handler, Api.CREATE_TOPICS, 7, topics=[new_topic("a.seen"), new_topic("a.unseen"),
                                                            new_topic("b.theirs")], timeout_ms=1000,
                     validate_only=False)
    assert [topic.name for topic in forwarded_body(outcome).topics] == ["a.seen", "a.unseen"]
    config = {"name": "cleanup.policy", "value": "delete", "read_only": False, "config_source": 5,
              "is_sensitive": False}
    upstream = encode_response(Api.CREATE_TOPICS, 7, {"throttle_time_ms": 0, "topics": [
        {"name": name, "topic_id": uuid.uuid4(), "error_code": 0, "error_message": None, "num_partitions": 1,
         "replication_factor": 1, "configs": [config], "topic_config_error_code": 0}
        for name in ("a.seen", "a.unseen")]})
    answer = decode_response(Api.CREATE_TOPICS, 7, finish_of(outcome)(memoryview(upstream)) or b"")
    assert [(topic.name, topic.error_code, topic.error_message, topic.topic_config_error_code, topic.num_partitions,
             len(topic.configs)) for topic in answer.topics] == [
        ("a.seen", 0, None, 0, 1, 1), ("a.unseen", 0, None, 29, -1, 0), ("b.theirs", 29, "Authorization failed.", 0,
                                                                         -1, 0)]


def test_with_the_authorizer_a_topic_is_deleted_only_with_delete_and_named_only_where_it_may_be_described(
        tmp_path: Path) -> None:
    ids = {"a.mine": uuid.uuid4(), "a.seen": uuid.uuid4(), "b.theirs": uuid.uuid4()}
    cluster = StubCluster({name: 1 for name in ids}, ids=ids)
    access = alices_acls((ResourceType.TOPIC, "a.", PatternType.PREFIXED, AclOperation.DESCRIBE),
                         (ResourceType.TOPIC, "a.mine", PatternType.LITERAL, AclOperation.DELETE))
    handler = TopicMutationHandler(Mutations(tmp_path, cluster).quotas, cluster,  # type: ignore[arg-type]
                                   UsageLog(tmp_path / "usage"), access)
    outcome = judged(handler, Api.DELETE_TOPICS, 6, timeout_ms=1000, topics=[
        {"name": None, "topic_id": ids[name]} for name in ids])
    assert [topic.topic_id for topic in forwarded_body(outcome).topics] == [ids["a.mine"]]
    upstream = encode_response(Api.DELETE_TOPICS, 6, {"throttle_time_ms": 0, "responses": [
        {"name": "a.mine", "topic_id": ids["a.mine"], "error_code": 0, "error_message": None}]})
    answer = decode_response(Api.DELETE_TOPICS, 6, finish_of(outcome)(memoryview(upstream)) or b"")
    assert sorted((topic.name or "", topic.error_code) for topic in answer.responses) == [
        ("", 29), ("a.mine", 0), ("a.seen", 29)], "b.theirs' name is not disclosed"
    cluster_deleter = Access(authorizer=AclAuthorizer([AclBinding(
        ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*", AclOperation.DELETE,
        AclPermission.ALLOW)]))
    anything = TopicMutationHandler(Mutations(tmp_path, cluster).quotas, cluster,  # type: ignore[arg-type]
                                    UsageLog(tmp_path / "usage"), cluster_deleter)
    assert forwarded(judged(anything, Api.DELETE_TOPICS, 6, timeout_ms=1000, topics=[
        {"name": None, "topic_id": ids[name]} for name in ids])).replacement is None
