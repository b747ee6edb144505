"""The cluster under the integration tests and proxies in front of it.

Without ``KAFKA_BOOTSTRAP`` a Tansu broker is started for the session; with it
(``KAFKA_BOOTSTRAP=host:port[,host:port] make test-cluster``) the tests run against that cluster,
e.g. Apache Kafka from docker-compose.yml. Each test checks what the cluster can show (from its
ApiVersions and answers), not which broker it is.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded_broker import EmbeddedBroker
from tests.support import Cluster, ProxyProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield Cluster(external).wait_until_ready()
        return
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as running:
        yield Cluster(running.bootstrap).wait_until_ready()


@pytest.fixture(scope="session")
def proxy(broker: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """One proxy shared by the tests that only need a working pass-through."""
    running = ProxyProcess(broker.bootstrap, tmp_path_factory.mktemp("proxy") / "proxy.log",
                           node_ids=broker.node_ids).start()
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def own_proxy(broker: Cluster, tmp_path: Path) -> Iterator[object]:
    """Factory for a dedicated proxy with extra flags, stopped after the test."""
    started: list[ProxyProcess] = []

    def start(*extra_args: str, upstream: str | None = None) -> ProxyProcess:
        process = ProxyProcess(upstream or broker.bootstrap, tmp_path / f"proxy{len(started)}.log", *extra_args,
                               node_ids=broker.node_ids)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
