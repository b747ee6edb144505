"""The order in which a bench measures its targets in each round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Target = TypeVar("Target")


def rotated(targets: Sequence[Target], round_index: int) -> list[Target]:
    """Each round starts one target later: none is always measured first, or right after the same one, so a drift
    of the shared machine falls on every target alike."""
    start = round_index % len(targets)
    return [*targets[start:], *targets[:start]]
