"""AlterClientQuotas and DescribeClientQuotas for the quota types the proxy enforces.

``producer_byte_rate``, ``consumer_byte_rate``, ``controller_mutation_rate``, ``request_rate`` and
``producer_ids_rate`` on user and client-id entities, ``connection_creation_rate`` on ip and user
entities, and the byte rates of topic entities (``topic``, alone or with ``user``: an entity type Kafka
does not have) are the proxy's: set in ``QuotaService`` (persisted, winning over the quota file) and
described from the quotas in force. Every other key (e.g. ``request_percentage``) belongs to the
cluster: those parts are forwarded upstream, and the answers are merged in request order. A cluster that lacks the API
gets nothing forwarded; its parts are answered UNSUPPORTED_VERSION.

Both APIs are refused whole (CLUSTER_AUTHORIZATION_FAILED, nothing forwarded) to principals not in
``[admin] principals``, as Kafka's ``KafkaApis`` refuses them without ALTER_CONFIGS / DESCRIBE_CONFIGS
on the cluster; with the authorizer, to those the ACLs do not allow these either, with Kafka's messages
(``ControllerApis.handleAlterClientQuotas``, ``KafkaApis.handleDescribeClientQuotasRequest``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Iterable, Mapping
from typing import Any

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, ERROR_MESSAGES, INVALID_REQUEST, UNSUPPORTED_VERSION
from protocol.header import RequestHeader
from proxy.decision.outcome import Caller, Decided, Forward, OnResponse, Outcome, local_answer, replacement_request
from proxy.security.access import Access
from proxy.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from proxy.state.quota_service import QuotaService
from quotas.config import DEFAULT, QuotaConfigError, QuotaEntity, QuotaType, validate_quota

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
TOPIC = "topic"
TENANT = "tenant"
_PROXY_ENTITY_TYPES = {USER, CLIENT_ID, IP, TOPIC, TENANT}
_STANDING_ALONE = (IP, TENANT)
_PROXY_ONLY_ENTITY_TYPES = {TOPIC, TENANT}
"""Entity types the cluster does not know (it refuses a filter naming one)."""
_PROXY_KEYS = {str(quota_type) for quota_type in QuotaType}


MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

EntityKey = tuple[tuple[str, str | None], ...]
"""An entity as sorted (type, name) pairs; name None is the default entity."""


def entity_key(components: Iterable[Any]) -> EntityKey:
    return tuple(sorted((c.entity_type, c.entity_name) for c in components))


def quota_entity(key: EntityKey) -> QuotaEntity:
    """The proxy's entity for a user/client-id, ip, topic or tenant entity key (raises QuotaConfigError otherwise)."""
    names = dict(key)
    if len(names) != len(key) or not names or set(names) - _PROXY_ENTITY_TYPES or (
            len(names) > 1 and any(alone in names for alone in _STANDING_ALONE)):
        raise QuotaConfigError("an entity is a user, a client-id or both, an ip alone, a topic with or without "
                               "a user, or a tenant alone, each named once")
    if IP in names:
        return QuotaEntity(ip=DEFAULT if names[IP] is None else names[IP])
    if TENANT in names:
        if names[TENANT] is None:
            raise QuotaConfigError("a tenant entity names its tenant (there is no default tenant)")
        return QuotaEntity(tenant=names[TENANT])

    def part(entity_type: str) -> str | None:
        if entity_type not in names:
            return None
        name = names[entity_type]
        return DEFAULT if name is None else name

    return QuotaEntity(part(USER), part(CLIENT_ID), topic=part(TOPIC))


def _components(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    if entity.ip is not None:
        return [(IP, None if entity.ip == DEFAULT else entity.ip)]
    if entity.tenant is not None:
        return [(TENANT, entity.tenant)]
    return [(entity_type, None if name == DEFAULT else name) for entity_type, name in (
        (USER, entity.user), (CLIENT_ID, entity.client_id), (TOPIC, entity.topic)) if name is not None]


class ClientQuotaHandlers:
    def __init__(self, quotas: QuotaService, cluster_api_keys: Callable[[], Awaitable[Container[int]]],
                 admin_principals: frozenset[str], access: Access) -> None:
        """``cluster_api_keys`` answers the api keys the cluster serves, as the proxy's own ApiVersions
        request learnt them (never a client's); only ``admin_principals`` may use these APIs, and with the
        authorizer (``access``) the principals its ACLs allow."""
        self._quotas = quotas
        self._cluster_api_keys = cluster_api_keys
        self._admin_principals = admin_principals
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        if header.api_key == Api.ALTER_CLIENT_QUOTAS:
            return self._alter(header, frame, caller)
        return self._describe(header, frame, caller)

    def _allowed(self, caller: Caller, operation: AclOperation) -> bool:
        access = self._access
        return caller.principal in self._admin_principals or access.authorizer is not None and access.allows(
            caller, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def _refusal_message(self, caller: Caller, kafka_message: str | None, doing: str) -> str | None:
        """The refusal's message: Kafka's with the authorizer."""
        if self._access.authorizer is not None:
            return kafka_message
        return f"{caller.principal} may not {doing} client quotas"

    # ---- AlterClientQuotas ----------------------------------------------------------------------

    def _alter(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        version = header.api_version
        request = decode_request(Api.ALTER_CLIENT_QUOTAS, version, frame[header.length:])
        if not self._allowed(caller, AclOperation.ALTER_CONFIGS):
            refused = (CLUSTER_AUTHORIZATION_FAILED,
                       self._refusal_message(caller, ERROR_MESSAGES[CLUSTER_AUTHORIZATION_FAILED], "alter"))
            return local_answer(header, _alter_response(version, request.entries, [refused] * len(request.entries),
                                                        {}, 0))
        results: list[tuple[int, str | None]] = []
        changes: dict[QuotaEntity, dict[QuotaType, float | None]] = {}
        forwarded_entries = []
        foreign: set[EntityKey] = set()
        for entry in request.entries:
            theirs = [op for op in entry.ops if op.key not in _PROXY_KEYS]
            if theirs:
                forwarded_entries.append(_entry_with_ops(entry, theirs))
                foreign.add(entity_key(entry.entity))
            ours = [op for op in entry.ops if op.key in _PROXY_KEYS]
            results.append(self._check_entry(entity_key(entry.entity), ours, changes))
        if changes and not request.validate_only:
            return self._save_then_answer(frame, header, request, changes, results, forwarded_entries, foreign)
        return self._answer_alter(frame, header, request, results, forwarded_entries, foreign)

    async def _save_then_answer(self, frame: memoryview, header: RequestHeader, request: Any,
                                changes: dict[QuotaEntity, dict[QuotaType, float | None]],
                                results: list[tuple[int, str | None]], forwarded_entries: list[dict[str, Any]],
                                foreign: set[EntityKey]) -> Outcome:
        try:
            await self._quotas.override(changes)
        except (QuotaConfigError, OSError) as error:
            results = [(code, message) if code else (INVALID_REQUEST, f"not applied: {error}")
                       for code, message in results]
        decided = self._answer_alter(frame, header, request, results, forwarded_entries, foreign)
        return decided if isinstance(decided, Outcome) else await decided

    def _answer_alter(self, frame: memoryview, header: RequestHeader, request: Any,
                      results: list[tuple[int, str | None]], forwarded_entries: list[dict[str, Any]],
                      foreign: set[EntityKey]) -> Decided:
        version = header.api_version
        if not forwarded_entries:
            return local_answer(header, _alter_response(version, request.entries, results, {}, 0))

        def merge(upstream_body: memoryview) -> bytes:
            upstream = decode_response(Api.ALTER_CLIENT_QUOTAS, version, upstream_body)
            from_upstream = {entity_key(e.entity): (e.error_code, e.error_message) for e in upstream.entries}
            return _alter_response(version, request.entries, results, from_upstream, upstream.throttle_time_ms)

        async def forward_if_served() -> Outcome:
            if Api.ALTER_CLIENT_QUOTAS not in await self._cluster_api_keys():
                unsupported = dict.fromkeys(foreign, (UNSUPPORTED_VERSION,
                                                      "the cluster does not serve AlterClientQuotas"))
                return local_answer(header, _alter_response(version, request.entries, results, unsupported, 0))
            body = encode_request(Api.ALTER_CLIENT_QUOTAS, version,
                                  {"entries": forwarded_entries, "validate_only": request.validate_only})
            return Forward(replacement=replacement_request(frame, header, body), on_response=OnResponse(finish=merge))

        return forward_if_served()

    def _check_entry(self, key: EntityKey, ops: list[Any],
                     changes: dict[QuotaEntity, dict[QuotaType, float | None]]) -> tuple[int, str | None]:
        """Validate one entry's proxy-owned ops; a valid entry adds its changes to ``changes``."""
        if not ops:
            return 0, None
        try:
            entity = quota_entity(key)
            # a removal is let through: an override of a tenant the file no longer has can still be taken away
            if entity.tenant is not None and not all(op.remove for op in ops) and \
                    self._quotas.config.tenants.named(entity.tenant) is None:
                raise QuotaConfigError(f"no [[tenant]] of the quota file is named {entity.tenant!r}")
            entry_changes: dict[QuotaType, float | None] = {}
            for op in ops:
                quota_type = QuotaType(op.key)
                if quota_type in entry_changes:
                    raise QuotaConfigError(f"{op.key} appears twice")
                if not op.remove:
                    validate_quota(entity, quota_type, op.value)
                entry_changes[quota_type] = None if op.remove else op.value
        except QuotaConfigError as error:
            return INVALID_REQUEST, str(error)
        changes.setdefault(entity, {}).update(entry_changes)
        return 0, None

    # ---- DescribeClientQuotas -------------------------------------------------------------------

    def _describe(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        request = decode_request(Api.DESCRIBE_CLIENT_QUOTAS, header.api_version, frame[header.length:])
        version = header.api_version
        if not self._allowed(caller, AclOperation.DESCRIBE_CONFIGS):
            return local_answer(header, _describe_response(version, {}, 0, CLUSTER_AUTHORIZATION_FAILED,
                                                           self._refusal_message(caller, None, "describe")))
        error = _filter_error(request.components)
        if error is not None:
            return local_answer(header, _describe_response(version, {}, 0, INVALID_REQUEST, error))
        ours = self._matching(request.components, request.strict)

        def merge(upstream_body: memoryview) -> bytes:
            upstream = decode_response(Api.DESCRIBE_CLIENT_QUOTAS, version, upstream_body)
            if upstream.error_code:
                return bytes(upstream_body)
            merged: dict[EntityKey, dict[str, float]] = {}
            for entry in upstream.entries or ():
                values = {v.key: v.value for v in entry.values if v.key not in _PROXY_KEYS}
                if values:
                    merged[entity_key(entry.entity)] = values
            for key, values in ours.items():
                merged.setdefault(key, {}).update(values)
            return _describe_response(version, merged, upstream.throttle_time_ms, 0, "")

        async def forward_if_served() -> Outcome:
            # the cluster has no topic or tenant entities (it refuses a filter naming one): only the proxy's answer
            if any(c.entity_type in _PROXY_ONLY_ENTITY_TYPES for c in request.components) or (
                    Api.DESCRIBE_CLIENT_QUOTAS not in await self._cluster_api_keys()):
                return local_answer(header, _describe_response(version, ours, 0, 0, ""))
            return Forward(on_response=OnResponse(finish=merge))

        return forward_if_served()

    def _matching(self, components: list[Any], strict: bool) -> dict[EntityKey, dict[str, float]]:
        found: dict[EntityKey, dict[str, float]] = {}
        for entity, quotas in self._quotas.config.entries.items():
            parts = dict(_components(entity))
            if not _matches(parts, components, strict):
                continue
            found[tuple(sorted(parts.items()))] = {str(quota_type): limit for quota_type, limit in quotas.items()}
        return found


def _filter_error(components: list[Any]) -> str | None:
    seen = set()
    for component in components:
        if component.entity_type in seen:
            return f"entity type {component.entity_type} appears twice in the filter"
        seen.add(component.entity_type)
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return f"unknown match type {component.match_type}"
        if component.match_type == MATCH_EXACT and component.match is None:
            return "an exact match needs a name"
    return None


def _matches(parts: dict[str, str | None], components: list[Any], strict: bool) -> bool:
    if strict and set(parts) != {c.entity_type for c in components}:
        return False
    for component in components:
        if component.entity_type not in parts:
            return False
        name = parts[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return True


def _alter_response(version: int, entries: list[Any], results: list[tuple[int, str | None]],
                    from_upstream: Mapping[EntityKey, tuple[int, str | None]], throttle_ms: int) -> bytes:
    """One result per request entry, in request order: the proxy's error first, else the cluster's."""
    cls = response_class(Api.ALTER_CLIENT_QUOTAS)
    answered = []
    for entry, (code, message) in zip(entries, results, strict=True):
        if not code:
            code, message = from_upstream.get(entity_key(entry.entity), (0, None))
        answered.append(cls.EntryData(
            error_code=code, error_message=message,
            entity=[cls.EntryData.EntityData(entity_type=c.entity_type, entity_name=c.entity_name)
                    for c in entry.entity]))
    return encode_response(Api.ALTER_CLIENT_QUOTAS, version, {"throttle_time_ms": throttle_ms, "entries": answered})


def _describe_response(version: int, entries: dict[EntityKey, dict[str, float]], throttle_ms: int,
                       error_code: int, error_message: str | None) -> bytes:
    """``error_message`` "" with no error, as Kafka sends it."""
    cls = response_class(Api.DESCRIBE_CLIENT_QUOTAS)
    answered = [cls.EntryData(entity=[cls.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in key],
                              values=[cls.EntryData.ValueData(key=k, value=v) for k, v in sorted(values.items())])
                for key, values in sorted(entries.items(), key=lambda item: repr(item[0]))]
    return encode_response(Api.DESCRIBE_CLIENT_QUOTAS, version,
                           {"throttle_time_ms": throttle_ms, "error_code": error_code, "error_message": error_message,
                            "entries": None if error_code else answered})


def _entry_with_ops(entry: Any, ops: list[Any]) -> dict[str, Any]:
    return {"entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in entry.entity],
            "ops": [{"key": op.key, "value": op.value, "remove": op.remove} for op in ops]}

