"""What the proxy is made of, built from its configuration: its state, quota engines, usage log, logins, producer-ID
sources, knowledge of the cluster, the fleet, and the chain that decides on every request; started and stopped as one.
The listeners and connections that use them are ``serving``'s."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from prometheus_client import CollectorRegistry

from allocator.block_log import BlockLog
from allocator.durable import WriteErrors, lock_directory
from protocol.apis import Api
from protocol.config_resources import CONFIG_APIS
from protocol.refused_topics import PARTITIONED_APIS
from protocol.share_group_offsets import SHARE_GROUP_OFFSET_APIS
from proxy.cluster.client import ClusterClient
from proxy.cluster.fleet import Fleet, FleetSettings
from proxy.cluster.info import ClusterInfo
from proxy.cluster.token_owners import TokenOwners
from proxy.cluster.topic_names import TopicNames
from proxy.cluster.upstream import ConnectTurns, UpstreamAccess
from proxy.cluster.usage_topic import POSITION_STORE as USAGE_TOPIC_POSITION_STORE
from proxy.cluster.usage_topic import usage_shipper
from proxy.decision.interception import RequestHandler
from proxy.files.watched_file import WatchedFile
from proxy.handlers.acls import ACL_APIS, AclRequests
from proxy.handlers.api_versions import ApiVersionsAnswers
from proxy.handlers.authorization import judged_by_acls
from proxy.handlers.chain import ClusterAnswers, RequestChain
from proxy.handlers.client_quotas import ClientQuotaHandlers
from proxy.handlers.config_resources import ConfigResourcesJudged, ConfigResourcesListed
from proxy.handlers.fetch import FetchHandler
from proxy.handlers.own_login import TOKEN_APIS, DelegationTokensWithoutTokens, OwnCredentialsKept
from proxy.handlers.produce import ProduceHandler
from proxy.handlers.producer_ids import AllocateProducerIdsForwarder, AllocateProducerIdsHandler, InitProducerIdHandler
from proxy.handlers.refused_topics import (
    DescribedTopicsWithoutRefused,
    MetadataWithoutRefusedTopics,
    OffsetDeletions,
    ShareGroupOffsets,
    ShareTopicsWithoutRefused,
    TopicsWithoutRefused,
)
from proxy.handlers.request_rate import RequestRateHandler
from proxy.handlers.share_fetch import ShareFetchHandler
from proxy.handlers.topic_mutations import AutoCreationUnderTenantCaps, TopicMutationHandler
from proxy.producer_ids.allocations import BlockAllocations
from proxy.producer_ids.cluster_claims import ClusterBlockClaims
from proxy.producer_ids.settings import AllocatorSettings
from proxy.producer_ids.sources import (
    BLOCK_LOG_STORE,
    Allocator,
    ProducerIdSource,
    embedded_fetcher,
    next_broker_epoch,
    remote_fetcher,
)
from proxy.reporting.metrics import ProxyMetrics
from proxy.reporting.usage_log import STORE as USAGE_LOG_STORE
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acl_service import STORE as ACLS_STORE
from proxy.security.acl_service import AclService
from proxy.security.oauthbearer import token_validator
from proxy.security.sasl import SaslServer
from proxy.security.sasl_inspect import SaslInspector
from proxy.security.tls import PrincipalMapper, ReloadingContext
from proxy.security.users import SaslConfigError, UserStore, load_users
from proxy.settings.config import ConfigError, ProxyConfig
from proxy.state.pid_ledger import STORE as LEDGER_STORE
from proxy.state.pid_ledger import LedgerRecorder, open_ledger
from proxy.state.quota_service import RELOAD_INTERVAL_S, QuotaService, now_ms
from proxy.state.quota_service import STORE as CLIENT_QUOTAS_STORE
from quotas.config import QuotaScope

log = logging.getLogger(__name__)

USAGE_FLUSH_INTERVAL_S = 1.0
BLOCK_LOG_FILE = "producer-id-blocks.log"
LEDGER_CHECK_INTERVAL_S = 1.0


class Services:
    """The proxy's parts, each built once, for every connection to share."""

    def __init__(self, config: ProxyConfig, known_brokers: Callable[[], Collection[int]]) -> None:
        """``known_brokers``: the node ids of the cluster's brokers the proxy has learnt (and serves)."""
        self.config = config
        self._state_lock = lock_directory(config.state_dir)  # first: nothing of the directory is read before
        self.write_errors = WriteErrors((ACLS_STORE, BLOCK_LOG_STORE, CLIENT_QUOTAS_STORE, LEDGER_STORE,
                                         USAGE_LOG_STORE, USAGE_TOPIC_POSITION_STORE))
        upstream_tls = config.upstream_tls
        self.upstream_access = UpstreamAccess(config.upstream_sasl, None if upstream_tls is None else ReloadingContext(
            upstream_tls.context, upstream_tls.files(), "upstream"))
        self.client_upstream_access = (replace(self.upstream_access, sasl=None) if config.sasl_mode == "inspect"
                                       else self.upstream_access)
        """Inspected clients log in to the cluster themselves: the proxy's login is for its own requests."""
        self.upstream_connects = ConnectTurns()
        self.token_owners = TokenOwners(config.upstream, self.upstream_access, config.connect_timeout_s,
                                        config.max_frame_bytes)
        """Whose the delegation tokens inspected logins name are (asked under the proxy's own login)."""
        listener_tls = config.tls
        self.listener_tls = None if listener_tls is None else ReloadingContext(
            listener_tls.context, listener_tls.files(), "listener")
        self.principal_mapper = PrincipalMapper(listener_tls.principal_mapping_rules if listener_tls else "DEFAULT")
        self.metrics = ProxyMetrics(CollectorRegistry(), self.write_errors)
        self.quotas = QuotaService(config.quota_file, self.metrics.registry, config.state_dir, config.connection_limits,
                                   self.write_errors)
        self.metrics.busiest_ips = self.quotas.connections.busiest_ips
        self.allocator_settings = settings = AllocatorSettings.from_config(config)
        self.in_front_of_controllers = settings.mode == "forward"
        """Between the brokers and the controller quorum: only AllocateProducerIds is looked at, everything
        else (KRaft's Fetch, BrokerRegistration, BrokerHeartbeat, ...) passes untouched, addresses included."""
        self.acls = self._acls()
        self.authorizer = None if self.acls is None else self.acls.authorizer
        fleet = FleetSettings.from_config(config)
        self.fleet = None if fleet is None else Fleet(fleet, fleet.instance(config, config.worker), self.quotas, config,
                                                      self.upstream_access, self.metrics.registry, self.acls)
        if self.fleet is None and self.quotas.config.settings.quota_scope is QuotaScope.CLUSTER:
            log.warning("quota.scope is \"cluster\" but --config has no [fleet]: budgets are this proxy's alone")
        self.usage = UsageLog(config.state_dir / "usage", config.usage_retention_days, self.write_errors)
        self.usage_shipper = usage_shipper(config, (fleet or FleetSettings()).instance(config, config.worker),
                                           self.upstream_access, self.metrics.registry, self.write_errors)
        self.quotas.observe(self.usage.quotas_in_force)  # the report draws each principal's quota in force
        self.users: UserStore | None = load_users(config.sasl_users) if config.sasl_users else None
        self._login_pool = ThreadPoolExecutor(config.login_threads, thread_name_prefix="sasl-login")
        self.tokens, self._jwks_endpoint = (token_validator(config.login.oauthbearer) if config.sasl_mode == "terminate"
                                            else (None, None))
        """What checks OAUTHBEARER tokens (terminate mode), and the JWKS endpoint it fetches keys from."""
        self._users_file = WatchedFile(config.sasl_users) if config.sasl_users else None
        self.blocks = BlockLog(config.state_dir / BLOCK_LOG_FILE, settings.first_id, settings.end_id)
        self.allocator = Allocator(self.blocks, self.write_errors, self._block_claims(settings))
        self.ledger = LedgerRecorder(open_ledger(config.state_dir, settings.ledger_capacity), self.write_errors,
                                     settings.ledger_cache)
        self.pid_source = self._producer_id_source(settings)
        self.cluster = ClusterInfo(config, known_brokers, self.upstream_access)
        self.topic_names = TopicNames(self.cluster.topics_by_id)
        self.reserved_topics = frozenset(
            (list(fleet.own_topics) if fleet is not None else [])
            + ([settings.blocks_topic] if settings.pid_source == "cluster" else [])
            + ([self.usage_shipper.topic] if self.usage_shipper is not None else []))
        """The proxy's own topics: no client's request may reach them (the proxy writes them with its own login,
        which the cluster lets write them whoever the client is)."""
        self.access = Access(self.reserved_topics, self.authorizer)
        mutations = TopicMutationHandler(self.quotas, self.cluster, self.usage, self.access)
        request_rate = RequestRateHandler(self.quotas, self.usage, charges=not self.in_front_of_controllers)
        self.api_versions = ApiVersionsAnswers(config, self.upstream_access, self.in_front_of_controllers)
        client_quotas = ClientQuotaHandlers(self.quotas, self.api_versions.cluster_api_keys, config.admin_principals,
                                            self.access)
        allocations = BlockAllocations(self.metrics.registry, self.usage)
        self.rewrites_addresses = not self.in_front_of_controllers
        produce = ProduceHandler(self.quotas, self.usage, self.ledger, self.topic_names, settings.scan_all_produce,
                                 self.access)
        refused_topic_handlers = self._refused_topic_handlers(
            ShareFetchHandler(self.quotas, self.usage, self.topic_names))
        handlers: Mapping[int, RequestHandler] = {
            Api.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsForwarder(settings, allocations),
        } if self.in_front_of_controllers else {
            Api.PRODUCE: produce,
            Api.FETCH: FetchHandler(self.quotas, self.usage, self.topic_names, self.access),
            Api.CREATE_TOPICS: mutations,
            Api.DELETE_TOPICS: mutations,
            Api.CREATE_PARTITIONS: mutations,
            Api.INIT_PRODUCER_ID: InitProducerIdHandler(self.quotas, self.pid_source, self.ledger, self.usage),
            Api.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsHandler(self.allocator, settings, allocations),
            Api.ALTER_CLIENT_QUOTAS: client_quotas,
            Api.DESCRIBE_CLIENT_QUOTAS: client_quotas,
            **({} if self.acls is None else dict.fromkeys(ACL_APIS, AclRequests(self.acls, self.access))),
            **self._own_login_handlers(),
            **refused_topic_handlers,
            Api.METADATA: AutoCreationUnderTenantCaps(self.quotas, refused_topic_handlers.get(Api.METADATA)),
        }
        self._otherwise: RequestHandler | None = None
        if self.authorizer is not None and not self.in_front_of_controllers:
            handlers, self._otherwise = judged_by_acls(handlers, self.access)
        self._handlers = handlers
        self._request_rate = request_rate
        self._maintenance: list[asyncio.Task[None]] = []

    def _own_login_handlers(self) -> dict[int, RequestHandler]:
        """What keeps the proxy's own login out of clients' reach: its SCRAM credentials (``[upstream-sasl]``), and,
        where the cluster sees that login for clients' requests (not inspect mode), its delegation tokens."""
        config = self.config
        handlers: dict[int, RequestHandler] = {} if config.sasl_mode == "inspect" else dict.fromkeys(
            TOKEN_APIS, DelegationTokensWithoutTokens(self.access, logins=config.sasl_mode == "terminate"))
        if config.upstream_sasl is not None:
            handlers[Api.ALTER_USER_SCRAM_CREDENTIALS] = OwnCredentialsKept(config.upstream_sasl.username)
        return handlers

    def _refused_topic_handlers(self, share_fetch: ShareFetchHandler) -> dict[int, RequestHandler]:
        """ShareFetch's handler, and what keeps the topics a client may not use from it (the proxy's own; with the
        authorizer, those its ACLs do not allow) besides the Produce, Fetch and topic-mutation handlers."""
        access = self.access
        if not access.guards_topics:
            return {Api.SHARE_FETCH: share_fetch}
        without = TopicsWithoutRefused(access)
        return {Api.METADATA: MetadataWithoutRefusedTopics(access, self.cluster.auto_creates_topics,
                                                           self.cluster.partitions),
                Api.DESCRIBE_TOPIC_PARTITIONS: DescribedTopicsWithoutRefused(access, self.cluster.every_topic_name),
                **dict.fromkeys(PARTITIONED_APIS.keys() - {Api.OFFSET_DELETE}, without),
                Api.OFFSET_DELETE: OffsetDeletions(access),
                **dict.fromkeys(CONFIG_APIS, ConfigResourcesJudged(access)),
                Api.LIST_CONFIG_RESOURCES: ConfigResourcesListed(access),
                Api.SHARE_FETCH: ShareTopicsWithoutRefused(access, self.topic_names, share_fetch),
                Api.SHARE_ACKNOWLEDGE: ShareTopicsWithoutRefused(access, self.topic_names),
                **dict.fromkeys(SHARE_GROUP_OFFSET_APIS, ShareGroupOffsets(access))}

    def _acls(self) -> AclService | None:
        """The ACLs in force, with the authorizer; raises ``AclFileError`` when the ACL file or the state directory's
        changes cannot be read (the proxy does not start with ACLs other than those it was given)."""
        settings = self.config.authorizer
        if settings is None:
            return None
        if self.in_front_of_controllers:
            raise ConfigError('[authorizer]: not in front of the controllers ([allocator] mode = "forward"), where '
                              "only brokers connect and nothing is judged by ACLs")
        return AclService(settings.acl_file, self.config.state_dir, self.write_errors, settings.super_users,
                          settings.allow_everyone_if_no_acl_found)

    def _block_claims(self, settings: AllocatorSettings) -> ClusterBlockClaims | None:
        if settings.pid_source != "cluster":
            return None
        config = self.config
        client = ClusterClient(config.upstream, settings.blocks_topic, self.upstream_access, config.connect_timeout_s,
                               config.max_frame_bytes)
        return ClusterBlockClaims(client, config.state_dir, settings.first_id, settings.blocks_topic_id,
                                  config.advertised_bootstrap)

    def _producer_id_source(self, settings: AllocatorSettings) -> ProducerIdSource | None:
        if settings.pid_source == "upstream":
            return None
        # with claims through the cluster the broker id only tags this proxy's own block log
        broker_id = settings.broker_id if settings.broker_id is not None else 0
        epoch = next_broker_epoch(self.config.state_dir)
        if settings.pid_source == "cluster" or settings.bootstrap is None:
            return ProducerIdSource(embedded_fetcher(self.allocator, broker_id, epoch))
        return ProducerIdSource(remote_fetcher(self.config, self.upstream_access, settings.bootstrap, broker_id, epoch))

    def request_chain(self, answers: ClusterAnswers) -> RequestChain:
        """Every request's way through the handlers (``proxy.handlers.chain``), its answers finished by ``answers``:
        the server's, which knows its listeners."""
        return RequestChain(self.api_versions, self._handlers, self._request_rate.throttle_ms, now_ms, answers,
                            self._otherwise, self.api_versions.ceilings)

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        settings = self.config.login
        if self.config.sasl_mode == "inspect":
            return SaslInspector(settings, peer, self.metrics, self.token_owners)
        if self.users is None and self.tokens is None:
            return None
        return SaslServer(self.users, self.tokens, settings, self._login_pool, peer, self.metrics)

    async def start(self) -> None:
        """Ready for logins (an OAUTHBEARER login needs the JWKS endpoint's keys first)."""
        if self._jwks_endpoint is not None:
            await self._jwks_endpoint.start()

    def run(self) -> None:
        """Start the usage log, the maintenance tasks, the producer-ID source and the fleet."""
        self.usage.start()
        loop = asyncio.get_running_loop()
        self._maintenance = [loop.create_task(self.quotas.maintain()), loop.create_task(self._flush_usage())]
        if self._users_file is not None:
            self._maintenance.append(loop.create_task(self._reload_users(self._users_file)))
        if self.acls is not None:
            self._maintenance.append(loop.create_task(self.acls.maintain()))
        if self._jwks_endpoint is not None:
            self._maintenance.append(loop.create_task(self._jwks_endpoint.refresh_periodically()))
        settings = self.allocator_settings
        self._maintenance.append(loop.create_task(self.ledger.maintain(
            settings.ledger_seal_interval_s, settings.producer_id_expiration_ms, LEDGER_CHECK_INTERVAL_S)))
        if self.pid_source is not None:
            self.pid_source.start()
        if self.fleet is not None:
            self.fleet.start()
        if self.usage_shipper is not None:
            self.usage_shipper.start()

    def stop_maintenance(self) -> None:
        for task in self._maintenance:
            task.cancel()

    async def close(self) -> None:
        """Once the connections are gone: the last usage written, the fleet left, the state files closed."""
        self.usage.stop(int(time.time()))
        if self.usage_shipper is not None:
            await self.usage_shipper.stop()
        if self.fleet is not None:
            await self.fleet.stop()
        if self.pid_source is not None:
            self.pid_source.stop()
        self.ledger.close()
        self.blocks.close()
        self._login_pool.shutdown(wait=False, cancel_futures=True)
        os.close(self._state_lock)

    async def _reload_users(self, users_file: WatchedFile) -> None:
        """A changed users file applies to the next login; a bad one keeps the users loaded before."""
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            if not users_file.changed():
                continue
            try:
                self.users = load_users(users_file.path)
            except SaslConfigError as error:
                log.error("keeping the loaded users: %s", error)
                continue
            log.info("reloaded %d users from %s", len(self.users.users), users_file.path)

    async def _flush_usage(self) -> None:
        """Each second, the usage counters go to the writer thread, stamped with that second."""
        while True:
            now = time.time()
            await asyncio.sleep(USAGE_FLUSH_INTERVAL_S - now % USAGE_FLUSH_INTERVAL_S)
            self.usage.end_second(int(now))

