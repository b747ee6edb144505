"""``connection_creation_rate`` on a user, against Apache Kafka: a user opening connections faster than its
rate has them closed after its login, while another user (from the same address) is untouched.

Kafka has the rate per IP only, which means nothing behind a load balancer; the proxy applies Kafka's IP
math to the principal a SASL login names: over the rate, the connection reads nothing more after the login's
answer and is closed after the throttle (at most one window), as Kafka closes one over its IP's rate.
"""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from protocol.apis import Api
from proxy.security.sasl_messages import plain_token
from tests.certificates import CertificateAuthority, Issued
from tests.integration.test_produce_quotas import metrics
from tests.integration.test_sasl import add_user
from tests.integration.test_tls import tls_config
from tests.support import LOOPBACK, PASSWORDS, ProxyProcess, encode_request, read_frame

pytestmark = pytest.mark.integration
RATE = 2
"""Connections per second: 11 one-second windows admit a burst of 20 before the first is closed."""


@pytest.fixture
def proxy(own_proxy, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    users_file = tmp_path / "users.toml"
    for user in ("alice", "bob"):
        add_user(users_file, user, "PLAIN")
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nuser = "bob"\nconnection_creation_rate = {RATE}\n')
    return own_proxy("--sasl-users", str(users_file), "--quota-file", str(quota_file))  # type: ignore[no-any-return]


def open_logged_in(proxy: ProxyProcess, user: str, count: int) -> list[socket.socket]:
    """``count`` connections, each sent at once a PLAIN login and a Metadata request behind it."""
    login = b"".join([
        encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1, mechanism="PLAIN"),
        encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=2, auth_bytes=plain_token(user, PASSWORDS[user])),
        encode_request(Api.METADATA, 12, correlation_id=3, topics=[], allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)])
    opened = []
    for _ in range(count):
        sock = socket.create_connection((LOOPBACK, proxy.port), timeout=30)
        sock.sendall(login)
        opened.append(sock)
    return opened


def served(sock: socket.socket) -> bool:
    """Its login answered (accepted), then its Metadata answered (True) or the connection closed (False)."""
    with sock:
        answers = [read_frame(sock) for _ in range(2)]
        assert all(answers), "the login was not answered"
        assert int.from_bytes(answers[1][4:6], "big") == 0, "the login failed"  # SaslAuthenticate v2 error_code
        return bool(read_frame(sock))


def test_a_user_over_its_rate_has_connections_closed_and_another_user_is_untouched(proxy: ProxyProcess) -> None:
    started = time.monotonic()
    bobs = open_logged_in(proxy, "bob", 40)
    alices = open_logged_in(proxy, "alice", 40)
    bob_served = [served(sock) for sock in bobs]
    elapsed = time.monotonic() - started
    assert all(served(sock) for sock in alices)  # no quota of hers: every connection served
    # the burst of 20 goes through, and at most RATE more per second that went by; the rest are closed
    assert all(bob_served[:20]), bob_served
    closed = bob_served.count(False)
    assert closed >= 40 - (20 + RATE * elapsed + 1), (bob_served, elapsed)
    values = metrics(proxy)
    assert values['kafka_quota_proxy_rejected_requests_total{quota_type="connection_creation_rate"}'] == closed
    throttled_ms = values['kafka_quota_proxy_throttle_time_ms_total{client_id="",quota_type="connection_creation_rate",'
                          'user="bob"}']
    assert 0 < throttled_ms <= closed * 1000  # each closed after its throttle, at most one window


def test_librdkafka_closed_after_its_login_comes_back_and_is_served(proxy: ProxyProcess, topic: str) -> None:
    for sock in open_logged_in(proxy, "bob", 20):  # bob's burst, used
        assert served(sock)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": PASSWORDS["bob"],
                         "client.id": "bob-librdkafka", "reconnect.backoff.ms": 100})
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer.produce(topic, b"after the burst", on_delivery=delivered)
    assert producer.flush(60) == 0 and not failures, failures
    assert metrics(proxy)['kafka_quota_proxy_rejected_requests_total{quota_type="connection_creation_rate"}'] >= 1


def test_a_client_certificate_names_the_user_whose_rate_applies(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ca = CertificateAuthority(tmp_path / "pki")
    # without SASL the certificate names the principal as the connection opens: over the rate it gets no answer
    server = ca.issue("proxy", "proxy", server=True)
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "alice"\nconnection_creation_rate = 1\n')  # a burst of 10
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca, client_auth="required"),
                      "--quota-file", str(quota_file))

    def answered(client: Issued, count: int) -> list[bool]:
        context = ssl.create_default_context(cafile=str(ca.cafile))
        context.load_cert_chain(str(client.certfile), str(client.keyfile))
        opened = []
        for _ in range(count):
            sock = context.wrap_socket(socket.create_connection((LOOPBACK, proxy.port), timeout=30),
                                       server_hostname=LOOPBACK)
            sock.sendall(encode_request(Api.METADATA, 12, topics=[], allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
            opened.append(sock)
        outcomes = []
        for sock in opened:
            with sock:
                try:
                    outcomes.append(bool(read_frame(sock)))
                except (ssl.SSLError, ConnectionError):
                    outcomes.append(False)
        return outcomes

    alice = answered(ca.issue("alice", "Alice", unit="eng"), 15)  # CN=Alice,OU=eng,... -> alice
    assert alice[:10] == [True] * 10 and alice.count(False) >= 3, alice
    assert all(answered(ca.issue("service", "Batch", unit="ops"), 15))  # batch: no quota
    assert metrics(proxy)['kafka_quota_proxy_rejected_requests_total{quota_type="connection_creation_rate"}'] == \
        alice.count(False)
