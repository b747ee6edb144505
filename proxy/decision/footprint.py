"""What keeping a request's reading costs in memory, so that what the proxy remembers of clients' requests is bounded
in bytes, whatever they send."""

from __future__ import annotations

OBJECT_BYTES = 64
"""An object's own bytes, at most, for the objects of a reading (a string's header, a small tuple's, a dict slot)."""


def footprint(value: object) -> int:
    """Roughly the bytes a reading of a request (tuples of strings, bytes, numbers, flags) takes when kept: an
    object's for each of its parts, and its strings' and bytes' length (a character of a string may take up to 4)."""
    if isinstance(value, str):
        return OBJECT_BYTES + 4 * len(value)
    if isinstance(value, bytes):
        return OBJECT_BYTES + len(value)
    if isinstance(value, tuple):
        return OBJECT_BYTES + sum(map(footprint, value))
    return OBJECT_BYTES
