from __future__ import annotations

import contextlib
import uuid

import pytest

from protocol.addresses import BrokerAddress, carries_addresses, may_name_brokers, rewrite_broker_addresses
from protocol.api_versions import VersionRange, adapt_api_versions
from protocol.apis import response_class
from protocol.errors import ProtocolError

UPSTREAM = {1: ("kafka-1.internal", 9092), 2: ("kafka-2.internal", 9093)}


class Advertiser:
    def __init__(self) -> None:
        self.seen: list[BrokerAddress] = []

    def __call__(self, broker: BrokerAddress) -> tuple[str, int]:
        self.seen.append(broker)
        return "proxy.local", 20000 + broker.node_id


def encode(api_key: int, version: int, **fields: object) -> bytes:
    return bytes(response_class(api_key)[version](**fields).encode())


def decode(api_key: int, version: int, body: bytes):  # type: ignore[no-untyped-def]
    return response_class(api_key).decode(body, version=version)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_brokers_of_every_version(version: int) -> None:
    cls = response_class(3)
    brokers = [cls.MetadataResponseBroker(node_id=n, host=h, port=p, rack=None) for n, (h, p) in UPSTREAM.items()]
    body = encode(3, version, brokers=brokers, topics=[], controller_id=1, cluster_id="c")
    advertise = Advertiser()
    rewritten = rewrite_broker_addresses(3, version, body, advertise)
    assert rewritten is not None
    assert [(b.node_id, b.host, b.port) for b in decode(3, version, rewritten).brokers] == [
        (1, "proxy.local", 20001), (2, "proxy.local", 20002)]
    assert advertise.seen == [BrokerAddress(n, h, p) for n, (h, p) in UPSTREAM.items()]


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_single(version: int) -> None:
    body = encode(10, version, error_code=0, node_id=2, host="kafka-2.internal", port=9093)
    message = decode(10, version, rewrite_broker_addresses(10, version, body, Advertiser()))
    assert (message.node_id, message.host, message.port) == (2, "proxy.local", 20002)


def test_find_coordinator_error_is_left_alone() -> None:
    body = encode(10, 3, error_code=15, node_id=-1, host="", port=-1)
    advertise = Advertiser()
    assert rewrite_broker_addresses(10, 3, body, advertise) is None
    assert advertise.seen == []


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_list(version: int) -> None:
    cls = response_class(10)
    coordinators = [cls.Coordinator(key="group-a", node_id=1, host="kafka-1.internal", port=9092, error_code=0),
                    cls.Coordinator(key="group-b", node_id=-1, host="", port=-1, error_code=15)]
    body = encode(10, version, coordinators=coordinators)
    message = decode(10, version, rewrite_broker_addresses(10, version, body, Advertiser()))
    assert [(c.key, c.node_id, c.host, c.port) for c in message.coordinators] == [
        ("group-a", 1, "proxy.local", 20001), ("group-b", -1, "", -1)]


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(version: int) -> None:
    cls = response_class(60)
    brokers = [cls.DescribeClusterBroker(broker_id=n, host=h, port=p, rack=None) for n, (h, p) in UPSTREAM.items()]
    body = encode(60, version, error_code=0, cluster_id="c", controller_id=1, brokers=brokers)
    message = decode(60, version, rewrite_broker_addresses(60, version, body, Advertiser()))
    assert [(b.broker_id, b.host, b.port) for b in message.brokers] == [
        (1, "proxy.local", 20001), (2, "proxy.local", 20002)]


@pytest.mark.parametrize(("api_key", "versions"), [(0, range(10, 14)), (1, range(16, 19)), (78, range(1, 3)),
                                                   (79, range(1, 3))])
def test_kip_951_node_endpoints(api_key: int, versions: range) -> None:
    cls = response_class(api_key)
    for version in versions:
        empty = encode(api_key, version, responses=[], node_endpoints=[])
        assert rewrite_broker_addresses(api_key, version, empty, Advertiser()) is None
        endpoints = [cls.NodeEndpoint(node_id=1, host="kafka-1.internal", port=9092, rack=None)]
        body = encode(api_key, version, responses=[], node_endpoints=endpoints)
        message = decode(api_key, version, rewrite_broker_addresses(api_key, version, body, Advertiser()))
        assert [(e.node_id, e.host, e.port) for e in message.node_endpoints] == [(1, "proxy.local", 20001)]


def test_which_responses_carry_addresses() -> None:
    assert carries_addresses(3, 0) and carries_addresses(60, 1)
    assert not carries_addresses(0, 9) and carries_addresses(0, 10)
    assert not carries_addresses(1, 15) and carries_addresses(1, 16)
    assert not carries_addresses(19, 7)


def test_garbage_response_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="api_key=3, version=12"):
        rewrite_broker_addresses(3, 12, b"\x00\x00\x00\x00\x05\xff", Advertiser())


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_capped_to_what_the_proxy_parses(version: int) -> None:
    cls = response_class(18)
    apis = [cls.ApiVersion(api_key=0, min_version=0, max_version=99),
            cls.ApiVersion(api_key=1, min_version=4, max_version=17),
            cls.ApiVersion(api_key=50, min_version=0, max_version=7)]
    body = encode(18, version, error_code=0, api_keys=apis)
    capped = adapt_api_versions(body, version, {0: 13, 1: 18})
    assert capped is not None
    assert [(a.api_key, a.max_version) for a in decode(18, version, capped).api_keys] == [(0, 13), (1, 17), (50, 7)]
    assert adapt_api_versions(body, version, {1: 18}) is None


@pytest.mark.parametrize("version", [0, 3])
def test_api_versions_with_a_null_api_keys_array_is_a_protocol_error(version: int) -> None:
    """Found by test_fuzz: the adaptation iterated the null array (TypeError, logged as an internal error)."""
    body = b"\x00\x00\xff\xff\xff\xff" if version < 3 else b"\x00\x00\x00\x00\x00\x00\x00\x00"
    with pytest.raises(ProtocolError, match="null api_keys"):
        adapt_api_versions(body, version, {0: 13})


def test_api_versions_error_answer_is_v0() -> None:
    cls = response_class(18)
    body = encode(18, 0, error_code=35, api_keys=[cls.ApiVersion(api_key=0, min_version=0, max_version=99)])
    capped = adapt_api_versions(body, 3, {0: 13})
    assert capped is not None
    message = decode(18, 0, capped)
    assert message.error_code == 35
    assert [(a.api_key, a.max_version) for a in message.api_keys] == [(0, 13)]


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_list_the_apis_the_proxy_serves(version: int) -> None:
    cls = response_class(18)
    apis = [cls.ApiVersion(api_key=0, min_version=0, max_version=11),
            cls.ApiVersion(api_key=17, min_version=0, max_version=0)]
    body = encode(18, version, error_code=0, api_keys=apis)
    adapted = adapt_api_versions(body, version, {}, {49: VersionRange(0, 1), 17: VersionRange(1, 1)})
    assert adapted is not None
    listed = [(a.api_key, a.min_version, a.max_version) for a in decode(18, version, adapted).api_keys]
    assert listed == [(0, 0, 11), (17, 1, 1), (49, 0, 1)]


def test_a_null_coordinator_list_is_a_protocol_error() -> None:
    # compact array length 0 means null: found by the fuzzer in a mutated FindCoordinator v4 answer. The list is not
    # nullable: Kafka's parser refuses such an answer, and so does the proxy's codec
    with pytest.raises(ProtocolError, match="null coordinators, which is not nullable"):
        rewrite_broker_addresses(10, 4, b"\x00\x00\x00\x00\x00\x00", lambda broker: ("proxy", 1))


def produce_answer(version: int, record_errors: int = 0, endpoints: bool = False) -> bytes:
    cls = response_class(0)
    errors = [cls.TopicProduceResponse.PartitionProduceResponse.BatchIndexAndErrorMessage(
        batch_index=i, batch_index_error_message="bad" if i % 2 else None) for i in range(record_errors)]
    partitions = [cls.TopicProduceResponse.PartitionProduceResponse(
        index=index, error_code=0, base_offset=1000 + index, log_append_time_ms=-1, log_start_offset=0,
        record_errors=errors, error_message=None if index else "a message") for index in range(3)]
    topic = {"topic_id": uuid.UUID(int=1)} if version >= 13 else {"name": "orders"}
    node_endpoints = [cls.NodeEndpoint(node_id=1, host="kafka-1.internal", port=9092, rack=None)] if endpoints else []
    return encode(0, version, responses=[cls.TopicProduceResponse(partition_responses=partitions, **topic)] * 2,
                  throttle_time_ms=5, node_endpoints=node_endpoints)


@pytest.mark.parametrize("version", range(10, 14))
@pytest.mark.parametrize("record_errors", [0, 3])
def test_a_produce_answer_without_node_endpoints_is_known_to_name_no_broker_without_decoding(
        version: int, record_errors: int) -> None:
    assert not may_name_brokers(0, version, produce_answer(version, record_errors))
    assert may_name_brokers(0, version, produce_answer(version, record_errors, endpoints=True))
    assert may_name_brokers(3, 12, b"")  # other answers: decoded to find out


def test_a_produce_answer_cut_short_is_a_protocol_error() -> None:
    body = produce_answer(11, record_errors=3)
    for end in range(len(body) - 1):
        with contextlib.suppress(ProtocolError):
            assert may_name_brokers(0, 11, body[:end])  # a malformed rest: for the decode to refuse
    with pytest.raises(ProtocolError):
        may_name_brokers(0, 11, body[:9])
