"""A client connection's login: before it completes, one request at a time; once it has, its user
is the principal of every later request and the upstream connection opens (when the proxy
terminates SASL)."""

from __future__ import annotations

import logging

from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason
from proxy.connection.state import ConnectionState

log = logging.getLogger(__name__)


class LoginSteps(ConnectionState):
    """The steps of a login in progress, and what changes once it has completed."""

    def _login_step_answered(self) -> None:
        """A request made before the login completed has its answer: the next one may be read, and once
        the login has completed its user is the principal of every later request."""
        if not self._mute.login_step_pending or self._awaiting_responses() or self._closed:
            return
        self._mute.login_step_answered()
        assert self._sasl is not None
        if self._sasl.refused:
            self.close(CloseReason.LOGIN_REFUSED)
            return
        if self._sasl.user is not None and not self._logged_in(self._sasl.user):
            return
        self.gate.resume(PauseReason.LOGGING_IN)
        self._loop.call_soon(self._release_held)  # not from here: a long pipeline would recurse

    def _logged_in(self, user: str) -> bool:
        """False: the connection is over its user's connection creation rate (``_admitted``)."""
        self._user = user
        if self._login_timer is not None:
            self._login_timer.cancel()
            self._login_timer = None
        self._requests.max_frame_bytes = self._config.max_frame_bytes
        if not self._admitted(user):
            return False
        if self._connect_task is None:
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

    def _login_too_slow(self) -> None:
        self._login_timer = None
        if self._sasl is not None and not self._sasl.done:
            log.info("closing connection from %s on %s: no SASL login within %g s", self._peer, self._listener,
                     self._config.login.timeout_s)
            self.close(CloseReason.LOGIN_TOO_SLOW)

