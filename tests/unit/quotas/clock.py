from __future__ import annotations


class FakeClock:
    """Quota time for tests: starts at a realistic epoch instant and moves only when told."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def advance(self, ms: float) -> int:
        self.now_ms += int(ms)
        return self.now_ms

    def __call__(self) -> int:
        return self.now_ms
