"""Rewriting every broker address a client can learn from a response.

Metadata, FindCoordinator (single and v4+ list), DescribeCluster, and the KIP-951
``NodeEndpoints`` of Produce v10+ and Fetch v16+ responses name brokers by host and port. The
proxy replaces each with its own listener for that node id, so clients never leave the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response


class BrokerAddress(NamedTuple):
    node_id: int
    host: str
    port: int


Advertise = Callable[[BrokerAddress], tuple[str, int]]
"""Maps an upstream broker to the (host, port) the proxy serves it on."""

# api key -> first version whose response carries broker addresses
_FIRST_VERSION_WITH_ADDRESSES: dict[int, int] = {
    Api.METADATA: 0,
    Api.FIND_COORDINATOR: 0,
    Api.DESCRIBE_CLUSTER: 0,
    Api.PRODUCE: 10,
    Api.FETCH: 16,
}
ADDRESS_BEARING_APIS = frozenset(_FIRST_VERSION_WITH_ADDRESSES)


def carries_addresses(api_key: int, api_version: int) -> bool:
    first = _FIRST_VERSION_WITH_ADDRESSES.get(api_key)
    return first is not None and api_version >= first


def _rewrite(entry: Any, node_id: int, advertise: Advertise) -> None:
    entry.host, entry.port = advertise(BrokerAddress(node_id, entry.host, entry.port))


def _rewrite_brokers(message: Any, advertise: Advertise) -> bool:
    for broker in message.brokers:
        _rewrite(broker, broker.node_id, advertise)
    return True


def _rewrite_described_cluster(message: Any, advertise: Advertise) -> bool:
    for broker in message.brokers:
        _rewrite(broker, broker.broker_id, advertise)
    return True


def _rewrite_coordinators(message: Any, advertise: Advertise) -> bool:
    if message.version >= 4:
        live = [c for c in message.coordinators if c.node_id >= 0]
        for coordinator in live:
            _rewrite(coordinator, coordinator.node_id, advertise)
        return bool(live)
    if message.node_id < 0:
        return False
    _rewrite(message, message.node_id, advertise)
    return True


def _rewrite_node_endpoints(message: Any, advertise: Advertise) -> bool:
    for endpoint in message.node_endpoints or ():  # a tagged field: absent, it reads as None
        _rewrite(endpoint, endpoint.node_id, advertise)
    return bool(message.node_endpoints)


_REWRITERS: dict[int, Callable[[Any, Advertise], bool]] = {
    Api.METADATA: _rewrite_brokers,
    Api.FIND_COORDINATOR: _rewrite_coordinators,
    Api.DESCRIBE_CLUSTER: _rewrite_described_cluster,
    Api.PRODUCE: _rewrite_node_endpoints,
    Api.FETCH: _rewrite_node_endpoints,
}


def rewrite_broker_addresses(api_key: int, api_version: int, body: bytes | memoryview,
                             advertise: Advertise) -> bytes | None:
    """The response body with every broker address replaced, or None when it names no broker.

    ``advertise`` is called once per broker before anything is returned, so the caller can
    open a listener for a broker it sees for the first time.
    """
    message = decode_response(api_key, api_version, body)
    if not _REWRITERS[api_key](message, advertise):
        return None
    return encode_response(api_key, api_version, message)
