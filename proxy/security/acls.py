"""Kafka's ACLs, decided at the proxy: the model (``AclBinding``, a resource pattern and an access-control entry,
with Kafka's codes) and the decision (``AclAuthorizer``), with the semantics of Apache Kafka 4.3's
``StandardAuthorizer``:

- super users are allowed everything, before any ACL is looked at (``StandardAuthorizerData.authorize``);
- the ACLs that cover a resource are those of its type that are LITERAL with its name, LITERAL ``*``, or PREFIXED with
  a prefix of its name (``checkSection``);
- of those, an ACL applies to the requester when its principal is the requester's or ``User:*``, its host the
  requester's address (as Java writes it, ``java_host_address``) or ``*``, and its operation the one asked for or
  ALL; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one of ALTER_CONFIGS DESCRIBE_CONFIGS,
  a DENY only what it names (``findResult``);
- a DENY that applies wins, then an ALLOW that applies; with neither, the request is denied when any ACL covers the
  resource, whoever it names, and otherwise as ``allow.everyone.if.no.acl.found`` says (``MatchingRuleBuilder``);
- ``authorize_by_resource_type`` is the ``Authorizer`` interface's default method (an idempotent producer's
  InitProducerId without IDEMPOTENT_WRITE on the cluster: WRITE on some topic).

The decisions are kept per requester, operation and resource until the ACLs change (``MAX_DECISIONS`` at most, of
names of ``LONGEST_KEPT_NAME`` at most): an allowed request's authorization is one dictionary look-up, however many
ACLs there are.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType`` codes: an ACL is LITERAL or PREFIXED; a filter may say ANY or MATCH."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermission(IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
"""The one name of the CLUSTER resource (``Resource.CLUSTER_NAME``)."""
WILDCARD = "*"
"""A LITERAL ACL of this name covers every resource of its type; as a host, every host."""
WILDCARD_PRINCIPAL = "User:*"

_IMPLIED_BY_ALLOW = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
"""The operations an ALLOW of another operation allows too (``IMPLIES_DESCRIBE``, ``IMPLIES_DESCRIBE_CONFIGS``)."""

SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}
"""What a resource type's authorized operations are made of (``AclEntry.supportedOperations``)."""


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal ``Type:name``, host,
    operation, ALLOW or DENY)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def invalid_reason(self) -> str | None:
        """Why Kafka refuses to create this ACL (INVALID_REQUEST, its message), or None: ``AclApis.handleCreateAcls``
        and ``AclControlManager.validateNewAcl``, in their order."""
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if not self.name:
            return "Invalid empty resource name"
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resourceType {self.resource_type.name}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {self.pattern_type.name}"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permission not in (AclPermission.DENY, AclPermission.ALLOW):
            return f"Invalid permissionType {self.permission.name}"
        if ":" not in self.principal:
            return (f"Could not parse principal from `{self.principal}` (no colon is present separating the principal "
                    f"type from the principal name)")
        return None


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls match ACLs with (``AclBindingFilter``): a type ANY, a pattern type ANY or
    MATCH (LITERAL of the name or ``*``, and PREFIXED of a prefix of it), an operation or permission ANY, and a name,
    principal or host None match any; the operation is matched as it is (an ALL filter matches ALL ACLs alone). A
    code Kafka does not know is UNKNOWN, which matches nothing."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def unknown_part(self) -> str | None:
        """What DeleteAcls refuses a filter for (``AclControlManager.validateFilter``): "patternFilter" when its
        resource type or pattern type is UNKNOWN, "entryFilter" when its operation or permission is; or None."""
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            return "patternFilter"
        if self.operation is AclOperation.UNKNOWN or self.permission is AclPermission.UNKNOWN:
            return "entryFilter"
        return None

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        """``ResourcePatternFilter.matches``."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not acl.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.name == acl.name
        if acl.pattern_type is PatternType.LITERAL:
            return acl.name in (self.name, WILDCARD)
        return self.name.startswith(acl.name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        """``AccessControlEntryFilter.matches``."""
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (AclPermission.ANY, acl.permission))


def java_host_address(address: str) -> str:
    """A client's address as Java's ``InetAddress.getHostAddress`` writes it, which is what Kafka compares an ACL's
    host with: IPv4 as it is (an IPv4-mapped IPv6 address too), IPv6 in eight groups of hex, none shortened
    (``0:0:0:0:0:0:0:1``, not ``::1``)."""
    try:
        parsed = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return ":".join(f"{group:x}" for group in (int.from_bytes(parsed.packed[i:i + 2], "big")
                                                    for i in range(0, 16, 2)))
    return str(parsed)


Requester = tuple[str, str]
"""A principal (``User:alice``) and its host (``java_host_address``)."""

MAX_DECISIONS = 100_000
"""Decisions kept at most; past it they are made again (clients of ever new addresses grow the set without end)."""
LONGEST_KEPT_NAME = 255
"""The decisions on longer resource names are made each time, not kept: a client names what it likes, up to a frame's
size. Kafka allows no topic name this long (249 at most); a group or transactional id this long is judged each
time."""


class AclAuthorizer:
    """Decides as Kafka's ``StandardAuthorizer`` over a set of ACLs that ``replace`` changes whole."""

    def __init__(self, acls: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        # fixed: what was decided (``_decided``, and the handlers' ``Access.judged_once``) is kept for the ACLs alone
        self.super_users: Final = frozenset(super_users)
        self.allow_everyone_if_no_acl_found: Final = allow_everyone_if_no_acl_found
        self.acls: tuple[AclBinding, ...] = ()
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        self._decided: dict[tuple[Requester, AclOperation, ResourceType, str], bool] = {}
        self.generation = 0
        """Counts the changes of the ACLs: what was decided of an older one may no longer hold."""
        self.replace(acls)

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """The ACLs from now on (each one once: Kafka keeps an ACL created twice once)."""
        self.acls = tuple(dict.fromkeys(acls))
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = defaultdict(lambda: defaultdict(list))
        by_type: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for acl in self.acls:
            by_type[acl.resource_type].append(acl)
            if acl.pattern_type is PatternType.PREFIXED:
                prefixed[acl.resource_type][acl.name].append(acl)
            else:
                literal[(acl.resource_type, acl.name)].append(acl)
        self._literal = dict(literal)
        self._prefixed = {kind: dict(names) for kind, names in prefixed.items()}
        self._prefix_lengths = {kind: tuple(sorted({len(name) for name in names}))
                                for kind, names in self._prefixed.items()}
        self._by_type = dict(by_type)
        self._decided = {}
        self.generation += 1

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches, in the order they were given."""
        return [acl for acl in self.acls if acl_filter.matches(acl)]

    def authorize(self, requester: Requester, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (requester, operation, resource_type, name)
        decided = self._decided.get(key)
        if decided is None:
            if len(name) > LONGEST_KEPT_NAME:
                return self._decide(requester, operation, resource_type, name)
            if len(self._decided) >= MAX_DECISIONS:
                self._decided.clear()
            decided = self._decided[key] = self._decide(requester, operation, resource_type, name)
        return decided

    def _decide(self, requester: Requester, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        principal, host = requester
        if principal in self.super_users:
            return True
        covering = self._covering(resource_type, name)
        if not covering:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for acl in covering:
            applies = self._applies(acl, principal, host, operation)
            if applies and acl.permission is AclPermission.DENY:
                return False
            allowed = allowed or applies
        return allowed

    def _covering(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        covering = [*self._literal.get((resource_type, name), ()), *self._literal.get((resource_type, WILDCARD), ())]
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for length in self._prefix_lengths[resource_type]:
                if length > len(name):
                    break
                covering.extend(prefixed.get(name[:length], ()))
        return covering

    @staticmethod
    def _applies(acl: AclBinding, principal: str, host: str, operation: AclOperation) -> bool:
        """Whether ``acl`` speaks of this requester and operation (``findResult``)."""
        if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
            return False
        if acl.operation in (AclOperation.ALL, operation):
            return True
        return acl.permission is AclPermission.ALLOW and acl.operation in _IMPLIED_BY_ALLOW.get(operation, ())

    def authorize_by_resource_type(self, requester: Requester, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the requester may do ``operation`` on some resource of the type (``Authorizer``'s default
        ``authorizeByResourceType``): allowed on a resource named "hardcode" (a super user; no ACL and
        ``allow.everyone.if.no.acl.found``), or an ALLOW of the operation itself or ALL (none implied) that no DENY
        outweighs: a DENY of ``*`` outweighs all, one of a LITERAL name the ALLOW of that name, one of a prefix every
        ALLOW of a name it begins."""
        if self.authorize(requester, operation, resource_type, "hardcode"):
            return True
        principal, host = requester
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for acl in self._by_type.get(resource_type, ()):
            if (acl.host not in (host, WILDCARD) or acl.principal not in (principal, WILDCARD_PRINCIPAL)
                    or acl.operation not in (operation, AclOperation.ALL)):
                continue
            if acl.permission is AclPermission.DENY:
                if acl.pattern_type is PatternType.LITERAL and acl.name == WILDCARD:
                    return False
                denied[acl.pattern_type].add(acl.name)
            else:
                allowed[acl.pattern_type].add(acl.name)
        if WILDCARD in allowed[PatternType.LITERAL]:
            return True
        for pattern_type, names in allowed.items():
            for name in names:
                if pattern_type is PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if not any(name[:length] in denied[PatternType.PREFIXED] for length in range(1, len(name) + 1)):
                    return True
        return False

    def authorized_operations(self, requester: Requester, resource_type: ResourceType, name: str) -> int:
        """The bit field of the operations the requester may do on the resource (``AuthHelper.authorizedOperations``:
        bit ``1 << code`` of each operation of ``SUPPORTED_OPERATIONS`` allowed)."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(requester, operation, resource_type, name):
                bits |= 1 << operation
        return bits
