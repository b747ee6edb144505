"""SASL terminated at the proxy, with real kafka-python clients; the proxy's own upstream login."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer
from kafka import KafkaProducer

from protocol.apis import Api
from protocol.errors import DELEGATION_TOKEN_AUTH_DISABLED
from proxy.security.sasl_messages import ScramClient, plain_token
from proxy.security.users import UserStore, plain_credential, save_users
from tests.integration.test_produce_quotas import metrics
from tests.support import (
    PASSWORDS,
    Cluster,
    ProxyProcess,
    call,
    encode_request,
    proxy_command,
    read_frame,
    read_to_end,
    wait_until,
)

pytestmark = pytest.mark.integration
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91


def add_user(users_file: Path, name: str, mechanism: str, password: str | None = None) -> None:
    done = subprocess.run([*proxy_command(), "users", "add", name, "--mechanism", mechanism,
                           "--users-file", str(users_file)], input=(password or PASSWORDS[name]) + "\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def sasl_proxy(own_proxy, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    users_file = tmp_path / "users.toml"
    add_user(users_file, "alice", "SCRAM-SHA-512")
    add_user(users_file, "bob", "PLAIN")
    add_user(users_file, "carol", "SCRAM-SHA-256")
    text = users_file.read_text()
    assert all(password not in text for password in PASSWORDS.values())
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 100000000\n')
    return own_proxy("--sasl-users", str(users_file), "--quota-file", str(quota_file))  # type: ignore[no-any-return]


def sasl_settings(mechanism: str, user: str, password: str) -> dict[str, object]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


def refused_login(bootstrap: str, mechanism: str, user: str, password: str, timeout_s: float = 30) -> str:
    """librdkafka's report of a refused login at ``bootstrap`` (it comes at once; kafka-python's producer only gives
    up bootstrapping after 30 s, against Kafka itself too)."""
    errors: list[ConfluentError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                         "error_cb": errors.append})
    deadline = time.monotonic() + timeout_s
    while not any(error.code() == ConfluentError._AUTHENTICATION for error in errors):
        assert time.monotonic() < deadline, f"no authentication error in {timeout_s} s: {errors}"
        producer.poll(0.1)
    return next(str(error) for error in errors if error.code() == ConfluentError._AUTHENTICATION)


@pytest.mark.parametrize(("mechanism", "user"), [("SCRAM-SHA-512", "alice"), ("PLAIN", "bob"),
                                                 ("SCRAM-SHA-256", "carol")])
def test_login_then_produce_and_consume_as_that_user(sasl_proxy: ProxyProcess, topic: str, mechanism: str,
                                                     user: str) -> None:
    settings = sasl_settings(mechanism, user, PASSWORDS[user])
    producer = KafkaProducer(bootstrap_servers=sasl_proxy.bootstrap, acks="all", client_id="app", **settings)
    producer.send(topic, b"hello").get(timeout=30)
    producer.close()
    assert [record.value for record in read_to_end(sasl_proxy.bootstrap, topic, **settings)] == [b"hello"]
    # the <default> user quota gives each authenticated user a bucket of its own (Kafka's level 6)
    assert any(f'client_id="",user="{user}"}}' in key for key in metrics(sasl_proxy)
               if key.startswith("kafka_quota_proxy_produce_byte_rate{"))


def test_wrong_password_is_refused(sasl_proxy: ProxyProcess) -> None:
    assert "Authentication failed" in refused_login(sasl_proxy.bootstrap, "SCRAM-SHA-512", "alice", "not-her-password")
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        handshake = call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert handshake.error_code == 0  # type: ignore[attr-defined]
        answer = call(sock, Api.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00bob\x00wrong")
        assert answer.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert read_frame(sock) == b""  # and the connection is closed


def test_unknown_mechanism_and_requests_before_login_close_the_connection(sasl_proxy: ProxyProcess) -> None:
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        handshake = call(sock, Api.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        assert handshake.error_code == UNSUPPORTED_SASL_MECHANISM  # type: ignore[attr-defined]
        assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]  # type: ignore[attr-defined]
        assert read_frame(sock) == b""
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        call(sock, Api.API_VERSIONS, 0)  # allowed before login
        with pytest.raises(AssertionError, match="closed"):
            call(sock, Api.METADATA, 4, topics=[], allow_auto_topic_creation=False)
    assert "request before SASL authentication completed" in sasl_proxy.log()


def test_proxy_logs_in_upstream_with_its_own_credentials(sasl_proxy: ProxyProcess, own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        topic: str) -> None:
    # a second proxy in front of the SASL proxy: its clients need no credentials, it logs in as alice
    config = tmp_path / "front.toml"
    config.write_text(f'[upstream-sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "alice"\n'
                      f'password = "{PASSWORDS["alice"]}"\n')
    front = own_proxy("--config", str(config), upstream=sasl_proxy.bootstrap)
    producer = KafkaProducer(bootstrap_servers=front.bootstrap, acks="all", client_id="via-front")
    producer.send(topic, b"through two proxies").get(timeout=30)
    producer.close()
    assert any('client_id="",user="alice"}' in key for key in metrics(sasl_proxy)
               if key.startswith("kafka_quota_proxy_produce_byte_rate{"))


def test_users_added_while_running_can_log_in(sasl_proxy: ProxyProcess, tmp_path: Path) -> None:
    add_user(tmp_path / "users.toml", "dave", "SCRAM-SHA-512", "dave-secret")
    sasl_proxy.wait_for_log("reloaded 4 users")
    producer = KafkaProducer(bootstrap_servers=sasl_proxy.bootstrap,
                             **sasl_settings("SCRAM-SHA-512", "dave", "dave-secret"))
    producer.close()


def test_no_upstream_connection_before_a_login(sasl_proxy: ProxyProcess) -> None:
    assert sasl_proxy.process is not None
    process = psutil.Process(sasl_proxy.process.pid)

    def upstream_connections() -> int:
        """The proxy's connections that it opened: their local port is none of its listeners'."""
        connections = process.net_connections(kind="tcp")
        listening = {c.laddr.port for c in connections if c.status == "LISTEN"}
        return sum(1 for c in connections if c.status == "ESTABLISHED" and c.laddr.port not in listening)

    waiting = [socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) for _ in range(20)]
    try:
        for sock in waiting:  # ApiVersions is answered before a login, from the cluster's list
            versions = call(sock, Api.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
            keys = {k.api_key for k in versions.api_keys}  # type: ignore[attr-defined]
            assert versions.error_code == 0 and {Api.PRODUCE, Api.FETCH, Api.SASL_HANDSHAKE} <= keys  # type: ignore[attr-defined]
        time.sleep(0.5)
        assert upstream_connections() == 0
        producer = KafkaProducer(bootstrap_servers=sasl_proxy.bootstrap,
                                 **sasl_settings("PLAIN", "bob", PASSWORDS["bob"]))  # type: ignore[arg-type]
        producer.partitions_for("any-topic")  # logged in: now connections go upstream
        assert upstream_connections() >= 1
        producer.close()
    finally:
        for sock in waiting:
            sock.close()


def test_pipelined_guesses_get_one_answer_and_the_connection_closes(sasl_proxy: ProxyProcess) -> None:
    # one write: a handshake and 20 PLAIN attempts, the 20th with bob's password (the old proxy let it in)
    guesses = [encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=10 + n,
                              auth_bytes=plain_token("bob", f"guess-{n}")) for n in range(19)]
    right = encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=29, auth_bytes=plain_token("bob", PASSWORDS["bob"]))
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        sock.sendall(b"".join([encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1, mechanism="PLAIN"),
                               *guesses, right]))
        answers = []
        while frame := read_frame(sock):
            answers.append(int.from_bytes(frame[:4], "big"))
    assert answers == [1, 10]  # the handshake and the first guess (refused); nothing after it was read
    assert "user 'bob'" in sasl_proxy.log() and "failed SASL login from 127.0.0.1" in sasl_proxy.log()
    counts = metrics(sasl_proxy)
    assert counts['kafka_quota_proxy_sasl_logins_total{mechanism="PLAIN",outcome="failed"}'] >= 1


def test_a_failed_login_is_answered_late_then_closed(sasl_proxy: ProxyProcess) -> None:
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        call(sock, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        client = ScramClient("SCRAM-SHA-512", "alice", "wrong")
        first = call(sock, Api.SASL_AUTHENTICATE, 2, auth_bytes=client.first_message())
        started = time.monotonic()
        final = call(sock, Api.SASL_AUTHENTICATE, 2, correlation_id=2,
                     auth_bytes=client.final_message(bytes(first.auth_bytes)))  # type: ignore[attr-defined]
        assert time.monotonic() - started >= 0.1  # connection.failed.authentication.delay.ms
        assert final.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert read_frame(sock) == b""


def test_an_unknown_scram_user_fails_where_a_wrong_password_does(sasl_proxy: ProxyProcess) -> None:
    with socket.create_connection(("127.0.0.1", sasl_proxy.port), timeout=30) as sock:
        call(sock, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        client = ScramClient("SCRAM-SHA-512", "mallory", "anything")
        first = call(sock, Api.SASL_AUTHENTICATE, 2, auth_bytes=client.first_message())
        assert first.error_code == 0  # type: ignore[attr-defined]
        final = call(sock, Api.SASL_AUTHENTICATE, 2, correlation_id=2,
                     auth_bytes=client.final_message(bytes(first.auth_bytes)))  # type: ignore[attr-defined]
        assert final.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]


def test_logins_are_bounded_in_size_and_time(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    users_file = tmp_path / "users.toml"
    add_user(users_file, "bob", "PLAIN")
    proxy = own_proxy("--sasl-users", str(users_file), "--sasl-login-timeout-seconds", "1")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        started = time.monotonic()
        assert read_frame(sock) == b""  # nothing sent: closed at the deadline
        assert time.monotonic() - started >= 0.9  # not before it (a loaded machine is only later)
    proxy.wait_for_log("no SASL login within 1 s")  # the deadline given, not the default 10 s
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        sock.sendall((600 * 1024).to_bytes(4, "big") + b"\0" * 1024)  # over sasl.server.max.receive.size
        assert read_frame(sock) == b""
    assert "frame size 614400 outside" in proxy.log()


def test_password_hashing_leaves_other_clients_served(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # PLAIN hashes of a million iterations: on the event loop, each would stall every connection that long
    users_file = tmp_path / "users.toml"
    save_users(users_file, UserStore({"bob": {"PLAIN": plain_credential("right", 1_000_000)}}))
    proxy = own_proxy("--sasl-users", str(users_file))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as busy:
        call(busy, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        started = time.monotonic()
        assert call(busy, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "right")).error_code == 0  # type: ignore[attr-defined]
        one_hash = time.monotonic() - started  # on this machine, under its load now
        call(busy, Api.METADATA, 4, topics=[], allow_auto_topic_creation=False)  # upstream connected: not measured
        guessers = [socket.create_connection(("127.0.0.1", proxy.port), timeout=30) for _ in range(4)]
        try:
            for sock in guessers:
                call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
            for sock in guessers:  # 4 hashes, one after another in one login thread
                sock.sendall(encode_request(Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "wrong")))
            slowest = 0.0
            deadline = time.monotonic() + 2 * one_hash  # while the 4 hashes run
            while time.monotonic() < deadline:
                started = time.monotonic()
                call(busy, Api.METADATA, 4, topics=[], allow_auto_topic_creation=False)
                slowest = max(slowest, time.monotonic() - started)
        finally:
            for sock in guessers:
                sock.close()
    # a Metadata sent while a hash ran on the event loop would wait for the rest of it: about one_hash. The same
    # load slows the hashes and the round trips alike, so half of one hash measured now stays a clear margin
    assert slowest < one_hash / 2, (slowest, one_hash)


def plain_login(bootstrap: str, user: str) -> socket.socket:
    """A connection to ``bootstrap`` logged in as ``user`` with PLAIN, by raw frames."""
    host, _, port = bootstrap.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    assert call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0  # type: ignore[attr-defined]
    login = call(sock, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token(user, PASSWORDS[user]))
    assert login.error_code == 0, login  # type: ignore[attr-defined]
    return sock


def token_ids(sock: socket.socket) -> set[str]:
    described = call(sock, Api.DESCRIBE_DELEGATION_TOKEN, 3, owners=None)
    assert described.error_code == 0, described  # type: ignore[attr-defined]
    return {token.token_id for token in described.tokens}  # type: ignore[attr-defined]


def terminating_as_quota_proxy(own_proxy, broker: Cluster, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """A proxy terminating bob's logins (PLAIN), in front of the cluster's SASL listener as quota-proxy."""
    if broker.sasl_bootstrap is None:
        pytest.skip("the cluster under test names no SASL listener (KAFKA_SASL_BOOTSTRAP)")
    users_file = tmp_path / "users.toml"
    add_user(users_file, "bob", "PLAIN")
    config = tmp_path / "upstream.toml"
    config.write_text('[upstream-sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "quota-proxy"\n'
                      f'password = "{PASSWORDS["quota-proxy"]}"\n')
    return own_proxy(  # type: ignore[no-any-return]
        "--sasl-users", str(users_file), "--config", str(config), upstream=broker.sasl_bootstrap)


def test_no_client_gets_or_sees_a_delegation_token_of_the_proxys_own_login(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                            tmp_path: Path) -> None:
    """In terminate mode the cluster sees the proxy's login ([upstream-sasl]) for every client's requests: a token
    made through it would be the proxy login's, a password for the proxy's identity on the cluster, and a described
    token's HMAC is that password. The proxy answers the token APIs as a cluster without tokens (Kafka's answer when
    ``delegation.token.secret.key`` is unset), here in front of a cluster that has them: nothing made, renewed,
    expired or shown."""
    proxy = terminating_as_quota_proxy(own_proxy, broker, tmp_path)
    with plain_login(str(broker.sasl_bootstrap), "quota-proxy") as own:  # the proxy's login, straight to the cluster
        made = call(own, Api.CREATE_DELEGATION_TOKEN, 3, owner_principal_type=None, owner_principal_name=None,
                    renewers=[], max_lifetime_ms=-1)
        assert made.error_code == 0, made  # type: ignore[attr-defined]
        wait_until(lambda: made.token_id in token_ids(own), 30, "the token to reach the broker")  # type: ignore[attr-defined]
        before = token_ids(own)
        try:
            with plain_login(proxy.bootstrap, "bob") as sock:
                created = call(sock, Api.CREATE_DELEGATION_TOKEN, 3, owner_principal_type=None,
                               owner_principal_name=None, renewers=[], max_lifetime_ms=-1)
                assert (created.error_code, created.principal_name, created.hmac) == (  # type: ignore[attr-defined]
                    DELEGATION_TOKEN_AUTH_DISABLED, "bob", b"")
                described = call(sock, Api.DESCRIBE_DELEGATION_TOKEN, 3, owners=None)
                assert (described.error_code, described.tokens) == (  # type: ignore[attr-defined]
                    DELEGATION_TOKEN_AUTH_DISABLED, [])
                for api_key, period in ((Api.RENEW_DELEGATION_TOKEN, "renew_period_ms"),
                                        (Api.EXPIRE_DELEGATION_TOKEN, "expiry_time_period_ms")):
                    answer = call(sock, api_key, 2, hmac=made.hmac, **{period: -1})  # type: ignore[attr-defined]
                    assert answer.error_code == DELEGATION_TOKEN_AUTH_DISABLED, answer  # type: ignore[attr-defined]
            assert token_ids(own) == before
        finally:
            expired = call(own, Api.EXPIRE_DELEGATION_TOKEN, 2, hmac=made.hmac,  # type: ignore[attr-defined]
                           expiry_time_period_ms=-1)
            assert expired.error_code == 0, expired  # type: ignore[attr-defined]


def test_no_client_changes_the_credentials_of_the_proxys_own_login(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                   tmp_path: Path) -> None:
    """Changing quota-proxy's SCRAM credentials would give bob a password for the proxy's identity on the cluster,
    or shut the proxy out: refused whole, every user named CLUSTER_AUTHORIZATION_FAILED. (The credential asked for is
    made of quota-proxy's own password: were it applied, nothing would break.) Another user's change goes on to the
    cluster, which answers it."""
    proxy = terminating_as_quota_proxy(own_proxy, broker, tmp_path)
    salt = b"a salt of bob's"
    same_password = hashlib.pbkdf2_hmac("sha256", PASSWORDS["quota-proxy"].encode(), salt, 4096)
    with plain_login(proxy.bootstrap, "bob") as sock:
        refused = call(sock, Api.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[{"name": "nobody", "mechanism": 1}],
                       upsertions=[{"name": "quota-proxy", "mechanism": 1, "iterations": 4096, "salt": salt,
                                    "salted_password": same_password}])
        assert [(result.user, result.error_code) for result in refused.results] == [  # type: ignore[attr-defined]
            ("nobody", 31), ("quota-proxy", 31)], refused
        others = call(sock, Api.ALTER_USER_SCRAM_CREDENTIALS, 0, upsertions=[],
                      deletions=[{"name": "nobody", "mechanism": 1}])
        assert [(result.user, result.error_code) for result in others.results] == [  # type: ignore[attr-defined]
            ("nobody", RESOURCE_NOT_FOUND)], others
