"""The ACL file (``[authorizer] acl-file``): ACLs for a static start, in TOML, one ``[[acl]]`` table for each
principal, resource and permission, with the names of Kafka's ``kafka-acls``::

    [[acl]]
    principal = "User:alice"            # or "User:*", every principal
    host = "*"                          # the default; or one address
    resource-type = "topic"             # topic, group, cluster, transactional-id, delegation-token, user
    resource-name = "payments."         # a cluster's is kafka-cluster, its default
    pattern-type = "prefixed"           # literal (the default) or prefixed
    operations = ["read", "describe"]   # one ACL each: read, write, create, delete, alter, describe, cluster-action,
                                        # describe-configs, alter-configs, idempotent-write, create-tokens,
                                        # describe-tokens, two-phase-commit, all
    permission = "allow"                # allow (the default) or deny

Names are taken in any case, with ``-`` or ``_`` between words or none (``IdempotentWrite`` as ``kafka-acls`` writes
it). Anything else is refused with the file, the entry and what is wrong named.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from proxy.files.toml_file import read_toml
from proxy.security.acls import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, PatternType, ResourceType

_KEYS = {"principal", "host", "resource-type", "resource-name", "pattern-type", "operations", "permission"}
_RESOURCE_TYPES = [kind for kind in ResourceType if kind not in (ResourceType.UNKNOWN, ResourceType.ANY)]
_PATTERN_TYPES = [PatternType.LITERAL, PatternType.PREFIXED]
_OPERATIONS = [operation for operation in AclOperation if operation not in (AclOperation.UNKNOWN, AclOperation.ANY)]
_PERMISSIONS = [AclPermission.ALLOW, AclPermission.DENY]
Choice = TypeVar("Choice", AclOperation, AclPermission, PatternType, ResourceType)


class AclFileError(ValueError):
    """The ACL file cannot be read or holds an entry Kafka would not take; the message names the file and entry."""


def read_acl_file(path: Path) -> list[AclBinding]:
    """The ACLs of the file, in its order."""
    document = read_toml(path, AclFileError)
    unknown = sorted(set(document) - {"acl"})
    if unknown:
        raise AclFileError(f"{path}: unknown table(s) {', '.join(unknown)}: ACLs are [[acl]] tables")
    entries = document.get("acl", [])
    if not isinstance(entries, list):
        raise AclFileError(f"{path}: acl must be an array of tables, [[acl]]")
    bindings: list[AclBinding] = []
    for number, entry in enumerate(entries, start=1):
        try:
            bindings.extend(acls_of_entry(entry))
        except ValueError as problem:
            raise AclFileError(f"{path}: [[acl]] entry {number} {_named(entry)}: {problem}") from None
    return bindings


def acl_entry(acl: AclBinding) -> dict[str, Any]:
    """One ACL as an ``[[acl]]`` table (of one operation), which ``acls_of_entry`` reads back."""
    return {"principal": acl.principal, "host": acl.host, "resource-type": _written(acl.resource_type),
            "resource-name": acl.name, "pattern-type": _written(acl.pattern_type),
            "operations": [_written(acl.operation)], "permission": _written(acl.permission)}


def acls_of_entry(entry: Any) -> list[AclBinding]:
    """The ACLs of one ``[[acl]]`` table; raises ValueError saying what is wrong with it."""
    return _bindings(entry)


def _named(entry: Any) -> str:
    """How an entry is called in an error: its principal and resource, as far as it has them."""
    if not isinstance(entry, dict):
        return ""
    kind = entry.get("resource-type", "?")
    name = entry.get("resource-name", CLUSTER_NAME if kind == "cluster" else "?")
    return f"({entry.get('principal', '?')} on {kind} {name!s})"


def _bindings(entry: Any) -> list[AclBinding]:
    if not isinstance(entry, dict):
        raise ValueError("must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    principal = _text(entry, "principal", None)
    host = _text(entry, "host", "*")
    resource_type = _named_value(entry, "resource-type", _RESOURCE_TYPES, None)
    default_name = CLUSTER_NAME if resource_type is ResourceType.CLUSTER else None
    name = _text(entry, "resource-name", default_name)
    pattern_type = _named_value(entry, "pattern-type", _PATTERN_TYPES, PatternType.LITERAL)
    permission = _named_value(entry, "permission", _PERMISSIONS, AclPermission.ALLOW)
    operations = entry.get("operations")
    if not isinstance(operations, list) or not operations:
        raise ValueError(f"operations: a list of one or more of {_choices(_OPERATIONS)}")
    bindings = []
    for operation in operations:
        binding = AclBinding(resource_type, name, pattern_type, principal, host,
                             _choice("operations", operation, _OPERATIONS), permission)
        reason = binding.invalid_reason()
        if reason is not None:
            raise ValueError(reason)
        bindings.append(binding)
    return bindings


def _text(entry: dict[str, Any], key: str, default: str | None) -> str:
    value = entry.get(key, default)
    if value is None:
        raise ValueError(f"{key} is required")
    if not isinstance(value, str):
        raise ValueError(f"{key}: a string, got {value!r}")
    return value


def _named_value(entry: dict[str, Any], key: str, choices: Sequence[Choice], default: Choice | None) -> Choice:
    if key not in entry:
        if default is None:
            raise ValueError(f"{key} is required: one of {_choices(choices)}")
        return default
    return _choice(key, entry[key], choices)


def _choice(key: str, given: Any, choices: Sequence[Choice]) -> Choice:
    if isinstance(given, str):
        wanted = _squeezed(given)
        for choice in choices:
            if _squeezed(choice.name) == wanted:
                return choice
    raise ValueError(f"{key}: unknown {given!r} (one of {_choices(choices)})")


def _squeezed(name: str) -> str:
    return name.replace("-", "").replace("_", "").upper()


def _written(choice: AclOperation | AclPermission | PatternType | ResourceType) -> str:
    return choice.name.lower().replace("_", "-")


def _choices(choices: Sequence[Any]) -> str:
    return ", ".join(map(_written, choices))
