"""/metrics stays bounded whatever clients send, and can require basic authentication and TLS."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.certificates import CertificateAuthority
from tests.support import (
    Cluster,
    ProxyProcess,
    connect_to_leader,
    create_topic_on_one_broker,
    produce_request,
    read_frame,
    record_batch,
)

pytestmark = pytest.mark.integration
CLIENT_IDS = 20_000


def scrape(url: str, context: ssl.SSLContext | None = None, authorization: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": authorization} if authorization else {})
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return bytes(response.read())


def default_client_quota(directory: Path) -> tuple[str, str]:
    """Proxy flags: a ``<default>`` client-id produce quota never reached, so each client id gets its own rate."""
    quota_file = directory / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "<default>"\nproducer_byte_rate = 100000000\n')
    return "--quota-file", str(quota_file)


def produce_as_many_client_ids(proxy: ProxyProcess, cluster: Cluster, topic: str) -> None:
    """One record from each of ``CLIENT_IDS`` client ids, pipelined on one connection."""
    create_topic_on_one_broker(cluster, topic)
    batch = record_batch([b"x"])
    with connect_to_leader(proxy, topic) as sock:
        frames = [produce_request(topic, batch, correlation_id=n, acks=1, client_id=f"client-{n}")
                  for n in range(CLIENT_IDS)]
        sock.sendall(b"".join(frames))
        for _ in range(CLIENT_IDS):
            assert read_frame(sock)


def test_twenty_thousand_client_ids_make_a_bounded_page(own_proxy, broker: Cluster, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        topic: str) -> None:
    """Bounded in size; how long a scrape of it takes is a figure of ``make bench`` (``bench/latency_aims.py``)."""
    proxy: ProxyProcess = own_proxy(*default_client_quota(tmp_path))
    produce_as_many_client_ids(proxy, broker, topic)
    page = scrape(f"http://127.0.0.1:{proxy.metrics_port}/metrics")
    rates = [line for line in page.splitlines() if line.startswith(b"kafka_quota_proxy_produce_byte_rate{")]
    assert len(rates) == 1001 and any(b'client_id="<others>"' in line for line in rates)
    assert len(page) < 2_000_000, len(page)


def test_basic_authentication_and_tls(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("metrics", "metrics", server=True)
    config = tmp_path / "proxy.toml"
    config.write_text(f'[metrics]\nusername = "prometheus"\npassword = "scrape-secret"\n'
                      f'certfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\n')
    proxy: ProxyProcess = own_proxy("--config", str(config))
    url = f"https://127.0.0.1:{proxy.metrics_port}/metrics"
    context = ssl.create_default_context(cafile=str(ca.cafile))
    good = "Basic " + base64.b64encode(b"prometheus:scrape-secret").decode()
    assert b"kafka_quota_proxy_client_connections" in scrape(url, context, good)
    for authorization in (None, "Basic " + base64.b64encode(b"prometheus:guess").decode()):
        with pytest.raises(urllib.error.HTTPError, match="401"):
            scrape(url, context, authorization)
    with pytest.raises(OSError):  # plain HTTP to the TLS endpoint
        scrape(f"http://127.0.0.1:{proxy.metrics_port}/metrics", authorization=good)
    explain = f"https://127.0.0.1:{proxy.metrics_port}/quotas/explain?user=alice"  # protected as /metrics is
    assert json.loads(scrape(explain, context, good))["user"] == "alice"
    with pytest.raises(urllib.error.HTTPError, match="401"):
        scrape(explain, context, None)


METRIC_PREFIX = "kafka_quota_proxy_"
UNIT_SUFFIXES = ("_bytes", "_seconds", "_ms", "_rate", "_ratio", "_per_hour")
"""What a quantity's name ends with (before ``_total``): Prometheus's base units, and Kafka's own where a client sees
the same figure (``throttle_time_ms``, ``producer_byte_rate``); a count needs none."""


def test_every_metric_has_the_one_prefix_and_says_its_unit(own_proxy, broker: Cluster, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           topic: str) -> None:
    """Every family a proxy with every quota kind, a fleet and durable state exposes: one prefix, counters'
    names ending in ``_total``, quantities naming their unit."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\n' + "".join(f"{key} = 1000000\n" for key in (
        "producer_byte_rate", "consumer_byte_rate", "request_rate", "controller_mutation_rate", "producer_ids_rate",
        "connection_creation_rate")) + '[[quota]]\ntopic = "<default>"\nproducer_byte_rate = 1000000\n'
        '[[quota]]\nip = "<default>"\nconnection_creation_rate = 1000\n')
    config = tmp_path / "fleet.toml"
    config.write_text(f'[fleet]\ntopic = "usage-{topic}"\nquotas-topic = "quotas-{topic}"\n')
    proxy: ProxyProcess = own_proxy("--quota-file", str(quota_file), "--config", str(config))
    create_topic_on_one_broker(broker, topic)
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(produce_request(topic, record_batch([b"x"]), acks=1))
        assert read_frame(sock)
    page = scrape(f"http://127.0.0.1:{proxy.metrics_port}/metrics").decode()
    kinds = dict(line.split()[2:4] for line in page.splitlines() if line.startswith("# TYPE "))
    assert len(kinds) > 50, sorted(kinds)
    # the process collector's are the standard names every Prometheus client library gives
    assert [name for name in kinds if not name.startswith((METRIC_PREFIX, "process_"))] == []
    assert [name for name, kind in kinds.items() if kind == "counter" and not name.endswith("_total")] == []
    quantities = [name for name in kinds if {"bytes", "time", "latency", "age"} & set(name.split("_"))]
    assert [name for name in quantities if not name.removesuffix("_total").endswith(UNIT_SUFFIXES)] == []
