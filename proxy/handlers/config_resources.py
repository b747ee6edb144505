"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: the proxy's own topics refused to every client, and,
with the authorizer, each resource judged as Kafka judges it (``ConfigHelper.handleDescribeConfigsRequest``,
``ControllerApis.authorizeAlterResource``): DESCRIBE_CONFIGS, or ALTER_CONFIGS, on the topic (else
TOPIC_AUTHORIZATION_FAILED), on the group (GROUP_AUTHORIZATION_FAILED), or on the cluster for a broker, a broker's
loggers and the client-metrics subscriptions (CLUSTER_AUTHORIZATION_FAILED). The refused resources never reach the
cluster, which the proxy's login lets describe and alter anything. ListConfigResources lists the topics without the
proxy's own."""

from __future__ import annotations

from protocol.apis import Api
from protocol.codecs import max_version
from protocol.config_resources import (
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    ConfigRefusal,
    config_resources_listed_without,
    configs_answer,
    configs_refused,
)
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from protocol.header import RequestHeader
from proxy.decision.outcome import (
    CLOSE,
    FORWARD,
    Caller,
    Decided,
    Forward,
    OnResponse,
    answered_in_part,
)
from proxy.handlers.refused_topics import reserved_names_search
from proxy.security.access import Access
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType


class ConfigResourcesJudged:
    def __init__(self, access: Access) -> None:
        self._access = access
        self._may_name_reserved = reserved_names_search(access.reserved_topics)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if version > max_version(api_key):  # not offered: a client that negotiated never sends it
            return CLOSE
        if self._access.authorizer is None and not self._may_name_reserved(frame):
            return FORWARD
        refused = configs_refused(api_key, version, frame[header.length:], self._refusal(api_key, caller))
        if refused is None:
            return FORWARD
        return answered_in_part(frame, header, refused.forwarded_body,
                                lambda body: configs_answer(api_key, version, body, refused))

    def _refusal(self, api_key: int, caller: Caller) -> ConfigRefusal:
        access = self._access
        operation = AclOperation.DESCRIBE_CONFIGS if api_key == Api.DESCRIBE_CONFIGS else AclOperation.ALTER_CONFIGS
        topic_refused = access.topic_refusal(caller, operation)

        def refusal(resource_type: int, name: str) -> int:
            if resource_type == TOPIC_RESOURCE:
                return TOPIC_AUTHORIZATION_FAILED if topic_refused(name) else 0
            if resource_type == GROUP_RESOURCE:
                return 0 if access.allows(caller, operation, ResourceType.GROUP, name) else GROUP_AUTHORIZATION_FAILED
            return 0 if access.allows(caller, operation, ResourceType.CLUSTER, CLUSTER_NAME) \
                else CLUSTER_AUTHORIZATION_FAILED

        return refusal


class ConfigResourcesListed:
    """ListConfigResources: v1 lists every topic of the cluster (Kafka asks DESCRIBE_CONFIGS on the cluster, judged
    before with the authorizer, and no topic's ACLs); the proxy's own are left out, as from every topic listing."""

    def __init__(self, access: Access) -> None:
        self._hidden = frozenset(access.reserved_topics)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version, hidden = header.api_version, self._hidden
        if not hidden:
            return FORWARD
        return Forward(on_response=OnResponse(
            finish=lambda body: config_resources_listed_without(version, body, hidden), read_whole=True))
