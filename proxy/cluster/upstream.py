"""The proxy's own requests to the cluster (not on any client's behalf), and its upstream login."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.addresses import BrokerAddress
from protocol.apis import Api, request_class, response_class
from protocol.codecs import build
from protocol.errors import ProtocolError
from protocol.header import response_header_length
from proxy.security.sasl_messages import AuthenticationFailed, ScramClient, ScramSalt, plain_token, salted_password
from proxy.security.tls import ReloadingContext
from proxy.security.users import PLAIN
from proxy.settings.config import HostPort, UpstreamSasl

_METADATA_VERSION = 4  # non-flexible, answered by every broker from Kafka 1.0 to 4.x
_METADATA_WITH_TOPIC_IDS_VERSION = 10  # topic ids in the answer: Kafka 2.8 and later
_SASL_HANDSHAKE_VERSION = 1
_SASL_AUTHENTICATE_VERSION = 1
_CLIENT_ID = "kafka-quota-proxy"
_correlation_ids = itertools.count(1)

UPSTREAM_ERRORS = (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError, AuthenticationFailed)
"""What talking to the cluster may raise: unreachable, slow, closed, garbled or refused."""


class SaltedPasswords:
    """The proxy's SCRAM SaltedPassword per salt and iteration count, computed once on a worker thread.

    In terminate mode every client connection opens its own upstream connection with the proxy's login: PBKDF2
    on the event loop for each would hold every other connection for its milliseconds. A cluster's brokers
    share a user's credential, so one salt is the common case; logins waiting for the same salt share one
    computation."""

    CAPACITY = 16
    """Salts remembered, oldest dropped first (a credential changed on the cluster brings a new salt)."""

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[str, ScramSalt], bytes] = OrderedDict()
        self._computing: dict[tuple[str, ScramSalt], asyncio.Future[bytes]] = {}

    async def get(self, sasl: UpstreamSasl, salt: ScramSalt) -> bytes:
        key = (sasl.mechanism, salt)
        known = self._known.get(key)
        if known is not None:
            self._known.move_to_end(key)
            return known
        computing = self._computing.get(key)
        if computing is None:
            computing = asyncio.ensure_future(asyncio.to_thread(salted_password, sasl.mechanism, sasl.password, salt))
            self._computing[key] = computing
            computing.add_done_callback(lambda _: self._computing.pop(key, None))
        salted = await asyncio.shield(computing)
        self._known[key] = salted
        while len(self._known) > self.CAPACITY:
            self._known.popitem(last=False)
        return salted


@dataclass(frozen=True)
class UpstreamAccess:
    """How the proxy reaches the cluster: its own SASL login (``[upstream-sasl]``) and TLS (``[upstream-tls]``)."""

    sasl: UpstreamSasl | None = None
    tls: ReloadingContext | None = None
    salted_passwords: SaltedPasswords = field(default_factory=SaltedPasswords, compare=False, repr=False)

    def tls_arguments(self, target: HostPort) -> dict[str, Any]:
        """``ssl`` and ``server_hostname`` for a connection to ``target`` (both None without TLS)."""
        context = None if self.tls is None else self.tls.get()
        return {"ssl": context, "server_hostname": target.host if context is not None else None}

    async def open(self, target: HostPort) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to ``target`` with TLS when configured (no login: see ``open_upstream``)."""
        return await asyncio.open_connection(target.host, target.port, **self.tls_arguments(target))


PLAINTEXT = UpstreamAccess()

CONNECTS_AT_ONCE_PER_BROKER = 25
"""Connections the proxy has opened to one broker that the broker may not have accepted yet: half of what it queues
unaccepted (Kafka's ``socket.listen.backlog.size``, 50). A burst of clients opening at once through the proxy becomes
a burst of connections to one broker, and a connection its queue has no room for is dropped and tried again only a
second later (TCP's first retransmission; measured against Apache Kafka 4.3 in docs/deploying.md, "New connections
under load"). The kernel completes a connection before the broker
accepts it, so a turn is given back once the broker has answered on it (``ConnectTurns``)."""

UNANSWERED_TURN_S = 0.1
"""A connection the broker has not answered on gives its turn back after this long: its client may not have asked
anything yet."""


class ConnectTurns:
    """Turns to open a connection to each broker, ``CONNECTS_AT_ONCE_PER_BROKER`` of them; the connections waiting for
    one take it in the order they asked."""

    def __init__(self, per_broker: int = CONNECTS_AT_ONCE_PER_BROKER) -> None:
        self._per_broker = per_broker
        self._turns: dict[HostPort, asyncio.Semaphore] = {}

    async def take(self, target: HostPort) -> Callable[[], None]:
        """Wait for a turn to open a connection to ``target``; what gives it back (once, however often called)."""
        turns = self._turns.get(target)
        if turns is None:
            turns = self._turns[target] = asyncio.Semaphore(self._per_broker)
        await turns.acquire()
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                turns.release()
        return give_back


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, api_version: int,
                   message: dict[str, Any], max_frame_bytes: int) -> Any:
    """Send one request on an open connection and return the decoded response."""
    request = build(request_class(api_key)[api_version], message)
    request.with_header(correlation_id=next(_correlation_ids), client_id=_CLIENT_ID)
    writer.write(request.encode(header=True, framed=True))
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if not 4 <= size <= max_frame_bytes:
        raise ProtocolError(f"response frame size {size} out of range", api_key=api_key, api_version=api_version)
    frame = await reader.readexactly(size)
    flexible = request_class(api_key).flexible_version_q(api_version)
    body = memoryview(frame)[response_header_length(frame, flexible):]
    return response_class(api_key).decode(body, version=api_version)


async def open_upstream(target: HostPort, access: UpstreamAccess,
                        max_frame_bytes: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``target``, over TLS and logged in with the proxy's credentials when configured."""
    reader, writer = await access.open(target)
    if access.sasl is not None:
        try:
            await _login(reader, writer, access.sasl, access.salted_passwords, max_frame_bytes)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sasl: UpstreamSasl,
                 salted_passwords: SaltedPasswords, max_frame_bytes: int) -> None:
    handshake = await exchange(reader, writer, Api.SASL_HANDSHAKE, _SASL_HANDSHAKE_VERSION,
                               {"mechanism": sasl.mechanism}, max_frame_bytes)
    if handshake.error_code:
        raise AuthenticationFailed(f"upstream refused SASL mechanism {sasl.mechanism} (error "
                                   f"{handshake.error_code}; it offers {', '.join(handshake.mechanisms)})")

    async def send(token: bytes) -> bytes:
        response = await exchange(reader, writer, Api.SASL_AUTHENTICATE, _SASL_AUTHENTICATE_VERSION,
                                  {"auth_bytes": token}, max_frame_bytes)
        if response.error_code:
            raise AuthenticationFailed(f"upstream SASL login as {sasl.username} failed: "
                                       f"{response.error_message or response.error_code}")
        return bytes(response.auth_bytes)

    if sasl.mechanism == PLAIN:
        await send(plain_token(sasl.username, sasl.password))
        return
    client = ScramClient(sasl.mechanism, sasl.username, sasl.password)
    server_first = await send(client.first_message())
    salted = await salted_passwords.get(sasl, client.server_salt(server_first))
    client.verify_server(await send(client.final_message(server_first, salted)))


async def request_once(target: HostPort, api_key: int, api_version: int, message: dict[str, Any],
                       timeout_s: float, max_frame_bytes: int, access: UpstreamAccess = PLAINTEXT) -> Any:
    """Open a connection (logging in if configured), send one request, return the decoded response."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await open_upstream(target, access, max_frame_bytes)
        try:
            return await exchange(reader, writer, api_key, api_version, message, max_frame_bytes)
        finally:
            writer.close()


async def request_any(bootstrap: tuple[HostPort, ...], api_key: int, api_version: int, message: dict[str, Any],
                      timeout_s: float, max_frame_bytes: int, access: UpstreamAccess = PLAINTEXT) -> Any:
    """Ask the bootstrap servers in turn; raise the last error when none answers."""
    last_error: BaseException = OSError("no upstream configured")
    for target in bootstrap:
        try:
            return await request_once(target, api_key, api_version, message, timeout_s, max_frame_bytes, access)
        except UPSTREAM_ERRORS as error:
            last_error = error
    raise last_error


async def fetch_metadata(bootstrap: tuple[HostPort, ...], topics: list[str] | None, timeout_s: float,
                         max_frame_bytes: int, access: UpstreamAccess = PLAINTEXT, topic_ids: bool = False) -> Any:
    """The cluster's Metadata answer for ``topics``, never creating them (an empty list: brokers only;
    None: every topic, with its id; ``topic_ids``: the named topics with their ids)."""
    if topics is None or topic_ids:
        return await request_any(bootstrap, Api.METADATA, _METADATA_WITH_TOPIC_IDS_VERSION,
                                 {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                                  "allow_auto_topic_creation": False},
                                 timeout_s, max_frame_bytes, access)
    return await request_any(bootstrap, Api.METADATA, _METADATA_VERSION,
                             {"topics": [{"name": topic} for topic in topics], "allow_auto_topic_creation": False},
                             timeout_s, max_frame_bytes, access)


async def fetch_brokers(bootstrap: tuple[HostPort, ...], timeout_s: float, max_frame_bytes: int,
                        access: UpstreamAccess = PLAINTEXT) -> list[BrokerAddress]:
    response = await fetch_metadata(bootstrap, [], timeout_s, max_frame_bytes, access)
    return [BrokerAddress(b.node_id, b.host, b.port) for b in response.brokers]
