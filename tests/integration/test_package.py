"""The package as a user installs it: the sdist and the wheel built from the checkout (``python -m build``, the
wheel from the sdist, so the sdist is known to be whole), the wheel installed into a new virtual environment that
cannot see the checkout, and its ``kafka-quota-proxy`` started in front of Apache Kafka: records produced and
consumed through it, with librdkafka."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import proxy
from tests.support import Cluster, ProxyProcess

pytestmark = pytest.mark.integration
CHECKOUT = Path(__file__).resolve().parents[2]
SCHEMAS = "protocol/schemas/"
"""Data files the proxy reads at run time: a wheel without them starts and fails on the first request."""


def _run(*command: str | Path, cwd: Path, timeout_s: float = 300) -> str:
    """``command``'s output, with an environment that names nothing of the checkout's (its virtual environment,
    a PYTHONPATH): what runs finds only what was installed."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a new virtual environment holding the wheel built from this checkout."""
    scratch = tmp_path_factory.mktemp("package")
    dist = scratch / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, CHECKOUT, cwd=scratch)  # the wheel built from the sdist
    version = proxy.__version__
    sdist, wheel = dist / f"kafka_quota_proxy-{version}.tar.gz", dist / f"kafka_quota_proxy-{version}-py3-none-any.whl"
    assert sdist.exists() and wheel.exists(), sorted(path.name for path in dist.iterdir())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.partition("/")[2] for name in archive.getnames()}
    assert {"README.md", "pyproject.toml", "proxy/__init__.py", f"{SCHEMAS}AllocateProducerIdsRequest.json"} <= in_sdist
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    assert any(name.startswith(SCHEMAS) and name.endswith(".json") for name in in_wheel), "no schemas in the wheel"
    assert not any(name.startswith(("tests/", "bench/")) for name in in_wheel), "tests or benchmarks in the wheel"
    environment = scratch / "venv"
    venv.create(environment, with_pip=True)
    _run(environment / "bin" / "pip", "install", "--quiet", wheel, cwd=scratch)
    return environment / "bin"


def test_the_wheel_installs_and_reports_its_version(installed: Path, tmp_path: Path) -> None:
    assert _run(installed / "kafka-quota-proxy", "--version", cwd=tmp_path).strip() == \
        f"kafka-quota-proxy {proxy.__version__}"
    where = _run(installed / "python", "-c", "import proxy, protocol; print(proxy.__file__, protocol.__file__)",
                 cwd=tmp_path)
    assert all(Path(path).is_relative_to(installed.parent) for path in where.split()), where


def test_the_installed_proxy_serves_a_producer_and_a_consumer(installed: Path, broker: Cluster, tmp_path: Path,
                                                             topic: str) -> None:
    running = ProxyProcess(broker.bootstrap, tmp_path / "proxy.log", node_ids=broker.node_ids,
                           command=[str(installed / "kafka-quota-proxy")])
    running.start()
    try:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": running.bootstrap, "acks": "all"})
        delivered: list[object] = []
        values = [f"from the wheel {number}".encode() for number in range(100)]
        for value in values:
            producer.produce(topic, value, partition=0, on_delivery=lambda error, _: delivered.append(error))
        assert producer.flush(30) == 0 and delivered == [None] * len(values)
        consumer = Consumer({"bootstrap.servers": running.bootstrap, "group.id": f"g-{topic}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        received: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(received) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
        consumer.close()
        assert received == values
    finally:
        assert running.stop() == 0, running.log()
