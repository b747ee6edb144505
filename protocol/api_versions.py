"""Adapting an upstream's ApiVersions answer to the proxy in front of it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_response, encode_response, max_version

NEWEST_API_VERSIONS = max_version(Api.API_VERSIONS)
"""The newest ApiVersions the proxy parses: a newer one is answered in v0 (KIP-511)."""


class VersionRange(NamedTuple):
    min_version: int
    max_version: int


def adapt_api_versions(body: bytes | memoryview, api_version: int, ceilings: Mapping[int, int],
                       served: Mapping[int, VersionRange] | None = None,
                       offered: Collection[int] | None = None) -> bytes | None:
    """Each api in ``ceilings`` limited to its ceiling; the apis the proxy ``served`` itself listed
    with the proxy's versions, whether the upstream has them or not; with ``offered``, the upstream's apis
    outside it left out. Returns the body to send instead, or None when the upstream's answer stands as it is.

    A broker answering an ApiVersions version it does not know replies in v0 format with
    UNSUPPORTED_VERSION; that body is decoded and re-encoded as v0 too, and left without additions.
    """
    message = decode_response(Api.API_VERSIONS, api_version, body)
    changed = False
    if offered is not None:
        kept = [api for api in message.api_keys if api.api_key in offered]
        changed = len(kept) != len(message.api_keys)
        message.api_keys = kept
    for api in message.api_keys:
        ceiling = ceilings.get(api.api_key)
        if ceiling is not None and api.max_version > ceiling:
            api.max_version = max(ceiling, api.min_version)
            changed = True
    if served and not message.error_code:
        by_key = {api.api_key: api for api in message.api_keys}
        entry_cls = response_class(Api.API_VERSIONS).ApiVersion
        for api_key, versions in served.items():
            existing = by_key.get(api_key)
            if existing is None:
                message.api_keys.append(entry_cls(api_key=api_key, min_version=versions.min_version,
                                                  max_version=versions.max_version))
                changed = True
            elif (existing.min_version, existing.max_version) != versions:
                existing.min_version, existing.max_version = versions
                changed = True
        if changed:
            message.api_keys.sort(key=lambda api: api.api_key)
    if not changed:
        return None
    return encode_response(Api.API_VERSIONS, message.version, message)
