"""The mute alone: a fake clock whose timers run when told, and the events a connection would send it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from proxy.connection.mute import ChannelMute, MuteState


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object]) -> Any:
        timer = FakeTimer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move on, running the timers due by then, in time order."""
        self.now += seconds
        while due := sorted((t for t in self.timers if not t.cancelled and t.when <= self.now), key=lambda t: t.when):
            self.timers.remove(due[0])
            due[0].callback()


class Connection:
    """What a connection does when told: its events, in order, and the muted gauge."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.events: list[str] = []
        self.muted = 0
        self.mute = ChannelMute(cast(Any, self.clock), lambda: self.events.append("hold"),
                                lambda: self.events.append("release"), self._count)

    def _count(self, change: int) -> None:
        self.muted += change


def test_a_throttle_starts_when_its_response_is_sent_and_holds_until_it_runs_out() -> None:
    connection = Connection()
    mute = connection.mute
    assert mute.state is MuteState.NOT_MUTED and not mute.holds
    mute.throttled(500, expects_response=True)
    assert mute.state is MuteState.MUTED_AND_RESPONSE_PENDING and mute.holds
    connection.clock.advance(2)  # however long the response takes, the throttle has not started
    assert mute.holds and connection.muted == 0
    mute.response_sent(500)
    assert mute.state is MuteState.MUTED_AND_THROTTLED and connection.muted == 1
    connection.clock.advance(0.499)
    assert mute.holds and connection.events == ["hold", "hold"]
    connection.clock.advance(0.001)
    assert mute.state is MuteState.NOT_MUTED and not mute.holds
    assert connection.events == ["hold", "hold", "release"] and connection.muted == 0


def test_a_longer_throttle_replaces_the_running_one_and_a_shorter_one_changes_nothing() -> None:
    connection = Connection()
    mute = connection.mute
    mute.response_sent(1000)
    connection.clock.advance(0.5)
    mute.response_sent(200)  # would end before the running one
    connection.clock.advance(0.4)
    assert mute.holds
    mute.response_sent(1000)  # ends 0.9 s after the first would have
    connection.clock.advance(0.2)
    assert mute.holds, "the longer throttle took the place of the first"
    connection.clock.advance(0.8)
    assert not mute.holds and connection.events.count("release") == 1 and connection.muted == 0


def test_a_response_pending_while_a_throttle_runs_holds_after_the_throttle() -> None:
    connection = Connection()
    mute = connection.mute
    mute.response_sent(100)
    mute.throttled(100, expects_response=True)
    assert mute.state is MuteState.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING
    connection.clock.advance(1)
    assert mute.state is MuteState.MUTED_AND_RESPONSE_PENDING and "release" not in connection.events
    mute.response_sent(0)
    assert not mute.holds and connection.events[-1] == "release"


def test_a_throttle_without_a_response_starts_at_once() -> None:
    connection = Connection()
    connection.mute.throttled(300, expects_response=False)  # acks=0: no response will say when
    assert connection.mute.state is MuteState.MUTED_AND_THROTTLED
    connection.clock.advance(0.3)
    assert not connection.mute.holds and connection.events == ["hold", "release"]


def test_an_unthrottled_response_releases_only_when_nothing_of_the_mute_holds() -> None:
    connection = Connection()
    mute = connection.mute
    mute.response_sent(0)
    assert connection.events == ["release"]
    mute.close_when_answered()
    mute.response_sent(0)
    assert mute.holds and connection.events == ["release", "hold"], "a close asked for holds for good"


def test_a_login_step_holds_until_its_answer() -> None:
    mute = Connection().mute
    mute.login_step_read()
    assert mute.holds and mute.login_step_pending and mute.state is MuteState.NOT_MUTED
    mute.login_step_answered()
    assert not mute.holds


def test_after_the_close_a_throttle_is_uncounted_and_events_change_nothing() -> None:
    connection = Connection()
    mute = connection.mute
    mute.response_sent(1000)
    assert connection.muted == 1
    mute.stop()
    assert connection.muted == 0 and all(timer.cancelled for timer in connection.clock.timers)
    mute.throttled(100, expects_response=True)
    mute.response_sent(100)
    connection.clock.advance(5)
    assert connection.muted == 0 and connection.events == ["hold"]
