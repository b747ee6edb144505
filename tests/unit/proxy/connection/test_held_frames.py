"""Requests held as read: chunks are never copied, their frames released in order."""

from __future__ import annotations

from array import array

from proxy.connection.reading import READ_BYTES, read_bytes_for
from proxy.connection.requests import HeldFrames


def test_frames_are_held_as_chunks_from_the_first_still_held_in_order() -> None:
    held = HeldFrames()
    assert not held
    first, second = b"aaaabbbbcccc", b"dddd"
    first_ends, second_ends = array("q", [4, 8, 12]), array("q", [4])
    held.hold(first, first_ends, 1)
    held.hold(second, second_ends)
    held.hold(b"eeee", array("q", [4]), 1)  # nothing left of it to hold
    assert held
    parts = list(held.take())
    assert parts == [(first, first_ends, 1), (second, second_ends, 0)]
    assert parts[0][0] is first  # the chunk itself, not a copy
    assert not held


def test_a_read_is_a_quarter_of_the_share_within_bounds() -> None:
    assert read_bytes_for(4 * 1024 * 1024) == READ_BYTES
    assert read_bytes_for(1024 * 1024) == READ_BYTES
    assert read_bytes_for(160 * 1024) == 40 * 1024
    assert read_bytes_for(1024) == 4096
