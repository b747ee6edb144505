"""The seed corpus: well-formed inputs of each target, as a client and a cluster would send them, for the fuzzer to
start from (``python -m tests.fuzz.seeds`` writes ``tests/fuzz/corpus/<target>/seed-NN``; committed). Beside them,
``finding-*``: inputs that found a defect, kept so that every test run replays them."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

from protocol.apis import Api
from protocol.codecs import encode_request, encode_response
from protocol.produce import MIN_SCANNED_PRODUCE_VERSION
from proxy.security.sasl_messages import plain_token
from tests.fuzz.targets import TARGETS, layout
from tests.support import record_batch

CORPUS = Path(__file__).parent / "corpus"
SCRAM_CLIENT_FIRST = b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"
"""RFC 5802's example client-first message, for alice."""
TOPIC_ID = uuid.UUID(int=0x1234)


def request_header() -> Iterator[bytes]:
    from tests.fuzz.targets import request_header as header
    yield b"\x00" + header(Api.PRODUCE, 7) + b"\x00"
    yield b"\x01" + header(Api.FETCH, 13, client_id="consumer-1")
    yield b"\x01" + header(Api.API_VERSIONS, 3, client_id="")
    yield b"\x00" + header(Api.METADATA, 12)[:-1] + b"\x02\x01\x00"  # a tagged field


def framing() -> Iterator[bytes]:
    frames = [len(body).to_bytes(4, "big") + body for body in (bytes(range(8)), b"x" * 300, b"metadata")]
    yield layout(3, 0, rest=b"".join(frames))
    yield layout(255, 1, rest=b"".join(frames))
    yield layout(0, 255, rest=frames[1][:100])


def _produce_body(version: int, topics: int = 2, with_id: bool = False) -> bytes:
    batch = record_batch([b"value-1", b"value-2"], producer_id=5, producer_epoch=0, base_sequence=0)
    named = ({"topic_id": TOPIC_ID} if version >= 13 else {"name": "orders"}) if not with_id else {"topic_id": TOPIC_ID}
    return encode_request(Api.PRODUCE, version, {
        "transactional_id": None, "acks": -1, "timeout_ms": 30_000,
        "topic_data": [{**named, "partition_data": [{"index": p, "records": batch if p else b"not a batch"}
                                                    for p in range(2)]} for _ in range(topics)]})


def produce() -> Iterator[bytes]:
    for version in (3, 7, 9, 12, 13):
        yield layout(version - MIN_SCANNED_PRODUCE_VERSION, 63, rest=_produce_body(version))
    yield layout(7 - MIN_SCANNED_PRODUCE_VERSION, 0, rest=_produce_body(7, topics=1)[:40])


def topic_mutations() -> Iterator[bytes]:
    created = encode_request(Api.CREATE_TOPICS, 5, {"topics": [
        {"name": "orders", "num_partitions": 6, "replication_factor": 1, "assignments": [], "configs": []},
        {"name": "bad name!", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}],
        "timeout_ms": 30_000, "validate_only": False})
    created_answer = encode_response(Api.CREATE_TOPICS, 5, {"throttle_time_ms": 0, "topics": [
        {"name": "orders", "topic_id": TOPIC_ID, "error_code": 0, "error_message": None, "num_partitions": 6,
         "replication_factor": 1, "configs": []}]})
    yield layout(0, 5, parts=[created_answer], rest=created)
    deleted = encode_request(Api.DELETE_TOPICS, 6, {"topics": [{"name": "orders", "topic_id": None},
                                                               {"name": None, "topic_id": TOPIC_ID}],
                                                    "timeout_ms": 30_000})
    yield layout(1, 6, parts=[b""], rest=deleted)
    grown = encode_request(Api.CREATE_PARTITIONS, 3, {"topics": [{"name": "orders", "count": 9, "assignments": None}],
                                                      "timeout_ms": 30_000, "validate_only": False})
    yield layout(2, 3, parts=[b""], rest=grown)


def init_producer_id() -> Iterator[bytes]:
    for version in (0, 4, 5):
        fields = {"transactional_id": None, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}
        yield layout(version, rest=encode_request(Api.INIT_PRODUCER_ID, version, fields))


def client_quotas() -> Iterator[bytes]:
    entity = [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id", "entity_name": None}]
    altered = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, {"entries": [
        {"entity": entity, "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False},
                                   {"key": "request_percentage", "value": 50.0, "remove": False}]},
        {"entity": [{"entity_type": "topic", "entity_name": "orders"}],
         "ops": [{"key": "consumer_byte_rate", "value": 0.0, "remove": True}]}], "validate_only": False})
    answer = encode_response(Api.ALTER_CLIENT_QUOTAS, 1, {"throttle_time_ms": 0, "entries": [
        {"error_code": 0, "error_message": None, "entity": entity}]})
    yield layout(0, 1, 1, parts=[answer], rest=altered)
    described = encode_request(Api.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
        {"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": False})
    answer = encode_response(Api.DESCRIBE_CLIENT_QUOTAS, 1, {"throttle_time_ms": 0, "error_code": 0,
                                                             "error_message": None, "entries": [
        {"entity": entity, "values": [{"key": "request_percentage", "value": 50.0}]}]})
    yield layout(1, 1, 1, parts=[answer], rest=described)


def _fetch_request(version: int) -> bytes:
    named = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "orders"}
    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    return encode_request(Api.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{**named, "partitions": [partition]}]})


def _fetch_response(version: int) -> bytes:
    named = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "orders"}
    partition = {"partition_index": 0, "error_code": 0, "high_watermark": 2, "last_stable_offset": 2,
                 "log_start_offset": 0, "aborted_transactions": [{"producer_id": 5, "first_offset": 0}],
                 "preferred_read_replica": -1, "records": record_batch([b"value-1", b"value-2"])}
    return encode_response(Api.FETCH, version, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                                "responses": [{**named, "partitions": [partition]}]})


def fetch() -> Iterator[bytes]:
    for version in (4, 11, 12, 13, 16):
        yield layout(version, 0, 255, parts=[_fetch_response(version)], rest=_fetch_request(version))


def response_rewriting() -> Iterator[bytes]:
    metadata = encode_response(Api.METADATA, 12, {
        "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "broker-1", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1, "topics": [
            {"error_code": 0, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                 "isr_nodes": [1], "offline_replicas": []}]}],
        })
    yield layout(2, 12, 0, 100, rest=metadata)
    versions = encode_response(Api.API_VERSIONS, 3, {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 3, "max_version": 13}, {"api_key": 1, "min_version": 4, "max_version": 17}],
        "throttle_time_ms": 0, "supported_features": [], "finalized_features_epoch": -1, "finalized_features": [],
        "zk_migration_ready": False})
    yield layout(5, 3, 0, 0, rest=versions)
    yield layout(1, 11, 1, 0, rest=_fetch_response(11))
    coordinator = encode_response(Api.FIND_COORDINATOR, 4, {"throttle_time_ms": 0, "coordinators": [
        {"key": "group", "node_id": 1, "host": "broker-1", "port": 9092, "error_code": 0, "error_message": None}]})
    yield layout(3, 4, 0, 10, rest=coordinator)


def _jwt(subject: str) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'exp': 4_000_000_000})}."


def _oauthbearer(subject: str) -> bytes:
    return f"n,,\x01auth=Bearer {_jwt(subject)}\x01\x01".encode()


def sasl_tokens() -> Iterator[bytes]:
    yield plain_token("alice", "alice-secret")
    yield SCRAM_CLIENT_FIRST
    yield b"c=biws,r=abc,p=" + base64.b64encode(bytes(32))
    yield _oauthbearer("alice")


def sasl_login() -> Iterator[bytes]:
    def request(api_index: int, version: int, fields: dict[str, object]) -> tuple[int, int, bytes]:
        api_key = (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE)[api_index]
        return api_index, version, encode_request(api_key, version, fields)

    for mechanism, token in (("PLAIN", plain_token("alice", "alice-secret")),
                             ("SCRAM-SHA-256", SCRAM_CLIENT_FIRST),
                             ("OAUTHBEARER", _oauthbearer("alice"))):
        steps = [request(0, 1, {"mechanism": mechanism}), request(1, 2, {"auth_bytes": token})]
        yield b"".join(bytes([api_index, version]) + len(body).to_bytes(2, "big") + body
                       for api_index, version, body in steps)


SEEDS = {"request_header": request_header, "framing": framing, "produce": produce,
         "topic_mutations": topic_mutations, "init_producer_id": init_producer_id, "client_quotas": client_quotas,
         "fetch": fetch, "response_rewriting": response_rewriting, "sasl_tokens": sasl_tokens,
         "sasl_login": sasl_login}


def main() -> None:
    assert set(SEEDS) == set(TARGETS), "a target without seeds, or seeds without a target"
    for name, seeds in SEEDS.items():
        directory = CORPUS / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("seed-*"):  # the findings (finding-*) stay
            old.unlink()
        for number, seed in enumerate(seeds()):
            (directory / f"seed-{number:02d}").write_bytes(seed)
        print(f"{name}: {number + 1} seeds")


if __name__ == "__main__":
    main()
