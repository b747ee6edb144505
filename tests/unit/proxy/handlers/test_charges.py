from __future__ import annotations

from typing import Any

from protocol.api_versions import adapt_api_versions
from protocol.apis import KNOWN_API_KEYS, Api, request_class, response_class
from protocol.codecs import decode_response, encode_response
from proxy.handlers.charges import CHARGES, Charge


def test_every_api_a_client_may_name_has_its_charge() -> None:
    assert set(CHARGES) == set(KNOWN_API_KEYS)


def _schemas(api_key: int) -> tuple[Any, ...]:
    try:
        return request_class(api_key), response_class(api_key)
    except KeyError:  # LeaderAndIsr and the like, which kafka-python knows by key only, and WITHOUT_SCHEMA's
        return ()


def _carries_records(fields: list[dict[str, Any]] | None) -> bool:
    return any(field.get("type") == "records" or _carries_records(field.get("fields")) for field in fields or [])


def test_an_api_whose_messages_carry_records_is_charged_for_them() -> None:
    carrying = {api_key for api_key in KNOWN_API_KEYS for schema in _schemas(api_key)
                if _carries_records(schema._json["fields"])}
    assert carrying == {Api.PRODUCE, Api.FETCH, Api.SHARE_FETCH}
    assert all(CHARGES[api_key] in (Charge.PRODUCE_BYTES, Charge.FETCH_BYTES) for api_key in carrying)


def test_an_api_the_cluster_serves_and_the_table_does_not_name_is_not_offered() -> None:
    """Kafka 4.4 serves api keys 93 and 94: until the table says how they are charged, clients are not told of
    them (a client sending one anyway is closed: the proxy cannot parse it)."""
    listed = [{"api_key": api_key, "min_version": 0, "max_version": 1} for api_key in (0, 78, 93, 94)]
    body = encode_response(Api.API_VERSIONS, 3, {"error_code": 0, "api_keys": listed, "throttle_time_ms": 0})
    adapted = adapt_api_versions(body, 3, {}, None, frozenset(CHARGES))
    assert adapted is not None
    assert [api.api_key for api in decode_response(Api.API_VERSIONS, 3, adapted).api_keys] == [0, 78]
