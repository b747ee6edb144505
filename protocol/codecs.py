"""Full decode and encode of the messages the proxy intercepts, on kafka-python's schema classes.

Every failure, whatever kafka-python raised, becomes a ``ProtocolError`` naming api key, version
and the byte offset reached; a body must be consumed exactly (no overrun, no trailing bytes).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.schemas.fields.codecs import EncodeBufferPool

from protocol.apis import Api, request_class, response_class
from protocol.errors import ProtocolError

CODEC_APIS = frozenset({
    Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.CREATE_PARTITIONS, Api.INIT_PRODUCER_ID,
    Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE,
    Api.API_VERSIONS, Api.METADATA, Api.FIND_COORDINATOR, Api.DESCRIBE_CLUSTER, Api.DESCRIBE_CONFIGS,
    Api.ALLOCATE_PRODUCER_IDS,
})
"""The APIs with a full codec here; Produce has its zero-copy scanner instead (``protocol.produce``)."""


def max_version(api_key: int) -> int:
    """The newest version the proxy can parse in both directions."""
    return int(min(request_class(api_key).max_version, response_class(api_key).max_version))


def _decode(cls: Any, api_key: int, version: int, body: bytes | memoryview) -> Any:
    if not 0 <= version <= cls.max_version:
        raise ProtocolError(f"version not supported (newest parsed: {cls.max_version})", api_key=api_key,
                            api_version=version, offset=0)
    flexible = cls.flexible_version_q(version)
    decode_from = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    view = body if isinstance(body, memoryview) else memoryview(body)
    try:
        message, end = decode_from(view, 0)
    except Exception as error:  # kafka-python raises struct, index, value and unicode errors
        raise ProtocolError(f"undecodable {cls.__name__}: {type(error).__name__}: {error}", api_key=api_key,
                            api_version=version, offset=_offset_hint(error)) from error
    if end != len(view):
        what = "ends past the frame" if end > len(view) else f"{len(view) - end} trailing bytes"
        raise ProtocolError(f"{cls.__name__} {what}", api_key=api_key, api_version=version, offset=min(end, len(view)))
    return message


def _offset_hint(error: Exception) -> int | None:
    return getattr(error, "offset", None)


def decode_request(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """The request body (after the header) as a kafka-python message object."""
    return _decode(request_class(api_key), api_key, version, body)


def decode_response(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """The response body (after the header); ApiVersions errors come in v0 format, as brokers send them."""
    cls = response_class(api_key)
    if api_key == Api.API_VERSIONS and len(body) >= 2 and body[0:2] != b"\x00\x00":
        version = 0
    return _decode(cls, api_key, version, body)


def encode_request(api_key: int, version: int, message: Any) -> bytes:
    return _encode(request_class(api_key), api_key, version, message)


def encode_response(api_key: int, version: int, message: Any) -> bytes:
    return _encode(response_class(api_key), api_key, version, message)


def build(cls: Any, fields: dict[str, Any], version: int | None = None) -> Any:
    """A kafka-python message (or nested struct) from plain dicts and lists, nested structs included."""
    values = {}
    for name, value in fields.items():
        field = cls.fields.get(name)
        if field is not None and field.is_struct_array() and value is not None:
            value = [build(field.data_class, item) if isinstance(item, dict) else item for item in value]
        elif field is not None and field.is_struct() and isinstance(value, dict):
            value = build(field.data_class, value)
        values[name] = value
    return cls(**values) if version is None else cls(version=version, **values)


def _encode(cls: Any, api_key: int, version: int, message: Any) -> bytes:
    # kafka-python's ``encode(version=...)`` fails on decoded objects (no ``_header``), so this
    # drives its compiled encoder directly, as its own ``encode`` does.
    if isinstance(message, dict):
        message = build(cls, message, version)
    flexible = cls.flexible_version_q(version)
    try:
        encode_into = cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
        with EncodeBufferPool.acquire() as out:
            encode_into(message, out)
            return bytes(out.result())
    except Exception as error:
        raise ProtocolError(f"cannot encode {cls.__name__}: {error}", api_key=api_key, api_version=version) from error
