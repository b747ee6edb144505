"""Connection quotas (KIP-612) as Kafka's ``ConnectionQuotas`` applies them, through real sockets; and a burst of
connections, passed on to the broker without overflowing its backlog.

Every client here connects from 127.0.0.1. A connection counts as served when it answers an
ApiVersions request, and as refused when the proxy closes it without an answer.
"""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import psutil
import pytest

from protocol.apis import Api
from proxy.cluster.upstream import CONNECTS_AT_ONCE_PER_BROKER
from tests.integration.test_client_quotas import quotas_command
from tests.integration.test_produce_quotas import metrics
from tests.support import ProxyProcess, admin_config, closed_by_peer, encode_request, read_frame, wait_until

pytestmark = pytest.mark.integration
LOCAL = "127.0.0.1"


def open_connections(proxy: ProxyProcess, count: int) -> list[socket.socket]:
    """``count`` connections, each having sent an ApiVersions request (the kernel completes the
    handshake whether or not the proxy has accepted them yet)."""
    sockets = []
    for index in range(count):
        sock = socket.create_connection((LOCAL, proxy.port), timeout=30)
        sock.sendall(encode_request(Api.API_VERSIONS, 0, correlation_id=index))
        sockets.append(sock)
    return sockets


def served(sock: socket.socket) -> bool:
    """Answered (True) or closed by the proxy (False)."""
    return not closed_by_peer(sock)


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def listen_overflows() -> int:
    """Connections the kernel has dropped because a listener's queue of connections not yet accepted was full, at any
    listener of this network namespace (``TcpExt: ListenOverflows``, what ``netstat -s`` reports)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    counters: dict[str, str] = {}
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        counters.update(zip(names.split(), values.split(), strict=True))
    return int(counters["ListenOverflows"])


def quota_settings(tmp_path: Path, body: str = "") -> str:
    """One-second minimum rate windows (num 2): a rate's initial credit is one second of it."""
    path = tmp_path / "quotas.toml"
    path.write_text('[settings]\n"quota.window.num" = 2\n' + body)
    return str(path)


def test_an_ip_keeps_its_maximum_of_connections_and_the_rest_are_closed(own_proxy) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--max-connections-per-ip", "50")
    process = psutil.Process(proxy.process.pid)
    descriptors_before = process.num_fds()
    sockets = open_connections(proxy, 200)
    try:
        outcomes = [served(sock) for sock in sockets]
        assert outcomes == [True] * 50 + [False] * 150
        figures = metrics(proxy)  # the proxy still answers, and says what it did
        assert figures['kafka_quota_proxy_listener_connections_total{listener="bootstrap",outcome="refused"}'] == 150
        assert figures['kafka_quota_proxy_listener_connections_total{listener="bootstrap",outcome="accepted"}'] == 50
        assert figures[f'kafka_quota_proxy_client_connections_per_ip{{ip="{LOCAL}"}}'] == 50
        # one socket per client and one upstream for each served connection, nothing for the refused
        assert process.num_fds() - descriptors_before <= 2 * 50 + 5
        assert len([c for c in process.net_connections(kind="tcp") if c.status == "ESTABLISHED"]) <= 2 * 50 + 2
    finally:
        close_all(sockets)
    per_ip = f'kafka_quota_proxy_client_connections_per_ip{{ip="{LOCAL}"}}'
    wait_until(lambda: not metrics(proxy).get(per_ip, 0), 30, "the closed connections' places given back")
    again = open_connections(proxy, 1)
    assert served(again[0]), "closed connections must give their places back"
    close_all(again)


def burst_of_clients(port: int, clients: int = 150, timeout_s: float = 30) -> list[float]:
    """``clients`` connections opened to ``port`` at once, each asking Metadata (always forwarded): the seconds each
    waited for its answer from the burst's start. Fails if one is closed, or not answered within ``timeout_s``."""
    started = time.monotonic()
    opened = []
    for index in range(clients):
        sock = socket.create_connection((LOCAL, port), timeout=timeout_s)
        sock.sendall(encode_request(Api.METADATA, 1, correlation_id=index, topics=None))
        opened.append(sock)
    waits: list[float] = []
    try:
        waiting = list(opened)
        deadline = started + timeout_s
        while waiting and time.monotonic() < deadline:
            for sock in select.select(waiting, [], [], 1)[0]:
                assert read_frame(sock), "the proxy closed a connection"
                waits.append(time.monotonic() - started)
                waiting.remove(sock)
        assert not waiting, f"{len(waiting)} of {clients} clients got no answer in {timeout_s} s"
    finally:
        close_all(opened)
    return waits


def test_a_burst_of_clients_reaches_the_broker_without_overflowing_its_backlog(own_proxy) -> None:  # type: ignore[no-untyped-def]
    """A hundred and fifty clients opening at once: the broker has at most ``CONNECTS_AT_ONCE_PER_BROKER`` of the
    proxy's connections not yet accepted, so its backlog (Kafka's ``socket.listen.backlog.size``, 50) never drops
    one, which TCP would try again only a second later: the kernel counts none dropped. A hundred connections
    opened at once to Apache Kafka overflow it. How long the slowest client waits is a figure of ``make bench``
    (``bench/latency_aims.py``)."""
    proxy = own_proxy()
    overflows_before = listen_overflows()
    burst_of_clients(proxy.port)
    dropped = listen_overflows() - overflows_before
    assert dropped == 0, f"{dropped} connections dropped by a full listen queue ({CONNECTS_AT_ONCE_PER_BROKER} at once)"


def test_the_creation_rate_makes_the_acceptor_wait(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--max-connection-creation-rate", "10", "--quota-file", quota_settings(tmp_path))
    started = time.monotonic()
    sockets = open_connections(proxy, 60)
    try:
        assert all(served(sock) for sock in sockets), "a delayed connection is served, not refused"
        elapsed = time.monotonic() - started
    finally:
        close_all(sockets)
    # one second of credit (10), then 10/s: the last of 60 is accepted after about 5 s at the soonest (the acceptor
    # decides its waits on its own clock: a busy machine only adds time, so no bound is put on how much)
    assert elapsed >= 4.5, f"60 connections at 10/s took {elapsed:.1f} s"
    assert metrics(proxy)['kafka_quota_proxy_listener_connections_total{listener="bootstrap",outcome="delayed"}'] >= 20


def test_max_connections_holds_a_new_connection_until_one_closes(own_proxy) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--max-connections", "3")
    first = open_connections(proxy, 3)
    waiting = open_connections(proxy, 1)[0]
    try:
        assert all(served(sock) for sock in first)
        waiting.settimeout(1.5)
        with pytest.raises(TimeoutError):
            read_frame(waiting)  # connected by the kernel, not yet accepted: no answer
        first[0].close()
        waiting.settimeout(30)
        assert read_frame(waiting), "accepted once a connection closed"
    finally:
        close_all([*first, waiting])


def test_an_ips_creation_rate_closes_its_extra_connections_after_a_delay(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    quota_file = quota_settings(tmp_path, f'[[quota]]\nip = "{LOCAL}"\nconnection_creation_rate = 5\n')
    proxy = own_proxy("--quota-file", quota_file)
    sockets = open_connections(proxy, 15)
    try:
        outcomes = [served(sock) for sock in sockets]
    finally:
        close_all(sockets)
    assert outcomes[:5] == [True] * 5 and outcomes.count(True) <= 7, outcomes
    assert metrics(proxy)['kafka_quota_proxy_listener_connections_total{listener="bootstrap",outcome="throttled"}'] >= 8


def test_ip_quotas_are_set_and_described_like_kafka_configs_entity_type_ips(own_proxy,  # type: ignore[no-untyped-def]
                                                                            tmp_path: Path) -> None:
    proxy = own_proxy(*admin_config(tmp_path))
    altered = quotas_command(proxy, "alter", "--entity-type", "ips", "--entity-name", "10.1.2.3",
                             "--add-config", "connection_creation_rate=7")
    assert altered.returncode == 0, altered.stderr
    refused = quotas_command(proxy, "alter", "--entity-type", "ips", "--entity-default",
                             "--add-config", "producer_byte_rate=7")
    assert refused.returncode == 1 and "does not apply" in refused.stderr
    described = quotas_command(proxy, "describe", "--entity-type", "ips")
    assert described.stdout.strip() == "Quota configs for ip '10.1.2.3' are connection_creation_rate=7"
