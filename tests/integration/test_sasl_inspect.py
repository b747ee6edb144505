"""sasl-mode inspect: clients log in to the cluster through the proxy, which takes the user the cluster accepted.

The cluster is Apache Kafka's SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512 and unsecured
OAUTHBEARER): Kafka verifies every password; the proxy holds none, and logs in itself (for its own
metadata requests) as ``quota-proxy``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

from protocol.apis import Api
from proxy.security.sasl_messages import ScramClient, plain_token
from tests.fidelity import java_tool
from tests.integration.test_produce_quotas import metrics
from tests.integration.test_sasl import plain_login, refused_login, sasl_settings
from tests.support import (
    PASSWORDS,
    Cluster,
    ProxyProcess,
    answer_to,
    call,
    closed_by_peer,
    create_topic_on_one_broker,
    encode_request,
    produce_request,
    read_frame,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration


class UnsignedJwt(AbstractTokenProvider):  # type: ignore[misc]
    def __init__(self, subject: str) -> None:
        self._subject = subject

    def token(self) -> str:
        def part(value: dict[str, object]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

        return f"{part({'alg': 'none'})}.{part({'sub': self._subject, 'exp': time.time() + 600})}."


@pytest.fixture
def inspecting(own_proxy, broker: Cluster, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """A proxy inspecting logins in front of the cluster's SASL listener."""
    if broker.sasl_bootstrap is None:
        pytest.skip("the cluster under test names no SASL listener (KAFKA_SASL_BOOTSTRAP)")
    config = tmp_path / "inspect.toml"
    config.write_text('[upstream-sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "quota-proxy"\n'
                      f'password = "{PASSWORDS["quota-proxy"]}"\n')
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 100000000\n')
    return own_proxy("--sasl-mode", "inspect", "--quota-file", str(quota_file),  # type: ignore[no-any-return]
                     "--config", str(config), upstream=broker.sasl_bootstrap)


def quota_users(proxy: ProxyProcess) -> set[str]:
    return {key.split('user="')[1].split('"')[0] for key in metrics(proxy)
            if key.startswith("kafka_quota_proxy_produce_byte_rate{") and 'user="' in key}


@pytest.mark.parametrize(("mechanism", "user"), [("SCRAM-SHA-512", "alice"), ("PLAIN", "bob"),
                                                 ("SCRAM-SHA-256", "carol"), ("OAUTHBEARER", "erin")])
def test_the_user_the_cluster_accepted_is_the_principal(inspecting: ProxyProcess, topic: str, mechanism: str,
                                                        user: str) -> None:
    proxy = inspecting
    settings = (sasl_settings(mechanism, user, PASSWORDS[user]) if mechanism != "OAUTHBEARER" else
                {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                 "sasl_oauth_token_provider": UnsignedJwt(user)})
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", **settings)
    producer.send(topic, b"inspected").get(timeout=30)
    producer.close()
    assert quota_users(proxy) == {user}
    assert metrics(proxy)[f'kafka_quota_proxy_sasl_logins_total{{mechanism="{mechanism}",outcome="succeeded"}}'] >= 1


def test_a_login_the_cluster_refuses_names_nobody(inspecting: ProxyProcess) -> None:
    proxy = inspecting
    assert "Authentication failed" in refused_login(proxy.bootstrap, "PLAIN", "bob", "not-his-password")
    assert quota_users(proxy) == set()
    assert metrics(proxy)['kafka_quota_proxy_sasl_logins_total{mechanism="PLAIN",outcome="failed"}'] >= 1
    assert "failed SASL login from 127.0.0.1" in proxy.log() and "user 'bob'" in proxy.log()


def test_librdkafka_logs_in_through_the_inspecting_proxy(inspecting: ProxyProcess, topic: str) -> None:
    proxy = inspecting
    for settings, user in (({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                             "sasl.password": PASSWORDS["carol"]}, "carol"),
                           ({"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                             "sasl.oauthbearer.config": "principal=frank"}, "frank")):
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "acks": "all", **settings})
        producer.produce(topic, b"via librdkafka")
        assert producer.flush(30) == 0
        assert user in quota_users(proxy)


def test_requests_without_a_login_are_charged_to_anonymous(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    # a cluster listener that asks for no login (PLAINTEXT) must not let clients of an inspecting proxy skip quotas
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 100000000\n')
    proxy = own_proxy("--sasl-mode", "inspect", "--quota-file", str(quota_file))
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
    producer.send(topic, b"no login").get(timeout=30)
    producer.close()
    assert quota_users(proxy) == {"ANONYMOUS"}


def test_a_pipelined_login_and_produce_is_charged_to_the_user_the_cluster_accepted(  # type: ignore[no-untyped-def]
        inspecting: ProxyProcess, broker: Cluster, topic: str) -> None:
    # one write: handshake, login, Produce. Decided at once, the Produce would be charged to ANONYMOUS while the
    # cluster (which reads it after the login) runs it as bob; one at a time, it is bob's.
    proxy = inspecting
    create_topic_on_one_broker(broker, topic)
    for password, charged in (("wrong", set()), (PASSWORDS["bob"], {"bob"})):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(b"".join([
                encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1, mechanism="PLAIN"),
                encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=2, auth_bytes=plain_token("bob", password)),
                produce_request(topic, record_batch([b"pipelined"]), correlation_id=3, acks=1)]))
            answered = []
            while frame := read_frame(sock):
                answered.append(int.from_bytes(frame[:4], "big"))
                if len(answered) == 3:
                    break
        assert answered == ([1, 2, 3] if charged else [1, 2])  # a refused login: closed, the Produce unread
        assert quota_users(proxy) == charged


class TokenScramClient(ScramClient):
    """A SCRAM client logging in with a delegation token, as Kafka's ``ScramLoginModule`` with ``tokenauth="true"``:
    the extension is part of the client-first message, and so of what the proof signs."""

    def __init__(self, token_id: str, hmac: str) -> None:
        super().__init__("SCRAM-SHA-256", token_id, hmac)
        self._first_bare += ",tokenauth=true"


def delegation_token(cluster: Cluster, owner: str, tmp_path: Path) -> tuple[str, str]:
    """A token for ``owner``, made with Kafka's own kafka-delegation-tokens tool: its id and HMAC."""
    settings = tmp_path / f"{owner}.properties"
    settings.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                        f'username="{owner}" password="{PASSWORDS[owner]}";\n')
    printed = java_tool("org.apache.kafka.tools.DelegationTokenCommand", "--bootstrap-server",
                        str(cluster.sasl_bootstrap), "--create", "--max-life-time-period", "-1",
                        "--command-config", str(settings))
    token_id = printed.split("Created delegation token with tokenId : ")[1].split()[0]
    hmac = next(line.split() for line in printed.splitlines() if line.startswith(f"{token_id} "))[1]

    def usable() -> bool:  # the broker learns the token from the metadata log a moment after the controller
        sock, answer = token_login(str(cluster.sasl_bootstrap), token_id, hmac)
        sock.close()
        return answer.error_code == 0

    wait_until(usable, 30, "the new token to reach the broker")
    return token_id, hmac


def token_login(bootstrap: str, token_id: str, hmac: str) -> tuple[socket.socket, Any]:
    """SCRAM-SHA-256 with the token by raw frames, the handshake and the client-first message pipelined: the socket
    and the last SaslAuthenticate answer."""
    client = TokenScramClient(token_id, hmac)
    host, _, port = bootstrap.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1, mechanism="SCRAM-SHA-256")
                 + encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=2, auth_bytes=client.first_message()))
    assert answer_to(sock, Api.SASL_HANDSHAKE, 1).error_code == 0
    first = answer_to(sock, Api.SASL_AUTHENTICATE, 2)
    if first.error_code:
        return sock, first
    sock.sendall(encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=3,
                                auth_bytes=client.final_message(bytes(first.auth_bytes))))
    return sock, answer_to(sock, Api.SASL_AUTHENTICATE, 2)


def test_a_delegation_token_login_is_charged_to_the_tokens_owner(inspecting: ProxyProcess, broker: Cluster,
                                                                 topic: str, tmp_path: Path) -> None:
    proxy = inspecting
    create_topic_on_one_broker(broker, topic)
    token_id, hmac = delegation_token(broker, "alice", tmp_path)
    sock, answer = token_login(proxy.bootstrap, token_id, hmac)
    with sock:
        assert answer.error_code == 0, answer
        sock.sendall(produce_request(topic, record_batch([b"with a token"]), correlation_id=4, acks=1))
        assert answer_to(sock, Api.PRODUCE, 7).responses[0].partition_responses[0].error_code == 0
    assert quota_users(proxy) == {"alice"}  # the token's owner, never its id nor ANONYMOUS
    settings = tmp_path / "token.properties"
    settings.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                        f'username="{token_id}" password="{hmac}" tokenauth="true";\n')
    printed = java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "20",
                        "--record-size", "100", "--throughput", "-1", "--producer.config", str(settings),
                        "--producer-props", f"bootstrap.servers={proxy.bootstrap}", "acks=all")
    assert "20 records sent" in printed
    assert quota_users(proxy) == {"alice"}
    unknown, refused = token_login(proxy.bootstrap, "made-up-token", hmac)  # Kafka refuses it at the first step
    unknown.close()
    assert refused.error_code == 58 and quota_users(proxy) == {"alice"}


def test_a_token_login_whose_owner_the_proxy_cannot_learn_is_refused(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                     tmp_path: Path) -> None:
    """Without [upstream-sasl] the proxy's own DescribeDelegationToken cannot reach the SASL listener: the cluster
    would accept the token, the proxy cannot name its owner, and refuses the login rather than charge ANONYMOUS."""
    if broker.sasl_bootstrap is None:
        pytest.skip("the cluster under test names no SASL listener (KAFKA_SASL_BOOTSTRAP)")
    token_id, hmac = delegation_token(broker, "alice", tmp_path)
    proxy = own_proxy("--sasl-mode", "inspect", upstream=broker.sasl_bootstrap)
    sock, answer = token_login(proxy.bootstrap, token_id, hmac)
    with sock:
        assert answer.error_code == 58 and "DescribeDelegationToken failed" in answer.error_message, answer
        assert closed_by_peer(sock)
    assert "failed SASL login from 127.0.0.1" in proxy.log() and token_id in proxy.log()


def test_no_client_changes_the_credentials_of_the_proxys_own_login(inspecting: ProxyProcess) -> None:
    """The proxy logs in as quota-proxy for its own requests: alice, whom the cluster lets alter any user's
    credentials, may not alter those through the proxy (refused whole, every user CLUSTER_AUTHORIZATION_FAILED); the
    credential asked for is made of quota-proxy's own password, so that nothing would break were it applied."""
    salt = b"a salt of alice's"
    same_password = hashlib.pbkdf2_hmac("sha256", PASSWORDS["quota-proxy"].encode(), salt, 4096)
    with plain_login(inspecting.bootstrap, "alice") as sock:
        refused = call(sock, Api.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[
            {"name": "quota-proxy", "mechanism": 1, "iterations": 4096, "salt": salt,
             "salted_password": same_password}])
    assert [(result.user, result.error_code) for result in refused.results] == [  # type: ignore[attr-defined]
        ("quota-proxy", 31)], refused
