"""CreateTopics, DeleteTopics and CreatePartitions under the controller mutation quota (KIP-599).

Kafka charges a topic's partitions only once its own checks have passed, right before it would
create, delete or extend it (``ControllerApis``, ``ReplicationControlManager``, recording into
``ControllerMutationQuotaManager``'s quota). The proxy does the same, entry by entry in request order:

- entries naming one of the proxy's own topics are answered TOPIC_AUTHORIZATION_FAILED, with ControllerApis'
  message, as Kafka answers a topic the principal may not create, delete or extend, whatever the quota;
- entries Kafka refuses before the quota (a name given twice, an invalid name, a partition count
  or replication factor below -1 or 0, a bad manual assignment, a partition count that is no
  increase, both or neither of name and id) are answered by the proxy with Kafka's error and
  message, charged nothing, and cut from the forwarded request;
- a topic that already exists (CreateTopics) or does not exist (DeleteTopics, CreatePartitions)
  is forwarded uncharged and unchecked, so the cluster's own error reaches the client, never 89;
- the others are charged: strict versions (CreateTopics v6+, DeleteTopics v5+, CreatePartitions
  v3+) refuse an entry with THROTTLING_QUOTA_EXCEEDED once the bucket is below zero, older ones
  admit all and throttle.

The cluster's answer settles the account: a charged entry the cluster refused is given back, a
topic the proxy thought existed but the cluster created is charged then, and ``num_partitions =
-1`` is charged what the cluster really created. ``validate_only`` is charged like the real thing,
as KRaft does (the quota is applied, then the records are dropped). Partition counts come from
the cluster for each request (``ClusterInfo``); if it cannot be asked, every entry is answered
REQUEST_TIMED_OUT (retriable) and nothing is charged.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_request
from protocol.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    POLICY_VIOLATION,
    REQUEST_TIMED_OUT,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.header import RequestHeader
from protocol.refused_topics import NameRefusal
from protocol.topic_admin import (
    THROTTLED,
    TopicError,
    TopicRef,
    merged_topic_response,
    request_keeping,
    request_topics,
    upstream_results,
)
from proxy.cluster.info import ClusterInfo, TopicPartitions
from proxy.cluster.upstream import UPSTREAM_ERRORS
from proxy.decision.interception import RequestHandler
from proxy.decision.outcome import (
    FORWARD,
    Caller,
    ChargedResponse,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    local_answer,
    replacement_request,
)
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from proxy.state.quota_service import QuotaService
from quotas.decisions import Requester
from quotas.mutations import PartitionMutations
from quotas.tenants import Creation, CreationsInFlight, refusals, tenants_to_count
from quotas.token_bucket import remaining_throttle_ms

log = logging.getLogger(__name__)

STRICT_SINCE_VERSION = {Api.CREATE_TOPICS: 6, Api.DELETE_TOPICS: 5, Api.CREATE_PARTITIONS: 3}
"""Kafka's ``strictSinceVersion`` per API (ControllerApis)."""


_USE_CLUSTER_DEFAULT = -1
_FIRST_METADATA_WITH_AUTO_CREATION_FLAG = 4
_UNSHOWN = TopicPartitions(0, shown=False)
_FIRST_CREATE_TOPICS_RESULT_WITH_PARTITIONS = 5  # CreatableTopicResult.NumPartitions
_MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_DUPLICATE_NAME = TopicError(INVALID_REQUEST, "Duplicate topic name.")
_DUPLICATE_ID = TopicError(INVALID_REQUEST, "Duplicate topic id.")
_NAME_AND_ID = TopicError(INVALID_REQUEST, "You may not specify both topic name and topic id.")
_NEITHER_NAME_NOR_ID = TopicError(INVALID_REQUEST, "Neither topic name nor id were specified.")
_REFUSAL = {  # ControllerApis' answers to a topic the principal may not create, delete or extend
    Api.CREATE_TOPICS: TopicError(TOPIC_AUTHORIZATION_FAILED, "Authorization failed."),
    Api.DELETE_TOPICS: TopicError(TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    Api.CREATE_PARTITIONS: TopicError(TOPIC_AUTHORIZATION_FAILED, None),
}


@dataclass
class _Charges:
    """What one request is charged, per entry index, and what its answer may correct."""

    counts: dict[int, int] = field(default_factory=dict)
    """Entries subject to the quota, with their partition mutations."""
    refused: dict[int, TopicError] = field(default_factory=dict)
    """Entries the proxy answers itself (Kafka's checks, or the quota)."""
    uncharged_creations: dict[int, int] = field(default_factory=dict)
    """CreateTopics entries for topics that existed when asked: charged only if the cluster creates them."""
    defaulted: set[int] = field(default_factory=set)
    """CreateTopics entries with ``num_partitions = -1``, charged the assumed cluster default."""
    display: dict[int, TopicRef] = field(default_factory=dict)
    """How the proxy's own results name an entry (a topic given by id also gets its name)."""
    growth: dict[int, tuple[str, uuid.UUID, int]] = field(default_factory=dict)
    """CreatePartitions entries: the topic, its id and the count asked, to tell the cluster's view once done."""
    partitions_asked: dict[int, int] = field(default_factory=dict)
    """CreateTopics entries: the partitions the topic gets, to tell the cluster's view once done (older answers
    do not say)."""
    unknown_growth: dict[int, int] = field(default_factory=dict)
    """CreatePartitions entries of topics the cluster does not show: the count asked (a topic still being created
    gets it, a tenant's cap counts it)."""
    creations: dict[int, Creation] = field(default_factory=dict)
    """The entries a tenant's cap judged, with what each creates (when one applies to the request)."""


class TopicMutationHandler:
    def __init__(self, quotas: QuotaService, cluster: ClusterInfo, usage: UsageLog, access: Access | None = None
                 ) -> None:
        """``access``: the topics a client may not create, delete or extend, refused as Kafka refuses them (before
        any other check, uncharged): the proxy's own, and with the authorizer those its ACLs do not allow
        (``ControllerApis``)."""
        self._quotas = quotas
        self._cluster = cluster
        self._usage = usage
        self._access = access = access or Access()
        self._reserved_topics = access.reserved_topics
        self._creations_in_flight = CreationsInFlight()
        """Creations of topics a tenant's cap counts, forwarded and not yet answered."""

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        client_id = header.client_id or ""
        config = self._quotas.config
        limited = self._quotas.mutations.applies(Requester(caller.user, client_id))
        tenants_capped = config.tenants.capped
        authorizing = self._access.authorizer is not None
        if not (limited or tenants_capped or self._reserved_topics or authorizing):
            return FORWARD
        request = decode_request(header.api_key, header.api_version, frame[header.length:])
        entries = request_topics(header.api_key, header.api_version, request)
        capped = tenants_capped and self._capped(Api(header.api_key), caller.user, entries)
        if not (limited or capped or authorizing) and not any(entry.name in self._reserved_topics or entry.topic_id
                                                              for entry in entries):
            return FORWARD
        # a copy of the frame: the connection's buffer moves on
        return self._decide(bytes(frame), header, request, entries, caller, limited, capped)

    def _capped(self, api_key: Api, user: str, entries: list[TopicRef]) -> bool:
        """A tenant's cap may refuse some of the entries, or a deletion changes what a capped tenant owns (the proxy
        sees it done, not only the metadata, which may lag)."""
        tenants = self._quotas.config.tenants
        creator = user if api_key == Api.CREATE_TOPICS else None
        return any(tenants.governs(entry.name, creator) for entry in entries if entry.name is not None)

    async def _decide(self, frame: bytes, header: RequestHeader, request: Any, entries: list[TopicRef],
                      caller: Caller, limited: bool, capped: bool) -> Outcome:
        api_key = Api(header.api_key)
        try:
            refused = await self._refusals(api_key, entries, caller)
            if not (limited or capped):
                if not refused and not self._withheld_configs(api_key, entries, caller):
                    return FORWARD
                charges = _Charges()
            elif api_key == Api.CREATE_TOPICS:
                charges = await self._create_topics(request, entries)
            elif api_key == Api.DELETE_TOPICS:
                charges = await self._delete_topics(entries)
            else:
                charges = await self._create_partitions(request, entries)
            if capped and api_key != Api.DELETE_TOPICS:
                refused.update(await self._tenant_refusals(api_key, entries, charges, caller.later(), refused))
        except UPSTREAM_ERRORS as error:
            log.warning("cannot read partition counts from the cluster for a %s request: %s", api_key.name,
                        error or type(error).__name__)
            unanswered = TopicError(REQUEST_TIMED_OUT, "The proxy could not read the topics' partition counts "
                                                       "from the cluster; retry.")
            body = merged_topic_response(api_key, header.api_version, entries, {},
                                         dict.fromkeys(range(len(entries)), unanswered), 0)
            return local_answer(header, body)
        for index, (shown, refusal) in refused.items():
            charges.counts.pop(index, None)
            charges.refused[index] = refusal
            charges.display[index] = shown
        return self._admit(memoryview(frame), header, request, entries, charges, caller.later(), limited)

    async def _refusals(self, api_key: Api, entries: list[TopicRef], caller: Caller
                        ) -> dict[int, tuple[TopicRef, TopicError]]:
        """The entries naming a topic the caller may not create, delete or extend (by name, or by id), with how the
        answer shows them: a topic given by id keeps its name undisclosed unless the caller may describe it, as
        Kafka answers (``ControllerApis.createTopics``, ``deleteTopics``, ``createPartitions``)."""
        access = self._access
        if not access.guards_topics:
            return {}
        ids = [entry.topic_id for entry in entries if entry.topic_id is not None]
        names_by_id = {topic_id: name for topic_id, (name, _) in (await self._cluster.topics_by_id(ids)).items()} \
            if ids else {}
        named = {index: name for index, entry in enumerate(entries)
                 if (name := entry.name if entry.topic_id is None else names_by_id.get(entry.topic_id)) is not None}
        undescribed = access.topic_refusal(caller, AclOperation.DESCRIBE)
        own_topics: NameRefusal = access.reserved_topics.__contains__
        if api_key == Api.CREATE_TOPICS:
            creates_any = access.allows(caller, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
            refused = own_topics if creates_any else access.topic_refusal(caller, AclOperation.CREATE)
        elif api_key == Api.CREATE_PARTITIONS:
            refused = access.topic_refusal(caller, AclOperation.ALTER)
        elif access.allows(caller, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME):
            refused = undescribed = own_topics
        else:  # Kafka answers a missing topic it may describe UNKNOWN_TOPIC_OR_PARTITION: here it is refused
            # too, as its metadata may lag behind a topic created a moment ago, which the cluster would delete
            refused = access.topic_refusal(caller, AclOperation.DELETE)
        error = _REFUSAL[api_key]
        refusals = {}
        for index, name in named.items():
            if refused(name):
                entry = entries[index]
                shown = entry if entry.topic_id is None or undescribed(name) else TopicRef(name, entry.topic_id)
                refusals[index] = (shown, error)
        return refusals

    def _withheld_configs(self, api_key: Api, entries: list[TopicRef], caller: Caller) -> set[int]:
        """The CreateTopics entries whose configs the caller may not describe: the answer leaves them out, as
        Kafka's controller does (``ReplicationControlManager.createTopic``)."""
        if api_key != Api.CREATE_TOPICS or self._access.authorizer is None:
            return set()
        undescribed = self._access.topic_refusal(caller, AclOperation.DESCRIBE_CONFIGS)
        return {index for index, entry in enumerate(entries) if undescribed(entry.name)}

    async def _tenant_refusals(self, api_key: Api, entries: list[TopicRef], charges: _Charges, caller: Caller,
                               refused: Mapping[int, object]) -> dict[int, tuple[TopicRef, TopicError]]:
        """The entries a tenant's cap refuses, as a ``CreateTopicPolicy`` refuses: after Kafka's own checks (an
        entry they refuse, or a topic that exists, never reaches it) and before the quota (uncharged). What each
        tenant owns is read from the cluster's metadata, so topics made around the proxy count too, with the
        creations this proxy let through whose answers have not come back."""
        tenants = self._quotas.config.tenants
        every_topic = await self._cluster.every_topic()
        creations = charges.creations = {index: creation for index, creation in self._creations(
            api_key, entries, charges, every_topic, caller.now_ms).items() if index not in refused}
        in_cluster = {name: topic.partitions for name, topic in every_topic.items()}
        owned = {tenant.name: self._creations_in_flight.owned_with(tenant, in_cluster, caller.now_ms)
                 for tenant in tenants_to_count(tenants, [creation.topic for creation in creations.values()])}
        for name, counted in owned.items():
            self._quotas.holdings.count(name, counted)
        return {index: (entries[index], TopicError(POLICY_VIOLATION, message))
                for index, message in refusals(tenants, caller.user, creations, owned).items()}

    def _creations(self, api_key: Api, entries: list[TopicRef], charges: _Charges,
                   every_topic: Mapping[str, TopicPartitions], now_ms: int) -> dict[int, Creation]:
        """The entries that create topics or partitions once Kafka's own checks have passed them; with the cluster's
        topics (``every_topic``), those the quota leaves to the cluster that may create too: a topic the proxy saw
        created that the metadata does not show (deleted since, maybe), an increase of a topic still being created."""
        if api_key == Api.DELETE_TOPICS:
            return {}
        if api_key == Api.CREATE_TOPICS:
            maybe_new = {index: count for index, count in charges.uncharged_creations.items()
                         if not every_topic.get(entries[index].name or "", _UNSHOWN).shown}
            return {index: Creation(entries[index].name or "", count, True)
                    for index, count in {**charges.counts, **maybe_new}.items()}
        creations = {index: Creation(entries[index].name or "", charges.growth[index][2], False)
                     for index in charges.counts}
        creations.update({index: Creation(entries[index].name or "", count, False)
                          for index, count in charges.unknown_growth.items()
                          if self._creations_in_flight.creating(entries[index].name or "", now_ms)})
        return creations

    def _held_in_flight(self, charges: _Charges, forwarded: list[int], now_ms: int) -> int | None:
        """The creations forwarded that a tenant's cap counts, held in flight until their answer: the hold's token."""
        tenants = self._quotas.config.tenants
        counted = [creation for index, creation in charges.creations.items()
                   if index in forwarded and (owner := tenants.owner_of(creation.topic)) is not None
                   and owner.counts_owned]
        return self._creations_in_flight.add(counted, now_ms) if counted else None

    # ---- what each API is charged -----------------------------------------------------------

    async def _create_topics(self, request: Any, entries: list[TopicRef]) -> _Charges:
        charges = _Charges()
        duplicates = _repeated([entry.name for entry in entries])
        for index, entry in enumerate(entries):
            name = entry.name or ""
            if name in duplicates:
                charges.refused[index] = _DUPLICATE_NAME
            elif (problem := _invalid_topic_name(name)) is not None:
                charges.refused[index] = problem
        candidates = [index for index in range(len(entries)) if index not in charges.refused]
        existing = await self._cluster.partitions([entries[index].name or "" for index in candidates])
        default: int | None = None
        for index in candidates:
            topic = request.topics[index]
            problem = _invalid_new_topic(topic)
            if problem is not None:
                if existing[topic.name].partitions:
                    continue  # Kafka answers TOPIC_ALREADY_EXISTS first: the cluster will
                charges.refused[index] = problem
                continue
            partitions = len(topic.assignments) if topic.assignments else int(topic.num_partitions)
            if partitions == _USE_CLUSTER_DEFAULT:
                if default is None:
                    default = await self._cluster.default_partitions()
                partitions = default
                charges.defaulted.add(index)
            charges.partitions_asked[index] = partitions
            if existing[topic.name].partitions:
                charges.uncharged_creations[index] = partitions
            else:
                charges.counts[index] = partitions
        return charges

    async def _delete_topics(self, entries: list[TopicRef]) -> _Charges:
        charges = _Charges()
        duplicate_names = _repeated([entry.name for entry in entries if entry.topic_id is None])
        duplicate_ids = _repeated([entry.topic_id for entry in entries if entry.name is None])
        for index, entry in enumerate(entries):
            if entry.name is not None and entry.topic_id is not None:
                charges.refused[index] = _NAME_AND_ID
            elif entry.name is None and entry.topic_id is None:
                charges.refused[index] = _NEITHER_NAME_NOR_ID
            elif entry.name in duplicate_names:
                charges.refused[index] = _DUPLICATE_NAME
            elif entry.topic_id in duplicate_ids:
                charges.refused[index] = _DUPLICATE_ID
        candidates = [index for index in range(len(entries)) if index not in charges.refused]
        names = [name for index in candidates if (name := entries[index].name) is not None]
        by_name = await self._cluster.partitions(names)
        by_id = await self._cluster.topics_by_id(
            [topic_id for index in candidates if (topic_id := entries[index].topic_id) is not None])
        for index in candidates:
            entry = entries[index]
            if entry.topic_id is None:
                partitions = by_name[entry.name or ""].partitions
            else:
                name, partitions = by_id.get(entry.topic_id, (None, 0))
                charges.display[index] = TopicRef(name, entry.topic_id)
                if name is not None and name in names:
                    # the same topic by name and by id: Kafka refuses it rather than delete it twice
                    mapped = TopicError(INVALID_REQUEST, "The provided topic name maps to an ID that was already "
                                                         "supplied.")
                    charges.refused[index] = mapped
                    charges.refused.update((other, mapped) for other in candidates if entries[other].name == name)
                    continue
            if partitions:  # an unknown topic is forwarded uncharged: the cluster says it does not exist
                charges.counts[index] = partitions
        for index in charges.refused:
            charges.counts.pop(index, None)
        return charges

    async def _create_partitions(self, request: Any, entries: list[TopicRef]) -> _Charges:
        charges = _Charges()
        duplicates = _repeated([entry.name for entry in entries])
        charges.refused = {index: _DUPLICATE_NAME for index, entry in enumerate(entries) if entry.name in duplicates}
        candidates = [index for index in range(len(entries)) if index not in charges.refused]
        existing = await self._cluster.partitions([entries[index].name or "" for index in candidates])
        for index in candidates:
            topic = request.topics[index]
            current, topic_id = existing[topic.name].partitions, existing[topic.name].topic_id
            if not current or topic_id is None:
                charges.unknown_growth[index] = topic.count
                continue  # unknown: forwarded uncharged, the cluster answers UNKNOWN_TOPIC_OR_PARTITION
            problem = _invalid_partition_increase(topic, current)
            if problem is not None:
                charges.refused[index] = problem
            else:
                charges.counts[index] = topic.count - current
                charges.growth[index] = (topic.name, topic_id, topic.count)
        return charges

    # ---- admission and the answer -------------------------------------------------------------

    def _admit(self, frame: memoryview, header: RequestHeader, request: Any, entries: list[TopicRef],
               charges: _Charges, caller: Caller, limited: bool) -> Outcome:
        """Charged when the cluster has named what the request mutates: ``caller``'s time is then. Not ``limited``:
        no quota applies (the request is here for a tenant's cap or the proxy's own topics), nothing is logged."""
        api_key, version = Api(header.api_key), header.api_version
        client_id = header.client_id or ""
        user, now = caller.user, caller.now_ms
        charged = sorted(charges.counts)  # request order
        mutations = PartitionMutations([charges.counts[i] for i in charged], version >= STRICT_SINCE_VERSION[api_key])
        decision = self._quotas.mutations.record(Requester(user, client_id, caller.broker), mutations, now)
        throttled = [index for index, admitted in zip(charged, decision.topics_admitted, strict=True) if not admitted]
        charges.refused.update(dict.fromkeys(throttled, THROTTLED))
        for index in throttled:
            del charges.counts[index]
        if limited:
            self._usage.mutations(user, client_id, sum(charges.counts.values()), decision.throttle_ms, len(throttled))
            self._usage.observed(user, client_id, decision.observed_ms, decision.observed_refusals > 0)
        shown = [charges.display.get(index, entry) for index, entry in enumerate(entries)]
        throttle_ms = decision.throttle_ms
        if len(charges.refused) == len(entries):
            return local_answer(header, merged_topic_response(api_key, version, shown, {}, charges.refused,
                                                              throttle_ms), throttle_ms)
        forwarded = [index for index in range(len(entries)) if index not in charges.refused]
        validate_only = bool(getattr(request, "validate_only", False))
        settle = self._settlement(api_key, version, shown, forwarded, charges, caller, client_id, validate_only,
                                  limited)
        held = None if validate_only else self._held_in_flight(charges, forwarded, now)
        withheld = self._withheld_configs(api_key, entries, caller)

        def finish(upstream_body: memoryview) -> bytes:
            upstream = decode_response(api_key, version, upstream_body)
            results = upstream_results(api_key, entries, forwarded, upstream)
            if held is not None and all(result.error_code != REQUEST_TIMED_OUT for result in results.values()):
                self._creations_in_flight.answered(held)  # timed out, the controller may still carry it out
            settle(results)
            created_unseen = [results[index] for index in withheld if index in results
                              and not results[index].error_code]
            for result in created_unseen:
                result.configs, result.num_partitions, result.replication_factor = [], -1, -1
                result.topic_config_error_code = TOPIC_AUTHORIZATION_FAILED
            if not (charges.refused or created_unseen):
                return bytes(upstream_body)
            return merged_topic_response(api_key, version, shown, results, charges.refused, 0,
                                         getattr(upstream, "throttle_time_ms", 0) or 0)

        replacement = None
        if charges.refused:
            body = encode_request(api_key, version, request_keeping(api_key, version, request, forwarded))
            replacement = replacement_request(frame, header, body)
        if not throttle_ms:
            return Forward(replacement=replacement, on_response=OnResponse(finish=finish))

        def throttle_left(response_start: memoryview, response_bytes: int) -> ChargedResponse:
            # Kafka computes a mutation's throttle as it answers: the time the request spent at the cluster counts
            # as served (``AbstractControllerMutationQuota.throttleTime``)
            return ChargedResponse(remaining_throttle_ms(throttle_ms, now, caller.later().now_ms))

        return Forward(replacement=replacement, on_response=OnResponse(finish=finish, charge=throttle_left))

    def _settlement(self, api_key: Api, version: int, entries: Sequence[TopicRef], forwarded: list[int],
                    charges: _Charges, caller: Caller, client_id: str, validate_only: bool,
                    limited: bool) -> Callable[[dict[int, Any]], None]:
        """Correct the charges once the cluster has answered (Kafka charges exactly what it carried out), and
        tell the cluster view what changed."""

        reports_partitions = api_key == Api.CREATE_TOPICS and version >= _FIRST_CREATE_TOPICS_RESULT_WITH_PARTITIONS

        def settle(results: dict[int, Any]) -> None:
            correction = 0
            for index in forwarded:
                result = results.get(index)
                if result is None:
                    continue
                done = result.error_code == 0
                if done and not validate_only:
                    self._changed(api_key, entries[index], charges, index, result,
                                  result.num_partitions if reports_partitions else 0)
                cost = charges.counts.get(index)
                if cost is not None and not done and result.error_code != REQUEST_TIMED_OUT:
                    correction -= cost  # refused by the cluster: Kafka would not have charged it
                elif cost is None and done and index in charges.uncharged_creations:
                    cost = charges.uncharged_creations[index]  # it did not exist after all: created now
                    correction += cost
                if done and cost is not None and index in charges.defaulted and reports_partitions \
                        and result.num_partitions > 0:
                    self._cluster.learn_default_partitions(result.num_partitions)
                    correction += result.num_partitions - cost  # what num_partitions = -1 really made
            if correction and limited:
                self._quotas.mutations.correct(Requester(caller.user, client_id, caller.broker), correction,
                                               caller.later().now_ms)
                self._usage.mutations(caller.user, client_id, correction, 0, 0)

        return settle

    def _changed(self, api_key: Api, entry: TopicRef, charges: _Charges, index: int, result: Any,
                 reported_partitions: int) -> None:
        """The cluster carried out ``entry``: its metadata may not show it at once."""
        if api_key == Api.DELETE_TOPICS:
            if entry.name is not None:
                self._cluster.deleted(entry.name)
        elif api_key == Api.CREATE_PARTITIONS:
            if index in charges.growth:
                self._cluster.accepted(*charges.growth[index])
            elif index in charges.unknown_growth and entry.name is not None:  # grown as soon as it was created
                self._cluster.accepted(entry.name, None, charges.unknown_growth[index])
        elif entry.name is not None:
            partitions = reported_partitions if reported_partitions > 0 else charges.partitions_asked.get(index, 0)
            topic_id = getattr(result, "topic_id", None)
            self._cluster.accepted(entry.name, topic_id if topic_id and topic_id.int else None, partitions)


class AutoCreationUnderTenantCaps:
    """Metadata asking the cluster to create the topics it names (``allow_auto_topic_creation``, with the cluster's
    ``auto.create.topics.enable``) is asked without it when a tenant's cap governs one of them. Kafka's controller
    holds a topic created that way to its ``CreateTopicPolicy`` too; the proxy cannot hold the cluster's own creation
    to the cap, so the topic is not created: the client is answered UNKNOWN_TOPIC_OR_PARTITION, as by a cluster
    without auto-creation, and creates it with CreateTopics, which the cap judges. ``then``: the Metadata handler the
    request (as it goes on) is handed to next."""

    def __init__(self, quotas: QuotaService, then: RequestHandler | None) -> None:
        self._quotas = quotas
        self._then = then

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        replacement = self._without_auto_creation(header, frame, caller.user)
        if replacement is not None:
            frame = memoryview(replacement)[SIZE_PREFIX_BYTES:]
        decided = FORWARD if self._then is None else self._then.on_request(header, frame, caller)
        if replacement is not None and isinstance(decided, Forward) and decided.replacement is None:
            return decided._replace(replacement=replacement)
        return decided

    def _without_auto_creation(self, header: RequestHeader, frame: memoryview, user: str) -> bytes | None:
        tenants = self._quotas.config.tenants
        if not tenants.capped or header.api_version < _FIRST_METADATA_WITH_AUTO_CREATION_FLAG:
            return None  # older versions always auto-create, and Kafka 4 no longer takes them
        request = decode_request(Api.METADATA, header.api_version, frame[header.length:])
        if not request.allow_auto_topic_creation or not request.topics:
            return None
        if not any(tenants.governs(topic.name, user) for topic in request.topics if topic.name is not None):
            return None
        request.allow_auto_topic_creation = False
        return replacement_request(frame, header, encode_request(Api.METADATA, header.api_version, request))


def _repeated(values: Sequence[Hashable]) -> set[Any]:
    return {value for value, count in Counter(values).items() if count > 1}


def _invalid_topic_name(name: str) -> TopicError | None:
    """Kafka's ``Topic.validate`` (and the KRaft metadata topic, which no client may create)."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > _MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {_MAX_TOPIC_NAME_LENGTH}"
    elif not _LEGAL_TOPIC_NAME.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        return TopicError(INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
    if name == _CLUSTER_METADATA_TOPIC:
        return TopicError(INVALID_REQUEST, f"Creation of internal topic {_CLUSTER_METADATA_TOPIC} is prohibited.")
    return None


def _invalid_new_topic(topic: Any) -> TopicError | None:
    """``ReplicationControlManager.createTopic``'s checks before the quota."""
    if topic.assignments:
        if topic.replication_factor != -1:
            return TopicError(INVALID_REQUEST, "A manual partition assignment was specified, but replication "
                                               "factor was not set to -1.")
        if topic.num_partitions != -1:
            return TopicError(INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions "
                                               "was not set to -1.")
        indexes = [assignment.partition_index for assignment in topic.assignments]
        if (repeated := _repeated(indexes)):
            return TopicError(INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for "
                                                          f"partition {min(repeated)}")
        if sorted(indexes) != list(range(len(indexes))):
            return TopicError(INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")
        return None
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        return TopicError(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the "
                                                      "default value.")
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        return TopicError(INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    return None


def _invalid_partition_increase(topic: Any, current: int) -> TopicError | None:
    """``ReplicationControlManager.createPartitions``'s checks before the quota."""
    if topic.count == current:
        return TopicError(INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        return TopicError(INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} partition(s); "
                                              f"{topic.count} would not be an increase.")
    additional = topic.count - current
    if topic.assignments is not None and len(topic.assignments) != additional:
        return TopicError(INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional partition(s), but "
                                                      f"only {len(topic.assignments)} assignment(s) were specified.")
    return None

