"""The messages kafka-python 3.0 has no schemas for, loaded from ``protocol/schemas`` (Kafka's own JSON format)
through kafka-python's JSON-schema machinery, so ``protocol.apis`` finds them as it finds its own.

AllocateProducerIds (67, KIP-730); ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge (76-79)
and the share groups' offset APIs (90-92, KIP-932); ConsumerGroupHeartbeat and ConsumerGroupDescribe (68, 69,
KIP-848), the groups' heartbeats and descriptions read by the authorizer alone; the delegation-token APIs (38-41),
which the proxy answers itself where the cluster sees its own login (``proxy.handlers.own_login``) and sends
itself (DescribeDelegationToken, ``proxy.cluster.token_owners``); UnregisterBroker and AddRaftVoter and
RemoveRaftVoter (64, 80, 81), which the authorizer refuses as Kafka does (``protocol.cluster_refusals``).
"""

from __future__ import annotations

import types

from kafka.protocol.api_message import ApiMessage

import protocol.schemas

MESSAGES = ("AllocateProducerIds", "CreateDelegationToken", "RenewDelegationToken", "ExpireDelegationToken",
            "DescribeDelegationToken", "ShareFetch", "ShareAcknowledge",
            "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets", "ConsumerGroupHeartbeat",
            "ConsumerGroupDescribe", "ShareGroupHeartbeat", "ShareGroupDescribe", "UnregisterBroker", "AddRaftVoter",
            "RemoveRaftVoter")
LOADED = {f"{name}{kind}": types.new_class(f"{name}{kind}", (ApiMessage,), {"load_json": protocol.schemas})
          for name in MESSAGES for kind in ("Request", "Response")}
"""Held here: ``protocol.apis`` finds them among ApiMessage's subclasses, which Python keeps only while referenced."""
