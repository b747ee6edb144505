"""Clients that pipeline requests and never read their answers: the proxy's resident memory stays within the
configured total (``max-buffered-bytes``) plus a quarter, and a well-behaved client on the same proxy is served
meanwhile, again and again through every step. How long it waits is a figure of ``make bench``
(``bench/flood_service.py``, beside a client straight to the cluster), not an aim held here: on a shared machine's
two cores a wait in seconds measures the machine as much as the proxy.

Each kind of request a client can flood with, as raw pipelined frames: answered by the proxy itself (an
ApiVersions newer than it parses), many small answers from the cluster (Metadata of a small cluster), few
large ones (Metadata naming a thousand topics that do not exist, which the proxy reads whole to rewrite), Produce
with acks, large Produce requests cut through, Produce held back behind a throttle, Fetch data, and SASL
handshakes before any login (connections the proxy closes, opened again at once). One proxy per kind and
setting takes 1, then 20, then 100 such connections (each step's flooders close before the next opens): the
growth checked is its RSS at every moment against what it was before the first, so memory a step freed but
kept counts against the later ones.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from kafka.protocol.consumer import FetchRequest

from protocol.api_versions import NEWEST_API_VERSIONS
from protocol.apis import Api
from tests.integration.flooders import flooding
from tests.integration.test_produce_quotas import create_topic
from tests.integration.test_sasl import add_user
from tests.integration.test_topic_quotas import logged_in
from tests.support import LOOPBACK, ProxyProcess, call, encode_request, produce_request, record_batch

pytestmark = pytest.mark.integration
MIB = 1024 * 1024
SETTINGS: dict[str, tuple[int, tuple[str, ...]]] = {
    # name: (max-buffered-bytes, the proxy's flags)
    "defaults": (256 * MIB, ()),
    "32 MiB total": (32 * MIB, ("--max-buffered-bytes", str(32 * MIB))),
}
ALLOWED_OVER_TOTAL = 1.25
"""RSS growth allowed, as a multiple of ``max-buffered-bytes``: what the proxy holds beyond the bytes it counts
(objects, the allocator's rounding) fits in the quarter."""
CONNECTIONS = (1, 20, 100)
STEP_S = 3.0
"""Each step's flood: the growth levels off within a second of the flooders' first bytes."""
SERVED_TIMEOUT_S = 30.0
"""How long a well-behaved client waits for its answer before it counts as not served: a bound against a hang,
far beyond any wait measured (``bench/flood_service.py``)."""


def fill_topic(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(2 * 64):
        producer.produce(topic, b"p" * 16384)
        producer.poll(0)
    assert producer.flush(60) == 0


@dataclass(frozen=True)
class Flood:
    requests: Callable[[str], bytes]
    to_leader: bool = False
    """Sent to the partition leader's listener, not the bootstrap."""
    topic_filled: bool = False
    quota: str | None = None
    """The quota file's text, when the kind needs one."""
    sasl: bool = False
    """The proxy terminates SASL: flooders never log in (and are closed), the well-behaved client logs in."""


def api_versions_too_new(topic: str) -> bytes:
    """ApiVersions newer than the proxy parses: answered by the proxy (KIP-511), never forwarded."""
    return b"".join(struct.pack(">ihhih5s", 15, 18, NEWEST_API_VERSIONS + 1, i, 5, b"flood") for i in range(1000))


def metadata(topic: str) -> bytes:
    """Metadata of every topic: small answers, the session's cluster holding only the tests' own topics (every
    test deletes what it made: ``tests.cluster_state``)."""
    return b"".join(encode_request(3, 1, correlation_id=i, topics=None) for i in range(1000))


def metadata_of_missing_topics(topic: str) -> bytes:
    """Metadata naming a thousand topics that do not exist (and are not created): answers of 68 KB, which the
    proxy reads whole to rewrite the brokers in them."""
    names = [{"name": f"{topic}-missing-{i:05}-{'x' * 40}"} for i in range(1000)]
    return b"".join(encode_request(3, 4, correlation_id=i, topics=names, allow_auto_topic_creation=False)
                    for i in range(4))


def produce_small(topic: str) -> bytes:
    batch = record_batch([b"v" * 100] * 10)
    return b"".join(produce_request(topic, batch, correlation_id=i, acks=1) for i in range(200))


def produce_large(topic: str) -> bytes:
    batch = record_batch([b"v" * 1000] * 200)  # 200 KB: cut through
    return b"".join(produce_request(topic, batch, correlation_id=i, acks=1) for i in range(10))


def fetch(topic: str) -> bytes:
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MIB)
    return b"".join(
        encode_request(1, 4, correlation_id=i, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=MIB,
                       isolation_level=0, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])])
        for i in range(100))


def sasl_handshakes(topic: str) -> bytes:
    """SaslHandshakes before any login: the first is answered, the second refused and the connection closed."""
    return b"".join(encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=i, mechanism="PLAIN") for i in range(100))


KINDS = {
    "answered by the proxy": Flood(api_versions_too_new),
    "many small answers from the cluster": Flood(metadata),
    "few large answers from the cluster": Flood(metadata_of_missing_topics),
    "produce acks": Flood(produce_small, to_leader=True),
    "produce cut through": Flood(produce_large, to_leader=True),
    "produce held back by a throttle": Flood(produce_small, to_leader=True,
                                             quota='[[quota]]\nuser = "ANONYMOUS"\nproducer_byte_rate = 100000\n'),
    "fetch data": Flood(fetch, to_leader=True, topic_filled=True),
    "sasl handshakes": Flood(sasl_handshakes, sasl=True),
}


def seconds_to_metadata(connection: Callable[[], AbstractContextManager[socket.socket]]) -> float:
    """Seconds a client connecting anew (``connection``) takes to get Metadata answered."""
    started = time.monotonic()
    with connection() as good:
        answer = call(good, 3, 1, topics=None)
    assert answer.brokers, f"a Metadata answer naming no broker: {answer}"  # type: ignore[attr-defined]
    return time.monotonic() - started


def served_once(proxy: ProxyProcess, sasl: bool) -> float:
    """Through the proxy (logged in first, under SASL)."""
    return seconds_to_metadata(lambda: logged_in(proxy, "bob") if sasl else
                               socket.create_connection((LOOPBACK, proxy.port), timeout=SERVED_TIMEOUT_S))


@dataclass
class Step:
    connections: int
    peak_growth: int = 0
    served: int = 0
    """Well-behaved clients answered during the step."""


def proxy_flags(directory: Path, kind: str, settings: str) -> list[str]:
    """The flags of the proxy a kind of flood and a setting take: its total, and the quota or the users it needs."""
    flood = KINDS[kind]
    flags = list(SETTINGS[settings][1])
    if flood.quota is not None:
        quotas = directory / "quotas.toml"
        quotas.write_text(flood.quota)
        flags += ["--quota-file", str(quotas)]
    if flood.sasl:
        users = directory / "users.toml"
        add_user(users, "bob", "PLAIN")
        flags += ["--sasl-users", str(users)]
    return flags


def flood_port(proxy: ProxyProcess, flood: Flood, topic: str) -> int:
    """Where the flooders connect, once the topic they need is there (and filled, for Fetch)."""
    if flood.topic_filled:
        fill_topic(proxy.bootstrap, topic)
    elif flood.to_leader:
        create_topic(proxy.bootstrap, topic)
    served_once(proxy, flood.sasl)
    time.sleep(1)  # the proxy's own allocations for the set-up settle before its RSS is taken
    return proxy.broker_port_base + 1 if flood.to_leader else proxy.port


def flood_in_steps(proxy: ProxyProcess, port: int, payload: bytes, flood: Flood,
                   probe: Callable[[Step], None]) -> list[Step]:
    """1, 20 and 100 flooding connections in turn, each for ``STEP_S``: the peak RSS growth over the proxy's RSS
    before the first, with a well-behaved client served (``probe``) again and again meanwhile, at least once a
    step however slow the machine. A client not answered within ``SERVED_TIMEOUT_S`` fails the probe."""
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    before = process.memory_info().rss
    steps = []
    for connections in CONNECTIONS:
        step = Step(connections)
        with flooding(port, payload, connections, reconnect=flood.sasl):
            deadline = time.monotonic() + STEP_S
            while True:
                probe(step)
                step.peak_growth = max(step.peak_growth, process.memory_info().rss - before)
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
        steps.append(step)
    return steps


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_clients_that_never_read_hold_the_proxy_to_its_total_and_others_are_served(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path, topic: str, kind: str, settings: str) -> None:
    flood = KINDS[kind]
    proxy = own_proxy(*proxy_flags(tmp_path, kind, settings))
    port = flood_port(proxy, flood, topic)

    def served(step: Step) -> None:
        served_once(proxy, flood.sasl)
        step.served += 1

    steps = flood_in_steps(proxy, port, flood.requests(topic), flood, served)  # a client not served fails here
    report = ", ".join(f"{step.connections}: +{step.peak_growth / MIB:.1f} MiB, {step.served} served"
                       for step in steps)
    print(f"{kind}, {settings}: {report}")
    allowed = int(SETTINGS[settings][0] * ALLOWED_OVER_TOTAL)
    assert all(step.peak_growth <= allowed for step in steps), f"{kind}, {settings}: allowed {allowed}; {report}"
