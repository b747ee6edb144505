"""DescribeDelegationToken (api key 41), loaded through kafka-python's JSON-schema machinery: the proxy asks it under
its own login to learn whose a delegation token is (``proxy.cluster.token_owners``). Clients' own requests of it
pass opaque (``protocol.apis.WITHOUT_SCHEMA``)."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import protocol.schemas


class DescribeDelegationTokenRequest(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass


class DescribeDelegationTokenResponse(ApiMessage, load_json=protocol.schemas):  # type: ignore[call-arg]
    pass
