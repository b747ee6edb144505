"""With the authorizer: Kafka's checks of the APIs that need more than topics' ACLs (a group's, a transactional
id's, the cluster's), and every API the proxy does not judge yet kept for super users.

The proxy reaches the cluster under its own login, which the cluster lets do what the proxy may, whoever the client is:
a request the proxy does not judge by the client's ACLs would be judged by the proxy's. So the APIs the proxy authorizes
as Kafka's ``KafkaApis`` and ``ControllerApis`` do (``AUTHORIZED_APIS``: topics' data and metadata, their creation and
deletion, coordinators, a group's membership and offsets, KIP-848's consumer groups and KIP-932's share groups,
producer ids, transactions, the groups' and the cluster's administration, configs, client quotas, and the ACLs
themselves, which the proxy answers) are judged (``judged_by_acls``), and a
request of any other API from a principal that is not a super user closes its connection, with a log line naming the
API: a client is never allowed what Kafka's ACLs would not allow it. (Kafka answers a request it refuses, with the API's
own error; the proxy does so for the APIs it authorizes.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from protocol.apis import Api
from protocol.authorization_answers import (
    CONSUMER_GROUP_APIS,
    FIRST_SHARE_FIND_COORDINATOR,
    GROUP_KEY_TYPE,
    GROUP_MEMBERSHIP_APIS,
    HEARTBEAT_APIS,
    INTERNAL_TOPICS,
    SHARE_GROUP_APIS,
    SHARE_KEY_TYPE,
    TRANSACTION_APIS,
    TRANSACTION_KEY_TYPE,
    ProducerIdAsked,
    assigned_groups_described_answer,
    cluster_described,
    cluster_operations_asked,
    coordinators_answer,
    coordinators_asked,
    coordinators_without,
    group_and_transaction,
    group_id,
    groups_deleted,
    groups_deleted_answer,
    groups_described,
    groups_described_answer,
    groups_listed,
    heartbeat_asked,
    heartbeat_refused,
    judged_by_the_cluster_first,
    membership_refused,
    offsets_answer,
    offsets_asked,
    producer_id_asked,
    producer_id_refused,
    share_request_asked,
    share_request_refused,
    transaction_asked,
    transaction_refused,
    transactions_described,
    transactions_described_answer,
    transactions_listed,
)
from protocol.cluster_refusals import (
    CLUSTER_OPERATION_NAMES,
    FIRST_KAFKA_VERSIONS,
    cluster_administration_refused,
    refused_message,
)
from protocol.codecs import max_version
from protocol.config_resources import CONFIG_APIS
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    OPERATION_NOT_ATTEMPTED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from protocol.header import RequestHeader
from protocol.refused_topics import SHARE_APIS, TopicsRefused, answer_with_refusals, topics_refused
from protocol.share_group_offsets import SHARE_GROUP_OFFSET_APIS
from proxy.decision.interception import RequestHandler
from proxy.decision.outcome import (
    CLOSE,
    FORWARD,
    Caller,
    Decided,
    Forward,
    OnResponse,
    answered_in_part,
    local_answer,
    replacement_request,
)
from proxy.handlers.acls import ACL_APIS
from proxy.handlers.own_login import TOKEN_APIS
from proxy.handlers.refused_topics import TOPIC_OPERATIONS
from proxy.security.access import Access, requester_of
from proxy.security.acls import CLUSTER_NAME, AclAuthorizer, AclOperation, ResourceType

log = logging.getLogger(__name__)

GROUP_FIRST_APIS = frozenset({Api.OFFSET_COMMIT, Api.TXN_OFFSET_COMMIT})
"""The APIs naming topics whose group is authorized first (``GroupFirst``)."""
GROUP_ADMINISTRATION_APIS = frozenset({Api.LIST_GROUPS, Api.DESCRIBE_GROUPS, Api.DELETE_GROUPS})
TRANSACTION_ADMINISTRATION_APIS = frozenset({Api.DESCRIBE_TRANSACTIONS, Api.LIST_TRANSACTIONS})
NEVER_AUTHORIZED_APIS = frozenset({Api.API_VERSIONS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE,
                                   Api.GET_TELEMETRY_SUBSCRIPTIONS, Api.PUSH_TELEMETRY})
"""The APIs Kafka authorizes no request of: forwarded."""
JUDGED_BY_THEIR_HANDLERS = frozenset({
    Api.PRODUCE, Api.FETCH, Api.METADATA, Api.DESCRIBE_TOPIC_PARTITIONS, Api.CREATE_TOPICS, Api.DELETE_TOPICS,
    Api.CREATE_PARTITIONS,
    *(api_key for api_key in TOPIC_OPERATIONS if api_key not in GROUP_FIRST_APIS), *ACL_APIS, *CONFIG_APIS,
    Api.OFFSET_DELETE, Api.DESCRIBE_CLIENT_QUOTAS, Api.ALTER_CLIENT_QUOTAS, *SHARE_GROUP_OFFSET_APIS,
})
"""The APIs whose handlers judge them by the ACLs (``proxy.security.access``): those naming topics alone
(DescribeTopicPartitions among them), OffsetDelete
and the share groups' offset APIs (``proxy.handlers.refused_topics``), the config APIs
(``proxy.handlers.config_resources``), the client-quota APIs (``proxy.handlers.client_quotas``) and the ACL APIs
(``proxy.handlers.acls``)."""
JUDGED_WHERE_ANSWERED = TOKEN_APIS
"""The APIs judged by their handlers where the proxy answers them: the delegation-token APIs, unless clients log in to
the cluster themselves (``proxy.handlers.own_login``); forwarded there, they are kept for super users."""
CLUSTER_OPERATIONS = {api_key: AclOperation[name] for api_key, name in CLUSTER_OPERATION_NAMES.items()}
"""The cluster's administration (``protocol.cluster_refusals``): the operation on the cluster each API needs."""
AUTHORIZED_APIS = NEVER_AUTHORIZED_APIS | JUDGED_BY_THEIR_HANDLERS | CLUSTER_OPERATIONS.keys() | {
    Api.FIND_COORDINATOR, *GROUP_MEMBERSHIP_APIS, *GROUP_FIRST_APIS, Api.OFFSET_FETCH, Api.INIT_PRODUCER_ID,
    *TRANSACTION_APIS, *GROUP_ADMINISTRATION_APIS, *TRANSACTION_ADMINISTRATION_APIS, Api.DESCRIBE_CLUSTER,
    *CONSUMER_GROUP_APIS, *SHARE_GROUP_APIS, *SHARE_APIS}
"""The APIs whose requests the proxy judges by the ACLs as Kafka does (``judged_by_acls``)."""
AUTHORIZER_DECODED_APIS = frozenset({Api.FIND_COORDINATOR, *GROUP_MEMBERSHIP_APIS, Api.OFFSET_FETCH,
                                     *TRANSACTION_APIS, *GROUP_ADMINISTRATION_APIS, *CONSUMER_GROUP_APIS,
                                     *SHARE_GROUP_APIS, *CLUSTER_OPERATIONS.keys(), *TRANSACTION_ADMINISTRATION_APIS})
"""The APIs only the authorizer decodes: ApiVersions offers clients the versions the proxy reads of them
(``protocol.codecs.max_version``)."""


def judged_by_acls(handlers: Mapping[int, RequestHandler], access: Access
                   ) -> tuple[dict[int, RequestHandler], RequestHandler]:
    """The request handlers (``handlers``: by api key) with the authorizer: the APIs of ``AUTHORIZED_APIS`` judged as
    Kafka judges them, every other one kept for super users; and the handler of the APIs without one (kept for super
    users too)."""
    authorizer = access.authorizer
    assert authorizer is not None, "judged with the authorizer"
    logged: set[tuple[str, int]] = set()
    super_users_only = SuperUsersOnly(authorizer, None, logged)
    missing = (JUDGED_BY_THEIR_HANDLERS | GROUP_FIRST_APIS | SHARE_APIS) - set(handlers)
    assert not missing, f"the APIs {sorted(missing)} have no handler to judge them"
    judged: dict[int, RequestHandler] = {
        **dict.fromkeys(NEVER_AUTHORIZED_APIS, _FORWARDED),
        **{api_key: handler if api_key in JUDGED_BY_THEIR_HANDLERS | JUDGED_WHERE_ANSWERED
           else SuperUsersOnly(authorizer, handler, logged)
           for api_key, handler in handlers.items()}}
    membership = GroupMembership(access)
    judged.update({api_key: ClusterAdministration(access, handlers.get(api_key))
                   for api_key in CLUSTER_OPERATIONS})
    judged.update({Api.FIND_COORDINATOR: Coordinators(access), **dict.fromkeys(GROUP_MEMBERSHIP_APIS, membership),
                   **{api_key: GroupFirst(access, handlers[api_key]) for api_key in GROUP_FIRST_APIS},
                   Api.OFFSET_FETCH: GroupOffsets(access),
                   **dict.fromkeys(TRANSACTION_APIS, TransactionalIdFirst(access)),
                   **dict.fromkeys(GROUP_ADMINISTRATION_APIS, GroupsAdministered(access)),
                   **dict.fromkeys(TRANSACTION_ADMINISTRATION_APIS, TransactionsAdministered(access)),
                   Api.DESCRIBE_CLUSTER: ClusterDescribed(access),
                   **dict.fromkeys(CONSUMER_GROUP_APIS | SHARE_GROUP_APIS, NewProtocolGroups(access, SuperUsersOnly(
                       authorizer, None, logged, "the coordinator would resolve its subscription by regular expression "
                       "(api key {api_key}) with the proxy's own login"))),
                   **{api_key: ShareGroupFirst(access, handlers[api_key]) for api_key in SHARE_APIS},
                   Api.INIT_PRODUCER_ID: ProducerIdFirst(access, handlers.get(Api.INIT_PRODUCER_ID, _FORWARDED))})
    return judged, super_users_only

_LOGGED_REFUSALS = 10_000
"""Principal and API pairs whose refusal has been logged, at most (then the log says each again)."""


class _Forwarded:
    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        return FORWARD


_FORWARDED = _Forwarded()


class SuperUsersOnly:
    """An API the proxy does not judge by the ACLs: super users' requests go on to ``then`` (the API's handler, if it
    has one), anyone else's connection is closed."""

    def __init__(self, authorizer: AclAuthorizer, then: RequestHandler | None, logged: set[tuple[str, int]],
                 why: str = "the authorizer does not judge requests of api key {api_key} yet") -> None:
        """``logged``: the principals and APIs refused whose refusal has been logged (once each: a client reconnects
        and asks again); ``why``: the log line's reason (its ``{api_key}`` the request's)."""
        self._authorizer = authorizer
        self._then = then
        self._logged = logged
        self._why = why

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        principal = caller.principal
        if principal in self._authorizer.super_users:
            return FORWARD if self._then is None else self._then.on_request(header, frame, caller)
        refusal = (principal, header.api_key)
        if refusal not in self._logged:
            if len(self._logged) >= _LOGGED_REFUSALS:
                self._logged.clear()
            self._logged.add(refusal)
            log.warning("closing a connection of %s from %s: %s, so only super users may send them", principal,
                        caller.host or "an unknown address", self._why.format(api_key=header.api_key))
        return CLOSE


class GroupMembership:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup: READ on the group, or refused whole with
    GROUP_AUTHORIZATION_FAILED (``KafkaApis.handleJoinGroupRequest`` and its kin)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        body = frame[header.length:]
        if judged_by_the_cluster_first(api_key, version, body) or self._access.allows(
                caller, AclOperation.READ, ResourceType.GROUP, group_id(api_key, version, body)):
            return FORWARD
        return local_answer(header, membership_refused(api_key, version, GROUP_AUTHORIZATION_FAILED))


class Coordinators:
    """FindCoordinator: a group's key needs DESCRIBE on the group, a transaction's DESCRIBE on its transactional id
    (each refused key answered with its error and no node, the others asked of the cluster), a share key (a
    broker's) CLUSTER_ACTION on the cluster (``KafkaApis.getCoordinator``)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        body = frame[header.length:]
        key_type, keys = coordinators_asked(version, body)
        access = self._access
        if key_type == SHARE_KEY_TYPE and version >= FIRST_SHARE_FIND_COORDINATOR:
            if access.allows(caller, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
                return FORWARD
            return local_answer(header, coordinators_answer(
                version, keys, dict.fromkeys(keys, CLUSTER_AUTHORIZATION_FAILED), None, whole=True))
        resource, error_code = _COORDINATED.get(key_type, (None, 0))
        refused = {} if resource is None else {
            key: error_code for key in keys if not access.allows(caller, AclOperation.DESCRIBE, resource, key)}
        if not refused:
            return FORWARD  # an unknown key type too: the cluster refuses it
        forwarded = None if len(refused) == len(set(keys)) else coordinators_without(version, body, frozenset(refused))
        if forwarded is None:
            return local_answer(header, coordinators_answer(version, keys, refused, None))
        return Forward(replacement=replacement_request(frame, header, forwarded), on_response=OnResponse(
            finish=lambda upstream: coordinators_answer(version, keys, refused, upstream)))


_COORDINATED = {GROUP_KEY_TYPE: (ResourceType.GROUP, GROUP_AUTHORIZATION_FAILED),
                TRANSACTION_KEY_TYPE: (ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
"""What a FindCoordinator key names, by key type, and the error of a key the principal may not describe."""


class GroupFirst:
    """OffsetCommit: READ on the group (``handleOffsetCommitRequest``); TxnOffsetCommit: WRITE on the transactional
    id, then READ on the group (``handleTxnOffsetCommitRequest``). Each refused, every partition is refused with its
    error (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED); then READ on each topic, judged by
    ``then`` (``TopicsWithoutRefused``)."""

    def __init__(self, access: Access, then: RequestHandler) -> None:
        self._access = access
        self._then = then

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        body = frame[header.length:]
        group, transactional_id = group_and_transaction(api_key, version, body)
        allows = self._access.allows
        if transactional_id is not None and not allows(caller, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                       transactional_id):
            error = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not allows(caller, AclOperation.READ, ResourceType.GROUP, group):
            error = GROUP_AUTHORIZATION_FAILED
        else:
            return self._then.on_request(header, frame, caller)
        every_topic = topics_refused(api_key, version, body, lambda name: True) or TopicsRefused((), None)
        return local_answer(header, answer_with_refusals(api_key, version, None, every_topic, error))


class GroupsAdministered:
    """ListGroups: every group with DESCRIBE on the cluster, else the groups the principal may describe
    (``handleListGroupsRequest``). DescribeGroups: DESCRIBE on each group, a refused one answered first with
    GROUP_AUTHORIZATION_FAILED and nothing else, the others asked of the cluster, their authorized operations the
    principal's (``handleDescribeGroupsRequest``). DeleteGroups: DELETE on each group, a refused one answered last
    with GROUP_AUTHORIZATION_FAILED (``handleDeleteGroupsRequest``)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        access, version = self._access, header.api_version
        if version > max_version(header.api_key):  # not offered: a client that negotiated never sends it
            return CLOSE

        def refused(group: str | None) -> bool:
            return not access.allows(caller, AclOperation.DESCRIBE, ResourceType.GROUP, group or "")

        if header.api_key == Api.LIST_GROUPS:
            if access.allows(caller, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
                return FORWARD
            return Forward(on_response=OnResponse(finish=lambda body: groups_listed(version, body, refused)))
        if header.api_key == Api.DELETE_GROUPS:
            refusals, forwarded_body = groups_deleted(version, frame[header.length:], lambda group: not access.allows(
                caller, AclOperation.DELETE, ResourceType.GROUP, group or ""))
            return answered_in_part(frame, header, forwarded_body,
                                    lambda body: groups_deleted_answer(version, refusals, body))
        described = groups_described(Api.DESCRIBE_GROUPS, version, frame[header.length:], refused)
        authorizer = access.authorizer
        assert authorizer is not None, "judged with the authorizer"
        requester = requester_of(caller)

        def operations(group: str) -> int:
            return authorizer.authorized_operations(requester, ResourceType.GROUP, group)

        return answered_in_part(frame, header, described.forwarded_body,
                                lambda body: groups_described_answer(version, described, body, operations))


class TransactionsAdministered:
    """ListTransactions: the transactions whose transactional id the principal may describe
    (``handleListTransactionsRequest``). DescribeTransactions: DESCRIBE on each transactional id, a refused one
    answered in its place with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing else, the others asked of the
    cluster; each without the topics the principal may not describe (``handleDescribeTransactionsRequest``)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        access, version = self._access, header.api_version

        def refused(transactional_id: str | None) -> bool:
            return not access.allows(caller, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                     transactional_id or "")

        if header.api_key == Api.LIST_TRANSACTIONS:
            return Forward(on_response=OnResponse(finish=lambda body: transactions_listed(version, body, refused)))
        described = transactions_described(version, frame[header.length:], refused)
        topic_refused = access.topic_refusal(caller, AclOperation.DESCRIBE)
        return answered_in_part(frame, header, described.forwarded_body, lambda body: transactions_described_answer(
            version, described, body, topic_refused))


class NewProtocolGroups:
    """KIP-848's consumer groups and KIP-932's share groups. ConsumerGroupHeartbeat and ShareGroupHeartbeat: READ on the
    group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on each topic subscribed to by name, else
    TOPIC_AUTHORIZATION_FAILED, whole (``handleConsumerGroupHeartbeat``, ``handleShareGroupHeartbeat``). A consumer
    group's subscription by regular expression is a super user's alone (``regex``): the coordinator resolves it to the
    topics whoever asks may describe, and through the proxy the proxy's login asks. ConsumerGroupDescribe and
    ShareGroupDescribe: DESCRIBE on each group, refused ones first with GROUP_AUTHORIZATION_FAILED; the others'
    authorized operations the principal's; a group assigning a topic the principal may not describe
    TOPIC_AUTHORIZATION_FAILED with no members (``handleConsumerGroupDescribe``, ``handleShareGroupDescribe``)."""

    def __init__(self, access: Access, regex: RequestHandler) -> None:
        self._access = access
        self._regex = regex

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if version > max_version(api_key):  # not offered: a client that negotiated never sends it
            return CLOSE
        access = self._access
        body = frame[header.length:]
        if api_key in HEARTBEAT_APIS:
            asked = heartbeat_asked(api_key, version, body)
            if not access.allows(caller, AclOperation.READ, ResourceType.GROUP, asked.group_id):
                return local_answer(header, heartbeat_refused(api_key, version, GROUP_AUTHORIZATION_FAILED))
            if asked.answered_before_topics:
                return FORWARD
            topic_refused = access.topic_refusal(caller, AclOperation.DESCRIBE)
            if any(topic_refused(name) for name in asked.topic_names):
                return local_answer(header, heartbeat_refused(api_key, version, TOPIC_AUTHORIZATION_FAILED))
            return FORWARD if asked.regex is None else self._regex.on_request(header, frame, caller)
        described = groups_described(api_key, version, body, lambda group: not access.allows(
            caller, AclOperation.DESCRIBE, ResourceType.GROUP, group or ""))
        authorizer = access.authorizer
        assert authorizer is not None, "judged with the authorizer"
        requester = requester_of(caller)

        def answer(upstream: memoryview | None) -> bytes:
            return assigned_groups_described_answer(
                api_key, version, described, upstream, lambda group: authorizer.authorized_operations(
                    requester, ResourceType.GROUP, group), access.topic_refusal(caller, AclOperation.DESCRIBE))

        if not described.refused:
            return Forward(on_response=OnResponse(finish=answer))
        return answered_in_part(frame, header, described.forwarded_body, answer)


class ShareGroupFirst:
    """ShareFetch and ShareAcknowledge: READ on the group, else refused whole with GROUP_AUTHORIZATION_FAILED; then READ
    on each topic, judged by ``then`` (``ShareTopicsWithoutRefused``) (``handleShareFetchRequest``,
    ``handleShareAcknowledgeRequest``). A request without a group is the cluster's to refuse, as Kafka does before it
    authorizes, and so is one from a member id Kafka refuses before it judges the topics."""

    def __init__(self, access: Access, then: RequestHandler) -> None:
        self._access = access
        self._then = then

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        asked = share_request_asked(api_key, version, frame[header.length:])
        if asked.group_id is None:
            return FORWARD
        if not self._access.allows(caller, AclOperation.READ, ResourceType.GROUP, asked.group_id):
            return local_answer(header, share_request_refused(api_key, version, GROUP_AUTHORIZATION_FAILED))
        return FORWARD if asked.answered_before_topics else self._then.on_request(header, frame, caller)


class ClusterDescribed:
    """DescribeCluster: nothing to authorize; the authorized operations on the cluster, asked for, are the
    principal's, 0 without DESCRIBE on it (``handleDescribeCluster``)."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        if not cluster_operations_asked(version, frame[header.length:]):
            return FORWARD
        access = self._access
        authorizer = access.authorizer
        assert authorizer is not None, "judged with the authorizer"
        operations = 0
        if access.allows(caller, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            operations = authorizer.authorized_operations(requester_of(caller), ResourceType.CLUSTER, CLUSTER_NAME)
        return Forward(on_response=OnResponse(finish=lambda body: cluster_described(version, body, operations)))


class ClusterAdministration:
    """The cluster's administration (``CLUSTER_OPERATIONS``): its operation on the cluster, else refused whole as
    Kafka refuses it (``protocol.cluster_refusals``); allowed, on to ``then`` (the API's handler, which keeps the
    proxy's own topics out, where it has one)."""

    def __init__(self, access: Access, then: RequestHandler | None) -> None:
        self._access = access
        self._then = then

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if version < FIRST_KAFKA_VERSIONS.get(api_key, 0):
            return CLOSE  # Kafka does not offer it, nor read it
        if self._access.allows(caller, CLUSTER_OPERATIONS[api_key], ResourceType.CLUSTER, CLUSTER_NAME):
            return FORWARD if self._then is None else self._then.on_request(header, frame, caller)
        answer = cluster_administration_refused(api_key, version, frame[header.length:],
                                                refused_message(caller.principal, caller.host, api_key))
        return CLOSE if answer is None else local_answer(header, answer)


class TransactionalIdFirst:
    """EndTxn, AddOffsetsToTxn and a client's AddPartitionsToTxn (v0-3): WRITE on the transactional id, or refused
    with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (whole; on every partition); then READ on AddOffsetsToTxn's group
    (GROUP_AUTHORIZATION_FAILED), and WRITE on each of AddPartitionsToTxn's topics: a refused topic's partitions get
    TOPIC_AUTHORIZATION_FAILED and every other OPERATION_NOT_ATTEMPTED, nothing added, an internal topic refused
    whatever the ACLs (``handleEndTxnRequest``, ``handleAddOffsetsToTxnRequest``, ``handleAddPartitionsToTxnRequest``).
    A broker's AddPartitionsToTxn (v4+) is not offered, and closes the connection."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if version > max_version(api_key):
            return CLOSE
        asked = transaction_asked(api_key, version, frame[header.length:])
        access = self._access
        if not access.allows(caller, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, asked.transactional_id):
            return local_answer(header, transaction_refused(api_key, version, asked,
                                                            TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        if asked.group_id is not None and not access.allows(caller, AclOperation.READ, ResourceType.GROUP,
                                                            asked.group_id):
            return local_answer(header, transaction_refused(api_key, version, asked, GROUP_AUTHORIZATION_FAILED))
        refused = access.topic_refusal(caller, AclOperation.WRITE)
        topic_errors = {name: TOPIC_AUTHORIZATION_FAILED for name, _ in asked.partitions
                        if name in INTERNAL_TOPICS or refused(name)}
        if topic_errors:
            return local_answer(header, transaction_refused(api_key, version, asked, OPERATION_NOT_ATTEMPTED,
                                                            topic_errors))
        return FORWARD


class GroupOffsets:
    """OffsetFetch: DESCRIBE on each group, and on each topic of it (``handleOffsetFetchRequest``): a refused group
    answered with its error, a refused topic named with TOPIC_AUTHORIZATION_FAILED, and left out of a group's
    offsets asked for all its topics."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        newest = max_version(Api.OFFSET_FETCH)
        if version > newest:  # not offered: a client that negotiated never sends it
            log.warning("closing a connection of %s from %s: OffsetFetch v%d names topics by id, which the "
                        "authorizer does not judge (v%d at most)", caller.principal, caller.host or "an unknown "
                        "address", version, newest)
            return CLOSE
        access = self._access
        topic_refused = access.topic_refusal(caller, AclOperation.DESCRIBE)
        asked = offsets_asked(version, frame[header.length:], lambda group: not access.allows(
            caller, AclOperation.DESCRIBE, ResourceType.GROUP, group or ""), topic_refused)
        if asked.forwarded_body is None:
            return local_answer(header, offsets_answer(version, asked, None, topic_refused))
        replacement = replacement_request(frame, header, asked.forwarded_body) \
            if asked.refused_groups or asked.refused_topics else None
        return Forward(replacement=replacement, on_response=OnResponse(
            finish=lambda upstream: offsets_answer(version, asked, upstream, topic_refused)))


class ProducerIdFirst:
    """InitProducerId: a transactional producer needs WRITE on its transactional id (and TWO_PHASE_COMMIT, asked
    for), refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an idempotent one IDEMPOTENT_WRITE on the cluster, or WRITE
    on some topic (``authorizeByResourceType``), refused CLUSTER_AUTHORIZATION_FAILED
    (``handleInitProducerIdRequest``); then ``then``, the producer-ID quota's handler."""

    def __init__(self, access: Access, then: RequestHandler) -> None:
        self._access = access
        self._then = then

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        asked = producer_id_asked(version, frame[header.length:])
        refused = self._refusal(asked, caller)
        if refused:
            return local_answer(header, producer_id_refused(version, refused))
        return self._then.on_request(header, frame, caller)

    def _refusal(self, asked: ProducerIdAsked, caller: Caller) -> int:
        """The error the request is refused with; 0: none."""
        access = self._access
        transactional_id = asked.transactional_id
        if transactional_id is not None:
            needed = [AclOperation.WRITE, *([AclOperation.TWO_PHASE_COMMIT] if asked.two_phase_commit else [])]
            allowed = all(access.allows(caller, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)
                          for operation in needed)
            return 0 if allowed else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        authorizer = access.authorizer
        assert authorizer is not None, "judged with the authorizer"
        allowed = access.allows(caller, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) or \
            authorizer.authorize_by_resource_type(requester_of(caller), AclOperation.WRITE, ResourceType.TOPIC)
        return 0 if allowed else CLUSTER_AUTHORIZATION_FAILED
