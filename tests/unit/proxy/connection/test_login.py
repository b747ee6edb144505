"""The login gate alone: a stand-in login, the real mute and read gate over a transport that records, a loop whose
timers and soon-callbacks run when told."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.login import LoginGate
from proxy.connection.mute import ChannelMute
from proxy.decision.outcome import FORWARD, Decided
from tests.unit.proxy.connection.test_flow import RecordingTransport
from tests.unit.proxy.connection.test_mute import FakeClock


class StandInLogin:
    needs_upstream_before_login = False

    def __init__(self) -> None:
        self.user: str | None = None
        self.refused = False

    @property
    def done(self) -> bool:
        return self.user is not None

    def handle(self, frame: memoryview) -> Decided:
        return FORWARD


class Loop(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.soon: list[Callable[[], object]] = []

    def call_later(self, delay: float, callback: Callable[[], object]) -> Any:
        return self.call_at(self.now + delay, callback)

    def call_soon(self, callback: Callable[[], object]) -> Any:
        self.soon.append(callback)


class Connection:
    """What a connection gives its gate, and what the gate made it do."""

    def __init__(self, admitted: bool = True) -> None:
        self.loop = Loop()
        self.transport = RecordingTransport()
        self.reading = ReadGate(cast(Any, self.transport))
        self.mute = ChannelMute(self.loop, lambda: None, lambda: None, lambda change: None)
        self.login = StandInLogin()
        self.closed: list[CloseReason] = []
        self.users: list[str] = []
        self.went_on = 0
        self._admitted = admitted
        self.gate = LoginGate(self.login, self.mute, self.reading, self.loop, 10.0, "from 1.2.3.4:5 on plain",
                              self._logged_in, self.closed.append, self._go_on)

    def _logged_in(self, user: str) -> bool:
        self.users.append(user)
        return self._admitted

    def _go_on(self) -> None:
        self.went_on += 1

    def run_soon(self) -> None:
        soon, self.loop.soon = self.loop.soon, []
        for callback in soon:
            callback()


def test_before_the_login_completes_each_request_waits_for_the_answer_to_the_one_before() -> None:
    connection = Connection()
    gate = connection.gate
    assert gate.in_progress
    gate.request_read()
    assert connection.mute.holds and connection.reading.paused_for(PauseReason.LOGGING_IN)
    gate.step_answered()  # the handshake's answer is out: the next request may be read
    assert not connection.mute.holds and not connection.reading.paused_for(PauseReason.LOGGING_IN)
    connection.run_soon()
    assert connection.went_on == 1 and connection.users == [] and connection.closed == []


def test_an_answer_with_no_login_step_pending_changes_nothing() -> None:
    connection = Connection()
    connection.gate.step_answered()
    assert connection.loop.soon == [] and connection.transport.calls == []


def test_the_login_completed_names_the_user_and_stops_the_deadline() -> None:
    connection = Connection()
    gate = connection.gate
    gate.request_read()
    connection.login.user = "alice"
    gate.step_answered()
    connection.run_soon()
    assert connection.users == ["alice"] and connection.went_on == 1 and not gate.in_progress
    connection.loop.advance(60)
    assert connection.closed == [], "a login that completed is never too slow"
    gate.request_read()  # a request after the login is not held for the one before
    assert not connection.mute.holds


def test_a_user_over_its_connection_rate_goes_no_further() -> None:
    connection = Connection(admitted=False)
    connection.gate.request_read()
    connection.login.user = "mallory"
    connection.gate.step_answered()
    assert connection.users == ["mallory"] and connection.loop.soon == []
    assert connection.reading.paused_for(PauseReason.LOGGING_IN)


def test_a_refused_login_closes_once_answered() -> None:
    connection = Connection()
    connection.gate.request_read()
    connection.login.refused = True
    connection.gate.step_answered()
    assert connection.closed == [CloseReason.LOGIN_REFUSED] and connection.loop.soon == []


def test_no_login_in_time_closes_the_connection() -> None:
    connection = Connection()
    connection.gate.request_read()
    connection.loop.advance(9.9)
    assert connection.closed == []
    connection.loop.advance(0.2)
    assert connection.closed == [CloseReason.LOGIN_TOO_SLOW]


def test_a_stopped_gate_closes_nothing_later() -> None:
    connection = Connection()
    connection.gate.stop()
    connection.loop.advance(60)
    assert connection.closed == []
