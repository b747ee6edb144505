"""CreateAcls, DescribeAcls and DeleteAcls answered by the proxy with the authorizer on (``[authorizer]``), so that
Kafka's ``kafka-acls`` manages the ACLs the proxy decides by, as Kafka's ``AclApis`` answers them (v1-3, as Kafka 4.3):

- DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER (which implies DESCRIBE); refused, every
  result is CLUSTER_AUTHORIZATION_FAILED (``AuthHelper.authorizeClusterOperation``);
- a request with an UNKNOWN code (0) in a creation or filter closes the connection, as Kafka's parser refuses it; a
  code Kafka does not know is UNKNOWN once parsed, which a creation is refused for (INVALID_REQUEST), a DeleteAcls
  filter too ("Unknown patternFilter." or "Unknown entryFilter."), and a DescribeAcls filter matches nothing with;
- a creation of ANY resource type, operation or permission, or of a MATCH or ANY pattern, fails the whole request
  (UNKNOWN_SERVER_ERROR on every result: the constructors of Kafka's ``ResourcePattern`` and
  ``AccessControlEntry`` throw);
- every other creation Kafka would refuse gets its INVALID_REQUEST (``AclBinding.invalid_reason``); an ACL that
  exists, or is created twice, is created once and answered success;
- DeleteAcls deletes what each filter matches among the ACLs in force, and lists it under that filter (under each
  filter that matched it); more than ``MAX_ACLS_PER_OPERATION`` fails every filter, and more new ACLs than that
  fail a CreateAcls whole (Kafka's controller refuses more records in one operation);
- DescribeAcls lists what its filter matches, by resource pattern.

What is created and deleted is kept by ``AclService`` (the state directory; a fleet's topic). Without the authorizer
the proxy does not answer them: they are forwarded to the cluster, as every API it does not judge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypeVar

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, encode_response, max_version
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNKNOWN_SERVER_ERROR
from protocol.header import RequestHeader
from proxy.decision.outcome import CLOSE, Caller, Decided, Outcome, local_answer
from proxy.security.access import Access
from proxy.security.acl_service import AclService
from proxy.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

ACL_APIS = frozenset({Api.DESCRIBE_ACLS, Api.CREATE_ACLS, Api.DELETE_ACLS})
FIRST_ACL_API_VERSION = 1
"""Kafka 4.3 serves these APIs from v1 on (v0 was removed)."""
MAX_ACLS_PER_OPERATION = 10_000
"""A CreateAcls creating more, or a DeleteAcls deleting more, fails whole, as Kafka's controller refuses more records
in one operation (``MAX_RECORDS_PER_USER_OP``)."""
Code = TypeVar("Code", AclOperation, AclPermission, PatternType, ResourceType)
Result = tuple[int, str | None]
_SUCCEEDED: Result = (0, None)


class AclRequests:
    def __init__(self, acls: AclService, access: Access) -> None:
        self._acls = acls
        self._access = access

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if not FIRST_ACL_API_VERSION <= version <= max_version(api_key):
            return CLOSE  # not offered (v0, as Kafka does not offer it)
        request = decode_request(api_key, version, frame[header.length:])
        if api_key == Api.DESCRIBE_ACLS:
            return self._describe(header, request, caller)
        if api_key == Api.CREATE_ACLS:
            return self._create(header, request, caller)
        return self._delete(header, request, caller)

    def _refusal(self, caller: Caller, operation: AclOperation) -> Result | None:
        if self._access.allows(caller, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return CLUSTER_AUTHORIZATION_FAILED, f"{caller.principal} needs {operation.name} permission on the cluster."

    # ---- DescribeAcls -------------------------------------------------------------------------

    def _describe(self, header: RequestHeader, request: Any, caller: Caller) -> Outcome:
        acl_filter = _filter(request)
        if acl_filter is None:
            return CLOSE
        refusal = self._refusal(caller, AclOperation.DESCRIBE)
        code, message = refusal or (0, "")  # Kafka leaves DescribeAcls' message at its default, not null
        matched = [] if refusal else self._acls.authorizer.matching(acl_filter)
        by_pattern: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
        for acl in matched:
            by_pattern[(acl.resource_type, acl.name, acl.pattern_type)].append(acl)
        cls = response_class(Api.DESCRIBE_ACLS)
        resources = [cls.DescribeAclsResource(
            resource_type=kind, resource_name=name, pattern_type=pattern,
            acls=[cls.DescribeAclsResource.AclDescription(principal=acl.principal, host=acl.host,
                                                          operation=acl.operation, permission_type=acl.permission)
                  for acl in acls]) for (kind, name, pattern), acls in sorted(by_pattern.items())]
        return local_answer(header, encode_response(Api.DESCRIBE_ACLS, header.api_version, {
            "throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": resources}))

    # ---- CreateAcls ---------------------------------------------------------------------------

    def _create(self, header: RequestHeader, request: Any, caller: Caller) -> Decided:
        creations = request.creations
        if any(0 in (c.resource_type, c.resource_pattern_type, c.operation, c.permission_type) for c in creations):
            return CLOSE
        acls = [AclBinding(_code(ResourceType, c.resource_type), c.resource_name,
                           _code(PatternType, c.resource_pattern_type), c.principal, c.host,
                           _code(AclOperation, c.operation), _code(AclPermission, c.permission_type))
                for c in creations]
        refusal = self._refusal(caller, AclOperation.ALTER)
        if refusal is None and any(_not_an_acl(acl) for acl in acls):
            refusal = (UNKNOWN_SERVER_ERROR, None)
        if refusal is not None:
            return _created(header, [refusal] * len(acls))
        reasons = [acl.invalid_reason() for acl in acls]
        results: list[Result] = [_SUCCEEDED if reason is None else (INVALID_REQUEST, reason) for reason in reasons]
        valid = [acl for acl, reason in zip(acls, reasons, strict=True) if reason is None]
        if not valid:
            return _created(header, results)
        if len(set(valid) - set(self._acls.authorizer.acls)) > MAX_ACLS_PER_OPERATION:
            too_many = f"Cannot create more than {MAX_ACLS_PER_OPERATION} acls in a single operation."
            return _created(header, [(UNKNOWN_SERVER_ERROR, too_many)] * len(acls))

        async def saved() -> Outcome:
            try:
                await self._acls.change(created=valid)
            except OSError as error:
                return _created(header, [(UNKNOWN_SERVER_ERROR, f"not applied: {error}") if code == 0 else
                                         (code, message) for code, message in results])
            return _created(header, results)

        return saved()

    # ---- DeleteAcls ---------------------------------------------------------------------------

    def _delete(self, header: RequestHeader, request: Any, caller: Caller) -> Decided:
        filters = [_filter(raw) for raw in request.filters]
        if None in filters:
            return CLOSE
        refusal = self._refusal(caller, AclOperation.ALTER)
        if refusal is not None:
            return _deleted(header, [(*refusal, [])] * len(filters))
        in_force = self._acls.authorizer
        outcomes: list[tuple[int, str | None, list[AclBinding]]] = []
        for acl_filter in filters:
            assert acl_filter is not None
            unknown = acl_filter.unknown_part()
            outcomes.append((INVALID_REQUEST, f"Unknown {unknown}.", []) if unknown else
                            (0, None, in_force.matching(acl_filter)))
        deleted = list(dict.fromkeys(acl for _, _, matched in outcomes for acl in matched))
        if len(deleted) > MAX_ACLS_PER_OPERATION:
            too_many = f"Cannot remove more than {MAX_ACLS_PER_OPERATION} acls in a single delete operation."
            return _deleted(header, [(INVALID_REQUEST, too_many, [])] * len(filters))
        if not deleted:
            return _deleted(header, outcomes)

        async def saved() -> Outcome:
            try:
                await self._acls.change(deleted=deleted)
            except OSError as error:
                return _deleted(header, [(UNKNOWN_SERVER_ERROR, f"not applied: {error}", []) if matched else
                                         (code, message, matched) for code, message, matched in outcomes])
            return _deleted(header, outcomes)

        return saved()


def _code(kind: type[Code], code: int) -> Code:
    """Kafka's ``fromCode``: a code it does not know is UNKNOWN."""
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


def _not_an_acl(acl: AclBinding) -> bool:
    """What Kafka's ``ResourcePattern`` and ``AccessControlEntry`` refuse to be made of."""
    return (acl.resource_type is ResourceType.ANY or acl.pattern_type in (PatternType.MATCH, PatternType.ANY)
            or acl.operation is AclOperation.ANY or acl.permission is AclPermission.ANY)


def _filter(raw: Any) -> AclFilter | None:
    """A DescribeAcls or DeleteAcls filter; None when Kafka's parser refuses it (an UNKNOWN code)."""
    codes = (raw.resource_type_filter, raw.pattern_type_filter, raw.operation, raw.permission_type)
    if 0 in codes:
        return None
    return AclFilter(_code(ResourceType, raw.resource_type_filter), raw.resource_name_filter,
                     _code(PatternType, raw.pattern_type_filter), raw.principal_filter, raw.host_filter,
                     _code(AclOperation, raw.operation), _code(AclPermission, raw.permission_type))


def _created(header: RequestHeader, results: Iterable[Result]) -> Outcome:
    cls = response_class(Api.CREATE_ACLS)
    return local_answer(header, encode_response(Api.CREATE_ACLS, header.api_version, {
        "throttle_time_ms": 0,
        "results": [cls.AclCreationResult(error_code=code, error_message=message) for code, message in results]}))


def _deleted(header: RequestHeader, outcomes: Iterable[tuple[int, str | None, list[AclBinding]]]) -> Outcome:
    cls = response_class(Api.DELETE_ACLS)
    result, matching = cls.DeleteAclsFilterResult, cls.DeleteAclsFilterResult.DeleteAclsMatchingAcl
    return local_answer(header, encode_response(Api.DELETE_ACLS, header.api_version, {
        "throttle_time_ms": 0,
        "filter_results": [result(error_code=code, error_message=message, matching_acls=[matching(
            error_code=0, error_message=None, resource_type=acl.resource_type, resource_name=acl.name,
            pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host, operation=acl.operation,
            permission_type=acl.permission) for acl in matched]) for code, message, matched in outcomes]}))

