"""What a per-API handler decides about one request; the connection carries it out.

A handler sees the request and the caller (``Caller``) and returns an ``Outcome`` (or an awaitable
of one, when it must ask the cluster first): ``Forward`` it (with a throttle, a replacement, what becomes of its
answer), ``Respond`` to it, or ``Close`` the connection. It never touches sockets: the connection forwards,
answers in request order, raises the throttle into the response, mutes, or closes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from protocol.header import RequestHeader, response_header_for
from protocol.throttle import raise_throttle_in_frame

PRINCIPAL_PREFIX = "User:"

ResponseFinisher = Callable[[memoryview], bytes | None]
"""Turns the upstream response body (header excluded) into the body the client gets (None: it stands as it is)."""


class ChargedResponse(NamedTuple):
    throttle_ms: int
    answer_body: bytes | None = None
    """The body the client gets instead of the upstream one (its throttle in it), the rest of which is read
    and dropped: Kafka answers a Fetch it throttles with no records. Nothing finishes it (``OnResponse.finish``): it
    names no broker."""


ResponseCharge = Callable[[memoryview, int], ChargedResponse]
"""Charges an upstream response to a quota, given its start (header included, no size prefix) and
its whole size (it may still be arriving)."""


class Sender(NamedTuple):
    """Who sent a request, as its connection knows it: the principal and the broker reached. The connection knows
    no quota time; the decisions read it (``Caller``)."""

    user: str
    """The connection's principal (``ANONYMOUS`` without a login or a client certificate)."""
    broker: str = ""
    """The upstream broker the connection reached (``host:port`` of the peer), for per-broker budgets."""
    host: str = ""
    """The client's address as Kafka's ACLs name hosts (Java's ``getHostAddress``)."""


def _no_clock() -> int:
    raise RuntimeError("a caller made without the quota clock was asked the time again")


class Caller(NamedTuple):
    user: str
    """The connection's principal (``ANONYMOUS`` without SASL); the client id is in the header."""
    now_ms: int
    """Quota time, read once for the request."""
    broker: str = ""
    """The upstream broker the connection reached (``host:port`` of the peer), for per-broker budgets."""
    clock: Callable[[], int] = _no_clock
    """The quota clock ``now_ms`` was read from, handed down for a decision taken later (``later``)."""
    host: str = ""
    """The client's address as Kafka's ACLs name hosts (Java's ``getHostAddress``)."""

    def later(self) -> Caller:
        """The same caller, quota time read again: a request that waited for the cluster, the ledger or its
        response is charged when it is decided, as Kafka charges a request when it handles it."""
        return self._replace(now_ms=self.clock())

    @property
    def principal(self) -> str:
        """Kafka's form of the user, as access lists name it: ``User:alice``."""
        return PRINCIPAL_PREFIX + self.user


class OnResponse(NamedTuple):
    """What becomes of the cluster's answer to a forwarded request, beyond the throttle raised into it."""

    finish: ResponseFinisher | None = None
    """Turns the cluster's answer into the client's (refusals merged in, topics left out, a count taken)."""
    charge: ResponseCharge | None = None
    """What the answer costs is known only when it arrives (a Fetch), or a throttle is known only then (a topic
    mutation's shrinks while the cluster carries it out): its throttle is raised into it (or it is replaced), and
    the connection muted after it, as for a throttle decided on the request; the larger of the two is given."""
    read_whole: bool = False
    """``charge`` or ``finish`` reads the whole answer: it is never cut through."""


class Forward(NamedTuple):
    """The request goes to the cluster: the client's bytes, or ``replacement``."""

    throttle_ms: int = 0
    """Raised into the response (max with upstream's); the client is muted after it is sent."""
    replacement: bytes | None = None
    """A whole request frame (size prefix included) forwarded instead of the client's."""
    expects_response: bool = True
    """False for a Produce request with acks=0: the cluster answers nothing."""
    on_response: OnResponse | None = None
    close_after_response: bool = False
    """Close the connection once the response is sent; without a response (acks=0), once the earlier
    requests are answered, reading nothing after this one (Kafka closes such a connection)."""


class Respond(NamedTuple):
    """The proxy answers the request itself, in its turn; nothing goes to the cluster."""

    response: bytes
    """A whole frame (size prefix included)."""
    throttle_ms: int = 0
    """In the response already; the client is muted after it is sent."""
    close_after_response: bool = False


class Close(NamedTuple):
    """Nothing goes to the cluster and nothing is answered: the connection closes once the earlier requests are
    answered, reading nothing after this one (Kafka closes the connection of a request without acknowledgement
    that it refuses)."""


Outcome = Forward | Respond | Close
"""What is done with one request: a request over several quotas carries the largest of their throttles
(``throttled_at_least``)."""

FORWARD = Forward()
CLOSE = Close()

Decided = Outcome | Awaitable[Outcome]


def throttled_at_least(decided: Decided, throttle_ms: int, api_key: int, api_version: int) -> Decided:
    """``decided`` throttled for ``throttle_ms`` at least: another quota's throttle of the same request (the
    largest is the one given, as Kafka answers with the largest of its quotas' throttles)."""
    if not throttle_ms:
        return decided
    if isinstance(decided, Outcome):
        return _throttled_at_least(decided, throttle_ms, api_key, api_version)
    return _throttled_once_decided(decided, throttle_ms, api_key, api_version)


async def _throttled_once_decided(decided: Awaitable[Outcome], throttle_ms: int, api_key: int,
                                  api_version: int) -> Outcome:
    return _throttled_at_least(await decided, throttle_ms, api_key, api_version)


def _throttled_at_least(outcome: Outcome, throttle_ms: int, api_key: int, api_version: int) -> Outcome:
    if isinstance(outcome, Close) or throttle_ms <= outcome.throttle_ms:
        return outcome  # a connection that closes is not muted
    if isinstance(outcome, Respond):
        return outcome._replace(throttle_ms=throttle_ms,
                                response=raise_throttle_in_frame(api_key, api_version, outcome.response, throttle_ms))
    return outcome._replace(throttle_ms=throttle_ms)


def answered_through(decided: Decided, finish: ResponseFinisher) -> Decided:
    """``decided`` with the cluster's answer, if it is forwarded and answered, turned into the client's by ``finish``
    too, after what turns it already: what every answer of its kind needs (the proxy's addresses for the brokers',
    the versions it serves)."""
    if isinstance(decided, Forward):
        return _answered_through(decided, finish)
    if isinstance(decided, Outcome):
        return decided  # answered by the proxy, or not at all
    return _answered_through_once_decided(decided, finish)


async def _answered_through_once_decided(decided: Awaitable[Outcome], finish: ResponseFinisher) -> Outcome:
    outcome = await decided
    return _answered_through(outcome, finish) if isinstance(outcome, Forward) else outcome


def _answered_through(outcome: Forward, finish: ResponseFinisher) -> Forward:
    if not outcome.expects_response:
        return outcome
    hook = outcome.on_response
    if hook is None:
        return outcome._replace(on_response=OnResponse(finish=finish))
    first = hook.finish
    if first is None:
        return outcome._replace(on_response=hook._replace(finish=finish))

    def both(body: memoryview) -> bytes | None:
        finished = first(body)
        return finish(body if finished is None else memoryview(finished)) or finished

    return outcome._replace(on_response=hook._replace(finish=both))


def finished_whole(outcome: Forward, replacement: bytes, finish: ResponseFinisher) -> Forward:
    """``outcome`` forwarding ``replacement`` (unless it forwards one of its own already) and its answer read whole
    and turned into the client's by ``finish`` (a charge it has reads the whole answer too)."""
    hook = outcome.on_response or OnResponse()
    return outcome._replace(replacement=outcome.replacement or replacement,
                            on_response=hook._replace(finish=finish, read_whole=True))


def observing_answer(decided: Decided, observe: Callable[[memoryview], None]) -> Decided:
    """``decided``, the start of its answer (header included) shown to ``observe`` before any charge of its own, when
    it is forwarded (a charge holds later requests until the answer: ``InFlight.holds_later_requests``)."""
    if not isinstance(decided, Forward):
        return decided
    hook = decided.on_response or OnResponse()
    charge = hook.charge

    def observed(start: memoryview, response_bytes: int) -> ChargedResponse:
        observe(start)
        return ChargedResponse(0) if charge is None else charge(start, response_bytes)

    return decided._replace(on_response=hook._replace(charge=observed))


def forwarding_instead(decided: Decided, replacement: bytes) -> Decided:
    """``decided``, forwarding ``replacement`` (a whole frame) unless it is answered, closed, or forwards a
    replacement of its own (made from ``replacement``)."""
    if isinstance(decided, Outcome):
        return _forwarding_instead(decided, replacement)
    return _forwarding_instead_once_decided(decided, replacement)


async def _forwarding_instead_once_decided(decided: Awaitable[Outcome], replacement: bytes) -> Outcome:
    return _forwarding_instead(await decided, replacement)


def _forwarding_instead(outcome: Outcome, replacement: bytes) -> Outcome:
    if isinstance(outcome, Forward) and outcome.replacement is None:
        return outcome._replace(replacement=replacement)
    return outcome


def frame(header_and_body: bytes) -> bytes:
    return len(header_and_body).to_bytes(4, "big") + header_and_body


def local_answer(header: RequestHeader, body: bytes, throttle_ms: int = 0,
                 close_after_response: bool = False) -> Respond:
    """Answer ``header``'s request with ``body`` without forwarding it."""
    response_header = response_header_for(header.api_key, header.flexible, header.correlation_id)
    return Respond(frame(response_header + body), throttle_ms, close_after_response)


def replacement_request(frame_without_prefix: memoryview, header: RequestHeader, body: bytes) -> bytes:
    """The client's request header (correlation id, client id) in front of a new body."""
    return frame(bytes(frame_without_prefix[:header.length]) + body)


def answered_in_part(frame_without_prefix: memoryview, header: RequestHeader, forwarded_body: bytes | None,
                     answer: Callable[[memoryview | None], bytes]) -> Decided:
    """A request the proxy answers in part: ``forwarded_body`` asked of the cluster in its place (None: nothing is
    left to ask), and the client answered ``answer`` of the cluster's answer (of None when nothing was asked)."""
    if forwarded_body is None:
        return local_answer(header, answer(None))
    return Forward(replacement=replacement_request(frame_without_prefix, header, forwarded_body),
                   on_response=OnResponse(finish=answer))
