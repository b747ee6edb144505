"""One client connection and its dedicated upstream connection: the transports' callbacks, the
upstream connection's opening and loss, idle and shutdown, and what holds its requests.

Requests flow client -> upstream as their original bytes (or the replacement decided); responses flow back as the
decision on their request says (finished: the proxy's addresses for the brokers', the versions it serves, what a
handler merged in; a throttle raised), else untouched. The connection is made of objects, each
with one job: the request path (``requests``) and the response path (``responses``), the link to the cluster
(``upstream_link``), the login gate (``login``), the mute (``mute``), the requests awaiting answers (``in_flight``),
the outboxes (``outbox``) and the read gates (``flow``). It wires them together and answers what they ask of it
(``RequestOwner``, ``ResponseOwner``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from proxy.connection.close_reason import CloseReason
from proxy.connection.context import ProxyContext, UpstreamResolver
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.in_flight import InFlightRequests
from proxy.connection.login import LoginGate
from proxy.connection.mute import ChannelMute
from proxy.connection.outbox import Outbox
from proxy.connection.reading import READ_AFTER_SPLICED_RECORDS_BYTES, read_bytes_for
from proxy.connection.requests import RequestPath
from proxy.connection.responses import ResponsePath
from proxy.connection.upstream_link import UpstreamLink
from proxy.decision.outcome import Sender
from proxy.security.acls import java_host_address
from proxy.security.tls import peer_principal_name
from proxy.settings.config import HostPort
from quotas.config import ANONYMOUS

log = logging.getLogger(__name__)


class UpstreamProtocol(asyncio.BufferedProtocol):
    """The proxy's side of the broker connection; everything is delegated to the client side."""

    def __init__(self, client: ClientConnection) -> None:
        self._client = client

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._client.upstream_read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._client.upstream_buffer_updated(nbytes)

    def pause_writing(self) -> None:
        self._client.upstream_busy()

    def resume_writing(self) -> None:
        self._client.upstream_drained()

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.upstream_lost(exc)


class ClientConnection(asyncio.BufferedProtocol):
    """The client's transport protocol: one connection's objects wired together, and what holds its requests."""

    def __init__(self, context: ProxyContext, resolve_upstream: UpstreamResolver, listener: str) -> None:
        self._context = context
        self._config = context.config
        self._metrics = context.metrics
        self._listener = listener
        self._in_flight = InFlightRequests()
        self._link = UpstreamLink(resolve_upstream, context.upstream_connects, context.client_upstream_access,
                                  self._config.connect_timeout_s, self._config.max_frame_bytes)
        """The connection's own connection to the cluster."""
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._closed = False
        self._draining = False
        self._last_activity = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._sender = Sender(ANONYMOUS, "")
        """Who sends the requests (the principal) and the broker they reach, renewed when either is known."""
        self._buffer_high = self._config.write_buffer_high_bytes
        """Either side stops being read while the other has this much unsent: ``write_buffer_high_bytes`` or
        the connection's share of ``max_buffered_bytes``, whichever is smaller (``set_buffer_share``)."""
        self._read_bytes = read_bytes_for(self._buffer_high)
        # made once the transport is there (``connection_made``)
        self._loop: asyncio.AbstractEventLoop
        self.gate: ReadGate
        self._to_client: Outbox
        """Everything the client is sent goes through it."""
        self._mute: ChannelMute
        """The throttle, the login step and a close asked for: when requests read wait undecided."""
        self._responses: ResponsePath
        self._requests: RequestPath

    # ---- what the paths ask of their connection (``RequestOwner``, ``ResponseOwner``) ------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def read_bytes(self) -> int:
        return self._read_bytes

    def touched(self) -> None:
        self._last_activity = self._loop.time()

    def sender(self) -> Sender:
        return self._sender

    def holding(self) -> bool:
        """Later requests wait: for a handler asking the cluster, for a throttled response and its mute, for
        the client to read its answers, or for the cluster to answer some of the requests out."""
        return (self._mute.holds or self._requests.settling
                or self._link.opening or self._to_client.behind
                or self._in_flight.local_answer_bytes >= self._buffer_high  # a client reading nothing must not
                # make the proxy hold its own answers without bound
                or len(self._in_flight) >= self._config.max_in_flight_requests)

    def close_if_answered(self) -> None:
        if self._mute.closing and not self._awaiting_responses():
            self.close(CloseReason.ACKS0_PARTITION_ERROR)

    def login_step_answered(self) -> None:
        """Answers were sent: once every request read before the login completed has its answer, the login gate
        lets the next be read (``LoginGate.step_answered``)."""
        login = self._requests.login
        if login is not None and not self._awaiting_responses() and not self._closed:
            login.step_answered()

    def after_responses(self) -> None:
        self.close_if_answered()
        if self.gate.paused_for(PauseReason.HOLDING) and not self.holding():
            self._requests.release_held()  # held for the requests in flight (reading paused, maybe nothing held yet)
        if self._draining and not self._awaiting_responses() and not self._requests.settling:
            self.close(CloseReason.SHUTDOWN, "drained")  # requests still held were never forwarded: the client retries

    def _awaiting_responses(self) -> bool:
        return bool(self._in_flight) or self._responses.passing

    # ---- reads ------------------------------------------------------------------------------------

    def read_buffer(self) -> memoryview:
        """Where the next read of either side lands: the loop's one read buffer, no more of it than this
        connection may read at once (``_read_bytes``): what a connection holds follows its buffer share,
        not the loop's read size."""
        return self._context.read_buffer[:self._read_bytes]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._requests.batch_header_next:
            # records were spliced and the request's structure follows: read just past the next batch's
            # header, so that the records after it are spliced too rather than read
            return self._context.read_buffer[:READ_AFTER_SPLICED_RECORDS_BYTES]
        return self.read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._requests.data_received(self.read_out(nbytes))

    def upstream_read_buffer(self) -> memoryview:
        return self._responses.read_buffer()

    def upstream_buffer_updated(self, nbytes: int) -> None:
        self._responses.buffer_updated(nbytes)

    def read_out(self, nbytes: int) -> bytes:
        """What the last read (of either side) put in the read buffer, before the next read reuses it."""
        return bytes(self._context.read_buffer[:nbytes])

    # ---- client transport callbacks -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._sender = self._sender._replace(host=java_host_address(peer[0]) if isinstance(peer, tuple) else "")
        self.gate = ReadGate(transport)
        self._loop = loop = asyncio.get_running_loop()
        self._mute = ChannelMute(loop, lambda: self._requests.pause_if_holding(), self._mute_released,
                                 self._count_muted)
        self._to_client = Outbox(transport, self._buffer_high, self._client_fell_behind, self._client_caught_up)
        self._responses = ResponsePath(self, self._context, loop, transport, self._to_client, self._link,
                                       self._in_flight, self._mute, self._peer)
        self._requests = RequestPath(self, self._context, loop, transport, self.gate, self._to_client, self._link,
                                     self._in_flight, self._mute, self._responses, self._peer)
        self._context.connection_opened(self)  # sets the buffer share
        ssl_object = transport.get_extra_info("ssl_object")
        name = None
        if ssl_object is not None:
            name, subject = peer_principal_name(ssl_object, self._context.principal_mapper)
            if subject is not None and name is None:
                log.info("closing connection from %s on %s: no principal mapping rule applies to %s",
                         self._peer, self._listener, subject)
                self.close(CloseReason.NO_PRINCIPAL)
                return
            self._name_user(name or ANONYMOUS)  # SASL, when on, names the principal once the client logs in
        self._last_activity = loop.time()
        self._idle_timer = loop.call_later(self._config.idle_timeout_s, self._check_idle)
        loop.call_soon(self.gate.reassert)
        login = self._context.new_login(self._peer)
        if login is None and name is not None and not self._admitted(name):
            return  # a certificate named the user, and no login will
        if login is not None:
            settings = self._config.login
            self._requests.limit_frames(min(self._config.max_frame_bytes, settings.max_receive_bytes))
            self._requests.login = LoginGate(
                login, self._mute, self.gate, loop, settings.timeout_s, f"from {self._peer} on {self._listener}",
                self._logged_in, self.close, lambda: self._requests.release_held())
        if login is None or login.needs_upstream_before_login:
            self._start_upstream()
        # when the proxy terminates SASL, the upstream connection opens once the client has logged in: a
        # client that cannot log in (or a flood of connections) never costs the cluster a connection

    def _name_user(self, user: str) -> None:
        self._sender = self._sender._replace(user=user, broker=self._link.broker)

    def _logged_in(self, user: str) -> bool:
        """The login named ``user``, the principal of every later request: the upstream connection opens (when
        the proxy terminates the login). False: the connection is over its user's connection creation rate."""
        self._name_user(user)
        self._requests.limit_frames(self._config.max_frame_bytes)
        if not self._admitted(user):
            return False
        if not self._link.started:
            self._start_upstream()
        return True

    def _admitted(self, user: str) -> bool:
        """The user a login or a client certificate named is charged the connection; over its
        ``connection_creation_rate`` the connection reads nothing more and is closed after the throttle, as
        Kafka closes a connection over its IP's rate (its login was answered: the client learns nothing
        else)."""
        delay_ms = self._context.admit_user(user)
        if not delay_ms:
            return True
        self.gate.pause(PauseReason.USER_OVER_CONNECTION_RATE)
        self._loop.call_later(delay_ms / 1000, self.close, CloseReason.OVER_USER_CONNECTION_RATE, f"user {user}")
        return False

    def _mute_released(self) -> None:
        """Nothing of the mute holds the requests read any longer: decide them (something else may hold them)."""
        self.gate.resume(PauseReason.HOLDING)
        self._requests.release_held()

    def _count_muted(self, change: int) -> None:
        self._metrics.muted_connections += change

    def _start_upstream(self) -> None:
        """Open the upstream connection; requests read meanwhile wait for it, in order."""
        self.gate.pause(PauseReason.CONNECTING)
        self._link.open(UpstreamProtocol(self), self._new_cluster_outbox, self._upstream_opened, self._upstream_failed)

    def eof_received(self) -> bool | None:
        if self._requests.mid_frame:
            self._metrics.closed_for_bad_input += 1
            self.close(CloseReason.TRUNCATED_FRAME, "client closed in the middle of a frame")
        return None

    def pause_writing(self) -> None:
        self._to_client.busy()

    def resume_writing(self) -> None:
        self._to_client.drained()

    def upstream_busy(self) -> None:
        if self._link.outbox is not None:
            self._link.outbox.busy()

    def upstream_drained(self) -> None:
        if self._link.outbox is not None:
            self._link.outbox.drained()

    def _client_fell_behind(self) -> None:
        """The client reads less than it is sent: nothing more is read from the cluster for it, and
        none of its requests is read or decided, whoever would answer it (the proxy's own answers
        included), until it catches up."""
        self.gate.pause(PauseReason.CLIENT_BACKLOG)
        if self._link.gate is not None:
            self._link.gate.pause(PauseReason.PEER_BACKPRESSURE)

    def _client_caught_up(self) -> None:
        self.gate.resume(PauseReason.CLIENT_BACKLOG)
        if self._link.gate is not None:
            self._link.gate.resume(PauseReason.PEER_BACKPRESSURE)
        self._requests.release_held()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(CloseReason.CLIENT_LEFT, "" if exc is None else f"connection lost: {exc}")

    # ---- upstream lifecycle --------------------------------------------------------------------

    def _new_cluster_outbox(self, transport: asyncio.Transport) -> Outbox:
        """What the cluster is sent: a backlog there stops the client's requests being read."""
        return Outbox(transport, self._buffer_high, lambda: self.gate.pause(PauseReason.PEER_BACKPRESSURE),
                      lambda: self.gate.resume(PauseReason.PEER_BACKPRESSURE))

    def _upstream_opened(self, target: HostPort) -> None:
        log.debug("client %s on %s connected upstream to %s", self._peer, self._listener, target)
        self._sender = self._sender._replace(broker=self._link.broker)
        self.gate.resume(PauseReason.CONNECTING)
        self._requests.release_held()
        self._requests.link_opened()

    def _upstream_failed(self, why: str) -> None:
        self._metrics.upstream_connect_failures += 1
        self.close(CloseReason.UPSTREAM_UNREACHABLE, f"{self._listener}: {why}")

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            self.close(CloseReason.UPSTREAM_LOST, "it closed the connection" if exc is None else str(exc),
                       warn=self._awaiting_responses())

    # ---- lifetime ------------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop taking requests; close once every forwarded request has its answer."""
        self._draining = True
        if not self._closed:
            self.gate.pause(PauseReason.DRAINING)
            if not self._awaiting_responses() and not self._requests.settling:
                self.close(CloseReason.SHUTDOWN)

    def _check_idle(self) -> None:
        loop = self._loop
        idle_for = loop.time() - self._last_activity
        if idle_for >= self._config.idle_timeout_s:
            self.close(CloseReason.IDLE, f"{idle_for:.0f} s")
        else:
            self._idle_timer = loop.call_later(self._config.idle_timeout_s - idle_for, self._check_idle)

    def close(self, reason: CloseReason, detail: str = "", warn: bool | None = None) -> None:
        """Close both sides; ``warn`` (when not the reason's own choice) logs it as a warning."""
        if self._closed:
            return
        self._closed = True
        (log.warning if (reason.warns if warn is None else warn) else log.debug)(
            "closing connection from %s on %s: %s", self._peer, self._listener, reason.describe(detail))
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._mute.stop()
        self._requests.stop()
        self._responses.stop()
        if self._transport is not None:
            self._to_client.close()
            self._transport.close()
        self._link.close()
        self._in_flight.clear()
        self._context.connection_closed(self)

    def set_buffer_share(self, high_bytes: int) -> None:
        self._buffer_high = high_bytes
        self._read_bytes = read_bytes_for(high_bytes)
        for outbox in (self._to_client, self._link.outbox):
            if outbox is not None:
                outbox.high_bytes = high_bytes

    def abort(self) -> None:
        """Force-close without waiting for buffered writes (shutdown past its grace period)."""
        if self._transport is not None:
            self._transport.abort()
        self._link.abort()
        self.close(CloseReason.SHUTDOWN_DEADLINE, warn=bool(self._in_flight))
