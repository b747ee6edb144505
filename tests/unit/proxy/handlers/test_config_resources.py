"""The config APIs judged resource by resource (``ConfigHelper.handleDescribeConfigsRequest``,
``ConfigAdminManager.preprocess``, ``ControllerApis.authorizeAlterResource``)."""

from __future__ import annotations

from typing import Any

from protocol.apis import Api, is_flexible_response
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.config_resources import (
    BROKER_LOGGER_RESOURCE,
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
)
from protocol.header import read_request_header, response_header_length
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Decided, Forward
from proxy.handlers.config_resources import ConfigResourcesJudged
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, finish_of, handled

ALICE = Caller("alice", 0)
RESERVED = "__kafka_quota_proxy_quotas"


def alices(*allowed: tuple[ResourceType, str, AclOperation]) -> Access:
    return Access(frozenset({RESERVED}), AclAuthorizer(
        [AclBinding(resource_type, name, PatternType.LITERAL, "User:alice", "*", operation, AclPermission.ALLOW)
         for resource_type, name, operation in allowed], super_users=["User:admin"]))


def describe(*resources: tuple[int, str]) -> memoryview:
    return memoryview(encode_request(Api.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                                     include_documentation=False, resources=[
                                         {"resource_type": resource_type, "resource_name": name,
                                          "configuration_keys": None} for resource_type, name in resources]))[4:]


def alter(api_key: int, *resources: tuple[int, str, list[tuple[str, str | None]]]) -> memoryview:
    def config(name: str, value: str | None) -> dict[str, Any]:
        return {"name": name, "value": value, **({"config_operation": 1 if name == "deleted" else 0}
                                                  if api_key == Api.INCREMENTAL_ALTER_CONFIGS else {})}

    version = 1 if api_key == Api.INCREMENTAL_ALTER_CONFIGS else 2
    return memoryview(encode_request(api_key, version, validate_only=False, resources=[
        {"resource_type": resource_type, "resource_name": name, "configs": [config(*entry) for entry in configs]}
        for resource_type, name, configs in resources]))[4:]


def answer_of(decided: Decided, api_key: int, version: int) -> Any:
    frame = answered(decided).response[4:]
    flexible = is_flexible_response(api_key, version)
    return decode_response(api_key, version, frame[response_header_length(frame, flexible=flexible):])


def forwarded_resources(decided: Decided, api_key: int) -> list[tuple[int, str]]:
    assert isinstance(decided, Forward) and decided.replacement is not None, decided
    frame = memoryview(decided.replacement)[4:]
    header = read_request_header(frame)
    request = decode_request(api_key, header.api_version, frame[header.length:])
    return [(resource.resource_type, resource.resource_name) for resource in request.resources]


def test_each_resource_needs_describe_configs_on_its_topic_group_or_the_cluster_refused_ones_answered_last() -> None:
    access = alices((ResourceType.TOPIC, "mine", AclOperation.ALTER_CONFIGS), (ResourceType.GROUP, "g",
                                                                               AclOperation.DESCRIBE_CONFIGS))
    judge = ConfigResourcesJudged(access)
    asked = describe((BROKER_RESOURCE, "1"), (TOPIC_RESOURCE, "mine"), (TOPIC_RESOURCE, "theirs"),
                     (GROUP_RESOURCE, "g"), (GROUP_RESOURCE, "h"), (BROKER_LOGGER_RESOURCE, "1"),
                     (CLIENT_METRICS_RESOURCE, "m"), (TOPIC_RESOURCE, RESERVED))
    decided = handled(judge, asked, ALICE)
    assert forwarded_resources(decided, Api.DESCRIBE_CONFIGS) == [(TOPIC_RESOURCE, "mine"), (GROUP_RESOURCE, "g")], \
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
    cluster = encode_response(Api.DESCRIBE_CONFIGS, 4, {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None, "resource_type": resource_type, "resource_name": name,
         "configs": [{"name": "retention.ms", "value": "1", "read_only": False, "config_source": 1,
                      "is_sensitive": False, "synonyms": [], "config_type": 5, "documentation": None}]}
        for resource_type, name in ((TOPIC_RESOURCE, "mine"), (GROUP_RESOURCE, "g"))]})
    answer = finish_of(decided)(memoryview(cluster))
    assert answer is not None
    results = decode_response(Api.DESCRIBE_CONFIGS, 4, answer).results
    assert [(result.resource_type, result.resource_name, result.error_code, result.error_message,
             len(result.configs)) for result in results] == [
        (TOPIC_RESOURCE, "mine", 0, None, 1), (GROUP_RESOURCE, "g", 0, None, 1),
        (BROKER_RESOURCE, "1", 31, "Cluster authorization failed.", 0),
        (TOPIC_RESOURCE, "theirs", 29, "Topic authorization failed.", 0),
        (GROUP_RESOURCE, "h", 30, "Group authorization failed.", 0),
        (BROKER_LOGGER_RESOURCE, "1", 31, "Cluster authorization failed.", 0),
        (CLIENT_METRICS_RESOURCE, "m", 31, "Cluster authorization failed.", 0),
        (TOPIC_RESOURCE, RESERVED, 29, "Topic authorization failed.", 0)]
    alone = answer_of(handled(judge, describe((TOPIC_RESOURCE, "theirs")), ALICE), Api.DESCRIBE_CONFIGS, 4)
    assert [(result.resource_name, result.error_code) for result in alone.results] == [("theirs", 29)]
    assert handled(judge, describe((TOPIC_RESOURCE, "theirs"), (0, "x")), ALICE) is FORWARD, \
        "a type Kafka does not know fails the whole request, before any resource is judged"
    assert handled(judge, describe((TOPIC_RESOURCE, "mine"), (GROUP_RESOURCE, "g")), ALICE) is FORWARD
    newer = bytearray(describe((TOPIC_RESOURCE, "mine")))
    newer[2:4] = (5).to_bytes(2, "big")
    assert handled(judge, memoryview(newer), ALICE) is CLOSE, "not offered"


def test_a_super_user_describes_anything_but_the_proxys_own_topics() -> None:
    judge = ConfigResourcesJudged(alices())
    admin = Caller("admin", 0)
    assert handled(judge, describe((BROKER_RESOURCE, "1"), (TOPIC_RESOURCE, "theirs")), admin) is FORWARD
    decided = handled(judge, describe((TOPIC_RESOURCE, RESERVED), (TOPIC_RESOURCE, "theirs")), admin)
    assert forwarded_resources(decided, Api.DESCRIBE_CONFIGS) == [(TOPIC_RESOURCE, "theirs")]


def test_without_the_authorizer_only_the_proxys_own_topics_are_refused() -> None:
    judge = ConfigResourcesJudged(Access(frozenset({RESERVED})))
    assert handled(judge, describe((TOPIC_RESOURCE, "theirs"), (BROKER_RESOURCE, "1")), ALICE) is FORWARD
    altered = answer_of(handled(judge, alter(Api.INCREMENTAL_ALTER_CONFIGS, (TOPIC_RESOURCE, RESERVED, [
        ("retention.ms", "1")])), ALICE), Api.INCREMENTAL_ALTER_CONFIGS, 1)
    assert [(result.resource_name, result.error_code) for result in altered.responses] == [(RESERVED, 29)]


def test_alterations_are_answered_in_the_requests_order_a_malformed_refused_one_as_the_broker_answers_it() -> None:
    """The broker answers a resource named twice, naming a config twice or setting one to null INVALID_REQUEST before
    the controller judges it; the refused ones that are well formed are refused, the rest asked of the cluster."""
    access = alices((ResourceType.TOPIC, "mine", AclOperation.ALTER_CONFIGS),
                    (ResourceType.GROUP, "g", AclOperation.DESCRIBE_CONFIGS))
    judge = ConfigResourcesJudged(access)
    for api_key, version in ((Api.INCREMENTAL_ALTER_CONFIGS, 1), (Api.ALTER_CONFIGS, 2)):
        asked = alter(api_key, (TOPIC_RESOURCE, "theirs", [("retention.ms", "1")]),
                      (TOPIC_RESOURCE, "mine", [("retention.ms", "1")]),
                      (GROUP_RESOURCE, "g", [("a", "1")]),
                      (TOPIC_RESOURCE, "twice", [("a", "1")]), (TOPIC_RESOURCE, "twice", [("a", "2")]),
                      (TOPIC_RESOURCE, "keys", [("a", "1"), ("a", "2")]),
                      (TOPIC_RESOURCE, "nulls", [("a", None), ("b", None)]),
                      (TOPIC_RESOURCE, "deleted", [("deleted", None)]),
                      (BROKER_LOGGER_RESOURCE, "1", [("root", "INFO")]), (BROKER_RESOURCE, "", [("a", "1")]))
        decided = handled(judge, asked, ALICE)
        legacy = api_key == Api.ALTER_CONFIGS
        assert forwarded_resources(decided, api_key) == [
            (TOPIC_RESOURCE, "mine"), *([(BROKER_LOGGER_RESOURCE, "1")] if legacy else [])], \
            "the legacy API knows no BROKER_LOGGER: the cluster answers it, judging nothing"
        cluster = encode_response(api_key, version, {"throttle_time_ms": 0, "responses": [
            {"error_code": 0, "error_message": None, "resource_type": TOPIC_RESOURCE, "resource_name": "mine"},
            {"error_code": 42, "error_message": "Unknown resource type 8", "resource_type": BROKER_LOGGER_RESOURCE,
             "resource_name": "1"}]})
        answer = finish_of(decided)(memoryview(cluster))
        assert answer is not None
        responses = decode_response(api_key, version, answer).responses
        assert [(response.resource_name, response.error_code, response.error_message) for response in responses] == [
            ("theirs", 29, "Topic authorization failed."), ("mine", 0, None),
            ("g", 30, "Group authorization failed."),
            ("twice", 42, "Each resource must appear at most once."),
            ("twice", 42, "Each resource must appear at most once."),
            ("keys", 42, "Error due to duplicate config keys"),
            ("nulls", 42, "Null value not supported for : a, b"),
            ("deleted", 42, "Null value not supported for : deleted") if legacy else
            ("deleted", 29, "Topic authorization failed."),  # DELETE takes no value
            ("1", 42, "Unknown resource type 8") if legacy else ("1", 31, None),
            ("", 31, "Cluster authorization failed.")]
        assert handled(judge, alter(api_key, (TOPIC_RESOURCE, "mine", [("a", "1")])), ALICE) is FORWARD


def test_a_result_the_cluster_left_out_is_an_unknown_server_error() -> None:
    """As the broker reassembles the controller's answer (``reassembleIncrementalResponse``)."""
    judge = ConfigResourcesJudged(alices((ResourceType.TOPIC, "mine", AclOperation.ALTER_CONFIGS)))
    decided = handled(judge, alter(Api.INCREMENTAL_ALTER_CONFIGS, (TOPIC_RESOURCE, "mine", [("a", "1")]),
                                   (TOPIC_RESOURCE, "theirs", [("a", "1")])), ALICE)
    empty = encode_response(Api.INCREMENTAL_ALTER_CONFIGS, 1, {"throttle_time_ms": 0, "responses": []})
    answer = finish_of(decided)(memoryview(empty))
    assert answer is not None
    assert [(response.resource_name, response.error_code) for response in decode_response(
        Api.INCREMENTAL_ALTER_CONFIGS, 1, answer).responses] == [("mine", -1), ("theirs", 29)]

