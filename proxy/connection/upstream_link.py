"""A client connection's own connection to the cluster: opened once, then its transport, its read gate, what it is
sent and the broker it reached.

It opens when its turn among the connections to the same broker comes (``ConnectTurns``: a flood of clients must not
become a flood of connections at one broker), logged in first when the proxy logs in to the cluster itself, within
``connect_timeout_s``. The turn is given back once the broker has answered on the connection, or ``UNANSWERED_TURN_S``
after it opened (its client may not have asked anything yet), or when it closes. It knows no request and no quota.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast

from proxy.cluster.upstream import UNANSWERED_TURN_S, UPSTREAM_ERRORS, ConnectTurns, UpstreamAccess, open_upstream
from proxy.connection.context import UpstreamResolver
from proxy.connection.flow import ReadGate
from proxy.connection.outbox import Outbox
from proxy.settings.config import HostPort


class UpstreamLink:
    """The cluster's side of one client connection, from its opening to its close."""

    __slots__ = ("transport", "gate", "outbox", "broker", "heard_at", "_resolve", "_turns", "_access", "_timeout_s",
                 "_max_frame_bytes", "_task", "_give_back_turn", "_turn_timer", "_login_writer", "_closed")

    def __init__(self, resolve: UpstreamResolver, turns: ConnectTurns, access: UpstreamAccess, timeout_s: float,
                 max_frame_bytes: int) -> None:
        """``resolve`` names the broker to reach; ``access`` says how (TLS, the proxy's own login)."""
        self._resolve = resolve
        self._turns = turns
        self._access = access
        self._timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self.transport: asyncio.Transport | None = None
        """Set once open."""
        self.gate: ReadGate | None = None
        """Why the cluster's side is not read (set once open)."""
        self.outbox: Outbox | None = None
        """Everything the cluster is sent on this connection goes through it (set once open)."""
        self.broker = ""
        """The broker reached, as ``ip:port`` of the peer: a bootstrap connection and a broker listener's connection
        reaching the same broker share its per-broker budgets."""
        self.heard_at = 0.0
        """``perf_counter`` when the cluster last sent something on this connection."""
        self._task: asyncio.Task[None] | None = None
        self._give_back_turn: Callable[[], None] | None = None
        self._turn_timer: asyncio.TimerHandle | None = None
        self._login_writer: asyncio.StreamWriter | None = None
        """The proxy's own login to the cluster's stream: a collected StreamWriter closes its transport."""
        self._closed = False

    @property
    def started(self) -> bool:
        """Opening, or open."""
        return self._task is not None

    @property
    def opening(self) -> bool:
        """Started and not open yet: requests read meanwhile wait for it."""
        return self._task is not None and self.transport is None

    def open(self, protocol: asyncio.BaseProtocol, outbox: Callable[[asyncio.Transport], Outbox],
             opened: Callable[[HostPort], None], failed: Callable[[str], None]) -> None:
        """Open it (once): ``protocol`` reads what the cluster sends; ``outbox`` makes what the cluster is sent, over
        the transport; ``opened(target)`` or ``failed(why)`` says how it went."""
        assert self._task is None, "opened once"
        self._task = asyncio.get_running_loop().create_task(self._open(protocol, outbox, opened, failed))

    async def _open(self, protocol: asyncio.BaseProtocol, outbox: Callable[[asyncio.Transport], Outbox],
                    opened: Callable[[HostPort], None], failed: Callable[[str], None]) -> None:
        loop = asyncio.get_running_loop()
        access = self._access
        try:
            target = await self._resolve()
            async with asyncio.timeout(self._timeout_s):
                self._give_back_turn = await self._turns.take(target)
                if access.sasl is None:
                    transport, _ = await loop.create_connection(lambda: protocol, target.host, target.port,
                                                                **access.tls_arguments(target))
                else:
                    _, writer = await open_upstream(target, access, self._max_frame_bytes)
                    self._login_writer = writer
                    transport = cast(asyncio.Transport, writer.transport)
                    transport.set_protocol(protocol)  # logged in: from now on, bytes only
                    self.turn_over()  # the broker answered the login
        except (*UPSTREAM_ERRORS, LookupError) as error:
            self.turn_over()
            failed(str(error) or type(error).__name__)
            return
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        if self._closed:
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        self.broker = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(target)
        self.outbox = outbox(transport)
        self.transport = transport
        self.gate = ReadGate(transport)
        if self._give_back_turn is not None:
            self._turn_timer = loop.call_later(UNANSWERED_TURN_S, self.turn_over)
        opened(target)

    def heard(self) -> None:
        """The cluster sent something: it has answered on the connection, whose turn is over."""
        self.heard_at = time.perf_counter()
        if self._give_back_turn is not None:
            self.turn_over()

    def turn_over(self) -> None:
        if self._give_back_turn is not None:
            self._give_back_turn()
            self._give_back_turn = None
        if self._turn_timer is not None:
            self._turn_timer.cancel()
            self._turn_timer = None

    def close(self) -> None:
        """Close it, whatever it is doing; its turn given back."""
        self._closed = True
        self.turn_over()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.outbox is not None:
            self.outbox.close()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop it without writing what is still buffered."""
        if self.transport is not None:
            self.transport.abort()
