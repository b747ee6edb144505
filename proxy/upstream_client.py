"""The proxy's own requests to the cluster (not on any client's behalf)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from protocol.addresses import BrokerAddress
from protocol.apis import Api, request_class, response_class
from protocol.errors import ProtocolError
from protocol.header import response_header_length
from proxy.config import HostPort

_METADATA_VERSION = 4  # non-flexible, answered by every broker from Kafka 1.0 to 4.x
_CLIENT_ID = "kafka-quota-proxy"
_correlation_ids = itertools.count(1)


async def request_once(target: HostPort, api_key: int, api_version: int, message: Any,
                       timeout_s: float, max_frame_bytes: int) -> Any:
    """Open a connection, send one request, return the decoded response."""
    request = request_class(api_key)[api_version](**message)
    request.with_header(correlation_id=next(_correlation_ids), client_id=_CLIENT_ID)
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            writer.write(request.encode(header=True, framed=True))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 4 <= size <= max_frame_bytes:
                raise ProtocolError(f"response frame size {size} out of range", api_key=api_key,
                                    api_version=api_version)
            frame = await reader.readexactly(size)
        finally:
            writer.close()
    flexible = request_class(api_key).flexible_version_q(api_version)
    body = memoryview(frame)[response_header_length(frame, flexible):]
    return response_class(api_key).decode(body, version=api_version)


async def fetch_brokers(bootstrap: tuple[HostPort, ...], timeout_s: float,
                        max_frame_bytes: int) -> list[BrokerAddress]:
    """Ask the bootstrap servers in turn for the cluster's brokers; raise the last error."""
    last_error: Exception = OSError("no upstream configured")
    for target in bootstrap:
        try:
            response = await request_once(target, Api.METADATA, _METADATA_VERSION,
                                          {"topics": [], "allow_auto_topic_creation": False},
                                          timeout_s, max_frame_bytes)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError) as error:
            last_error = error
            continue
        return [BrokerAddress(b.node_id, b.host, b.port) for b in response.brokers]
    raise last_error
