"""The one exception type for malformed Kafka input."""

from __future__ import annotations


class ProtocolError(ValueError):
    """Malformed or unsupported bytes; the message names api key, version and byte offset."""

    def __init__(self, reason: str, *, api_key: int | None = None, api_version: int | None = None,
                 offset: int | None = None) -> None:
        self.reason = reason
        self.api_key = api_key
        self.api_version = api_version
        self.offset = offset
        where = []
        if api_key is not None:
            where.append(f"api_key={api_key}")
        if api_version is not None:
            where.append(f"version={api_version}")
        if offset is not None:
            where.append(f"offset={offset}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)
