from __future__ import annotations

import pytest

from protocol.api_versions import adapt_api_versions
from protocol.apis import Api, request_class, response_class
from protocol.codecs import TESTED_VERSIONS, decode_response, encode_response
from proxy.handlers.api_versions import FETCH_VERSION_CEILING, version_ceilings


@pytest.fixture
def newer_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python as a later release may be: each schema the proxy decodes three versions newer."""
    for api_key in TESTED_VERSIONS:
        for schema in (request_class(api_key), response_class(api_key)):
            monkeypatch.setattr(schema, "max_version", schema.max_version + 3)


@pytest.mark.usefixtures("newer_kafka_python")
def test_a_newer_kafka_python_schema_does_not_raise_what_the_proxy_offers() -> None:
    ceilings = version_ceilings(in_front_of_controllers=False)
    assert ceilings[Api.PRODUCE] == 13  # the scanner's newest: v14 would be offered, then each request refused
    assert ceilings[Api.FETCH] == FETCH_VERSION_CEILING
    assert all(ceilings[api_key] <= TESTED_VERSIONS[api_key] for api_key in ceilings)
    # every API whose messages the proxy walks is capped (an API tested but not capped was offered as is)
    assert set(TESTED_VERSIONS) - set(ceilings) == set()


@pytest.mark.usefixtures("newer_kafka_python")
def test_a_cluster_offering_newer_versions_is_capped_at_the_tested_ones() -> None:
    cluster = [{"api_key": api_key, "min_version": 0, "max_version": 30} for api_key in (Api.PRODUCE, Api.METADATA)]
    body = encode_response(Api.API_VERSIONS, 3, {"error_code": 0, "api_keys": cluster, "throttle_time_ms": 0})
    adapted = adapt_api_versions(body, 3, version_ceilings(in_front_of_controllers=False))
    assert adapted is not None
    offered = {api.api_key: api.max_version for api in decode_response(Api.API_VERSIONS, 3, adapted).api_keys}
    assert offered == {Api.PRODUCE: 13, Api.METADATA: TESTED_VERSIONS[Api.METADATA]}
