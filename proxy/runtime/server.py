"""Listeners, the broker registry and staged shutdown."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from prometheus_client import CollectorRegistry

from allocator.block_log import BlockLog
from allocator.durable import WriteErrors, lock_directory
from protocol.addresses import BrokerAddress, may_name_brokers, rewrite_broker_addresses
from protocol.apis import Api
from protocol.reserved_topics import CONFIG_APIS, PARTITIONED_APIS
from protocol.share_group_offsets import SHARE_GROUP_OFFSET_APIS
from proxy.cluster.client import ClusterClient
from proxy.cluster.fleet import Fleet, FleetSettings
from proxy.cluster.info import ClusterInfo
from proxy.cluster.rewrites import RewriteMemo
from proxy.cluster.token_owners import TokenOwners
from proxy.cluster.topic_names import TopicNames
from proxy.cluster.upstream import UPSTREAM_ERRORS, ConnectTurns, UpstreamAccess, fetch_brokers
from proxy.connection.client import ClientConnection
from proxy.connection.context import Connection, UpstreamResolver
from proxy.connection.state import READ_BYTES
from proxy.decision.interception import RequestHandler
from proxy.files.watched_file import WatchedFile
from proxy.handlers.api_versions import ApiVersionsAnswers
from proxy.handlers.chain import RequestChain
from proxy.handlers.client_quotas import ClientQuotaHandlers
from proxy.handlers.fetch import FetchHandler
from proxy.handlers.produce import ProduceHandler
from proxy.handlers.producer_ids import AllocateProducerIdsForwarder, AllocateProducerIdsHandler, InitProducerIdHandler
from proxy.handlers.request_rate import RequestRateHandler
from proxy.handlers.reserved_topics import (
    DescribedTopicsWithoutReserved,
    MetadataWithoutReservedTopics,
    ShareGroupOffsetsWithoutReserved,
    ShareTopicsWithoutReserved,
    TopicsWithoutReserved,
)
from proxy.handlers.share_fetch import ShareFetchHandler
from proxy.handlers.topic_mutations import TopicMutationHandler
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
from proxy.reporting.metrics import ProxyMetrics, serve_metrics, worker_labelled
from proxy.reporting.usage_log import STORE as USAGE_LOG_STORE
from proxy.reporting.usage_log import UsageLog
from proxy.runtime.memory import FreedMemory
from proxy.security.oauthbearer import token_validator
from proxy.security.sasl import SaslServer
from proxy.security.sasl_inspect import SaslInspector
from proxy.security.tls import PrincipalMapper, ReloadingContext
from proxy.security.users import SaslConfigError, UserStore, load_users
from proxy.settings.config import HostPort, ProxyConfig
from proxy.state.pid_ledger import STORE as LEDGER_STORE
from proxy.state.pid_ledger import LedgerRecorder, open_ledger
from proxy.state.quota_service import RELOAD_INTERVAL_S, QuotaService, now_ms
from proxy.state.quota_service import STORE as CLIENT_QUOTAS_STORE
from quotas.config import QuotaScope, normalized_ip
from quotas.connection_quotas import Verdict

log = logging.getLogger(__name__)

_LISTEN_BACKLOG = 1024
_ACCEPT_RETRY_S = 0.1
USAGE_FLUSH_INTERVAL_S = 1.0
BLOCK_LOG_FILE = "producer-id-blocks.log"
LEDGER_CHECK_INTERVAL_S = 1.0
_ADDRESS_REWRITE_BYTES = 4 * 1024 * 1024
KAFKA_SOCKET_BUFFER_BYTES = 102400
SMALLEST_BUFFER_SHARE = 64 * 1024
"""A connection's least buffer a side however many share ``max_buffered_bytes``: Kafka's own socket buffers
are 100 KiB (``socket.send.buffer.bytes``)."""


def peer_ip(address: object) -> str:
    """The IP a client's connections count against (IPv4-mapped IPv6 as IPv4)."""
    host = address[0] if isinstance(address, tuple) else str(address)
    try:
        return normalized_ip(host)
    except ValueError:  # a Unix socket or an unparsable name: one bucket of its own
        return str(host)


TAKEN_IN_A_ROW = 128
"""Connections taken from a listener's backlog before the loop gets a turn: a burst of a hundred clients is taken at
once, and a flood of new connections cannot starve the open ones."""


class Backlog:
    """The connections waiting on a listening socket (non-blocking), taken at once as a broker's acceptor thread takes
    them. uvloop's ``sock_accept`` waits a loop turn for each connection even when many are waiting: a client arriving
    just after a hundred others waited a hundred turns, long when every turn served busy connections (measured in
    docs/deploying.md, "New connections under load")."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._taken_in_a_row = 0

    async def next_connection(self) -> tuple[socket.socket, object]:
        """The next connection and its peer's address."""
        client = None
        if self._taken_in_a_row < TAKEN_IN_A_ROW:
            try:
                client, address = self._sock.accept()
                self._taken_in_a_row += 1
            except BlockingIOError:
                pass
        if client is None:
            self._taken_in_a_row = 0
            client, address = await asyncio.get_running_loop().sock_accept(self._sock)
        client.setblocking(False)
        return client, address


def metrics_socket(host: str, port: int) -> socket.socket:
    """The metrics listener's socket, bound and listening.

    With several workers the supervisor binds every worker's before forking and holds it across that worker's
    restarts: while a worker is down its port stays taken (nothing else, not even an outgoing connection given
    it as an ephemeral port, can take it from the worker coming back), and a scrape meanwhile waits in the
    backlog instead of being refused."""
    return socket.create_server((host, port))


class ProxyServer:
    def __init__(self, config: ProxyConfig, held_metrics_socket: socket.socket | None = None) -> None:
        """``held_metrics_socket``: the metrics listener's socket, bound by a supervisor that outlives this
        worker (``metrics_socket``); None: bound here, from ``config.metrics_listen``."""
        self.config = config
        self._metrics_socket = held_metrics_socket
        self._state_lock = lock_directory(config.state_dir)  # first: nothing of the directory is read before
        self.write_errors = WriteErrors((BLOCK_LOG_STORE, CLIENT_QUOTAS_STORE, LEDGER_STORE, USAGE_LOG_STORE))
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
        fleet = FleetSettings.from_config(config)
        self.fleet = None if fleet is None else Fleet(fleet, fleet.instance(config, config.worker), self.quotas, config,
                                                      self.upstream_access, self.metrics.registry)
        if self.fleet is None and self.quotas.config.settings.quota_scope is QuotaScope.CLUSTER:
            log.warning("quota.scope is \"cluster\" but --config has no [fleet]: budgets are this proxy's alone")
        self.usage = UsageLog(config.state_dir / "usage", config.usage_retention_days, self.write_errors)
        self.quotas.observe(self.usage.quotas_in_force)  # the report draws each principal's quota in force
        self.users: UserStore | None = load_users(config.sasl_users) if config.sasl_users else None
        self._login_pool = ThreadPoolExecutor(config.login_threads, thread_name_prefix="sasl-login")
        self.tokens, self._jwks_endpoint = (token_validator(config.login.oauthbearer) if config.sasl_mode == "terminate"
                                            else (None, None))
        """What checks OAUTHBEARER tokens (terminate mode), and the JWKS endpoint it fetches keys from."""
        self._users_file = WatchedFile(config.sasl_users) if config.sasl_users else None
        self.allocator_settings = settings = AllocatorSettings.from_config(config)
        self.blocks = BlockLog(config.state_dir / BLOCK_LOG_FILE, settings.first_id, settings.end_id)
        self.allocator = Allocator(self.blocks, self.write_errors, self._block_claims(settings))
        self.ledger = LedgerRecorder(open_ledger(config.state_dir, settings.ledger_capacity), self.write_errors,
                                     settings.ledger_cache)
        self.pid_source = self._producer_id_source(settings)
        self.cluster = ClusterInfo(config, lambda: self._upstream_brokers.keys(), self.upstream_access)
        self.topic_names = TopicNames(self.cluster.topics_by_id)
        self.reserved_topics = frozenset(
            ([fleet.topic, fleet.quotas_topic] if fleet is not None else [])
            + ([settings.blocks_topic] if settings.pid_source == "cluster" else []))
        """The proxy's own topics: no client's request may reach them (the proxy writes them with its own login,
        which the cluster lets write them whoever the client is)."""
        mutations = TopicMutationHandler(self.quotas, self.cluster, self.usage, self.reserved_topics)
        self.in_front_of_controllers = settings.mode == "forward"
        """Between the brokers and the controller quorum: only AllocateProducerIds is looked at, everything
        else (KRaft's Fetch, BrokerRegistration, BrokerHeartbeat, ...) passes untouched, addresses included."""
        request_rate = RequestRateHandler(self.quotas, self.usage, charges=not self.in_front_of_controllers)
        self.api_versions = ApiVersionsAnswers(config, self.upstream_access, self.in_front_of_controllers)
        client_quotas = ClientQuotaHandlers(self.quotas, self.api_versions.cluster_api_keys, config.admin_principals)
        allocations = BlockAllocations(self.metrics.registry, self.usage)
        self.rewrites_addresses = not self.in_front_of_controllers
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        produce = ProduceHandler(self.quotas, self.usage, self.ledger, self.topic_names, settings.scan_all_produce,
                                 self.reserved_topics)
        handlers: Mapping[int, RequestHandler] = {
            Api.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsForwarder(settings, allocations),
        } if self.in_front_of_controllers else {
            Api.PRODUCE: produce,
            Api.FETCH: FetchHandler(self.quotas, self.usage, self.topic_names, self.reserved_topics),
            Api.CREATE_TOPICS: mutations,
            Api.DELETE_TOPICS: mutations,
            Api.CREATE_PARTITIONS: mutations,
            Api.INIT_PRODUCER_ID: InitProducerIdHandler(self.quotas, self.pid_source, self.ledger, self.usage),
            Api.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsHandler(self.allocator, settings, allocations),
            Api.ALTER_CLIENT_QUOTAS: client_quotas.alter,
            Api.DESCRIBE_CLIENT_QUOTAS: client_quotas.describe,
            **self._reserved_topic_handlers(ShareFetchHandler(self.quotas, self.usage, self.topic_names)),
        }
        self.requests = RequestChain(self.api_versions, handlers,
                                     {} if self.in_front_of_controllers else {Api.PRODUCE: produce},
                                     request_rate.throttle_ms)
        self._maintenance: list[asyncio.Task[None]] = []
        self._upstream_brokers: dict[int, HostPort] = {}
        self._broker_listeners: set[int] = set()
        """Node ids whose listener was opened (or could not be)."""
        self._acceptors: list[tuple[asyncio.Task[None], socket.socket]] = []
        self._attaching: set[asyncio.Task[None]] = set()
        self._servers: list[asyncio.Server] = []
        self._connections: dict[Connection, str] = {}
        """Open client connections and the IP each counts against."""
        self._buffer_share = self.metrics.buffer_share_bytes = self.config.write_buffer_high_bytes
        self._address_rewrites = RewriteMemo(_ADDRESS_REWRITE_BYTES)
        self._freed_memory = FreedMemory()
        self._admitted: dict[Connection, str] = {}
        """Connections accepted and counted, not yet attached to their socket."""
        self._slot_freed = asyncio.Event()
        self._bootstrap_turn = itertools.count()
        self._refresh: asyncio.Task[None] | None = None

    # ---- ProxyContext ---------------------------------------------------------------------------

    def _reserved_topic_handlers(self, share_fetch: ShareFetchHandler) -> dict[int, RequestHandler]:
        """ShareFetch's handler, and what keeps the proxy's own topics from clients besides the Produce, Fetch and
        topic-mutation handlers."""
        if not self.reserved_topics:
            return {Api.SHARE_FETCH: share_fetch}
        without = TopicsWithoutReserved(self.reserved_topics)
        return {Api.METADATA: MetadataWithoutReservedTopics(self.reserved_topics),
                Api.DESCRIBE_TOPIC_PARTITIONS: DescribedTopicsWithoutReserved(self.reserved_topics),
                **dict.fromkeys([*PARTITIONED_APIS, *CONFIG_APIS], without),
                Api.SHARE_FETCH: ShareTopicsWithoutReserved(self.reserved_topics, self.topic_names, share_fetch),
                Api.SHARE_ACKNOWLEDGE: ShareTopicsWithoutReserved(self.reserved_topics, self.topic_names),
                **dict.fromkeys(SHARE_GROUP_OFFSET_APIS, ShareGroupOffsetsWithoutReserved(self.reserved_topics))}

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

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        settings = self.config.login
        if self.config.sasl_mode == "inspect":
            return SaslInspector(settings, peer, self.metrics, self.token_owners)
        if self.users is None and self.tokens is None:
            return None
        return SaslServer(self.users, self.tokens, settings, self._login_pool, peer, self.metrics)

    def connection_opened(self, connection: Connection) -> None:
        self._connections[connection] = self._admitted.pop(connection)
        self.metrics.open_connections += 1
        self.metrics.connections_accepted += 1
        if not self._share_buffers():  # a new share is told every connection, this one included
            connection.set_buffer_share(self._buffer_share)

    def connection_closed(self, connection: Connection) -> None:
        ip = self._connections.pop(connection, None)
        if ip is not None:
            self.metrics.open_connections -= 1
            self._share_buffers()
            self._freed_memory.connection_closed()
        else:
            ip = self._admitted.pop(connection, None)  # its socket could not be attached
        if ip is not None:
            self.quotas.connections.release(ip)
            self._slot_freed.set()

    def _share_buffers(self) -> bool:
        """Give every connection an equal share of ``max_buffered_bytes`` (two sides each, at most
        ``write_buffer_high_bytes`` a side, never less than ``SMALLEST_BUFFER_SHARE``). The connections
        are told only when the share moved by a sixteenth or more: a burst of connections costs no
        more than a few passes over them. True when they were told."""
        config = self.config
        share = max(SMALLEST_BUFFER_SHARE, min(config.write_buffer_high_bytes,
                                               config.max_buffered_bytes // (2 * max(1, len(self._connections)))))
        if abs(share - self._buffer_share) * 16 < self._buffer_share:
            return False
        self._buffer_share = share
        self.metrics.buffer_share_bytes = share
        for connection in self._connections:
            connection.set_buffer_share(share)
        return True

    def adapt_api_versions(self, body: memoryview, api_version: int) -> bytes | None:
        return self.api_versions.adapt(body, api_version)

    # ---- brokers and listeners ----------------------------------------------------------------

    def rewrite_addresses(self, api_key: int, api_version: int, body: bytes | memoryview) -> bytes | None:
        if not may_name_brokers(api_key, api_version, body):
            return None  # never remembered: a Produce answer's bytes (its offsets) are never the same twice
        return self._address_rewrites.rewritten(
            (api_key, api_version, bytes(body)),
            lambda: rewrite_broker_addresses(api_key, api_version, body, self.advertise_broker))

    def advertise_broker(self, broker: BrokerAddress) -> tuple[str, int]:
        """Record where node ``broker.node_id`` lives upstream; answer where the proxy serves it.

        A node seen for the first time gets its listening socket bound here, synchronously, so
        the kernel accepts connections to it before the response naming it reaches the client.
        """
        self._upstream_brokers[broker.node_id] = HostPort(broker.host, broker.port)
        port = self.config.broker_port_base + broker.node_id
        if broker.node_id not in self._broker_listeners:
            self._broker_listeners.add(broker.node_id)
            self._open_broker_listener(broker.node_id, port)
        return self.config.advertised_host, port

    def _open_broker_listener(self, node_id: int, port: int) -> None:
        name = f"broker {node_id}"
        try:
            if not 0 < port < 65536:
                raise OSError(f"port {port} out of range (broker-port-base + node id)")
            sock = self._listening_socket(self.config.listen.host, port)
        except OSError as error:
            log.error("cannot listen for %s on %s:%s: %s", name, self.config.listen.host, port, error)
            return
        log.info("listening for %s on %s:%d (upstream %s)", name, self.config.listen.host, port,
                 self._upstream_brokers[node_id])
        self._serve(sock, name, self._broker_resolver(node_id))

    def _listening_socket(self, host: str, port: int) -> socket.socket:
        """With several workers each binds the same port; the kernel spreads new connections over them."""
        return socket.create_server((host, port), backlog=_LISTEN_BACKLOG, reuse_port=self.config.workers > 1)

    def _serve(self, sock: socket.socket, name: str, resolver: UpstreamResolver) -> None:
        sock.setblocking(False)
        task = asyncio.get_running_loop().create_task(self._accept_connections(sock, name, resolver))
        self._acceptors.append((task, sock))

    async def _accept_connections(self, sock: socket.socket, name: str, resolver: UpstreamResolver) -> None:
        """Kafka's acceptor: take a connection, then wait (accepting nothing more) while the creation
        rate or ``max-connections`` says so; then the IP's rate and count decide its fate."""
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        limits = quotas.connections
        counts = self.metrics.listener_counts(name)
        backlog = Backlog(sock)
        while True:
            try:
                client, address = await backlog.next_connection()
            except OSError as error:  # e.g. EMFILE: wait for descriptors to be freed rather than spin
                log.warning("cannot accept on %s: %s", name, error)
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            delay_ms = limits.creation_delay_ms(now_ms())
            if delay_ms or not limits.slot_available():
                counts.delayed += 1
                await asyncio.sleep(delay_ms / 1000)
                while not limits.slot_available():
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
            ip = peer_ip(address)
            admission = limits.admit(ip, quotas.config.connection_rate_for(ip), now_ms())
            if admission.verdict is Verdict.TOO_MANY:
                counts.refused += 1
                log.info("refused a connection from %s on %s: it has its maximum of %d connections",
                         ip, name, limits.connections_of(ip))
                client.close()
            elif admission.verdict is Verdict.THROTTLED:
                counts.throttled += 1
                log.debug("closing a connection from %s on %s in %d ms: over its creation rate",
                          ip, name, admission.delay_ms)
                loop.call_later(admission.delay_ms / 1000, client.close)
            else:
                counts.accepted += 1
                if admission.observed_delay_ms:
                    log.debug("accepted a connection from %s on %s that its observed creation rate would have "
                              "closed in %d ms", ip, name, admission.observed_delay_ms)
                self._start_connection(client, ip, name, resolver)

    def admit_user(self, user: str) -> int:
        decision = self.quotas.user_connections.admit(user, now_ms())
        if not decision.admitted:
            log.debug("closing a connection of user %s in %d ms: over its connection creation rate", user,
                      decision.throttle_ms)
            return decision.throttle_ms
        if decision.observed_ms:
            log.debug("serving a connection of user %s that its observed connection creation rate would have "
                      "closed in %d ms", user, decision.observed_ms)
        return 0

    def _start_connection(self, client: socket.socket, ip: str, name: str, resolver: UpstreamResolver) -> None:
        connection = ClientConnection(self, resolver, name)
        self._admitted[connection] = ip
        # Kafka's socket.send.buffer.bytes: the kernel holds no more for a client that stops reading than a
        # broker's would, and the proxy's own buffers do the rest. Its socket.receive.buffer.bytes is left to
        # the kernel's autotuning: 100 KiB there made reads smaller and cost more CPU per produced MB
        # (docs/benchmarks.md)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, KAFKA_SOCKET_BUFFER_BYTES)

        async def attach() -> None:
            try:
                tls = self.listener_tls
                await asyncio.get_running_loop().connect_accepted_socket(
                    lambda: connection, sock=client, ssl=None if tls is None else tls.get(),
                    ssl_handshake_timeout=self.config.connect_timeout_s if tls is not None else None)
            except OSError as error:  # a failed TLS handshake is a client's mistake (or a scan), not the proxy's
                (log.info if isinstance(error, ssl.SSLError) else log.warning)(
                    "cannot serve a connection from %s on %s: %s", ip, name, error)
                client.close()
                self.connection_closed(connection)

        task = asyncio.get_running_loop().create_task(attach())
        self._attaching.add(task)
        task.add_done_callback(self._attaching.discard)

    def _broker_resolver(self, node_id: int) -> UpstreamResolver:
        async def resolve() -> HostPort:
            if node_id not in self._upstream_brokers:
                await self.refresh_brokers()
            try:
                return self._upstream_brokers[node_id]
            except KeyError:
                raise LookupError(f"node {node_id} is not in the cluster's metadata") from None
        return resolve

    async def _bootstrap_target(self) -> HostPort:
        upstream = self.config.upstream
        return upstream[next(self._bootstrap_turn) % len(upstream)]

    async def refresh_brokers(self) -> None:
        """Learn the cluster's brokers (once at a time) and open listeners for new ones."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._fetch_brokers())
        await asyncio.shield(self._refresh)

    async def _fetch_brokers(self) -> None:
        try:
            brokers = await fetch_brokers(self.config.upstream, self.config.connect_timeout_s,
                                          self.config.max_frame_bytes, self.upstream_access)
        except UPSTREAM_ERRORS as error:
            log.warning("cannot read cluster metadata from %s: %s",
                        ",".join(map(str, self.config.upstream)), error or type(error).__name__)
            return
        for broker in brokers:
            self.advertise_broker(broker)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._jwks_endpoint is not None:  # no login can succeed before it has keys
            await self._jwks_endpoint.start()
        listen = self.config.listen
        sock = self._listening_socket(listen.host, listen.port)
        self._serve(sock, "bootstrap", self._bootstrap_target)
        log.info("listening for bootstrap on %s (upstream %s)", listen,
                 ",".join(map(str, self.config.upstream)))
        if self.rewrites_addresses:  # controllers answer no Metadata, and their addresses are not rewritten
            await self.refresh_brokers()
        self.usage.start()
        loop = asyncio.get_running_loop()
        self._maintenance = [loop.create_task(self.quotas.maintain()), loop.create_task(self._flush_usage()),
                             loop.create_task(self._freed_memory.return_periodically())]
        if self._users_file is not None:
            self._maintenance.append(loop.create_task(self._reload_users(self._users_file)))
        if self._jwks_endpoint is not None:
            self._maintenance.append(loop.create_task(self._jwks_endpoint.refresh_periodically()))
        settings = self.allocator_settings
        self._maintenance.append(loop.create_task(self.ledger.maintain(
            settings.ledger_seal_interval_s, settings.producer_id_expiration_ms, LEDGER_CHECK_INTERVAL_S)))
        if self.pid_source is not None:
            self.pid_source.start()
        if self.fleet is not None:
            self.fleet.start()
        if self.config.metrics_listen is not None:
            metrics = self.config.metrics_listen
            endpoint = self.config.metrics_endpoint
            registry = self.metrics.registry if self.config.worker is None else worker_labelled(
                self.metrics.registry, self.config.worker)
            sock = self._metrics_socket or metrics_socket(metrics.host, metrics.port)
            self._servers.append(await serve_metrics(
                registry, sock, endpoint.credentials,
                None if endpoint.tls is None else endpoint.tls.context(), self.quotas.explain))
            log.info("serving metrics on %s://%s/metrics%s", "http" if endpoint.tls is None else "https", metrics,
                     "" if endpoint.credentials is None else " (basic authentication)")

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish within the grace period, then force."""
        for task in self._maintenance:
            task.cancel()
        for task, sock in self._acceptors:
            task.cancel()
            sock.close()
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            connection.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_grace_s
        while self._connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self._connections):
            connection.abort()
        for server in self._servers:
            await server.wait_closed()
        self.usage.stop(int(time.time()))
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

