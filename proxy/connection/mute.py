"""A client connection's mute: when the requests it has sent are decided no further, as Kafka's
``KafkaChannel.ChannelMuteState`` says when a broker reads no more from a channel.

Kafka mutes a channel for a throttle (KIP-219) from the moment the throttled response has been sent until the
throttle has run out: ``MUTED_AND_RESPONSE_PENDING``, then ``MUTED_AND_THROTTLED`` (and
``MUTED_AND_THROTTLED_AND_RESPONSE_PENDING`` when a response is sent while a throttle runs). The proxy reads a
client's requests ahead (it pipelines where a broker takes one at a time), so its mute also holds for two things a
broker gets from reading one request at a time: before a login completes, a request waits for the answer to the one
before it (no pipelined password guesses); after a request that asks for the connection to close once answered,
nothing more is decided. Other connections are untouched.

The mute knows no connection: it is told events and says, through the callbacks it was given, when the connection
must stop deciding (``on_hold``) and when it may go on (``on_release``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Protocol


class MuteState(enum.Enum):
    """Kafka's names for the throttle's part of a channel's mute."""

    NOT_MUTED = "reading"
    MUTED_AND_RESPONSE_PENDING = "a throttled request's response is not sent yet: the throttle starts once it is"
    MUTED_AND_THROTTLED = "a throttle runs"
    MUTED_AND_THROTTLED_AND_RESPONSE_PENDING = "a throttle runs and another throttled response is not sent yet"


class TimerClock(Protocol):
    """The event loop's clock and timers (asyncio's ``time`` and ``call_at``)."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object]) -> asyncio.TimerHandle: ...


class ChannelMute:
    """The throttle, the login step and the close asked for, for one client connection."""

    __slots__ = ("_clock", "_on_hold", "_on_release", "_count_muted", "_response_pending", "_throttle_timer",
                 "_muted_until", "_login_step_pending", "_closing", "_stopped")

    def __init__(self, clock: TimerClock, on_hold: Callable[[], None], on_release: Callable[[], None],
                 count_muted: Callable[[int], None]) -> None:
        """``on_hold``: the connection must decide nothing more for now. ``on_release``: the throttle and a close no
        longer hold (the connection asks ``holds``, and its other reasons, before it decides). ``count_muted``: +1
        when a throttle starts, -1 when it ends, for the gauge of muted connections."""
        self._clock = clock
        self._on_hold = on_hold
        self._on_release = on_release
        self._count_muted = count_muted
        self._response_pending = False
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._muted_until = 0.0
        self._login_step_pending = False
        self._closing = False
        self._stopped = False

    @property
    def state(self) -> MuteState:
        throttled = self._throttle_timer is not None
        if self._response_pending:
            return MuteState.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING if throttled else \
                MuteState.MUTED_AND_RESPONSE_PENDING
        return MuteState.MUTED_AND_THROTTLED if throttled else MuteState.NOT_MUTED

    @property
    def holds(self) -> bool:
        """Requests read now wait, undecided."""
        return (self._response_pending or self._throttle_timer is not None or self._login_step_pending
                or self._closing)

    @property
    def closing(self) -> bool:
        """A request asked for the connection to close once the requests before it are answered."""
        return self._closing

    # ---- a throttle (KIP-219) ------------------------------------------------------------------------------

    def throttled(self, throttle_ms: int, expects_response: bool) -> None:
        """A request was given ``throttle_ms``: nothing more is decided until its response has been sent (then the
        throttle starts, ``response_sent``) or, for a request without a response (acks=0), for the throttle."""
        if not expects_response:
            self.response_sent(throttle_ms)
        elif not self._stopped:
            self._response_pending = True
            self._on_hold()

    def response_sent(self, throttle_ms: int) -> None:
        """The response of a throttled request has been written: its throttle starts now. A throttle ending before
        the one running changes nothing; one ending after it takes its place."""
        if self._stopped:
            return
        self._response_pending = False
        until = self._clock.time() + throttle_ms / 1000
        if throttle_ms <= 0 or until <= self._muted_until:
            if self._throttle_timer is None:
                self._release()
            return
        if self._throttle_timer is None:
            self._count_muted(1)
        else:
            self._throttle_timer.cancel()
        self._muted_until = until
        self._throttle_timer = self._clock.call_at(until, self._throttle_ended)
        self._on_hold()

    def _throttle_ended(self) -> None:
        self._throttle_timer = None
        self._count_muted(-1)
        self._release()

    # ---- the login, one request at a time --------------------------------------------------------------------

    def login_step_read(self) -> None:
        """A request read before the login completed: the next one waits for its answer."""
        self._login_step_pending = True

    def login_step_answered(self) -> None:
        """The answer to the login step is out: the next request may be read."""
        self._login_step_pending = False

    @property
    def login_step_pending(self) -> bool:
        return self._login_step_pending

    # ---- the end ---------------------------------------------------------------------------------------------

    def close_when_answered(self) -> None:
        """A request without a response asked for the close: Kafka handles requests one at a time, so the ones
        before it are answered first and the ones after it never read."""
        self._closing = True
        self._on_hold()

    def stop(self) -> None:
        """The connection closed: a running throttle is dropped (and uncounted), later events change nothing."""
        self._stopped = True
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
            self._count_muted(-1)

    def _release(self) -> None:
        if not (self._response_pending or self._closing or self._stopped):
            self._on_release()
