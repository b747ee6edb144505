"""ShareFetch and ShareAcknowledge (api keys 78 and 79, KIP-932 share groups) and the share groups' offset APIs (90,
91, 92), loaded through kafka-python's JSON-schema machinery: kafka-python 3.0 knows their api keys, not their
messages."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import protocol.schemas


class ShareFetchRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class ShareFetchResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class ShareAcknowledgeRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass
