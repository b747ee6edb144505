"""The proxy's own Prometheus metrics and the /metrics HTTP endpoint."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import cache

from kafka.protocol.api_key import ApiKey
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.connections = Gauge("kafka_proxy_client_connections", "Open client connections",
                                 registry=registry)
        self.connections_total = Counter("kafka_proxy_client_connections_accepted", "Client connections accepted",
                                         registry=registry)
        self.bytes_from_clients = Counter("kafka_proxy_bytes_in", "Bytes received from clients",
                                          registry=registry)
        self.bytes_to_clients = Counter("kafka_proxy_bytes_out",
                                        "Bytes received from upstream for clients", registry=registry)
        self.upstream_connect_failures = Counter("kafka_proxy_upstream_connect_failures",
                                                 "Upstream connections that could not be opened",
                                                 registry=registry)
        self.closed_for_bad_input = Counter("kafka_proxy_connections_closed_bad_input",
                                            "Connections closed because of malformed frames",
                                            registry=registry)
        self._requests = Counter("kafka_proxy_requests", "Requests received, by api",
                                 ["api"], registry=registry)
        self.requests_by_api: Callable[[int], Counter] = cache(
            lambda api_key: self._requests.labels(api=_api_name(api_key)))


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """A minimal HTTP/1.0 server for GET /metrics (scrapes are rare; one request per connection)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request_line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = request_line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                body = generate_latest(registry)
                status, content_type = "200 OK", CONTENT_TYPE_LATEST
            else:
                body, status, content_type = b"not found; try /metrics\n", "404 Not Found", "text/plain"
            writer.write(f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (OSError, TimeoutError, UnicodeDecodeError) as error:
            log.debug("metrics request failed: %s", error)
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
