"""AllocateProducerIds (api key 67, KIP-730), loaded through kafka-python's JSON-schema machinery."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import protocol.schemas


class AllocateProducerIdsRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class AllocateProducerIdsResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass
