"""Serving: the listeners (bootstrap and one per broker), the broker registry behind the address rewriting, what
each new connection is handed, and the staged shutdown. What it serves with is built in ``wiring``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
from functools import partial

from protocol.addresses import BrokerAddress, carries_addresses, may_name_brokers, rewrite_broker_addresses
from protocol.apis import Api
from proxy.cluster.rewrites import RewriteMemo
from proxy.cluster.upstream import UPSTREAM_ERRORS, fetch_brokers
from proxy.connection.client import ClientConnection
from proxy.connection.context import Connection, UpstreamResolver
from proxy.connection.reading import READ_BYTES
from proxy.decision.outcome import ResponseFinisher
from proxy.handlers.chain import RequestChain
from proxy.reporting.metrics import serve_metrics, worker_labelled
from proxy.runtime.memory import FreedMemory
from proxy.runtime.wiring import Services
from proxy.security.sasl import SaslServer
from proxy.security.sasl_inspect import SaslInspector
from proxy.settings.config import HostPort, ProxyConfig
from proxy.state.quota_service import now_ms
from quotas.config import normalized_ip
from quotas.connection_quotas import Verdict
from quotas.decisions import Requester

log = logging.getLogger(__name__)

_LISTEN_BACKLOG = 1024
_ACCEPT_RETRY_S = 0.1
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
        self._upstream_brokers: dict[int, HostPort] = {}
        self.services = services = Services(config, lambda: self._upstream_brokers.keys())
        # what each connection is handed (``ProxyContext``)
        self.metrics = services.metrics
        self.client_upstream_access = services.client_upstream_access
        self.upstream_connects = services.upstream_connects
        self.principal_mapper = services.principal_mapper
        self.rewrites_addresses = services.rewrites_addresses
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self._maintenance: list[asyncio.Task[None]] = []
        self._broker_listeners: set[int] = set()
        """Node ids whose listener was opened (or could not be)."""
        self._acceptors: list[tuple[asyncio.Task[None], socket.socket]] = []
        self._attaching: set[asyncio.Task[None]] = set()
        self._servers: list[asyncio.Server] = []
        self._connections: dict[Connection, str] = {}
        """Open client connections and the IP each counts against."""
        self._buffer_share = self.metrics.buffer_share_bytes = self.config.write_buffer_high_bytes
        self._address_rewrites = RewriteMemo(_ADDRESS_REWRITE_BYTES)
        self._requests = services.request_chain(self)
        self._freed_memory = FreedMemory()
        self._admitted: dict[Connection, str] = {}
        """Connections accepted and counted, not yet attached to their socket."""
        self._slot_freed = asyncio.Event()
        self._bootstrap_turn = itertools.count()
        self._refresh: asyncio.Task[None] | None = None

    # ---- ProxyContext ---------------------------------------------------------------------------

    @property
    def requests(self) -> RequestChain:
        return self._requests

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        return self.services.new_login(peer)

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
            self.services.quotas.connections.release(ip)
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

    # ---- the cluster's answers, as clients get them (ClusterAnswers) --------------------------------

    def finisher(self, api_key: int, api_version: int) -> ResponseFinisher | None:
        if api_key == Api.API_VERSIONS:
            return partial(self.services.api_versions.adapt, version=api_version)
        if self.rewrites_addresses and carries_addresses(api_key, api_version):
            return partial(self._rewrite_addresses, api_key, api_version)
        return None

    def _rewrite_addresses(self, api_key: int, api_version: int, body: memoryview) -> bytes | None:
        """A response body naming brokers, rewritten to name the proxy's listeners (None: unchanged)."""
        if not may_name_brokers(api_key, api_version, body):
            return None  # never remembered: a Produce answer's bytes (its offsets) are never the same twice
        return self._address_rewrites.rewritten(
            (api_key, api_version, bytes(body)),
            lambda: rewrite_broker_addresses(api_key, api_version, body, self.advertise_broker))

    # ---- brokers and listeners ----------------------------------------------------------------

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
        quotas = self.services.quotas
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
        decision = self.services.quotas.user_connections.record(Requester(user), 1, now_ms())
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
                tls = self.services.listener_tls
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
                                          self.config.max_frame_bytes, self.services.upstream_access)
        except UPSTREAM_ERRORS as error:
            log.warning("cannot read cluster metadata from %s: %s",
                        ",".join(map(str, self.config.upstream)), error or type(error).__name__)
            return
        for broker in brokers:
            self.advertise_broker(broker)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        services = self.services
        await services.start()  # ready for logins before anything listens
        listen = self.config.listen
        sock = self._listening_socket(listen.host, listen.port)
        self._serve(sock, "bootstrap", self._bootstrap_target)
        log.info("listening for bootstrap on %s (upstream %s)", listen,
                 ",".join(map(str, self.config.upstream)))
        if self.rewrites_addresses:  # controllers answer no Metadata, and their addresses are not rewritten
            await self.refresh_brokers()
        services.run()
        self._maintenance = [asyncio.get_running_loop().create_task(self._freed_memory.return_periodically())]
        if self.config.metrics_listen is not None:
            metrics = self.config.metrics_listen
            endpoint = self.config.metrics_endpoint
            registry = self.metrics.registry if self.config.worker is None else worker_labelled(
                self.metrics.registry, self.config.worker)
            sock = self._metrics_socket or metrics_socket(metrics.host, metrics.port)
            self._servers.append(await serve_metrics(
                registry, sock, endpoint.credentials,
                None if endpoint.tls is None else endpoint.tls.context(), services.quotas.explain))
            log.info("serving metrics on %s://%s/metrics%s", "http" if endpoint.tls is None else "https", metrics,
                     "" if endpoint.credentials is None else " (basic authentication)")

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish within the grace period, then force."""
        self.services.stop_maintenance()
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
        await self.services.close()
