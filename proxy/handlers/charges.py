"""How each API a client may send is charged, in one table: the next API that carries records cannot slip past
the quotas unnoticed. ApiVersions offers clients only the APIs of this table (``ApiVersionsAnswers``), and the
tests hold it to every API kafka-python and the proxy know, to the handlers that charge, and to the schemas
(an API whose messages carry records must be charged for them).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from protocol.apis import Api


class Charge(enum.Enum):
    PRODUCE_BYTES = "producer_byte_rate on the request's bytes (and its topics'), producer_ids_rate on new producer IDs"
    FETCH_BYTES = "consumer_byte_rate on the answer's bytes (and its topics'), as Kafka's one fetch quota"
    TOPIC_MUTATIONS = "controller_mutation_rate on the partitions created or deleted"
    PRODUCER_IDS = "producer_ids_rate: the producer-ID throttle a client has pending"
    ANSWERED_BY_THE_PROXY = "answered by the proxy itself, never forwarded"
    REQUESTS = "request_rate only: it carries no records, and Kafka charges it to the request quota alone"
    TO_CONNECT = "uncharged: what a client needs to connect and log in"
    NOT_FOR_CLIENTS = "request_rate only: brokers and controllers send it to each other (a client gets the " \
                      "cluster's refusal)"


_REQUESTS = (2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 21, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35, 38, 39, 40,
             41, 42, 43, 44, 45, 46, 47, 50, 51, 55, 57, 60, 61, 64, 65, 66, 68, 69, 71, 72, 74, 75, 76, 77, 79, 80,
             81, 88, 89, 90, 91, 92)
"""Group, transaction, offset, admin (a broker unregistered, a KRaft voter added or removed among them), ACL, config,
telemetry and describe APIs, ShareAcknowledge and the group heartbeats: Kafka charges them to the request quota only
(``sendMaybeThrottle``)."""
_NOT_FOR_CLIENTS = (4, 5, 6, 7, 27, 52, 53, 54, 56, 58, 59, 62, 63, 70, 73, 82, 83, 84, 85, 86, 87)
"""Replication, KRaft and share-state traffic between brokers and controllers."""

CHARGES: Mapping[int, Charge] = {
    Api.PRODUCE: Charge.PRODUCE_BYTES,
    Api.FETCH: Charge.FETCH_BYTES,
    Api.SHARE_FETCH: Charge.FETCH_BYTES,
    Api.CREATE_TOPICS: Charge.TOPIC_MUTATIONS,
    Api.DELETE_TOPICS: Charge.TOPIC_MUTATIONS,
    Api.CREATE_PARTITIONS: Charge.TOPIC_MUTATIONS,
    Api.INIT_PRODUCER_ID: Charge.PRODUCER_IDS,
    Api.ALTER_CLIENT_QUOTAS: Charge.ANSWERED_BY_THE_PROXY,
    Api.DESCRIBE_CLIENT_QUOTAS: Charge.ANSWERED_BY_THE_PROXY,
    Api.ALLOCATE_PRODUCER_IDS: Charge.ANSWERED_BY_THE_PROXY,
    Api.API_VERSIONS: Charge.TO_CONNECT,
    Api.SASL_HANDSHAKE: Charge.TO_CONNECT,
    Api.SASL_AUTHENTICATE: Charge.TO_CONNECT,
    **dict.fromkeys(_REQUESTS, Charge.REQUESTS),
    **dict.fromkeys(_NOT_FOR_CLIENTS, Charge.NOT_FOR_CLIENTS),
}
