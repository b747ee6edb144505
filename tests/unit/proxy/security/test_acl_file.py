"""The ACL file (``proxy.security.acl_file``): Kafka's names, one ACL per operation, and every entry Kafka would not
take refused with the file and the entry named."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.security.acl_file import AclFileError, read_acl_file
from proxy.security.acls import CLUSTER_NAME, AclBinding, AclOperation, AclPermission, PatternType, ResourceType


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "acls.toml"
    path.write_text(text)
    return path


def test_each_operation_of_an_entry_is_an_acl_with_kafkas_defaults(tmp_path: Path) -> None:
    path = written(tmp_path, '''
[[acl]]
principal = "User:alice"
resource-type = "topic"
resource-name = "payments."
pattern-type = "prefixed"
operations = ["read", "Describe"]

[[acl]]
principal = "User:*"
host = "10.0.0.7"
resource-type = "cluster"
operations = ["IdempotentWrite", "idempotent_write", "ALTER-CONFIGS"]
permission = "deny"

[[acl]]
principal = "User:bob"
resource-type = "transactional-id"
resource-name = "tx"
operations = ["all"]
''')
    prefixed = [AclBinding(ResourceType.TOPIC, "payments.", PatternType.PREFIXED, "User:alice", "*", operation,
                           AclPermission.ALLOW) for operation in (AclOperation.READ, AclOperation.DESCRIBE)]
    cluster = [AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:*", "10.0.0.7", operation,
                          AclPermission.DENY)
               for operation in (AclOperation.IDEMPOTENT_WRITE, AclOperation.IDEMPOTENT_WRITE,
                                 AclOperation.ALTER_CONFIGS)]
    transactional = [AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL, "User:bob", "*",
                                AclOperation.ALL, AclPermission.ALLOW)]
    assert read_acl_file(path) == [*prefixed, *cluster, *transactional]


def test_an_empty_file_holds_no_acl(tmp_path: Path) -> None:
    assert read_acl_file(written(tmp_path, "")) == []


ENTRY = 'principal = "User:alice"\nresource-type = "topic"\nresource-name = "t"\noperations = ["read"]\n'


@pytest.mark.parametrize(("text", "problem"), [
    (f"[[acl]]\n{ENTRY}colour = 1\n", r"\(User:alice on topic t\): unknown key\(s\) colour"),
    (ENTRY.replace("read", "reed"), r"operations: unknown 'reed' \(one of all, read, write"),
    (ENTRY.replace('["read"]', "[]"), r"operations: a list of one or more"),
    (ENTRY.replace('"topic"', '"topics"'), r"resource-type: unknown 'topics' \(one of topic, group, cluster"),
    (ENTRY.replace('principal = "User:alice"\n', ""), r"principal is required"),
    (ENTRY.replace('"User:alice"', '"alice"'), r"Could not parse principal from `alice`"),
    (ENTRY.replace('resource-name = "t"\n', ""), r"resource-name is required"),
    (ENTRY.replace('resource-name = "t"', 'resource-name = ""'), r"Invalid empty resource name"),
    (ENTRY.replace('"topic"', '"cluster"'), r"The only valid name for the CLUSTER resource is kafka-cluster"),
    (ENTRY + 'pattern-type = "match"\n', r"pattern-type: unknown 'match' \(one of literal, prefixed\)"),
    (ENTRY + 'permission = "maybe"\n', r"permission: unknown 'maybe' \(one of allow, deny\)"),
    (ENTRY + "host = 7\n", r"host: a string, got 7"),
])
def test_an_entry_kafka_would_not_take_is_refused_with_the_file_and_entry_named(tmp_path: Path, text: str,
                                                                               problem: str) -> None:
    path = written(tmp_path, f"[[acl]]\n{ENTRY}\n[[acl]]\n{text}" if not text.startswith("[[acl]]") else text)
    number = 1 if text.startswith("[[acl]]") else 2
    with pytest.raises(AclFileError, match=rf"^{path}: \[\[acl\]\] entry {number} .*{problem}"):
        read_acl_file(path)


@pytest.mark.parametrize(("text", "problem"), [
    ("acl = 1\n", "acl must be an array of tables"),
    ("[acls]\n", r"unknown table\(s\) acls"),
    ("[[acl]\n", "not valid TOML"),
])
def test_a_file_that_is_no_acl_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(AclFileError, match=problem):
        read_acl_file(written(tmp_path, text))


def test_a_file_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AclFileError, match="cannot read"):
        read_acl_file(tmp_path / "missing.toml")
