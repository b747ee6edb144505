"""The config APIs' requests without the resources their principal may not describe or alter, and their answers,
shaped as Kafka shapes them.

DescribeConfigs (``ConfigHelper.handleDescribeConfigsRequest``) answers a refused resource with its error, Kafka's
message and no configs, after the others; a resource of a type it does not know fails the whole request before any
is judged. AlterConfigs and IncrementalAlterConfigs (``ConfigAdminManager.preprocess`` on the broker, then
``ControllerApis.authorizeAlterResource``) answer each resource in the request's order, and judge a resource only
once it is well formed: a resource named twice, or naming a config twice, or setting one to null, gets
INVALID_REQUEST whatever the principal may do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import ERROR_MESSAGES, INVALID_REQUEST, UNKNOWN_SERVER_ERROR

CONFIG_APIS = frozenset({Api.DESCRIBE_CONFIGS, Api.ALTER_CONFIGS, Api.INCREMENTAL_ALTER_CONFIGS})
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 16, 32
"""``ConfigResource.Type`` ids."""
_JUDGED_TYPES: dict[int, frozenset[int]] = {
    Api.DESCRIBE_CONFIGS: frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE,
                                     GROUP_RESOURCE}),
    Api.ALTER_CONFIGS: frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE}),
    Api.INCREMENTAL_ALTER_CONFIGS: frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE,
                                              CLIENT_METRICS_RESOURCE, GROUP_RESOURCE}),
}
"""The resource types each API authorizes; the others it answers INVALID_REQUEST (the legacy AlterConfigs has no
BROKER_LOGGER) without judging them, as the cluster does."""
_DELETE_CONFIG = 1
"""IncrementalAlterConfigs' DELETE, the one operation without a value."""

ConfigRefusal = Callable[[int, str], int]
"""The error refusing a resource (its type and name) to the principal; 0 when it may."""
ResourceError = tuple[int, str | None]
"""An error code and its message."""


class ConfigsRefused(NamedTuple):
    resources: tuple[tuple[int, str], ...]
    """Each resource of the request, in its order: its type and name."""
    errors: tuple[ResourceError | None, ...]
    """The answer of each resource answered by the proxy; None for those asked of the cluster."""
    forwarded_body: bytes | None
    """The request without the resources answered by the proxy, or None when none is left to ask."""


def configs_refused(api_key: int, version: int, body: memoryview, refusal: ConfigRefusal) -> ConfigsRefused | None:
    """The request's resources the principal may not describe or alter (``refusal``) with their answers, and the
    request for the others; None when none is refused."""
    request = decode_request(api_key, version, body)
    resources = tuple((resource.resource_type, resource.resource_name) for resource in request.resources)
    judged_types = _JUDGED_TYPES[api_key]
    if api_key == Api.DESCRIBE_CONFIGS:
        if any(resource_type not in judged_types for resource_type, _ in resources):
            return None  # the cluster fails the whole request, describing none
        errors = tuple(_refusal_error(refusal(*resource)) for resource in resources)
    else:
        named = Counter(resources)
        errors = tuple(_alter_error(api_key, resource, key, named[key] > 1, refusal) if key[0] in judged_types
                       else None for resource, key in zip(request.resources, resources, strict=True))
    if not any(errors):
        return None
    request.resources = [resource for resource, error in zip(request.resources, errors, strict=True) if error is None]
    return ConfigsRefused(resources, errors, encode_request(api_key, version, request) if request.resources else None)


_NAMED_TWICE = "Each resource must appear at most once."


def _refusal_error(error_code: int) -> ResourceError | None:
    return (error_code, ERROR_MESSAGES[error_code]) if error_code else None


def _alter_error(api_key: int, resource: Any, key: tuple[int, str], named_twice: bool,
                 refusal: ConfigRefusal) -> ResourceError | None:
    """A refused resource's answer: what the broker answers before judging it when it is not well formed
    (``ConfigAdminManager.preprocess``), else its refusal."""
    refused = _refusal_error(refusal(*key))
    if refused is None:
        return None
    if named_twice:
        return INVALID_REQUEST, _NAMED_TWICE
    names = [config.name for config in resource.configs]
    if len(set(names)) < len(names):
        return INVALID_REQUEST, "Error due to duplicate config keys"
    valued = api_key == Api.ALTER_CONFIGS
    nulls = [config.name for config in resource.configs
             if config.value is None and (valued or config.config_operation != _DELETE_CONFIG)]
    if nulls:
        return INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
    if key[0] == BROKER_LOGGER_RESOURCE:  # refused by the broker with an exception, whose default message
        return refused[0], None  # ``ApiError.fromThrowable`` leaves out
    return refused


def configs_answer(api_key: int, version: int, upstream_body: memoryview | None, refused: ConfigsRefused) -> bytes:
    """The cluster's answer (or, with nothing asked, an empty one) with the proxy's: DescribeConfigs' after the
    cluster's results, the alterations' each in the request's place (``reassembleIncrementalResponse``)."""
    cls = response_class(api_key)
    if api_key == Api.DESCRIBE_CONFIGS:
        answer = cls(version=version, throttle_time_ms=0, results=[]) if upstream_body is None else \
            decode_response(api_key, version, upstream_body)
        answer.results = [*answer.results, *(
            cls.DescribeConfigsResult(error_code=error[0], error_message=error[1], resource_type=resource_type,
                                      resource_name=name, configs=[])
            for (resource_type, name), error in zip(refused.resources, refused.errors, strict=True)
            if error is not None)]
        return encode_response(api_key, version, answer)
    answer = cls(version=version, throttle_time_ms=0, responses=[]) if upstream_body is None else \
        decode_response(api_key, version, upstream_body)
    asked = {(result.resource_type, result.resource_name): (result.error_code, result.error_message)
             for result in answer.responses}
    missing = (UNKNOWN_SERVER_ERROR, ERROR_MESSAGES[UNKNOWN_SERVER_ERROR])
    answer.responses = [cls.AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=resource_type, resource_name=name)
        for (resource_type, name), error in zip(refused.resources, refused.errors, strict=True)
        for code, message in (error or asked.get((resource_type, name), missing),)]
    return encode_response(api_key, version, answer)


def config_resources_listed_without(version: int, upstream_body: memoryview, hidden_topics: frozenset[str]
                                    ) -> bytes | None:
    """A ListConfigResources answer without the topics of ``hidden_topics`` (v1 lists every topic, as Kafka lists
    them to a principal that may describe the cluster's configs); None when it lists none of them."""
    answer = decode_response(Api.LIST_CONFIG_RESOURCES, version, upstream_body)
    kept = [resource for resource in answer.config_resources
            if resource.resource_type != TOPIC_RESOURCE or resource.resource_name not in hidden_topics]
    if len(kept) == len(answer.config_resources):
        return None
    answer.config_resources = kept
    return encode_response(Api.LIST_CONFIG_RESOURCES, version, answer)
