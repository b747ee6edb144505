"""Capping an upstream's ApiVersions answer to what the proxy can parse."""

from __future__ import annotations

from collections.abc import Mapping

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response


def cap_api_versions(body: bytes | memoryview, api_version: int,
                     ceilings: Mapping[int, int]) -> bytes | None:
    """The body with each api in ``ceilings`` limited to its ceiling; None if nothing changed.

    A broker answering an ApiVersions version it does not know replies in v0 format with
    UNSUPPORTED_VERSION; that body is decoded and re-encoded as v0 too.
    """
    message = decode_response(Api.API_VERSIONS, api_version, body)
    changed = False
    for api in message.api_keys:
        ceiling = ceilings.get(api.api_key)
        if ceiling is not None and api.max_version > ceiling:
            api.max_version = max(ceiling, api.min_version)
            changed = True
    if not changed:
        return None
    return encode_response(Api.API_VERSIONS, message.version, message)
