"""What a test may change on a cluster it shares with the other tests of the session, and putting it back.

Every test that uses a cluster the session started (``broker``, ``three_brokers``) finds it as the test
before it did: no topics but Kafka's internal ones and no client quotas. The guard in
``tests/integration/conftest.py`` deletes the topics a test made (tests make them freely, with names of
their own); a test that leaves a client quota behind fails, as it must remove what it set (in a
``finally``), and the quota is put back so that the tests after it do not fail too. ACLs need no guard: the
clusters started here have no authorizer (DescribeAcls answers SECURITY_DISABLED), so no test can leave one.
Before the guard the cluster grew with every test, and what a test saw (the size of an all-topics Metadata
answer, the proxy's usage topic or producer-ID blocks topic left by an earlier test) depended on what ran
before it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.apis import Api
from tests.support import Cluster, call

UNKNOWN_TOPIC_OR_PARTITION = 3
_SETTLE_S = 30.0

QuotaEntity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for the default) of each component."""


@dataclass(frozen=True)
class ClusterState:
    topics: frozenset[str]
    """Topic names, Kafka's internal topics aside."""
    quotas: frozenset[tuple[QuotaEntity, str, float]]


def cluster_state(cluster: Cluster) -> ClusterState:
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        return _read_state(sock)


def _read_state(sock: socket.socket) -> ClusterState:
    metadata: Any = call(sock, Api.METADATA, 4, topics=None, allow_auto_topic_creation=False)
    topics = frozenset(topic.name for topic in metadata.topics if not topic.is_internal)
    described: Any = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False, components=[])
    assert described.error_code == 0, f"DescribeClientQuotas: error {described.error_code}"
    quotas = frozenset((tuple((part.entity_type, part.entity_name) for part in entry.entity), value.key, value.value)
                       for entry in described.entries or () for value in entry.values)
    return ClusterState(topics, quotas)


def leave_as_found(cluster: Cluster, before: ClusterState) -> list[str]:
    """Delete the topics made since ``before`` and put its client quotas back; returns the quotas that were
    left (the test's to undo) once a removal under way has had time to show."""
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        after = _settled(sock, lambda state: state.quotas == before.quotas)
        left = [f"client quota {key}={value} of {dict(entity)}" for entity, key, value in after.quotas - before.quotas]
        left += [f"client quota {key}={value} of {dict(entity)} removed" for entity, key, value
                 in before.quotas - after.quotas]
        made = after.topics - before.topics
        if made:
            answer: Any = call(sock, Api.DELETE_TOPICS, 4, topic_names=sorted(made), timeout_ms=30_000)
            failed = {topic.name: topic.error_code for topic in answer.responses
                      if topic.error_code not in (0, UNKNOWN_TOPIC_OR_PARTITION)}
            assert not failed, f"cannot delete the topics a test made: {failed}"
        if after.quotas != before.quotas:
            _put_quotas_back(sock, before, after)
        _settled(sock, lambda state: not state.topics & made and state.quotas == before.quotas)
    return left


def _put_quotas_back(sock: socket.socket, before: ClusterState, after: ClusterState) -> None:
    values_before = {(entity, key): value for entity, key, value in before.quotas}
    entries: dict[QuotaEntity, list[dict[str, object]]] = {}
    for entity, key, _ in after.quotas - before.quotas:
        if (entity, key) not in values_before:
            entries.setdefault(entity, []).append({"key": key, "value": 0.0, "remove": True})
    for entity, key, value in before.quotas - after.quotas:
        entries.setdefault(entity, []).append({"key": key, "value": value, "remove": False})
    answer: Any = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity], "ops": ops}
        for entity, ops in entries.items()])
    assert all(entry.error_code == 0 for entry in answer.entries), f"cannot put the cluster's quotas back: {answer}"


def _settled(sock: socket.socket, settled: Callable[[ClusterState], bool]) -> ClusterState:
    """The cluster's state once ``settled`` holds of it, or after ``_SETTLE_S`` (a broker's metadata follows
    its controller's by a moment)."""
    deadline = time.monotonic() + _SETTLE_S
    while not settled(state := _read_state(sock)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return state
