"""Signed OAUTHBEARER at the proxy (terminate mode) beside Apache Kafka's own validator (KIP-768), both given the
same JWKS file: the same tokens accepted and refused, the same principal named, by raw pipelined frames,
librdkafka and Kafka's Java client."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from protocol.apis import Api
from proxy.dev.apache_kafka import KafkaCluster
from tests.fidelity import java_tool
from tests.support import (
    Cluster,
    ProxyProcess,
    answer_to,
    call,
    create_topic_on_one_broker,
    encode_request,
    produce_request,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration

ISSUER = "https://login.kafka-quota-proxy.test"
AUDIENCE = "kafka"
TOPIC = "oauth-tokens"
QUOTA_BYTES_PER_S = 1024
"""alice's producer_byte_rate, at the broker and at the proxy: a 20 KB Produce by her is throttled at once, so a
throttle says the login named alice."""
SASL_AUTHENTICATION_FAILED = 58


@dataclass
class Issuer:
    """An identity provider: two signing keys in a JWKS file, and a third it never published."""

    jwks: Path
    rsa_key: Any
    ec_key: Any
    unpublished: Any

    def token(self, sub: str = "alice", *, key: str = "rsa", **overrides: Any) -> str:
        now = int(time.time())
        claims = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "scope": "kafka",
                  **overrides}
        private, algorithm, kid = {"rsa": (self.rsa_key, "RS256", "rsa-1"), "ec": (self.ec_key, "ES256", "ec-1"),
                                   "unpublished": (self.unpublished, "RS256", "rsa-9")}[key]
        return jwt.encode(claims, private, algorithm=algorithm, headers={"kid": kid})


def _part(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _token_cases(issuer: Issuer) -> dict[str, tuple[str, str | None]]:
    """Each case's token and the principal it should log in (None: refused)."""
    now = int(time.time())
    header, _, signature = issuer.token().split(".")
    tampered = f"{header}.{_part({'sub': 'mallory', 'iss': ISSUER, 'aud': AUDIENCE, 'iat': now, 'exp': now + 600})}" \
               f".{signature}"
    unsigned = f"{_part({'alg': 'none'})}.{_part({'sub': 'alice', 'iat': now, 'exp': now + 600})}."
    return {
        "RS256": (issuer.token("alice"), "alice"),
        "ES256": (issuer.token("bob", key="ec"), "bob"),
        "expired": (issuer.token(iat=now - 3600, exp=now - 600), None),
        "wrong issuer": (issuer.token(iss="https://elsewhere.test"), None),
        "wrong audience": (issuer.token(aud="billing"), None),
        "unknown key": (issuer.token(key="unpublished"), None),
        "alg none": (unsigned, None),
        "tampered signature": (tampered, None),
    }


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Issuer:
    directory = tmp_path_factory.mktemp("idp")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keys = [{**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key())), "kid": "rsa-1", "use": "sig"},
            {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key())), "kid": "ec-1", "use": "sig"}]
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": keys}))
    return Issuer(jwks, rsa_key, ec_key, rsa.generate_private_key(public_exponent=65537, key_size=2048))


@pytest.fixture(scope="module")
def kafka(issuer: Issuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    """Apache Kafka validating OAUTHBEARER against the JWKS file (its SASL listener), alice held to the quota;
    with its SASL bootstrap."""
    url = issuer.jwks.as_uri()
    oauth = "org.apache.kafka.common.security.oauthbearer"
    properties = {
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            f"{oauth}.OAuthBearerValidatorCallbackHandler",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{oauth}.OAuthBearerLoginModule required;",
        "sasl.oauthbearer.jwks.endpoint.url": url,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
    }
    with KafkaCluster(log_directory=tmp_path_factory.mktemp("kafka-oauth"), extra_properties=properties,
                      system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": url}) as started:
        cluster = Cluster(started.bootstrap, started.sasl_bootstrap, started_here=True).wait_until_ready()
        create_topic_on_one_broker(cluster, TOPIC)
        with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
            answer: Any = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
                {"entity": [{"entity_type": "user", "entity_name": "alice"}],
                 "ops": [{"key": "producer_byte_rate", "value": float(QUOTA_BYTES_PER_S), "remove": False}]}])
        assert answer.entries[0].error_code == 0, answer
        yield cluster, started.sasl_bootstrap


@pytest.fixture(scope="module")
def proxy(kafka: tuple[Cluster, str], issuer: Issuer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """The proxy terminating OAUTHBEARER with the same JWKS file, expected issuer and audience, and alice's quota;
    it reaches the cluster on the PLAINTEXT listener."""
    cluster, _ = kafka
    directory = tmp_path_factory.mktemp("oauth-proxy")
    config = directory / "proxy.toml"
    config.write_text(f'sasl-mode = "terminate"\n[oauthbearer]\njwks.endpoint.url = "{issuer.jwks.as_uri()}"\n'
                      f'expected.issuer = "{ISSUER}"\nexpected.audience = ["{AUDIENCE}"]\n')
    quotas = directory / "quotas.toml"
    quotas.write_text(f'[[quota]]\nuser = "alice"\nproducer_byte_rate = {QUOTA_BYTES_PER_S}\n')
    running = ProxyProcess(cluster.bootstrap, directory / "proxy.log", "--config", str(config), "--quota-file",
                           str(quotas), node_ids=cluster.node_ids).start()
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture(scope="module")
def inspecting_proxy(kafka: tuple[Cluster, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """The proxy in inspect mode in front of Kafka's SASL listener: Kafka checks the tokens, the proxy names the
    principal from the token's subject and holds bob (not alice) to the quota."""
    cluster, kafka_sasl = kafka
    directory = tmp_path_factory.mktemp("oauth-inspect")
    quotas = directory / "quotas.toml"
    quotas.write_text(f'[[quota]]\nuser = "bob"\nproducer_byte_rate = {QUOTA_BYTES_PER_S}\n')
    running = ProxyProcess(kafka_sasl, directory / "proxy.log", "--sasl-mode", "inspect", "--quota-file", str(quotas),
                           node_ids=cluster.node_ids).start()
    yield running
    assert running.stop() == 0, running.log()


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def login_and_produce(bootstrap: str, token: str) -> tuple[bool, int | None]:
    """Log in with ``token`` by raw frames, the handshake and the token sent together, then produce 20 KB: whether
    the login was accepted, and the Produce's throttle_time_ms."""
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    with socket.create_connection(_host_port(bootstrap), timeout=30) as sock:
        sock.sendall(encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1, mechanism="OAUTHBEARER")
                     + encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=2, auth_bytes=message))
        assert answer_to(sock, Api.SASL_HANDSHAKE, 1).error_code == 0
        answer = answer_to(sock, Api.SASL_AUTHENTICATE, 2)
        if answer.error_code == 0 and answer.auth_bytes:  # Kafka's refusal, sent as a challenge (RFC 7628)
            assert json.loads(answer.auth_bytes)["status"] == "invalid_token"
            sock.sendall(encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=3, auth_bytes=b"\x01"))
            answer = answer_to(sock, Api.SASL_AUTHENTICATE, 2)
        if answer.error_code:
            assert answer.error_code == SASL_AUTHENTICATION_FAILED
            return False, None
        sock.sendall(produce_request(TOPIC, record_batch([b"x" * 20_000]), correlation_id=4, acks=1, version=9))
        produced = answer_to(sock, Api.PRODUCE, 9)
        assert produced.responses[0].partition_responses[0].error_code == 0
        return True, produced.throttle_time_ms


def test_the_same_tokens_are_accepted_and_refused_and_name_the_same_principal(
        kafka: tuple[Cluster, str], proxy: ProxyProcess, issuer: Issuer) -> None:
    _, kafka_sasl = kafka
    seen = {}
    for case, (token, principal) in _token_cases(issuer).items():
        direct, through = login_and_produce(kafka_sasl, token), login_and_produce(proxy.bootstrap, token)
        seen[case] = (direct, through)
        accepted = principal is not None
        assert direct[0] is accepted and through[0] is accepted, f"{case}: Kafka {direct}, proxy {through}"
        if accepted:  # only alice's quota throttles: a throttle names her, its absence someone else
            throttled = principal == "alice"
            assert (direct[1] > 0) is throttled and (through[1] > 0) is throttled, f"{case}: {direct}, {through}"
    log = proxy.log()
    assert "failed SASL login" in log and "expired" in log and "Signature verification failed" in log, log[-3000:]


def test_in_inspect_mode_kafka_decides_and_the_proxy_names_the_tokens_subject(
        kafka: tuple[Cluster, str], inspecting_proxy: ProxyProcess, issuer: Issuer) -> None:
    for case, (token, principal) in _token_cases(issuer).items():
        accepted, throttle = login_and_produce(inspecting_proxy.bootstrap, token)
        assert accepted is (principal is not None), case
        if accepted:  # the proxy's quota is bob's, Kafka's alice's: each throttles its own principal
            assert throttle is not None and throttle > 0, f"{case}: {principal} was not held to a quota"
    direct_bob = login_and_produce(kafka[1], issuer.token("bob", key="ec"))
    assert direct_bob == (True, 0), "Kafka itself holds bob to no quota: the throttle above was the proxy's"


def _librdkafka_producer(bootstrap: str, token: str, errors: list[ConfluentError]) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _config: (token, time.time() + 600),
                     "error_cb": errors.append})


@pytest.mark.parametrize("side", ["kafka", "proxy"])
def test_librdkafka_produces_with_a_signed_token_and_is_refused_a_forged_one(
        side: str, kafka: tuple[Cluster, str], proxy: ProxyProcess, issuer: Issuer) -> None:
    bootstrap = kafka[1] if side == "kafka" else proxy.bootstrap
    errors: list[ConfluentError] = []
    producer = _librdkafka_producer(bootstrap, issuer.token("bob", key="ec"), errors)
    delivered: list[object] = []
    producer.produce(TOPIC, b"signed", on_delivery=lambda error, message: delivered.append(error or message))
    producer.flush(60)
    assert len(delivered) == 1 and not isinstance(delivered[0], ConfluentError), (delivered, errors)
    refused: list[ConfluentError] = []
    forged = _librdkafka_producer(bootstrap, issuer.token("bob", key="unpublished"), refused)
    deadline = time.monotonic() + 30
    while not any(error.code() == ConfluentError._AUTHENTICATION for error in refused):
        assert time.monotonic() < deadline, refused
        forged.poll(0.2)


def test_kafkas_java_admin_client_logs_in_with_a_token_file(proxy: ProxyProcess, issuer: Issuer,
                                                           tmp_path: Path) -> None:
    """Kafka's own client side of KIP-768: a token read from a file (``FileJwtRetriever``), through the proxy."""
    def topics_listed(token: str, succeeds: bool) -> str:
        token_file = tmp_path / f"token-{succeeds}"
        token_file.write_text(token)
        settings = tmp_path / f"client-{succeeds}.properties"
        settings.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n"
            "sasl.login.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
            f"sasl.oauthbearer.token.endpoint.url={token_file.as_uri()}\n")
        return java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap,
                         "--command-config", str(settings), "--list", succeeds=succeeds, timeout_s=120,
                         system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": token_file.as_uri()})

    assert TOPIC in topics_listed(issuer.token("alice"), succeeds=True).split()
    assert "SaslAuthenticationException" in topics_listed(issuer.token(aud="billing"), succeeds=False)


class JwksServer:
    """An identity provider's JWKS endpoint over HTTP (``http.server`` in a thread), whose keys can be rotated."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        import http.server
        import threading

        self.keys = keys
        self.fetches = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.fetches += 1
                body = json.dumps({"keys": server.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/jwks.json"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def test_a_jwks_endpoint_is_fetched_again_when_a_token_names_a_key_it_lacks(
        kafka: tuple[Cluster, str], issuer: Issuer, tmp_path: Path) -> None:
    """The keys rotated at the identity provider: the first token signed with the new key is refused (the proxy had
    not fetched it yet, as Kafka's ``RefreshingHttpsJwks`` refuses it) and sets off a fetch; the next is accepted."""
    cluster, _ = kafka
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    published = json.loads(issuer.jwks.read_text())["keys"]
    server = JwksServer(published)
    config = tmp_path / "proxy.toml"
    config.write_text(f'sasl-mode = "terminate"\n[oauthbearer]\njwks.endpoint.url = "{server.url}"\n'
                      f'expected.issuer = "{ISSUER}"\nexpected.audience = ["{AUDIENCE}"]\n')
    proxy = ProxyProcess(cluster.bootstrap, tmp_path / "proxy.log", "--config", str(config),
                         node_ids=cluster.node_ids).start()
    try:
        assert server.fetches == 1 and login_and_produce(proxy.bootstrap, issuer.token("alice"))[0]
        server.keys = [*published, {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rotated.public_key())),
                                    "kid": "rsa-2"}]
        now = int(time.time())
        new_key = jwt.encode({"sub": "carol", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600},
                             rotated, algorithm="RS256", headers={"kid": "rsa-2"})
        assert login_and_produce(proxy.bootstrap, new_key)[0] is False
        wait_until(lambda: server.fetches == 2, 30, "the proxy to fetch the JWKS again")
        wait_until(lambda: login_and_produce(proxy.bootstrap, new_key)[0], 30, "the new key to be taken")
        assert server.fetches == 2  # one fetch for the missing key, not one per login
    finally:
        assert proxy.stop() == 0, proxy.log()
        server.close()


def test_without_keys_the_proxy_does_not_start_and_says_why(kafka: tuple[Cluster, str], tmp_path: Path) -> None:
    import subprocess

    from proxy.dev.apache_kafka import free_port
    from tests.support import proxy_command

    cluster, _ = kafka
    unreachable = f"http://127.0.0.1:{free_port()}/jwks.json"
    config = tmp_path / "proxy.toml"
    config.write_text(f'sasl-mode = "terminate"\n[oauthbearer]\njwks.endpoint.url = "{unreachable}"\n'
                      'jwks.endpoint.retry.backoff.ms = 50\njwks.endpoint.retry.backoff.max.ms = 300\n')
    done = subprocess.run([*proxy_command(), "--upstream", cluster.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
                           "--state-dir", str(tmp_path / "state"), "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"cannot start: JWKS endpoint {unreachable}" in done.stderr, done.stderr
    config.write_text('sasl-mode = "terminate"\n[oauthbearer]\njwks.endpoint.url = "ftp://idp/jwks"\n')
    done = subprocess.run([*proxy_command(), "--upstream", cluster.bootstrap, "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "jwks.endpoint.url: a file, http, https URL" in done.stderr, done.stderr
