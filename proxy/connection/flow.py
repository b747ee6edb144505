"""Reading is paused for a set of reasons and resumes only when none is left.

A Kafka broker mutes a channel's reading for memory pressure in its ``ChannelMuteState`` too (``MUTED``), beside its
throttle's states. The proxy reads requests ahead of deciding them, so the two come apart: backpressure (a side's
write buffer full, a connection being made or drained) stops reading, here, while a throttle, a login step or a close
asked for stops deciding what was read (``mute.ChannelMute``), which pauses reading too (``HOLDING``).
"""

from __future__ import annotations

import asyncio
import enum


class PauseReason(enum.Enum):
    CONNECTING = "connecting upstream"
    PEER_BACKPRESSURE = "the other side's write buffer is full"
    CLIENT_BACKLOG = "the client's own write buffer is full"
    DRAINING = "shutting down"
    HOLDING = "requests read are held (a throttle, a pending decision, a backlog, too many in flight)"
    AWAITING_CLUSTER = "a request waits for cluster metadata"
    LOGGING_IN = "before a login completes, a request waits for the answer to the one before"
    SPLICING = "the rest of a frame this side sent moves to the other side inside the kernel"
    AWAITING_VERDICT = "the answer to a request forwarded as it arrived waits for the throttle it is to carry"
    USER_OVER_CONNECTION_RATE = "the user's connection creation rate closes it after the throttle"


class ReadGate:
    """Owns ``pause_reading``/``resume_reading`` of one transport.

    Several independent conditions can each stop reading; tracking them as a set means one
    condition clearing cannot resume reading while another still holds.
    """

    __slots__ = ("_transport", "_reasons")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._reasons: set[PauseReason] = set()

    @property
    def reasons(self) -> frozenset[PauseReason]:
        return frozenset(self._reasons)

    def pause(self, reason: PauseReason) -> None:
        if not self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)

    def paused_for(self, reason: PauseReason) -> bool:
        return reason in self._reasons

    def reassert(self) -> None:
        """Pause the transport again if any reason holds: uvloop starts reading once ``connection_made``
        has returned, whatever was paused in it (as asyncio did before Python 3.12, gh-103607)."""
        if self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume(self, reason: PauseReason) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and not self._transport.is_closing():
            self._transport.resume_reading()
