"""A client connection's login gate: before the login completes, one request at a time; a login refused or too
slow closes the connection; once it completes, its user is the connection's principal.

A Kafka broker reads one request at a time, so a client cannot pipeline guesses at a password: the proxy reads
ahead, so the gate holds each request read before the login completes until the one before it is answered
(``ChannelMute``'s login step), and none is forwarded as it arrives. What the login's requests are answered with
is the login's (``SaslServer``, ``SaslInspector``): the gate only says when the next may be decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.mute import ChannelMute
from proxy.decision.interception import Login

log = logging.getLogger(__name__)


class LoginProgress(Login, Protocol):
    """What the gate reads of a login besides its requests: who it named, and whether it was refused."""

    @property
    def user(self) -> str | None:
        """Set once the login has completed."""

    @property
    def refused(self) -> bool:
        """The login failed: the connection closes once its answer has been sent."""


class LoginTimer(Protocol):
    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle: ...

    def call_soon(self, callback: Callable[[], object]) -> asyncio.Handle: ...


class LoginGate:
    """The login of one connection, from its first request to its user."""

    __slots__ = ("login", "_mute", "_reading", "_loop", "_timeout_s", "_timer", "_logged_in", "_close", "_go_on",
                 "_who")

    def __init__(self, login: LoginProgress, mute: ChannelMute, reading: ReadGate, loop: LoginTimer,
                 timeout_s: float, who: str, logged_in: Callable[[str], bool],
                 close: Callable[[CloseReason], None], go_on: Callable[[], None]) -> None:
        """``logged_in(user)``: the login completed; False when the connection goes no further (its user is over
        its connection rate). ``go_on``: decide the requests read meanwhile (called soon, not from within: a long
        pipeline would recurse). ``who``: the connection, for the log line of a login too slow."""
        self.login = login
        self._mute = mute
        self._reading = reading
        self._loop = loop
        self._timeout_s = timeout_s
        self._who = who
        self._logged_in = logged_in
        self._close = close
        self._go_on = go_on
        self._timer: asyncio.TimerHandle | None = loop.call_later(timeout_s, self._too_slow)

    @property
    def in_progress(self) -> bool:
        """Requests wait their turn, and none is forwarded as it arrives."""
        return not self.login.done

    def request_read(self) -> None:
        """A request was read: before the login completes, the next one waits for its answer."""
        if self.in_progress:
            self._mute.login_step_read()
            self._reading.pause(PauseReason.LOGGING_IN)

    def step_answered(self) -> None:
        """Every request read so far has its answer: the next may be read, or the connection closes (a login
        refused), or it goes on as the user the login named."""
        if not self._mute.login_step_pending:
            return
        self._mute.login_step_answered()
        if self.login.refused:
            self._close(CloseReason.LOGIN_REFUSED)
            return
        user = self.login.user
        if user is not None:
            self.stop()
            if not self._logged_in(user):
                return
        self._reading.resume(PauseReason.LOGGING_IN)
        self._loop.call_soon(self._go_on)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        if self.in_progress:
            log.info("closing connection %s: no SASL login within %g s", self._who, self._timeout_s)
            self._close(CloseReason.LOGIN_TOO_SLOW)
