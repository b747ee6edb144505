"""The cluster under the integration tests and proxies in front of it.

Without ``KAFKA_BOOTSTRAP`` an Apache Kafka node (KRaft, broker and controller) is started for the
session, with a SASL_PLAINTEXT listener for the users of ``tests.support.PASSWORDS`` (and delegation tokens) and an
SSL listener (a certificate of a CA made for the session); the tests that need several brokers share a cluster of
three, started the first time one asks for it. With ``KAFKA_BOOTSTRAP=host:port[,host:port] make test-cluster``
the tests run against that cluster (``KAFKA_SASL_BOOTSTRAP`` names its SASL listener, if it has one with those
users; the tests of Kafka's own SSL listener are skipped). Tests that stop, kill or pause brokers, or put a proxy
between brokers and their controller, start clusters of their own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.dev.apache_kafka import KafkaCluster, SslCertificate
from tests.certificates import CertificateAuthority
from tests.cluster_state import cluster_state, leave_as_found
from tests.support import CLUSTER_USERS, Cluster, ProxyProcess


def _launched(brokers: int, log_directory: Path, **properties: str) -> Iterator[Cluster]:
    authority = CertificateAuthority(log_directory / "pki", "kafka-ca")
    issued = authority.issue("kafka", "kafka", server=True)
    with KafkaCluster(brokers, users=CLUSTER_USERS, log_directory=log_directory, extra_properties=properties,
                      ssl=SslCertificate(issued.certfile, issued.keyfile)) as kafka:
        yield Cluster(kafka.bootstrap, kafka.sasl_bootstrap, started_here=True, ssl_bootstrap=kafka.ssl_bootstrap,
                      ssl_cafile=authority.cafile).wait_until_ready()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield Cluster(external, os.environ.get("KAFKA_SASL_BOOTSTRAP")).wait_until_ready()
        return
    # delegation tokens on: logins with Kafka's own tokens through an inspecting proxy (test_sasl_inspect)
    yield from _launched(1, tmp_path_factory.mktemp("kafka"), **{"delegation.token.secret.key": uuid.uuid4().hex})


@pytest.fixture(scope="session")
def three_brokers(broker: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster of three brokers: ``broker`` itself when it has three or more, else one started here,
    whose ``num.partitions`` is 3, not Kafka's default of 1 (so a test can tell the count a cluster chose
    from a fallback of 1)."""
    if len(broker.node_ids) >= 3:
        yield broker
        return
    yield from _launched(3, tmp_path_factory.mktemp("kafka-three"), **{"num.partitions": "3"})


@pytest.fixture(scope="session")
def proxy(broker: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """One proxy shared by the tests that only need a working pass-through."""
    running = ProxyProcess(broker.bootstrap, tmp_path_factory.mktemp("proxy") / "proxy.log",
                           node_ids=broker.node_ids).start()
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def own_proxy(broker: Cluster, tmp_path: Path) -> Iterator[object]:
    """Factory for a dedicated proxy with extra flags, stopped after the test. ``upstream`` and
    ``cluster`` put it in front of another cluster or listener."""
    started: list[ProxyProcess] = []

    def start(*extra_args: str, upstream: str | None = None, cluster: Cluster | None = None) -> ProxyProcess:
        cluster = cluster or broker
        process = ProxyProcess(upstream or cluster.bootstrap, tmp_path / f"proxy{len(started)}.log", *extra_args,
                               node_ids=cluster.node_ids)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def shared_clusters_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """The session's clusters, as this test found them, for the next test (``tests.cluster_state``); torn
    down after the test's own fixtures, its proxies among them. Not ``KAFKA_BOOTSTRAP``'s cluster: others may
    change it meanwhile, and nothing the tests did not make is theirs to delete or put back."""
    shared = {id(cluster): cluster for cluster in (request.getfixturevalue(name) for name in ("broker", "three_brokers")
                                                     if name in request.fixturenames) if cluster.started_here}
    found = [(cluster, cluster_state(cluster)) for cluster in shared.values()]
    yield
    left = [what for cluster, state in found for what in leave_as_found(cluster, state)]
    if left:
        pytest.fail("the test left client quotas on the shared cluster (put back now): " + "; ".join(left))
