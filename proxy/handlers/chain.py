"""Every request's way through the proxy's decisions, in one ordered chain.

A connection hands each request it reads here and carries out what comes back; it knows no API and no quota. In
order, as a Kafka broker takes a request (``SocketServer``, then ``KafkaApis``):

1. ApiVersions before the cluster can be asked (no upstream connection yet: a login comes first), or newer than the
   proxy reads: answered by the proxy (``ApiVersionsAnswers``).
2. The login: before it has completed, its requests (and, when the proxy terminates SASL, every request) are the
   login's to answer.
3. A version newer than the proxy offers of an API it reads (``version_ceilings``) closes the connection: a client
   that asked ApiVersions never sends one, and the proxy would read it otherwise than Kafka (OffsetCommit v10 names
   its topics by id alone, which the proxy's reading of v9 would take for a topic named "").
4. The API's handler (``handlers``), if it has one (or the handler of every other API, ``otherwise``: with the
   authorizer, what keeps the APIs it does not judge yet for super users): the request is forwarded, answered or
   refused, with a throttle.
5. The ``request_rate`` quota, every request but those that connect and log in.
6. What every answer of its kind needs, once the cluster has answered a forwarded request (``ClusterAnswers``): the
   proxy's listeners in place of the brokers' addresses (a filter of Kroxylicious' does so too), the versions the
   proxy serves in ApiVersions.

A request over several quotas carries the largest throttle (``throttled_at_least``), as Kafka answers with the largest
of its quotas' throttles. A handler that can decide on a request's start, while the rest of it still arrives (a
Produce request megabytes long), is a ``StreamingRequestHandler``: the connection forwards the rest as it comes
and hands its bytes to the ``RequestStream`` the handler gave, whose throttle comes once the request is complete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Protocol

from protocol.api_versions import NEWEST_API_VERSIONS
from protocol.apis import Api
from protocol.header import RequestHeader, read_request_header
from proxy.decision.interception import Login, RequestHandler, RequestStream, StreamingRequestHandler
from proxy.decision.outcome import (
    CLOSE,
    FORWARD,
    Caller,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    ResponseFinisher,
    Sender,
    answered_through,
    throttled_at_least,
)

log = logging.getLogger(__name__)

_LOGIN_APIS = (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE)
_LOGGED_VERSIONS = 1_000
"""Api keys and versions above their ceiling whose closing has been logged, at most (then each is logged again)."""
_JUDGED_WHOLE = frozenset({*_LOGIN_APIS, Api.API_VERSIONS})
"""Never forwarded as they arrive, however large: a login (a re-authentication, KIP-368) is the login's to answer,
and an ApiVersions may be the proxy's."""


class ApiVersionsAnswer(Protocol):
    def answer(self, frame: memoryview) -> Decided: ...


class ClusterAnswers(Protocol):
    def finisher(self, api_key: int, api_version: int) -> ResponseFinisher | None:
        """What turns the cluster's answers to requests of this api and version into the clients' (the same for
        every one), or None when they stand as they are."""


RequestRateCharge = Callable[[memoryview, int, RequestHeader | None, Caller], int]
"""Charges one request to its entity's ``request_rate`` (given the frame, its api key, and its header when the chain
has read it already); its throttle."""


class RequestChain:
    """``RequestDecisions`` for the engine: the chain above."""

    def __init__(self, api_versions: ApiVersionsAnswer, handlers: Mapping[int, RequestHandler],
                 request_rate: RequestRateCharge, clock: Callable[[], int], answers: ClusterAnswers,
                 otherwise: RequestHandler | None = None, version_ceilings: Mapping[int, int] | None = None) -> None:
        """``handlers``: by api key; those that can decide on a request's start too (``StreamingRequestHandler``)
        are handed large requests as they arrive. ``otherwise``: the handler of the APIs ``handlers`` has none for
        (None: they are forwarded). ``clock``: quota time, read once for each request and handed down
        (``Caller``). ``version_ceilings``: the newest version ApiVersions offers of each API the proxy reads."""
        self._clock = clock
        self._ceilings = version_ceilings or {}
        self._logged_versions: set[tuple[int, int]] = set()
        self._api_versions = api_versions
        self._handlers = handlers
        self._otherwise = otherwise
        self._streaming = {api_key: handler for api_key, handler in handlers.items()
                           if isinstance(handler, StreamingRequestHandler)}
        self._request_rate = request_rate
        # as many as the api versions clients use (bounded: a version is the client's to choose)
        self._finisher = lru_cache(maxsize=512)(answers.finisher)
        self._forwarded = lru_cache(maxsize=512)(self._forwarded_and_finished)

    def _forwarded_and_finished(self, api_key: int, api_version: int) -> Forward:
        """The usual decision, ``FORWARD``, with what every answer of the kind needs: made once."""
        return Forward(on_response=OnResponse(finish=self._finisher(api_key, api_version)))

    def _answered(self, decided: Decided, api_key: int, api_version: int) -> Decided:
        """``decided``, its answer, if the cluster gives one, finished as every answer of its kind needs."""
        finish = self._finisher(api_key, api_version)
        if finish is None:
            return decided
        if decided is FORWARD:
            return self._forwarded(api_key, api_version)
        return answered_through(decided, finish)

    def decide(self, frame: memoryview, api_key: int, api_version: int, sender: Sender, login: Login | None,
               upstream_open: bool) -> Decided:
        """One whole request (size prefix excluded)."""
        if api_key == Api.API_VERSIONS and (not upstream_open or api_version > NEWEST_API_VERSIONS):
            # a client's first ApiVersions may be newer than the proxy parses (KIP-511: it is answered in v0 with the
            # versions served); before a login no upstream connection may be open yet
            return self._api_versions.answer(frame)
        if login is not None and (api_key in _LOGIN_APIS or not (login.done or login.needs_upstream_before_login)):
            return self._answered(login.handle(frame), api_key, api_version)  # forwarded, when inspected
        if self._above_ceiling(api_key, api_version, sender):
            return CLOSE
        # inspected, a request before a login goes the usual way, charged to ANONYMOUS: a cluster listener that does
        # not ask for a login must not open a way around the quotas
        caller = Caller(sender.user, self._clock(), sender.broker, self._clock, sender.host)
        handler = self._handlers.get(api_key, self._otherwise)
        if handler is None:
            decided: Decided = FORWARD
            header = None
        else:
            header = read_request_header(frame)  # once, for the handler and the request rate
            decided = handler.on_request(header, frame, caller)
        # charged once the handler has judged the request: one it cannot judge yet costs nothing
        decided = throttled_at_least(decided, self._request_rate(frame, api_key, header, caller), api_key,
                                     api_version)
        return self._answered(decided, api_key, api_version)

    def _above_ceiling(self, api_key: int, api_version: int, sender: Sender) -> bool:
        if api_version <= self._ceilings.get(api_key, api_version):
            return False
        logged = (api_key, api_version)
        if logged not in self._logged_versions:
            if len(self._logged_versions) >= _LOGGED_VERSIONS:
                self._logged_versions.clear()
            self._logged_versions.add(logged)
            log.warning("closing a connection of %s from %s: api key %d v%d is newer than the proxy offers (v%d)",
                        sender.user, sender.host or "an unknown address", api_key, api_version,
                        self._ceilings[api_key])
        return True

    def start(self, frame_start: memoryview, api_key: int, api_version: int, request_bytes: int,
              sender: Sender) -> tuple[Outcome, RequestStream | None] | None:
        """A request whose start is here, and whose rest is still to come (after a login): a decision on it now, or
        None when it is judged once whole. Raises ``ProtocolError`` when the start is too short to judge yet."""
        if api_key in _JUDGED_WHOLE or api_version > self._ceilings.get(api_key, api_version):
            return None  # a version above its ceiling closes the connection once whole (``decide``)
        caller = Caller(sender.user, self._clock(), sender.broker, self._clock, sender.host)
        handler = self._streaming.get(api_key)
        if handler is None:
            if api_key in self._handlers or self._otherwise is not None:
                return None  # its handler judges whole requests
            decided: Decided = FORWARD
            header = None
            stream = None
        else:
            header = read_request_header(frame_start)
            started = handler.on_request_start(header, frame_start, request_bytes, caller)
            if started is None:
                return None
            decided, stream = started
        decided = throttled_at_least(decided, self._request_rate(frame_start, api_key, header, caller), api_key,
                                     api_version)
        decided = self._answered(decided, api_key, api_version)
        assert isinstance(decided, Outcome), "a request's start is decided at once"
        return decided, stream
