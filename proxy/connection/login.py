"""A client connection's login: before it completes, one request at a time; once it has, its user
is the principal of every later request and the upstream connection opens (when the proxy
terminates SASL)."""

from __future__ import annotations

import logging

from proxy.connection.flow import PauseReason
from proxy.connection.state import ConnectionState

log = logging.getLogger(__name__)


class LoginSteps(ConnectionState):
    """The steps of a login in progress, and what changes once it has completed."""

    def _login_step_answered(self) -> None:
        """A request made before the login completed has its answer: the next one may be read, and once
        the login has completed its user is the principal of every later request."""
        if not self._login_step_pending or self._awaiting_responses() or self._closed:
            return
        self._login_step_pending = False
        assert self._sasl is not None
        if self._sasl.refused:
            self.close("its login was refused")
            return
        if self._sasl.user is not None:
            self._logged_in(self._sasl.user)
        self.gate.resume(PauseReason.LOGGING_IN)
        self._loop.call_soon(self._release_held)  # not from here: a long pipeline would recurse

    def _logged_in(self, user: str) -> None:
        self._user = user
        if self._login_timer is not None:
            self._login_timer.cancel()
            self._login_timer = None
        self._requests.max_frame_bytes = self._config.max_frame_bytes
        if self._connect_task is None:
            self._start_upstream()

    def _login_too_slow(self) -> None:
        self._login_timer = None
        if self._sasl is not None and not self._sasl.done:
            log.info("closing connection from %s on %s: no SASL login within %g s", self._peer, self._listener,
                     self._config.login.timeout_s)
            self.close("no login in time")

