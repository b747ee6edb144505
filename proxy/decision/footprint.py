"""What keeping a request's reading costs in memory, so that what the proxy remembers of clients' requests is bounded
in bytes, whatever they send."""

from __future__ import annotations

OBJECT_BYTES = 96
"""An object's own bytes (CPython 3.11: 49 for a string of ASCII, up to 80 for others; 33 for bytes; 40 for a tuple),
with its place in the tuple or dictionary that holds it."""


def footprint(value: object) -> int:
    """The bytes a reading of a request (tuples of strings, bytes, numbers, flags) takes when kept, or a little more:
    an object's for each of its parts, and its strings' and bytes' length (a character of a string takes up to 4)."""
    if isinstance(value, str):
        return OBJECT_BYTES + 4 * len(value)
    if isinstance(value, bytes):
        return OBJECT_BYTES + len(value)
    if isinstance(value, tuple):
        return OBJECT_BYTES + sum(map(footprint, value))
    return OBJECT_BYTES
