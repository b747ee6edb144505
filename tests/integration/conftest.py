from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded_broker import EmbeddedBroker
from tests.support import ProxyProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as running:
        yield running


@pytest.fixture(scope="session")
def proxy(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """One proxy shared by the tests that only need a working pass-through."""
    running = ProxyProcess(broker.bootstrap, tmp_path_factory.mktemp("proxy") / "proxy.log").start()
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def own_proxy(broker: EmbeddedBroker, tmp_path: Path) -> Iterator[object]:
    """Factory for a dedicated proxy with extra flags, stopped after the test."""
    started: list[ProxyProcess] = []

    def start(*extra_args: str, upstream: str | None = None) -> ProxyProcess:
        process = ProxyProcess(upstream or broker.bootstrap, tmp_path / f"proxy{len(started)}.log", *extra_args)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
