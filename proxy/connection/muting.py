"""A client connection's mute (KIP-219): after a throttled response has been sent, nothing more is
read from the client until the throttle has run out; other connections are untouched."""

from __future__ import annotations

from proxy.connection.flow import PauseReason
from proxy.connection.state import ConnectionState


class Muting(ConnectionState):
    """Stopping and restarting the reading of requests for a throttle."""

    def _throttled(self, throttle_ms: int, expects_response: bool) -> None:
        """A request was given ``throttle_ms``: nothing more is read or decided until its response
        has been sent (then the mute starts) or, with no response (acks=0), for the throttle."""
        if expects_response:
            self._throttled_response_pending = True
            self._pause_if_holding()
        else:
            self._mute(throttle_ms)

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this client for ``throttle_ms`` (KIP-219); other connections are untouched."""
        if self._closed:
            return
        self._throttled_response_pending = False
        until = self._loop.time() + throttle_ms / 1000
        if throttle_ms <= 0 or until <= self._muted_until:
            if self._mute_timer is None:
                self._unmute()
            return
        if self._mute_timer is None:
            self._metrics.muted_connections += 1
        else:
            self._mute_timer.cancel()
        self._muted_until = until
        self._mute_timer = self._loop.call_at(until, self._end_mute)
        self._pause_if_holding()

    def _end_mute(self) -> None:
        self._mute_timer = None
        self._metrics.muted_connections -= 1
        self._unmute()

    def _unmute(self) -> None:
        if self._throttled_response_pending or self._close_when_answered:
            return
        self.gate.resume(PauseReason.HOLDING)
        self._release_held()

