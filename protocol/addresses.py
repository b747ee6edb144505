"""Rewriting every broker address a client can learn from a response.

Metadata, FindCoordinator (single and v4+ list), DescribeCluster, and the KIP-951
``NodeEndpoints`` of Produce v10+ and Fetch v16+ responses name brokers by host and port. The
proxy replaces each with its own listener for that node id, so clients never leave the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any, NamedTuple

from protocol.apis import Api
from protocol.body_reader import BodyReader
from protocol.codecs import decode_response, encode_response
from protocol.errors import ProtocolError


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
    Api.SHARE_FETCH: 1,  # KIP-932: a share consumer follows these to a moved leader, whatever Metadata said
    Api.SHARE_ACKNOWLEDGE: 1,
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
    Api.SHARE_FETCH: _rewrite_node_endpoints,
    Api.SHARE_ACKNOWLEDGE: _rewrite_node_endpoints,
}


_FIRST_TOPIC_ID_PRODUCE_VERSION = 13
_PRODUCE_PARTITION_FIXED_BYTES = 4 + 2 + 8 + 8 + 8
"""index, error_code, base_offset, log_append_time_ms, log_start_offset (Produce v5 on)."""
_INT16 = Struct(">h")
_INT32 = Struct(">i")
_UUID_BYTES = 16


def may_name_brokers(api_key: int, api_version: int, body: bytes | memoryview) -> bool:
    """False when the response certainly names no broker: a Produce answer (v10 on) whose top-level tagged fields,
    where KIP-951's ``NodeEndpoints`` would be, are empty (Kafka adds them only when a partition's leader moved).
    Read without decoding: every Produce answer of a librdkafka client is one, and decoding it to find out costs time
    growing with its partitions (docs/benchmarks.md). ``body`` excludes the header."""
    if api_key != Api.PRODUCE or api_version < _FIRST_VERSION_WITH_ADDRESSES[Api.PRODUCE]:
        return True
    try:
        return _produce_answer_has_tagged_fields(body, api_version)
    except (IndexError, ValueError):
        raise ProtocolError("produce response unreadable", api_key=api_key, api_version=api_version) from None


def _produce_answer_has_tagged_fields(body: bytes | memoryview, version: int) -> bool:
    """Walk a Produce answer (v10 on, Kafka's ``ProduceResponse.json``) to its top-level tagged fields."""
    reader = BodyReader(body, flexible=True)
    for _ in range(reader.count(_INT32)):
        if version >= _FIRST_TOPIC_ID_PRODUCE_VERSION:
            reader.skip(_UUID_BYTES)
        else:
            reader.skip_string(_INT16)  # name
        for _ in range(reader.count(_INT32)):
            reader.skip(_PRODUCE_PARTITION_FIXED_BYTES)
            for _ in range(reader.count(_INT32)):  # record_errors
                reader.skip(_INT32.size)  # batch_index
                reader.skip_string(_INT16)  # batch_index_error_message
                reader.tagged_fields()
            reader.skip_string(_INT16)  # error_message
            reader.tagged_fields()  # current_leader, tag 0
        reader.tagged_fields()
    reader.skip(_INT32.size)  # throttle_time_ms
    return reader.uvarint() > 0 or reader.at != len(body)  # what is there, or a malformed rest, is for the decode


def rewrite_broker_addresses(api_key: int, api_version: int, body: bytes | memoryview,
                             advertise: Advertise) -> bytes | None:
    """The response body with every broker address replaced, or None when it names no broker.

    ``advertise`` is called once per broker before anything is returned, so the caller can
    open a listener for a broker it sees for the first time.
    """
    if not may_name_brokers(api_key, api_version, body):
        return None
    message = decode_response(api_key, api_version, body)
    if not _REWRITERS[api_key](message, advertise):
        return None
    return encode_response(api_key, api_version, message)
