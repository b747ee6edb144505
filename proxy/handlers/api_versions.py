"""ApiVersions: what the proxy tells clients it serves, and the answers it gives itself.

The cluster's list, asked once by the proxy, capped for the APIs whose messages the proxy decodes
(``protocol.codecs.TESTED_VERSIONS``, and Fetch at v15, see ``FETCH_VERSION_CEILING``; the authorizer's too, whether
it is on or not), with the APIs the proxy answers itself added. Responses the cluster sends to a client's own
ApiVersions get the same treatment on their way back (``proxy.connection.responses``).
"""

from __future__ import annotations

import asyncio

from protocol.addresses import ADDRESS_BEARING_APIS
from protocol.api_versions import NEWEST_API_VERSIONS, VersionRange, adapt_api_versions
from protocol.apis import Api
from protocol.codecs import encode_response, max_version
from protocol.config_resources import CONFIG_APIS
from protocol.errors import UNSUPPORTED_VERSION
from protocol.header import RequestHeader, read_request_header
from protocol.refused_topics import PARTITIONED_APIS
from protocol.share_group_offsets import SHARE_GROUP_OFFSET_APIS
from proxy.cluster.rewrites import RewriteMemo
from proxy.cluster.upstream import UpstreamAccess, request_any
from proxy.decision.outcome import Decided, Outcome, local_answer
from proxy.handlers.acls import ACL_APIS, FIRST_ACL_API_VERSION
from proxy.handlers.authorization import AUTHORIZER_DECODED_APIS
from proxy.handlers.charges import CHARGES
from proxy.handlers.own_login import FIRST_TOKEN_API_VERSION, TOKEN_APIS
from proxy.settings.config import ProxyConfig

# APIs whose messages the proxy decodes; ApiVersions answers cap them to the versions it parses and was tested with.
_DECODED_APIS = ADDRESS_BEARING_APIS | {
    Api.API_VERSIONS, Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.CREATE_PARTITIONS, Api.INIT_PRODUCER_ID,
    Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS, Api.ALLOCATE_PRODUCER_IDS, Api.SASL_HANDSHAKE,
    Api.SASL_AUTHENTICATE, Api.DESCRIBE_TOPIC_PARTITIONS, *PARTITIONED_APIS, *CONFIG_APIS, *SHARE_GROUP_OFFSET_APIS,
    *AUTHORIZER_DECODED_APIS, *ACL_APIS, *TOKEN_APIS}
_SASL_VERSIONS: dict[int, VersionRange] = {
    Api.SASL_HANDSHAKE: VersionRange(1, 1), Api.SASL_AUTHENTICATE: VersionRange(0, 2)}
FETCH_VERSION_CEILING = 15
"""Fetch v16+ ends each response with KIP-951 leader endpoints the proxy must rewrite, which holds the
response until its last byte (about a tenth of a consumer's throughput); up to v15 a response is passed
on as it arrives. Clients then learn a moved leader from Metadata, as they did before KIP-951."""
def version_ceilings(in_front_of_controllers: bool) -> dict[int, int]:
    if in_front_of_controllers:  # the brokers' requests pass untouched, whatever version they and the controllers speak
        return {Api.ALLOCATE_PRODUCER_IDS: max_version(Api.ALLOCATE_PRODUCER_IDS)}
    ceilings = {api_key: max_version(api_key) for api_key in _DECODED_APIS}
    ceilings[Api.FETCH] = min(ceilings[Api.FETCH], FETCH_VERSION_CEILING)
    return ceilings


def served_versions(sasl_mode: str, in_front_of_controllers: bool, authorizer: bool) -> dict[int, VersionRange]:
    """APIs the proxy answers itself, listed in ApiVersions whatever the cluster serves: the SASL APIs when it
    terminates logins; the client-quota APIs and AllocateProducerIds; the ACL APIs with the authorizer, and the
    delegation-token APIs unless clients log in to the cluster themselves (inspect mode), from the version Kafka
    serves them from. In front of the controllers, only the SASL APIs."""
    served = dict(_SASL_VERSIONS) if sasl_mode == "terminate" else {}
    if in_front_of_controllers:
        return served
    served.update({api_key: VersionRange(0, max_version(api_key))
                   for api_key in (Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS, Api.ALLOCATE_PRODUCER_IDS)})
    if authorizer:
        served.update({api_key: VersionRange(FIRST_ACL_API_VERSION, max_version(api_key)) for api_key in ACL_APIS})
    if sasl_mode != "inspect":
        served.update({api_key: VersionRange(FIRST_TOKEN_API_VERSION, max_version(api_key)) for api_key in TOKEN_APIS})
    return served


_ADAPTED_ANSWER_BYTES = 256 * 1024


class ApiVersionsAnswers:
    def __init__(self, config: ProxyConfig, upstream_access: UpstreamAccess, in_front_of_controllers: bool) -> None:
        self._config = config
        self._upstream_access = upstream_access
        self.ceilings = version_ceilings(in_front_of_controllers)
        self.served = served_versions(config.sasl_mode, in_front_of_controllers,
                                      config.authorizer is not None)
        self._offered = None if in_front_of_controllers else frozenset(CHARGES)
        """Clients are offered the APIs whose charge the proxy knows: an API the cluster adds later is not."""
        self._cluster_api_versions: list[dict[str, int]] | None = None
        """The cluster's ApiVersions list, asked once by the proxy itself (a client's answer may be an
        error or a version's subset): for the answers given before a login and for what is forwarded."""
        self._asking_api_versions: asyncio.Task[list[dict[str, int]]] | None = None
        self._adapted = RewriteMemo(_ADAPTED_ANSWER_BYTES)

    def adapt(self, body: memoryview, version: int) -> bytes | None:
        """The cluster's ApiVersions answer as the client gets it (see ``adapt_api_versions``)."""
        return self._adapted.rewritten((Api.API_VERSIONS, version, bytes(body)),
                                       lambda: adapt_api_versions(body, version, self.ceilings, self.served,
                                                                  self._offered))

    def answer(self, frame: memoryview) -> Decided:
        """ApiVersions answered by the proxy (before a login, or newer than it parses)."""
        header = read_request_header(frame)
        if self._cluster_api_versions is not None or header.api_version > NEWEST_API_VERSIONS:
            return self._local_api_versions(header)
        return self._api_versions_once_known(header)

    async def _api_versions_once_known(self, header: RequestHeader) -> Outcome:
        await self._learn_cluster_api_versions()
        return self._local_api_versions(header)

    async def cluster_api_keys(self) -> frozenset[int]:
        """The api keys the cluster serves."""
        versions = self._cluster_api_versions
        if versions is None:
            versions = await self._learn_cluster_api_versions()
        return frozenset(entry["api_key"] for entry in versions)

    async def _learn_cluster_api_versions(self) -> list[dict[str, int]]:
        if self._asking_api_versions is None or self._asking_api_versions.done():
            self._asking_api_versions = asyncio.get_running_loop().create_task(self._ask_api_versions())
        self._cluster_api_versions = await asyncio.shield(self._asking_api_versions)
        return self._cluster_api_versions

    async def _ask_api_versions(self) -> list[dict[str, int]]:
        config = self._config
        response = await request_any(config.upstream, Api.API_VERSIONS, 0, {}, config.connect_timeout_s,
                                     config.max_frame_bytes, self._upstream_access)
        return [{"api_key": k.api_key, "min_version": k.min_version, "max_version": k.max_version}
                for k in response.api_keys]

    def _local_api_versions(self, header: RequestHeader) -> Outcome:
        """As a broker answers ApiVersions itself; a version the proxy cannot encode gets Kafka's
        UNSUPPORTED_VERSION answer, in v0, naming the ApiVersions versions it can."""
        version = header.api_version
        if version > NEWEST_API_VERSIONS:
            body = encode_response(Api.API_VERSIONS, 0, {"error_code": UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": Api.API_VERSIONS, "min_version": 0, "max_version": NEWEST_API_VERSIONS}]})
            return local_answer(header, body)
        assert self._cluster_api_versions is not None, "asked before answering"
        body = encode_response(Api.API_VERSIONS, version, {"error_code": 0, "api_keys": self._cluster_api_versions,
                                                           "throttle_time_ms": 0})
        return local_answer(header, self.adapt(memoryview(body), version) or body)
