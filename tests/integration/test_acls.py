"""The proxy's ACL decisions (``proxy.security.acls``) against Apache Kafka's own ``StandardAuthorizer``, in one JVM
(``tests/java/AuthorizerDecisions.java``): random sets of ACLs over names, prefixes, wildcards, principals, hosts,
operations and permissions chosen to meet each other, and every question of every requester asked of both."""

from __future__ import annotations

import random

import pytest

from proxy.security.acls import (
    SUPPORTED_OPERATIONS,
    AclAuthorizer,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    java_host_address,
)
from tests.fidelity import JAVA_SOURCES, java_tool

pytestmark = pytest.mark.integration

NAMES = ("a", "ab", "abc", "b", "*", "pay.", "pay.in", "hardcode")
PRINCIPALS = ("User:alice", "User:bob", "User:*")
HOSTS = ("*", "10.0.0.1", "10.0.0.2", "0:0:0:0:0:0:0:1", "::1")
TYPES = (ResourceType.TOPIC, ResourceType.GROUP)
OPERATIONS = (AclOperation.ALL, *SUPPORTED_OPERATIONS[ResourceType.TOPIC])
ASKERS = [(principal, address) for principal in ("User:alice", "User:bob", "User:carol")
          for address in ("10.0.0.1", "10.0.0.2", "::1")]
SETS = 200


def random_acls(chance: random.Random) -> list[AclBinding]:
    return [AclBinding(chance.choice(TYPES), chance.choice(NAMES), chance.choice((PatternType.LITERAL,
                                                                                  PatternType.PREFIXED)),
                       chance.choice(PRINCIPALS), chance.choice(HOSTS), chance.choice(OPERATIONS),
                       chance.choice((AclPermission.ALLOW, AclPermission.DENY)))
            for _ in range(chance.randint(0, 10))]


def test_every_decision_is_kafkas() -> None:
    chance = random.Random(56)
    lines: list[str] = []
    ours: list[str] = []
    for _ in range(SETS):
        acls = random_acls(chance)
        super_users = chance.choice(((), ("User:carol",)))
        everyone = chance.random() < 0.3
        authorizer = AclAuthorizer(acls, super_users, everyone)
        lines.append(f"config\t{';'.join(super_users)}\t{str(everyone).lower()}")
        lines.extend(f"acl\t{acl.resource_type}\t{acl.name}\t{acl.pattern_type}\t{acl.principal}\t{acl.host}\t"
                     f"{acl.operation}\t{acl.permission}" for acl in acls)
        for principal, address in ASKERS:
            requester = (principal, java_host_address(address))
            for resource_type in TYPES:
                for operation in SUPPORTED_OPERATIONS[resource_type]:
                    lines.append(f"bytype\t{principal}\t{address}\t{operation}\t{resource_type}")
                    ours.append(_said(authorizer.authorize_by_resource_type(requester, operation, resource_type)))
                    for name in NAMES:
                        lines.append(f"ask\t{principal}\t{address}\t{operation}\t{resource_type}\t{name}")
                        ours.append(_said(authorizer.authorize(requester, operation, resource_type, name)))
    kafkas = java_tool(str(JAVA_SOURCES / "AuthorizerDecisions.java"), input_text="\n".join(lines) + "\n").split()
    assert len(kafkas) == len(ours)
    questions = [line for line in lines if line.startswith(("ask", "bytype"))]
    differences = [(question, kafka, our) for question, kafka, our in zip(questions, kafkas, ours, strict=True)
                   if kafka != our]
    assert not differences, f"{len(differences)} of {len(ours)} decisions differ from Kafka's: {differences[:5]}"
    assert {"ALLOWED", "DENIED"} <= set(kafkas)


def _said(allowed: bool) -> str:
    return "ALLOWED" if allowed else "DENIED"
