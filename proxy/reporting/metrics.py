"""The proxy's own Prometheus metrics and the /metrics HTTP endpoint.

Per-request counts are plain integers on the hot path, exported by a collector at scrape time:
a prometheus-client ``Counter.inc`` takes a lock, which per request costs more than the
forwarding itself.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import socket
import ssl
import urllib.parse
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

from kafka.protocol.api_key import ApiKey
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from allocator.durable import WriteErrors
from quotas.config import ANONYMOUS, QuotaConfigError
from quotas.explain import Client, parse_client

log = logging.getLogger(__name__)

_API_NAMES = {int(key): key.name for key in ApiKey}
_MAX_API_KEY = max(_API_NAMES)
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds of the request latency histogram (seconds, from request read to response sent)."""


BUSIEST_IPS = 100
"""Connections per IP are exported for this many IPs, those with the most: a series per IP would not be bounded."""


class Observations:
    """One Prometheus histogram's counts per bucket, kept as plain numbers (observed on the hot path)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative, as ``HistogramMetricFamily`` takes them, ending with +Inf."""
        return list(zip((*map(str, self.bounds), "+Inf"), accumulate(self.counts), strict=True))


class ListenerCounts:
    """What a listener's acceptor did with the connections it took (Kafka's ConnectionQuotas outcomes)."""

    __slots__ = ("accepted", "refused", "throttled", "delayed")

    def __init__(self) -> None:
        self.accepted = 0
        self.refused = 0
        """Closed at once: the IP had its maximum of connections."""
        self.throttled = 0
        """Closed after a delay: over the IP's connection creation rate."""
        self.delayed = 0
        """Accepted only after the acceptor waited (creation rate or max-connections)."""


class ProxyMetrics(Collector):
    """Counters of the transport layer: connections, bytes and requests by api."""

    def __init__(self, registry: CollectorRegistry, write_errors: WriteErrors | None = None) -> None:
        self.registry = registry
        self._write_errors = write_errors or WriteErrors()
        self.open_connections = 0
        self.connections_accepted = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_spliced = 0
        """Bytes of ``bytes_in`` that went upstream inside the kernel (``splice``), never read by the proxy."""
        self.bytes_spliced_out = 0
        """Bytes of ``bytes_out`` that came from the cluster inside the kernel (``splice``)."""
        self.upstream_connect_failures = 0
        self.upstream_request_timeouts = 0
        self.closed_for_bad_input = 0
        self.muted_connections = 0
        self.buffer_share_bytes = 0
        """Unsent bytes each side of a connection may hold now (``ProxyServer._share_buffers``)."""
        self._listeners: dict[str, ListenerCounts] = {}
        self._logins: dict[tuple[str, str], int] = {}
        self.busiest_ips: Callable[[int], list[tuple[str, int]]] = lambda limit: []
        """Open connections of the IPs with the most, most first (set by the server)."""
        self.requests_by_api = [0] * (_MAX_API_KEY + 1)
        """Indexed by api key; keys outside Kafka's known set close the connection first."""
        self._latency: dict[int, Observations] = {}
        registry.register(self)
        # the process's CPU seconds and memory beside its bytes: what sizing a proxy (or a worker) needs
        ProcessCollector(registry=registry)

    def login_ended(self, mechanism: str, succeeded: bool) -> None:
        key = (mechanism, "succeeded" if succeeded else "failed")
        self._logins[key] = self._logins.get(key, 0) + 1

    def listener_counts(self, listener: str) -> ListenerCounts:
        return self._listeners.setdefault(listener, ListenerCounts())

    def _connection_metrics(self) -> Iterator[Metric]:
        outcomes = CounterMetricFamily("kafka_quota_proxy_listener_connections",
                                       "Connections taken by a listener's acceptor, by outcome: accepted, refused "
                                       "(the IP's maximum), throttled (the IP's creation rate: closed after a "
                                       "delay), delayed (accepted after waiting for the creation rate or "
                                       "max-connections)", labels=["listener", "outcome"])
        for listener, counts in sorted(self._listeners.items()):
            for outcome in ListenerCounts.__slots__:
                outcomes.add_metric([listener, outcome], getattr(counts, outcome))
        yield outcomes
        per_ip = GaugeMetricFamily("kafka_quota_proxy_client_connections_per_ip",
                                   f"Open client connections of the {BUSIEST_IPS} IPs with the most", labels=["ip"])
        for ip, count in self.busiest_ips(BUSIEST_IPS):
            per_ip.add_metric([ip], count)
        yield per_ip
        logins = CounterMetricFamily("kafka_quota_proxy_sasl_logins", "SASL logins by mechanism and outcome "
                                     "(succeeded, failed); with sasl-mode inspect, as the cluster answered them",
                                     labels=["mechanism", "outcome"])
        for (mechanism, outcome), count in sorted(self._logins.items()):
            logins.add_metric([mechanism, outcome], count)
        yield logins

    def observe_latency(self, api_key: int, seconds: float) -> None:
        observations = self._latency.get(api_key)
        if observations is None:
            observations = self._latency[api_key] = Observations(LATENCY_BUCKETS_S)
        observations.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_quota_proxy_client_connections", "Open client connections",
                                value=self.open_connections)
        yield from self._connection_metrics()
        yield GaugeMetricFamily("kafka_quota_proxy_muted_connections", "Client connections muted for a quota throttle",
                                value=self.muted_connections)
        yield GaugeMetricFamily("kafka_quota_proxy_connection_buffer_bytes",
                                "Unsent bytes each side of a connection may hold: write-buffer-high-bytes or an "
                                "equal share of max-buffered-bytes, whichever is smaller",
                                value=self.buffer_share_bytes)
        simple = (
            ("kafka_quota_proxy_client_connections_accepted", "Client connections accepted", self.connections_accepted),
            ("kafka_quota_proxy_client_received_bytes", "Bytes received from clients", self.bytes_in),
            ("kafka_quota_proxy_client_sent_bytes", "Bytes sent to clients", self.bytes_out),
            ("kafka_quota_proxy_client_received_spliced_bytes", "Bytes received from clients that went upstream "
             "inside the kernel (splice), never read by the proxy", self.bytes_spliced),
            ("kafka_quota_proxy_client_sent_spliced_bytes", "Bytes sent to clients that came from the cluster "
             "inside the kernel (splice), never read by the proxy", self.bytes_spliced_out),
            ("kafka_quota_proxy_upstream_connect_failures", "Upstream connections that could not be opened",
             self.upstream_connect_failures),
            ("kafka_quota_proxy_upstream_request_timeouts", "Connections closed because the cluster did not answer a "
             "request within request-timeout-seconds", self.upstream_request_timeouts),
            ("kafka_quota_proxy_connections_closed_bad_input", "Connections closed for malformed or truncated frames",
             self.closed_for_bad_input),
        )
        for name, documentation, value in simple:
            yield CounterMetricFamily(name, documentation, value=value)
        requests = CounterMetricFamily("kafka_quota_proxy_requests", "Requests received, by api", labels=["api"])
        for api_key, count in enumerate(self.requests_by_api):
            if count:
                requests.add_metric([_API_NAMES.get(api_key, str(api_key))], count)
        yield requests
        latency = HistogramMetricFamily("kafka_quota_proxy_request_latency_seconds",
                                        "From a request's last byte read to its response written, by api",
                                        labels=["api"])
        for api_key, observations in sorted(self._latency.items()):
            latency.add_metric([_API_NAMES.get(api_key, str(api_key))], observations.buckets(), observations.sum)
        yield latency
        write_errors = CounterMetricFamily("kafka_quota_proxy_state_write_errors",
                                           "Failed writes of durable state (full disk, I/O error), by store; "
                                           "the store keeps what it could not write and tries again",
                                           labels=["store"])
        for store, count in sorted(self._write_errors.counts.items()):
            write_errors.add_metric([store], count)
        yield write_errors


class _Collected:
    """Metric families collected on the event loop, rendered to text in a thread (a large page would stall
    every connection while it is formatted; the live state is only read on the loop)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


_MAX_HEADER_LINES = 100


class _WorkerLabelled(Collector):
    def __init__(self, registry: CollectorRegistry, worker: int) -> None:
        self._registry = registry
        self._worker = str(worker)

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [sample._replace(labels={**sample.labels, "worker": self._worker})
                              for sample in metric.samples]
            yield metric


def worker_labelled(registry: CollectorRegistry, worker: int) -> CollectorRegistry:
    """``registry`` with ``worker="N"`` on every sample: one endpoint per worker, Prometheus-style."""
    labelled = CollectorRegistry(auto_describe=False)
    labelled.register(_WorkerLabelled(registry, worker))
    return labelled


Explainer = Callable[[Client], dict[str, object]]
"""The quotas that apply to a client, with their current rates, and its tenant (``QuotaService.explain``)."""
_EXPLAIN_PARAMETERS = {"user", "client_id", "ip", "topic"}


def _explained(explainer: Explainer, query: str) -> tuple[str, bytes]:
    """(status, JSON body) of ``GET /quotas/explain?user=U&client_id=C&ip=A&topic=T``."""
    try:
        parameters = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                                           max_num_fields=len(_EXPLAIN_PARAMETERS))
        unknown = set(parameters) - _EXPLAIN_PARAMETERS
        repeated = [name for name, values in parameters.items() if len(values) > 1]
        if unknown or repeated:
            raise QuotaConfigError(f"unknown or repeated parameter(s) {', '.join(sorted({*unknown, *repeated}))}; "
                                   f"known: {', '.join(sorted(_EXPLAIN_PARAMETERS))}")
        given = {name: values[0] for name, values in parameters.items()}
        who = parse_client(given.get("user", ANONYMOUS), given.get("client_id", ""), given.get("ip"),
                           given.get("topic"))
    except (QuotaConfigError, ValueError) as error:
        return "400 Bad Request", json.dumps({"error": str(error)}).encode() + b"\n"
    answer = {"user": who.user, "client_id": who.client_id, "ip": who.ip, "topic": who.topic, **explainer(who)}
    return "200 OK", json.dumps(answer, indent=1).encode() + b"\n"


async def serve_metrics(registry: CollectorRegistry, sock: socket.socket, credentials: str | None = None,
                        tls: ssl.SSLContext | None = None, explainer: Explainer | None = None) -> asyncio.Server:
    """A minimal HTTP/1.0 server on ``sock`` (from ``metrics_socket``) for GET /metrics and GET /quotas/explain
    (rare requests; one per connection).

    ``credentials`` (``user:password``), when given, are required as HTTP basic authentication for both.
    """
    expected = None if credentials is None else "Basic " + base64.b64encode(credentials.encode()).decode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request_line = await reader.readline()
                authorization = ""
                for _ in range(_MAX_HEADER_LINES):
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "authorization":
                        authorization = value.strip()
            parts = request_line.decode("latin-1").split()
            path, _, query = parts[1].partition("?") if len(parts) >= 2 and parts[0] == "GET" else ("", "", "")
            headers = ""
            if expected is not None and not hmac.compare_digest(authorization.encode(), expected.encode()):
                body, status, content_type = b"unauthorized\n", "401 Unauthorized", "text/plain"
                headers = 'WWW-Authenticate: Basic realm="metrics"\r\n'
            elif path == "/metrics":
                body = await asyncio.to_thread(generate_latest, _Collected(list(registry.collect())))  # type: ignore[arg-type]
                status, content_type = "200 OK", CONTENT_TYPE_LATEST
            elif path == "/quotas/explain" and explainer is not None:
                (status, body), content_type = _explained(explainer, query), "application/json"
            else:
                body, status, content_type = b"not found; try /metrics\n", "404 Not Found", "text/plain"
            writer.write(f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n{headers}"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (OSError, TimeoutError, UnicodeDecodeError) as error:
            log.debug("metrics request failed: %s", error)
        finally:
            writer.close()

    return await asyncio.start_server(handle, sock=sock, ssl=tls)
