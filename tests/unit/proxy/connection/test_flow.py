from __future__ import annotations

from typing import Any, cast

from proxy.connection.flow import PauseReason, ReadGate


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return False


def test_reading_resumes_only_when_every_reason_is_gone() -> None:
    transport = RecordingTransport()
    gate = ReadGate(cast(Any, transport))
    gate.pause(PauseReason.PEER_BACKPRESSURE)
    gate.pause(PauseReason.HOLDING)
    gate.resume(PauseReason.PEER_BACKPRESSURE)
    assert transport.calls == ["pause"]
    gate.resume(PauseReason.PEER_BACKPRESSURE)
    gate.resume(PauseReason.HOLDING)
    assert transport.calls == ["pause", "resume"]
    assert gate.reasons == frozenset()
