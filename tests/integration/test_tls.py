"""TLS on the client listeners (SSL, SASL_SSL, mTLS principals) and to the cluster, with real clients."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from protocol.apis import Api
from tests.certificates import CertificateAuthority, Issued
from tests.integration.test_produce_quotas import metrics
from tests.integration.test_sasl import add_user
from tests.support import (
    PASSWORDS,
    Cluster,
    ProxyProcess,
    closed_by_peer,
    encode_request,
    proxy_command,
    read_frame,
    read_to_end,
)

pytestmark = pytest.mark.integration
MAPPING = "RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT"


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


def tls_config(path: Path, server: Issued, ca: CertificateAuthority, client_auth: str = "none",
               extra: str = "") -> tuple[str, str]:
    path.write_text(f'{extra}\n[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\n'
                    f'cafile = "{ca.cafile}"\nclient-auth = "{client_auth}"\nprincipal-mapping-rules = "{MAPPING}"\n')
    return "--config", str(path)


def kafka_python_ssl(ca: CertificateAuthority, client: Issued | None = None, sasl: tuple[str, str, str] | None = None
                     ) -> dict[str, object]:
    settings: dict[str, object] = {"security_protocol": "SASL_SSL" if sasl else "SSL", "ssl_cafile": str(ca.cafile)}
    if client is not None:
        settings.update(ssl_certfile=str(client.certfile), ssl_keyfile=str(client.keyfile))
    if sasl is not None:
        settings.update(sasl_mechanism=sasl[0], sasl_plain_username=sasl[1], sasl_plain_password=sasl[2])
    return settings


def librdkafka_ssl(ca: CertificateAuthority, client: Issued | None = None, sasl: tuple[str, str, str] | None = None
                   ) -> dict[str, object]:
    settings: dict[str, object] = {"security.protocol": "SASL_SSL" if sasl else "SSL",
                                   "ssl.ca.location": str(ca.cafile)}
    if client is not None:
        settings.update({"ssl.certificate.location": str(client.certfile), "ssl.key.location": str(client.keyfile)})
    if sasl is not None:
        settings.update({"sasl.mechanism": sasl[0], "sasl.username": sasl[1], "sasl.password": sasl[2]})
    return settings


def round_trip_kafka_python(bootstrap: str, topic: str, settings: dict[str, object]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings)
    producer.send(topic, b"over tls").get(timeout=30)
    producer.close()
    assert [record.value for record in read_to_end(bootstrap, topic, **settings)] == [b"over tls"]


def round_trip_librdkafka(bootstrap: str, topic: str, settings: dict[str, object]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings})
    failures: list[object] = []
    producer.produce(topic, b"over tls (librdkafka)", partition=0, on_delivery=lambda error, _: failures.append(error))
    assert producer.flush(30) == 0 and failures == [None]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         **settings})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 30
    values = []
    while not values and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"over tls (librdkafka)"]


def assert_refused(port: int, context: ssl.SSLContext) -> None:
    """A TLS connection with ``context`` gets no answer (raw: kafka-python leaks the sockets of failed
    TLS handshakes, and the warnings of their collection fail whichever test runs then)."""
    with (socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
          pytest.raises((ssl.SSLError, ConnectionError)),
          context.wrap_socket(raw, server_hostname="127.0.0.1") as sock):
        sock.sendall(encode_request(Api.API_VERSIONS, 0))
        assert read_frame(sock) == b""  # TLS 1.3: a refused client certificate shows at the first read
        raise ConnectionError("closed")


def quota_users(proxy: ProxyProcess) -> set[str]:
    return {key.split('user="')[1].split('"')[0] for key in metrics(proxy)
            if key.startswith("kafka_quota_proxy_produce_byte_rate{") and 'user="' in key}


def default_user_quota(tmp_path: Path) -> tuple[str, str]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 100000000\n')
    return "--quota-file", str(quota_file)


def test_ssl_round_trips_with_kafka_python_and_librdkafka(own_proxy, tmp_path: Path, ca: CertificateAuthority,  # type: ignore[no-untyped-def]
                                                          topic: str) -> None:
    server = ca.issue("proxy", "proxy", server=True)
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca), *default_user_quota(tmp_path))
    round_trip_kafka_python(proxy.bootstrap, topic, kafka_python_ssl(ca))
    round_trip_librdkafka(proxy.bootstrap, f"{topic}-r", librdkafka_ssl(ca))
    assert quota_users(proxy) == {"ANONYMOUS"}  # TLS without a client certificate names nobody (Kafka's ANONYMOUS)


def test_sasl_ssl_round_trips(own_proxy, tmp_path: Path, ca: CertificateAuthority, topic: str) -> None:  # type: ignore[no-untyped-def]
    users_file = tmp_path / "users.toml"
    add_user(users_file, "alice", "SCRAM-SHA-512")
    add_user(users_file, "bob", "PLAIN")
    server = ca.issue("proxy", "proxy", server=True)
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca, extra=f'sasl-users = "{users_file}"'),
                      *default_user_quota(tmp_path))
    round_trip_kafka_python(proxy.bootstrap, topic, kafka_python_ssl(ca, sasl=("SCRAM-SHA-512", "alice",
                                                                              PASSWORDS["alice"])))
    round_trip_librdkafka(proxy.bootstrap, f"{topic}-r", librdkafka_ssl(ca, sasl=("PLAIN", "bob", PASSWORDS["bob"])))
    assert quota_users(proxy) == {"alice", "bob"}


def test_client_certificates_name_the_principal_through_the_mapping_rules(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          ca: CertificateAuthority, topic: str) -> None:
    server = ca.issue("proxy", "proxy", server=True)
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "alice"\nproducer_byte_rate = 1000\n'
                          '[[quota]]\nuser = "<default>"\nproducer_byte_rate = 200000000\n')
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca, client_auth="required"),
                      "--quota-file", str(quota_file))
    alice = ca.issue("alice", "Alice", unit="eng")  # CN=Alice,OU=eng,O=Acme,C=US -> alice
    service = ca.issue("service", "batch-job")  # no OU: DEFAULT, the whole name
    round_trip_kafka_python(proxy.bootstrap, topic, kafka_python_ssl(ca, alice))
    round_trip_librdkafka(proxy.bootstrap, f"{topic}-r", librdkafka_ssl(ca, service))
    assert quota_users(proxy) == {"alice", "CN=batch-job,O=Acme,C=US"}
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", **kafka_python_ssl(ca, alice))
    producer.send(topic, b"x" * 20_000).get(timeout=30)  # over alice's own 1000 B/s, far under the default
    producer.close(timeout=1)
    throttles = {key.split('user="')[1].split('"')[0]: value for key, value in metrics(proxy).items()
                 if key.startswith("kafka_quota_proxy_produce_throttle_time_ms{")}
    assert throttles["alice"] > 0 and throttles["CN=batch-job,O=Acme,C=US"] == 0, throttles


def test_a_client_without_a_certificate_is_refused_when_one_is_required(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                        ca: CertificateAuthority) -> None:
    server = ca.issue("proxy", "proxy", server=True)
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca, client_auth="required"))
    context = ssl.create_default_context(cafile=str(ca.cafile))
    assert_refused(proxy.port, context)
    # the same proxy serves a client that has one
    holder = ca.issue("holder", "Holder", unit="eng")
    context.load_cert_chain(holder.certfile, holder.keyfile)
    with (socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as raw,
          context.wrap_socket(raw, server_hostname="127.0.0.1") as sock):
        sock.sendall(encode_request(Api.API_VERSIONS, 0))
        assert read_frame(sock)


def test_upstream_tls_to_apache_kafkas_own_ssl_listener_with_either_kind_of_client_listener(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, ca: CertificateAuthority, topic: str) -> None:
    """The proxy speaks TLS to Kafka's SSL listener, and to the brokers that listener's Metadata names (their SSL
    ports): records go through with the clients in plaintext to the proxy, and with TLS to it too."""
    if broker.ssl_bootstrap is None or broker.ssl_cafile is None:
        pytest.skip("the cluster has no SSL listener")
    upstream_tls = f'[upstream-tls]\ncafile = "{broker.ssl_cafile}"\n'
    (tmp_path / "upstream.toml").write_text(upstream_tls)
    plain_front = own_proxy("--config", str(tmp_path / "upstream.toml"), upstream=broker.ssl_bootstrap)
    round_trip_librdkafka(plain_front.bootstrap, topic, {})
    round_trip_kafka_python(plain_front.bootstrap, f"{topic}-k", {})
    tls_front = own_proxy(*tls_config(tmp_path / "both.toml", ca.issue("proxy", "proxy", server=True), ca,
                                      extra=upstream_tls), upstream=broker.ssl_bootstrap)
    round_trip_librdkafka(tls_front.bootstrap, f"{topic}-t", {"security.protocol": "SSL",
                                                              "ssl.ca.location": str(ca.cafile)})
    assert metrics(tls_front)['kafka_quota_proxy_requests_total{api="Produce"}'] >= 1

    untrusting = tmp_path / "untrusting.toml"
    untrusting.write_text(f'[upstream-tls]\ncafile = "{ca.cafile}"\n')  # not the CA that signed Kafka's
    refused = own_proxy("--config", str(untrusting), upstream=broker.ssl_bootstrap)
    with socket.create_connection(("127.0.0.1", refused.port), timeout=30) as sock:
        sock.sendall(encode_request(Api.METADATA, 1, topics=None))
        # closed: the cluster's certificate is not trusted (the proxy reads nothing while it connects
        # upstream, so the Metadata left unread can make the close a reset)
        assert closed_by_peer(sock)
    assert "certificate verify failed" in refused.wait_for_log("upstream unreachable")


def test_certificates_are_reread_when_their_files_change(own_proxy, tmp_path: Path, ca: CertificateAuthority,  # type: ignore[no-untyped-def]
                                                         topic: str) -> None:
    first = ca.issue("proxy", "proxy", server=True)
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", first, ca))
    renewed_ca = CertificateAuthority(tmp_path / "renewed-pki", "renewed-ca")
    renewed = renewed_ca.issue("renewed", "proxy", server=True)
    assert_refused(proxy.port, ssl.create_default_context(cafile=str(renewed_ca.cafile)))
    shutil.copy(renewed.keyfile, first.keyfile)
    shutil.copy(renewed.certfile, first.certfile)
    # the proxy looks at its files again at the first connection a second (its clock) after the last look, the
    # refused one above: this wait is on the same clock, so a loaded machine cannot make it short
    time.sleep(1.5)
    round_trip_kafka_python(proxy.bootstrap, topic, kafka_python_ssl(renewed_ca))
    assert "reloaded the listener certificates" in proxy.log()


def test_the_quotas_command_over_mtls_as_an_admin_principal(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            ca: CertificateAuthority) -> None:
    server = ca.issue("proxy", "proxy", server=True)
    proxy = own_proxy(*tls_config(tmp_path / "proxy.toml", server, ca, client_auth="required",
                                  extra='[admin]\nprincipals = ["User:ops"]'))
    ops = ca.issue("ops", "Ops", unit="platform")
    dev = ca.issue("dev", "Dev", unit="apps")

    def quotas(client: Issued, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*proxy_command(), "quotas", *args, "--bootstrap-server", proxy.bootstrap,
                               "--ssl-cafile", str(ca.cafile), "--ssl-certfile", str(client.certfile),
                               "--ssl-keyfile", str(client.keyfile)], capture_output=True, text=True, timeout=60)

    altered = quotas(ops, "alter", "--entity-type", "users", "--entity-name", "dev", "--add-config",
                     "producer_byte_rate=1000")
    assert altered.returncode == 0, altered.stderr
    refused = quotas(dev, "alter", "--entity-type", "users", "--entity-name", "dev", "--delete-config",
                     "producer_byte_rate")
    assert refused.returncode == 1 and "error 31" in refused.stderr
    assert quotas(ops, "describe", "--entity-type", "users", "--entity-name", "dev").stdout.strip() == \
        "Quota configs for user-principal 'dev' are producer_byte_rate=1000"


def test_a_certificate_no_rule_maps_is_closed(own_proxy, tmp_path: Path, ca: CertificateAuthority) -> None:  # type: ignore[no-untyped-def]
    server = ca.issue("proxy", "proxy", server=True)
    config = tmp_path / "proxy.toml"
    config.write_text(f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\ncafile = "{ca.cafile}"\n'
                      'client-auth = "required"\nprincipal-mapping-rules = "RULE:^CN=(.*?),OU=eng,.*$/$1/"\n')
    proxy = own_proxy("--config", str(config))
    for holder, served in ((ca.issue("eng", "Erin", unit="eng"), True), (ca.issue("apps", "Abe", unit="apps"), False)):
        context = ssl.create_default_context(cafile=str(ca.cafile))
        context.load_cert_chain(holder.certfile, holder.keyfile)
        with (socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as raw,
              context.wrap_socket(raw, server_hostname="127.0.0.1") as sock):
            sock.sendall(encode_request(Api.API_VERSIONS, 0))
            assert bool(read_frame(sock)) is served
    assert "no principal mapping rule applies to CN=Abe,OU=apps,O=Acme,C=US" in proxy.log()
